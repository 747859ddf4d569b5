"""``offsets = "preserve"`` between two tidelog brokers: every record at its source offset.

A source partition with compaction gaps, a log start moved by DeleteRecords and transactions (some
aborted) is mirrored by a ``tidelog mirror`` subprocess that is killed -9 mid-copy and restarted:
the destination then holds every record at its source offset, aborted data still aborted, nothing
twice and no gap; a group's committed offset means the same record on both sides. The broker's
MirrorProduce refuses ordinary producers, other links, straddling batches and principals without
Alter on the topic.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)
from kio.static.primitive import Records, i16, i32

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess, wait_until
from helpers.cli_runner import run_cli
from helpers.clients import admin_client, create_topic, unique_topic
from helpers.mirror_run import MirrorProcess, produce_mixed, write_config
from tidelog.net.kafka_connection import KafkaConnection
from tidelog.protocol.mirror_produce import MirrorPartitionData, MirrorProduceRequest, MirrorTopicData
from tidelog.protocol.records import Record, build_batch

PARTITIONS = 2
INVALID_REQUEST, INVALID_RECORD, TOPIC_AUTHORIZATION_FAILED = 42, 87, 29
Entry = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("preserve")
    source = {**GROUP_TEST_BROKER, "log.cleaner.backoff.ms": 100}
    dest = {**GROUP_TEST_BROKER, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true"}
    with BrokerProcess(base / "a", source) as a, BrokerProcess(base / "b", dest) as b:
        yield a, b


def read_entries(bootstrap: str, topic: str, partition: int, end: int, committed: bool) -> list[Entry]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed" if committed else "read_uncommitted"})
    out: list[Entry] = []
    try:
        consumer.assign([TopicPartition(topic, partition, -2)])
        deadline = time.monotonic() + 30
        while consumer.position([TopicPartition(topic, partition)])[0].offset < end:
            assert time.monotonic() < deadline, f"{topic}-{partition} not read to {end}"
            for m in consumer.consume(1000, 0.2):
                if m.error() is None:
                    out.append((m.offset() or 0, m.key(), m.value(), m.timestamp()[1]))
        return out
    finally:
        consumer.close()


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("w")})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def compacted_with_gaps(bootstrap: str) -> str:
    """A compacted source topic whose first partition has lost offsets to the cleaner."""
    topic = create_topic(bootstrap, unique_topic("compacted"), PARTITIONS,
                         {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(600):
        producer.produce(topic, b"v%d" % i, b"key%d" % (i % 20), partition=i % PARTITIONS)
        if i % 50 == 0:
            producer.flush(10)
    producer.flush(30)

    def gaps() -> bool:
        low, high = watermarks(bootstrap, topic, 0)
        return len(read_entries(bootstrap, topic, 0, high, committed=False)) < high - low

    wait_until(gaps, timeout=30, message="the cleaner compacted the source")
    return topic


def copied(bootstrap: str, topic: str) -> int:
    try:
        return sum(watermarks(bootstrap, topic, p)[1] for p in range(PARTITIONS))
    except KafkaException:
        return 0  # not created yet


def mirrored(source: str, dest: str, topic: str, partition: int | None = None) -> bool:
    try:
        return all(watermarks(dest, topic, p) == watermarks(source, topic, p)
                   for p in (range(PARTITIONS) if partition is None else [partition]))
    except KafkaException:
        return False


def test_a_killed_mirror_resumes_with_every_record_at_its_source_offset_and_groups_move_as_they_are(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    a, b = clusters
    compacted = compacted_with_gaps(a.bootstrap)
    txn = create_topic(a.bootstrap, unique_topic("txn"), PARTITIONS)
    produce_mixed(a.bootstrap, txn, PARTITIONS, 3000, abort_every=3)
    admin = admin_client(a.bootstrap)
    admin.delete_records([TopicPartition(txn, 1, 100)])[TopicPartition(txn, 1, 100)].result(30)
    link = unique_topic("keep")
    config = write_config(tmp_path / "link.toml", name=link, source=a.bootstrap, destination=b.bootstrap,
                          include=[compacted, txn], link={"offsets": "preserve", "budget.bytes": 1 << 20})
    mirror = MirrorProcess(config, tmp_path / "mirror.log").start()
    try:
        writer = threading.Thread(target=produce_mixed, args=(a.bootstrap, txn, PARTITIONS, 30_000),
                                  kwargs={"seed": 3, "abort_every": 3})
        writer.start()
        wait_until(lambda: copied(b.bootstrap, txn) > 6000,
                   timeout=60, message=f"copying started:\n{mirror.tail()}")
        mirror.kill9()
        # Usually mid-copy; on a quiet machine the writer may already be done, on a loaded one the mirror may
        # have caught up with it: either way the restarted mirror must end equal, which is what is checked.
        writer.join(120)
        mirror.start()
        wait_until(lambda: mirrored(a.bootstrap, b.bootstrap, txn) and mirrored(a.bootstrap, b.bootstrap, compacted),
                   timeout=60, message=f"caught up after the restart:\n{mirror.tail()}")
    finally:
        mirror.close()
    assert "needs a tidelog destination" not in mirror.tail()
    for topic in (compacted, txn):
        for p in range(PARTITIONS):
            low, high = watermarks(a.bootstrap, topic, p)
            assert watermarks(b.bootstrap, topic, p) == (low, high)
            for committed in (True, False):
                source = read_entries(a.bootstrap, topic, p, high, committed)
                assert read_entries(b.bootstrap, topic, p, high, committed) == source, (topic, p, committed)
    # offsets equal, aborted records absent from read_committed on both sides, gaps and log start kept
    assert watermarks(b.bootstrap, txn, 1)[0] == 100

    # a group's committed offset names the same record on both clusters
    group = unique_topic("moved")
    low, high = watermarks(a.bootstrap, txn, 0)
    middle = read_entries(a.bootstrap, txn, 0, high, True)[len(read_entries(a.bootstrap, txn, 0, high, True)) // 2]
    for bootstrap in (a.bootstrap, b.bootstrap):
        committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        committer.commit(offsets=[TopicPartition(txn, 0, middle[0])], asynchronous=False)
        committer.close()
    firsts = []
    for bootstrap in (a.bootstrap, b.bootstrap):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                             "isolation.level": "read_committed"})
        consumer.assign([TopicPartition(txn, 0, -1001)])  # the group's committed offset
        got = [m for m in consumer.consume(1, 10) if m.error() is None]
        consumer.close()
        firsts.append((got[0].offset(), got[0].key(), got[0].value()))
    assert firsts[0] == firsts[1] == (middle[0], middle[1], middle[2])

    # the mirrored topic takes no ordinary produce
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": b.bootstrap, "retries": 0})
    producer.produce(txn, b"intruder", partition=0, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == INVALID_REQUEST
    assert watermarks(b.bootstrap, txn, 0)[1] == high


def mirror_produce(bootstrap: str, link: str, topic: str, records: bytes | None) -> Any:
    host, port = bootstrap.rsplit(":", 1)

    async def call() -> Any:
        connection = KafkaConnection(host, int(port), "test")
        try:
            return await connection.call(MirrorProduceRequest(
                link=link, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
                topics=(MirrorTopicData(name=topic, partitions=(MirrorPartitionData(
                    index=i32(0), records=None if records is None else Records(records)),)),)))
        finally:
            connection.close()

    return asyncio.run(call()).topics[0].partitions[0]


def batch(base: int, n: int) -> bytes:
    return build_batch([Record(base + i, 1_700_000_000_000, None, b"x") for i in range(n)], base_offset=base)


def test_mirror_produce_refuses_other_links_straddles_and_principals_without_alter(
        clusters: tuple[BrokerProcess, BrokerProcess]) -> None:
    _, b = clusters
    topic = create_topic(b.bootstrap, unique_topic("guarded"), 1, {"mirror.source": "east"})
    plain = create_topic(b.bootstrap, unique_topic("plain"), 1)
    assert mirror_produce(b.bootstrap, "east", topic, batch(5, 5)).error_code == 0
    retried = mirror_produce(b.bootstrap, "east", topic, batch(5, 5))
    assert (retried.error_code, retried.duplicate_batches, retried.log_end_offset) == (0, 1, 10)
    straddle = mirror_produce(b.bootstrap, "east", topic, batch(8, 4))
    assert straddle.error_code == INVALID_RECORD and "straddles the log end offset 10" in straddle.error_message
    assert straddle.log_end_offset == 10
    other = mirror_produce(b.bootstrap, "west", topic, batch(10, 1))
    assert other.error_code == INVALID_REQUEST and "written by mirror link east" in other.error_message
    unmarked = mirror_produce(b.bootstrap, "east", plain, batch(0, 1))
    assert unmarked.error_code == INVALID_REQUEST and "mirror.source=east" in unmarked.error_message
    probe = mirror_produce(b.bootstrap, "east", topic, None)
    assert (probe.error_code, probe.log_start_offset, probe.log_end_offset) == (0, 5, 10)
    deny = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                      AclOperation.ALTER, AclPermissionType.DENY)
    describe = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                          AclOperation.DESCRIBE, AclPermissionType.ALLOW)  # once a topic has ACLs, none is implied
    admin = admin_client(b.bootstrap)  # must outlive the futures
    for future in admin.create_acls([deny, describe]).values():
        future.result(30)
    denied = mirror_produce(b.bootstrap, "east", topic, batch(10, 1))
    assert denied.error_code == TOPIC_AUTHORIZATION_FAILED and denied.log_end_offset == -1
    assert watermarks(b.bootstrap, topic, 0) == (5, 10)


def mirror_source(bootstrap: str, topic: str) -> str | None:
    admin = admin_client(bootstrap)  # must outlive the future
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entry = admin.describe_configs([resource])[resource].result(30).get("mirror.source")
    return None if entry is None or entry.value is None else str(entry.value)


def test_an_existing_empty_topic_is_adopted_and_an_unmarked_one_holding_records_is_refused(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    a, b = clusters
    empty, occupied = unique_topic("adopted"), unique_topic("occupied")
    for topic in (empty, occupied):
        create_topic(a.bootstrap, topic, PARTITIONS)
        produce_mixed(a.bootstrap, topic, PARTITIONS, 600, abort_every=3)
        create_topic(b.bootstrap, topic, PARTITIONS)  # made by hand on the destination, unmarked
    producer = Producer({"bootstrap.servers": b.bootstrap})
    producer.produce(occupied, b"written here", partition=1)
    assert producer.flush(10) == 0
    both = write_config(tmp_path / "both.toml", name=unique_topic("both"), source=a.bootstrap,
                        destination=b.bootstrap, include=[empty, occupied], link={"offsets": "preserve"})
    refused = MirrorProcess(both, tmp_path / "refused.log").start()
    try:
        assert refused.process is not None and refused.process.wait(60) == 1, refused.tail()
    finally:
        refused.close()
    assert (f"destination topic {occupied} already exists, holds records (partition 1 ends at 1) and has no "
            "mirror.source") in refused.tail()
    assert mirror_source(b.bootstrap, empty) is None and mirror_source(b.bootstrap, occupied) is None  # untouched
    link, late = unique_topic("adopter"), unique_topic("late")
    config = write_config(tmp_path / "adopt.toml", name=link, source=a.bootstrap, destination=b.bootstrap,
                          include=[empty, late], link={"offsets": "preserve"})
    mirror = MirrorProcess(config, tmp_path / "adopt.log").start()
    refusal = f"destination topic {late} already exists, holds records (partition 0 ends at 1)"
    try:
        wait_until(lambda: mirrored(a.bootstrap, b.bootstrap, empty), timeout=60,
                   message=f"the empty topic filled:\n{mirror.tail()}")
        create_topic(b.bootstrap, late, PARTITIONS)  # occupied before the source topic appears
        producer.produce(late, b"written here", partition=0)
        assert producer.flush(10) == 0
        create_topic(a.bootstrap, late, PARTITIONS)
        wait_until(lambda: refusal in mirror.log.read_text(), timeout=30, message=f"refused:\n{mirror.tail()}")
        produce_mixed(a.bootstrap, empty, PARTITIONS, 300, seed=5, abort_every=3)
        wait_until(lambda: mirrored(a.bootstrap, b.bootstrap, empty), timeout=60,
                   message=f"the other topic still copied:\n{mirror.tail()}")
        assert mirror.running()
    finally:
        mirror.close()
    log = mirror.log.read_text()
    assert f"existing empty topic {empty} marked mirror.source={link}: done" in log
    assert log.count(refusal) == 1  # logged once, not at every refresh
    assert mirror_source(b.bootstrap, empty) == link and mirror_source(b.bootstrap, late) is None
    for p in range(PARTITIONS):
        _low, high = watermarks(a.bootstrap, empty, p)
        assert read_entries(b.bootstrap, empty, p, high, False) == read_entries(a.bootstrap, empty, p, high, False)


def owners(config: Path, capsys: pytest.CaptureFixture[str]) -> set[str]:
    run = run_cli(capsys, "mirror", "status", "--config", str(config), "--json")
    assert run.code == 0, run.out + run.err
    return {row["owner"] for row in run.json()}


def test_two_processes_split_the_shards_and_one_takes_over_a_killed_ones(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = clusters
    partitions = 6
    topic = create_topic(a.bootstrap, unique_topic("split"), partitions)
    produce_mixed(a.bootstrap, topic, partitions, 1200, abort_every=3)
    config = write_config(tmp_path / "link.toml", name=unique_topic("split"), source=a.bootstrap,
                          destination=b.bootstrap, include=[topic], link={"offsets": "preserve", "shards": 4})
    first = MirrorProcess(config, tmp_path / "first.log").start()
    second = MirrorProcess(config, tmp_path / "second.log").start()
    try:
        wait_until(lambda: len(owners(config, capsys) - {"-"}) == 2, timeout=60,
                   message=f"two owners:\n{first.tail()}\n{second.tail()}")
        wait_until(lambda: all(mirrored(a.bootstrap, b.bootstrap, topic, p) for p in range(partitions)), timeout=60,
                   message="copied by the two")
        first.kill9()
        more = produce_mixed(a.bootstrap, topic, partitions, 600, seed=11, abort_every=3)
        assert more > 0
        wait_until(lambda: all(mirrored(a.bootstrap, b.bootstrap, topic, p) for p in range(partitions)), timeout=60,
                   message=f"the survivor took over:\n{second.tail()}")
        assert len(owners(config, capsys) - {"-"}) == 1
    finally:
        first.close()
        second.close()
    for p in range(partitions):
        _low, high = watermarks(a.bootstrap, topic, p)
        for committed in (True, False):
            assert read_entries(b.bootstrap, topic, p, high, committed) == read_entries(
                a.bootstrap, topic, p, high, committed), (p, committed)


def test_a_hot_partition_does_not_hold_back_a_quiet_one_under_a_small_budget(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    a, b = clusters
    topic = create_topic(a.bootstrap, unique_topic("hot"), 2)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 20, "batch.size": 262144})
    value = b"h" * 1024
    for _ in range(16_000):  # 16 MiB behind on partition 0, which a fetch in partition order would serve first
        producer.produce(topic, value, partition=0)
        producer.poll(0)
    for i in range(50):
        producer.produce(topic, b"quiet-%d" % i, partition=1)
    assert producer.flush(60) == 0
    hot_end, quiet_end = watermarks(a.bootstrap, topic, 0)[1], watermarks(a.bootstrap, topic, 1)[1]
    # the minimum budget: a round is 256 KiB, so the hot partition needs 64 rounds
    config = write_config(tmp_path / "link.toml", name=unique_topic("hot"), source=a.bootstrap, destination=b.bootstrap,
                          include=[topic], link={"offsets": "preserve", "budget.bytes": 1 << 20})
    probe = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("probe")})
    mirror = MirrorProcess(config, tmp_path / "mirror.log").start()
    try:
        def quiet_copied() -> tuple[int] | None:
            """(the hot partition's destination end) once the quiet partition is all there."""
            try:
                ends = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in (1, 0)]
            except KafkaException:
                return None  # not created yet
            return (ends[1],) if ends[0] == quiet_end else None

        (hot_then,) = wait_until(quiet_copied, timeout=60, interval=0.05,
                                 message=f"the quiet partition copied:\n{mirror.tail()}")
        assert hot_then < hot_end // 2, (hot_then, hot_end)  # served long before the hot partition was done
        wait_until(lambda: mirrored(a.bootstrap, b.bootstrap, topic), timeout=60, message="all copied")
    finally:
        mirror.close()
        probe.close()
