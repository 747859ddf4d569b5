"""The replica manager against an in-memory store (the seam it shares with the etcd store)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from tidelog.broker.replica_manager import ReplicaManager
from tidelog.common.config import BrokerConfig
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.metadata.image import BrokerRegistration, ClusterImage, PartitionImage, TopicImage
from tidelog.protocol.records import Record, build_batch
from tidelog.storage.damage import DamagedRange
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager
from tidelog.storage.partition_metadata import read_topic_id


class MemoryStore:
    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.valid = True
        self.written: list[tuple[str, int, PartitionImage]] = []

    def lease_valid(self) -> bool:
        return self.valid

    async def alter_partition(self, topic: str, index: int, expected: PartitionImage, new: PartitionImage) -> bool:
        current = self.image.topics[topic].partitions[index]
        if current != expected:
            return False
        self.image = self.image.with_partition(topic, new)
        self.written.append((topic, index, new))
        return True


def image_with(name: str, topic_id: uuid.UUID, leader: int, isr: tuple[int, ...] = (1, 2)) -> ClusterImage:
    partition = PartitionImage(0, leader, 3, (1, 2), isr, partition_epoch=5)
    topic = TopicImage(name, topic_id, (partition,), MappingProxyType({}))
    return ClusterImage("c").with_topic(topic)


def manager(tmp_path: Path, store: MemoryStore) -> tuple[ReplicaManager, LogManager]:
    logs = LogManager([tmp_path], hw_follows_leo=False)
    logs.startup()
    config = BrokerConfig.from_properties({"replica.lag.time.max.ms": "1000"})
    rm = ReplicaManager(1, config, store, logs, lambda _t: LogConfig(), lambda _t: 2, lambda _tp: None, lambda: 0)
    return rm, logs


def batch(n: int) -> bytes:
    return build_batch([Record(offset=i, timestamp=0, key=None, value=b"v") for i in range(n)])


def test_a_log_of_an_older_topic_with_the_same_name_is_not_served(tmp_path: Path) -> None:
    async def run() -> None:
        old_id, new_id = uuid.uuid4(), uuid.uuid4()
        store = MemoryStore(image_with("t", old_id, leader=1, isr=(1,)))
        rm, logs = manager(tmp_path, store)
        rm.apply(store.image)
        plog = logs.get_log("t", 0)
        assert plog is not None and read_topic_id(plog.dir) == old_id
        plog.append_as_leader(batch(7), leader_epoch=3, now_ms=0)
        store.image = image_with("t", new_id, leader=1, isr=(1,))
        rm.apply(store.image)
        fresh = logs.get_log("t", 0)
        assert fresh is not None and fresh.log_end_offset == 0 and read_topic_id(fresh.dir) == new_id
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())


def test_the_leader_refuses_acks_all_below_min_insync_and_writes_while_its_lease_is_doubtful(tmp_path: Path) -> None:
    async def run() -> None:
        store = MemoryStore(image_with("t", uuid.uuid4(), leader=1, isr=(1,)))
        rm, logs = manager(tmp_path, store)
        rm.apply(store.image)
        try:
            rm.check_writable(("t", 0), -1, 2)
            raise AssertionError("acks=all accepted with an ISR of 1 and min.insync.replicas 2")
        except KafkaError as exc:
            assert exc.code is ErrorCode.NOT_ENOUGH_REPLICAS
        rm.check_writable(("t", 0), 1, 2)  # acks=1 is fine
        store.valid = False
        try:
            rm.check_writable(("t", 0), 1, 2)
            raise AssertionError("a leader with a doubtful lease accepted a write")
        except KafkaError as exc:
            assert exc.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())


def test_acks_all_completes_when_the_follower_fetches_past_the_batch(tmp_path: Path) -> None:
    async def run() -> None:
        store = MemoryStore(image_with("t", uuid.uuid4(), leader=1, isr=(1, 2)))
        rm, logs = manager(tmp_path, store)
        rm.apply(store.image)
        plog = logs.get_log("t", 0)
        assert plog is not None
        rm.check_writable(("t", 0), -1, 2)
        plog.append_as_leader(batch(4), leader_epoch=3, now_ms=0)
        rm.appended(("t", 0), plog)
        waiting = asyncio.ensure_future(rm.wait_for_high_watermark(("t", 0), 4, 5000))
        await asyncio.sleep(0)
        rm.follower_fetched(("t", 0), 2, 2, 3)
        await asyncio.sleep(0)
        assert not waiting.done() and plog.high_watermark == 2
        rm.follower_fetched(("t", 0), 2, 4, 3)
        assert await waiting is ErrorCode.NONE and plog.high_watermark == 4
        try:
            rm.follower_fetched(("t", 0), 9, 4, 3)
            raise AssertionError("a stranger's fetch was accepted")
        except KafkaError as exc:
            assert exc.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())


def test_an_acks_all_wait_made_after_leadership_moved_answers_not_leader_at_once(tmp_path: Path) -> None:
    # The produce path awaits between its append and its wait (rolls, flushes, a turn for woken
    # fetches): leadership may move in between. A waiter registered only then used to hang until its
    # timeout (30 s for librdkafka's request.timeout.ms): nothing completes it any more.
    async def run() -> None:
        store = MemoryStore(image_with("t", uuid.uuid4(), leader=1, isr=(1, 2)))
        rm, logs = manager(tmp_path, store)
        rm.apply(store.image)
        plog = logs.get_log("t", 0)
        assert plog is not None
        plog.append_as_leader(batch(4), leader_epoch=3, now_ms=0)
        rm.appended(("t", 0), plog)
        watched = rm.watch_high_watermark(("t", 0), 4)  # in the append's turn, as the produce path does
        topic_id = store.image.topics["t"].topic_id
        rm.apply(image_with("t", topic_id, leader=2))  # broker 2 leads now: this one follows
        assert await asyncio.wait_for(rm.await_high_watermark(watched, 5000), 1) is ErrorCode.NOT_LEADER_OR_FOLLOWER
        late = rm.wait_for_high_watermark(("t", 0), 4, 5000)  # asked only after the move
        assert await asyncio.wait_for(late, 1) is ErrorCode.NOT_LEADER_OR_FOLLOWER
        # leading again: the old watch stays answered (the batch may have been truncated meanwhile)
        back = image_with("t", topic_id, leader=1)
        rm.apply(back.with_partition("t", replace(back.topics["t"].partitions[0], leader_epoch=5)))
        assert watched.result() is ErrorCode.NOT_LEADER_OR_FOLLOWER
        # a new leader epoch of an unbroken leadership keeps its waiters: they complete as usual
        plog.append_as_leader(batch(2), leader_epoch=5, now_ms=0)
        rm.appended(("t", 0), plog)
        end = plog.log_end_offset
        waiting = asyncio.ensure_future(rm.wait_for_high_watermark(("t", 0), end, 5000))
        current = back.topics["t"].partitions[0]
        rm.apply(back.with_partition("t", replace(current, leader_epoch=6, partition_epoch=9)))
        await asyncio.sleep(0)
        assert not waiting.done()
        rm.follower_fetched(("t", 0), 2, end, 6)
        assert await asyncio.wait_for(waiting, 1) is ErrorCode.NONE
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())


def damage(logs: LogManager) -> None:
    """Give partition t-0 a closed segment with a damaged range in it, as the scrubber records one."""
    plog = logs.get_log("t", 0)
    assert plog is not None
    seg = plog.segments_snapshot()[0]
    plog.roll(now_ms=0)
    assert plog.record_damage(seg, DamagedRange(0, 3, seg.base_offset, 0, 100, 0, "crc-mismatch"), lambda: True)


def registered(image: ClusterImage, *nodes: int) -> ClusterImage:
    return image.with_brokers({n: BrokerRegistration(n, None, (), f"i{n}") for n in nodes})


def test_a_damaged_leader_hands_over_to_an_in_sync_follower_and_leaves_the_isr(tmp_path: Path) -> None:
    async def run() -> None:
        store = MemoryStore(registered(image_with("t", uuid.uuid4(), leader=1, isr=(1, 2)), 1, 2))
        rm, logs = manager(tmp_path, store)
        rm.apply(store.image)
        plog = logs.get_log("t", 0)
        assert plog is not None
        plog.append_as_leader(batch(4), leader_epoch=3, now_ms=0)
        damage(logs)
        state = rm.leader_state(("t", 0))
        rm._check_damage(("t", 0), state, 0)
        await asyncio.gather(*rm._tasks)
        assert store.written == []  # broker 2 has not fetched in this leadership: not known to be caught up
        rm.follower_fetched(("t", 0), 2, 4, 3)
        rm._check_damage(("t", 0), state, 0)
        await asyncio.gather(*rm._tasks)
        [(_, _, new)] = store.written
        assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (2, 4, (2,), 6)
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())


def test_a_damaged_leader_that_is_the_only_in_sync_replica_stays_leader_until_another_joins(tmp_path: Path) -> None:
    async def run() -> None:
        store = MemoryStore(registered(image_with("t", uuid.uuid4(), leader=1, isr=(1,)), 1, 2))
        rm, logs = manager(tmp_path, store)
        rm.apply(store.image)
        plog = logs.get_log("t", 0)
        assert plog is not None
        plog.append_as_leader(batch(4), leader_epoch=3, now_ms=0)
        damage(logs)
        state = rm.leader_state(("t", 0))
        rm._check_damage(("t", 0), state, 0)
        await asyncio.gather(*rm._tasks)
        assert store.written == [] and ("t", 0) in rm._no_healthy_replica
        # Broker 2 (holding the records from before, say back from a restart) catches up and joins the ISR:
        # it takes over at the next check.
        rm.follower_fetched(("t", 0), 2, 4, 3)
        await asyncio.gather(*rm._tasks)
        assert store.written[-1][2].isr == (1, 2)
        rm._check_damage(("t", 0), state, 0)
        await asyncio.gather(*rm._tasks)
        assert (store.written[-1][2].leader, store.written[-1][2].isr) == (2, (2,))
        assert ("t", 0) not in rm._no_healthy_replica
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())


def test_a_damaged_follower_may_truncate_only_once_it_left_the_isr(tmp_path: Path) -> None:
    async def run() -> None:
        store = MemoryStore(image_with("t", uuid.uuid4(), leader=2, isr=(2, 1)))
        rm, logs = manager(tmp_path, store)
        assert rm.may_repair(("t", 0)) is False  # asks to leave first
        assert rm.may_repair(("t", 0)) is False  # one request in flight, not two
        await asyncio.gather(*rm._tasks)
        [(_, _, new)] = store.written
        assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (2, 3, (2,), 6)
        assert rm.may_repair(("t", 0)) is True
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())


def test_a_consumer_is_not_sent_to_a_follower_whose_log_starts_above_its_fetch_offset(tmp_path: Path) -> None:
    async def run() -> None:
        image = image_with("t", uuid.uuid4(), leader=1, isr=(1, 2)).with_brokers(
            {n: BrokerRegistration(n, f"r{n}", (), f"i{n}") for n in (1, 2)})
        store = MemoryStore(image)
        logs = LogManager([tmp_path], hw_follows_leo=False)
        logs.startup()
        config = BrokerConfig.from_properties({
            "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"})
        rm = ReplicaManager(1, config, store, logs, lambda _t: LogConfig(), lambda _t: 2, lambda _tp: None, lambda: 0)
        rm.apply(store.image)
        plog = logs.get_log("t", 0)
        assert plog is not None
        plog.append_as_leader(batch(100), leader_epoch=3, now_ms=0)
        rm.appended(("t", 0), plog)
        rm.follower_fetched(("t", 0), 2, 100, 3, log_start_offset=60)  # retention took 0-59 on broker 2
        assert rm.preferred_read_replica(("t", 0), "r2", 70) == 2
        assert rm.preferred_read_replica(("t", 0), "r2", 50) == -1  # only the leader still has offset 50
        rm.follower_fetched(("t", 0), 2, 100, 3, log_start_offset=0)
        assert rm.preferred_read_replica(("t", 0), "r2", 50) == 2
        await rm.stop()
        logs.shutdown()

    asyncio.run(run())
