"""Consumer groups with kafka-python (3.0) and aiokafka (0.14): shared assignments, leaving, resuming
at committed offsets. One broker for the module, tuned for quick rebalances."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess, module_broker
from helpers.clients import create_topic, produce_all, producer, unique_topic

group_broker = module_broker("group_broker", GROUP_TEST_BROKER)


@pytest.fixture
def bootstrap(group_broker: BrokerProcess) -> str:
    return group_broker.bootstrap


@pytest.fixture
def topic6(bootstrap: str) -> str:
    return create_topic(bootstrap, unique_topic("grp"), 6)


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def is_disjoint_complete(assignments: list[frozenset[int]], count: int, each: int) -> bool:
    return (frozenset().union(*assignments) == frozenset(range(count))
            and all(len(a) == each for a in assignments))


# ------------------------------------------------------------------------------------------ kafka-python

# kafka-python 3.0.12 strands a member whose JoinGroup/SyncGroup completes after poll() gave up
# waiting for it (join_group_async stops awaiting the join once need_rejoin() turns False, so the
# join is never completed and heartbeats stay off). Polls long enough for a rebalance avoid that: 1 s
# was not, once, with two busy xdist workers beside a CI run (ci24: a member left with no partitions).
KAFKA_PYTHON_POLL_MS = 3000


class ThreadedMember:
    """A kafka-python consumer polling in its own thread (a blocking join needs the others to poll)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=200, max_poll_interval_ms=10_000,
            request_timeout_ms=15_000, fetch_max_wait_ms=100,
        )
        self.consumer.subscribe([topic])
        self.assigned: frozenset[int] = frozenset()
        self.records: list[tuple[int, int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for batch in self.consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values():
                self.records.extend((r.partition, r.offset, r.value) for r in batch)
            self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def wait_assignments(members: list[ThreadedMember], each: int, timeout: float = 30.0) -> list[frozenset[int]]:
    deadline = time.monotonic() + timeout
    good_since = None
    while time.monotonic() < deadline:
        current = [m.assigned for m in members]
        if is_disjoint_complete(current, 6, each):
            good_since = good_since or time.monotonic()
            if time.monotonic() - good_since > 0.5:
                return current
        else:
            good_since = None
        time.sleep(0.05)
    raise AssertionError(f"assignments never settled: {[m.assigned for m in members]}")


def test_kafka_python_three_consumers_share_six_partitions_then_one_leaves(bootstrap: str, topic6: str) -> None:
    group = new_group()
    members = [ThreadedMember(bootstrap, group, topic6) for _ in range(3)]
    try:
        wait_assignments(members, each=2)
        members.pop().close()
        wait_assignments(members, each=3, timeout=15)
    finally:
        for m in members:
            m.close()


def test_kafka_python_resumes_at_the_committed_offset(bootstrap: str, topic6: str) -> None:
    group = new_group()
    produce_all(producer(bootstrap), topic6, [f"v{i}".encode() for i in range(10)], partition=3)
    first = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=200)
    first.subscribe([topic6])
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while len(seen) < 4 and time.monotonic() < deadline:
        for batch in first.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values():
            seen.extend(r.offset for r in batch if r.partition == 3)
    first.commit({TopicPartition(topic6, 3): OffsetAndMetadata(4, "kp", -1)})
    first.close()

    second = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                           auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=200)
    try:
        assert second.committed(TopicPartition(topic6, 3)) == 4
        second.subscribe([topic6])
        offsets: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 20
        while not offsets and time.monotonic() < deadline:
            for batch in second.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values():
                offsets.extend((r.offset, r.value) for r in batch if r.partition == 3)
        assert offsets[0] == (4, b"v4")
    finally:
        second.close()


# --------------------------------------------------------------------------------------------- aiokafka


async def _aio_member(bootstrap: str, group: str, topic: str) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=6000, heartbeat_interval_ms=200, max_poll_interval_ms=10_000, rebalance_timeout_ms=5000,
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    return consumer


async def _settle(members: list[AIOKafkaConsumer], each: int, timeout: float = 30.0) -> list[frozenset[int]]:
    deadline = time.monotonic() + timeout
    good_since = None
    while time.monotonic() < deadline:
        await asyncio.gather(*(m.getmany(timeout_ms=50) for m in members))
        current = [frozenset(tp.partition for tp in m.assignment()) for m in members]
        if is_disjoint_complete(current, 6, each):
            good_since = good_since or time.monotonic()
            if time.monotonic() - good_since > 0.5:
                return current
        else:
            good_since = None
    raise AssertionError(f"assignments never settled: {[m.assignment() for m in members]}")


def test_aiokafka_three_consumers_share_six_partitions_then_one_leaves(bootstrap: str, topic6: str) -> None:
    async def scenario() -> None:
        group = new_group()
        members = [await _aio_member(bootstrap, group, topic6) for _ in range(3)]
        try:
            await _settle(members, each=2)
            await members.pop().stop()
            await _settle(members, each=3, timeout=15)
        finally:
            for m in members:
                await m.stop()

    asyncio.run(scenario())


def test_aiokafka_resumes_at_the_committed_offset(bootstrap: str, topic6: str) -> None:
    produce_all(producer(bootstrap), topic6, [f"v{i}".encode() for i in range(10)], partition=1)

    async def scenario() -> None:
        group = new_group()
        first = await _aio_member(bootstrap, group, topic6)
        try:
            await _settle([first], each=6)
            await first.commit({AioTopicPartition(topic6, 1): 7})
        finally:
            await first.stop()
        second = await _aio_member(bootstrap, group, topic6)
        try:
            assert await second.committed(AioTopicPartition(topic6, 1)) == 7
            deadline = time.monotonic() + 20
            got: list[tuple[int, bytes | None]] = []
            while not got and time.monotonic() < deadline:
                batches = await second.getmany(timeout_ms=100)
                got = [(r.offset, r.value) for tp, rs in batches.items() if tp.partition == 1 for r in rs]
            assert got[0] == (7, b"v7")
        finally:
            await second.stop()

    asyncio.run(scenario())
