"""Consumer groups with confluent-kafka (librdkafka): assignments, leaving, crashing, static members,
cooperative rebalancing. One broker for the module, tuned for quick rebalances (no initial delay,
short sessions allowed)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess, module_broker
from helpers.clients import FAST_CLIENT, create_topic, produce_all, producer, unique_topic

group_broker = module_broker("group_broker", GROUP_TEST_BROKER)


@pytest.fixture
def bootstrap(group_broker: BrokerProcess) -> str:
    return group_broker.bootstrap


@pytest.fixture
def topic6(bootstrap: str) -> str:
    return create_topic(bootstrap, unique_topic("grp"), 6)


class Member:
    """A subscribed consumer that records every assignment change it is told about."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config: object) -> None:
        self.events: list[tuple[str, frozenset[int]]] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
            "fetch.wait.max.ms": 100, **FAST_CLIENT, **config,
        })
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("assign", frozenset(p.partition for p in partitions)))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", frozenset(p.partition for p in partitions)))

    def partitions(self) -> frozenset[int]:
        return frozenset(p.partition for p in self.consumer.assignment())

    def poll(self) -> None:
        self.consumer.poll(0.05)

    def close(self) -> None:
        self.consumer.close()


def settle(members: list[Member], expected: Callable[[list[frozenset[int]]], bool], timeout: float = 20.0,
           hold: float = 0.5) -> list[frozenset[int]]:
    """Poll every member until their assignments satisfy ``expected`` for ``hold`` seconds in a row."""
    deadline = time.monotonic() + timeout
    good_since: float | None = None
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        current = [m.partitions() for m in members]
        if expected(current):
            good_since = good_since or time.monotonic()
            if time.monotonic() - good_since >= hold:
                return current
        else:
            good_since = None
    raise AssertionError(f"assignments never settled: {[m.partitions() for m in members]}")


def disjoint_and_complete(count: int, each: int | None = None) -> Callable[[list[frozenset[int]]], bool]:
    def check(assignments: list[frozenset[int]]) -> bool:
        union = frozenset().union(*assignments)
        return (
            union == frozenset(range(count))
            and sum(len(a) for a in assignments) == count
            and all(a if each is None else len(a) == each for a in assignments)
        )

    return check


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def test_three_consumers_share_six_partitions_disjointly_and_completely(bootstrap: str, topic6: str) -> None:
    group = new_group()
    members = [Member(bootstrap, group, topic6) for _ in range(3)]
    try:
        final = settle(members, disjoint_and_complete(6, each=2))
        assert sorted(len(a) for a in final) == [2, 2, 2]
    finally:
        for m in members:
            m.close()


def test_a_member_that_leaves_hands_its_partitions_over_at_once(bootstrap: str, topic6: str) -> None:
    group = new_group()
    # A long session: if the partitions move quickly, it was the LeaveGroup, not a session expiry.
    members = [Member(bootstrap, group, topic6, **{"session.timeout.ms": 30_000}) for _ in range(3)]
    try:
        settle(members, disjoint_and_complete(6, each=2))
        leaving = members.pop()
        started = time.monotonic()
        leaving.close()
        settle(members, disjoint_and_complete(6, each=3), timeout=10, hold=0.2)
        assert time.monotonic() - started < 8
    finally:
        for m in members:
            m.close()


KILLED_CONSUMER = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 2000,
                  "heartbeat.interval.ms": 200, "enable.auto.commit": False})
    c.subscribe([sys.argv[3]])
    announced = False
    while True:
        c.poll(0.05)
        if c.assignment() and not announced:
            print("assigned", flush=True)
            announced = True
""")


def wait_for_line(child: subprocess.Popen[bytes], line: bytes, members: list[Member], timeout: float = 20.0) -> None:
    """Wait for ``line`` on the child's stdout, polling ``members`` meanwhile (a rebalance needs them)."""
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if select.select([child.stdout], [], [], 0.05)[0]:
            assert child.stdout.readline().strip() == line
            return
    raise AssertionError(f"the child consumer did not print {line!r} within {timeout} s")


def test_a_killed_member_loses_its_partitions_within_its_session_timeout(bootstrap: str, topic6: str,
                                                                           tmp_path: Path) -> None:
    group = new_group()
    script = tmp_path / "consumer.py"
    script.write_text(KILLED_CONSUMER)
    child = subprocess.Popen([sys.executable, str(script), bootstrap, group, topic6], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=dict(os.environ))
    survivors = [Member(bootstrap, group, topic6, **{"session.timeout.ms": 2000}) for _ in range(2)]
    try:
        wait_for_line(child, b"assigned", survivors)
        settle(survivors, lambda a: all(len(p) == 2 for p in a))  # the child holds the other two
        killed_at = time.monotonic()
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        settle(survivors, disjoint_and_complete(6, each=3), timeout=10, hold=0)
        assert time.monotonic() - killed_at <= 2.0 + 1.0
    finally:
        child.kill()
        child.wait(5)
        if child.stdout is not None:
            child.stdout.close()
        for m in survivors:
            m.close()


def test_a_static_member_restarting_within_its_session_keeps_its_partitions_without_rebalance(
    bootstrap: str, topic6: str,
) -> None:
    group = new_group()
    static = {"group.instance.id": "instance-a", "session.timeout.ms": 10_000}
    a = Member(bootstrap, group, topic6, **static)
    b = Member(bootstrap, group, topic6, **{"group.instance.id": "instance-b", "session.timeout.ms": 10_000})
    restarted: Member | None = None
    try:
        before = settle([a, b], disjoint_and_complete(6, each=3))
        b_events = len(b.events)
        a.close()  # a static member does not leave the group when it closes
        restarted = Member(bootstrap, group, topic6, **static)
        after = settle([restarted, b], disjoint_and_complete(6, each=3))
        assert after == before
        time.sleep(0.5)
        b.poll()
        assert b.events[b_events:] == []  # b saw no rebalance at all
    finally:
        for m in (b, restarted):
            if m is not None:
                m.close()


def test_cooperative_sticky_moves_only_the_partitions_that_must_move(bootstrap: str, topic6: str) -> None:
    group = new_group()
    config = {"partition.assignment.strategy": "cooperative-sticky"}
    first = [Member(bootstrap, group, topic6, **config) for _ in range(2)]
    newcomer: Member | None = None
    try:
        before = settle(first, disjoint_and_complete(6, each=3))
        marks = [len(m.events) for m in first]
        newcomer = Member(bootstrap, group, topic6, **config)
        after = settle([*first, newcomer], disjoint_and_complete(6, each=2))
        for member, mark, had, has in zip(first, marks, before, after[:2], strict=True):
            revoked = frozenset().union(*(p for kind, p in member.events[mark:] if kind == "revoke"))
            assert has <= had, "a member that only gives partitions away gained one"
            assert revoked == had - has and len(revoked) == 1, member.events[mark:]
        assert after[2] == frozenset(range(6)) - after[0] - after[1]
    finally:
        for m in [*first, newcomer]:
            if m is not None:
                m.close()


def test_committed_offsets_are_where_a_new_member_of_the_group_resumes(bootstrap: str, topic6: str) -> None:
    group = new_group()
    first = Member(bootstrap, group, topic6)
    try:
        settle([first], disjoint_and_complete(6, each=6))
        produce_all(producer(bootstrap), topic6, [f"v{i}".encode() for i in range(12)], partition=0)
        seen = []
        deadline = time.monotonic() + 10
        while len(seen) < 5 and time.monotonic() < deadline:
            message = first.consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen.append(message)
        first.consumer.commit(offsets=[TopicPartition(topic6, 0, seen[4].offset() + 1)], asynchronous=False)
    finally:
        first.close()
    second = Member(bootstrap, group, topic6)
    try:
        committed = second.consumer.committed([TopicPartition(topic6, 0)], timeout=10)
        assert committed[0].offset == 5
        deadline = time.monotonic() + 10
        message = None
        while message is None and time.monotonic() < deadline:
            polled = second.consumer.poll(0.1)
            if polled is not None and polled.error() is None and polled.partition() == 0:
                message = polled
        assert message is not None and (message.offset(), message.value()) == (5, b"v5")
    finally:
        second.close()
