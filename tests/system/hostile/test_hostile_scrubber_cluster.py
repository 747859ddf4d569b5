"""Damage repaired from replicas: three brokers on etcd, scrubbers at a fast rate, bytes flipped on disk.

- A follower's copy: its scrubber finds the range, the follower leaves the ISR, its fetcher truncates
  to the range's start and fetches the rest again; the range disappears, its log equals the leader's
  record for record, and it is back in the ISR at the end.
- The leader's copy: the leader hands leadership to an in-sync follower and leaves the ISR; consumers
  then read the partition whole (no CORRUPT_MESSAGE), the old leader repairs its copy as a follower and
  rejoins the ISR.
- No healthy replica (replication factor 1): the leader stays, says so once, consumers get
  CORRUPT_MESSAGE for the range.

One cluster for the file; each test has its own topic. The flip happens in a running broker's file (the
page cache sees it), in the middle of a batch of a closed segment.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import consume, consumer, produce_all, producer
from helpers.cluster import Cluster
from helpers.hostile import metric
from tidelog.protocol.records import decode_records, iter_batches

RECORDS = 2000
SCRUB_FAST = {"log.scrubber.bytes.per.second": 64 * 1024 * 1024, "log.scrubber.interval.ms": 500}
# Failover speed is not under test: sessions long enough that a loaded 2-core machine does not lapse them
# (a lapse moves leadership for reasons of its own).
SESSION = {"broker.session.timeout.ms": 10_000, "broker.heartbeat.interval.ms": 1000, "replica.lag.time.max.ms": 10_000}
TOPIC_CONFIG = {"segment.bytes": "16384"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    ports = {node: free_port() for node in (1, 2, 3)}
    c = Cluster(tmp_path_factory.mktemp("scrub-cluster"), 3, overrides={**SCRUB_FAST, **SESSION},
                per_node={node: {"metrics.port": port} for node, port in ports.items()})
    c.metrics_ports = ports  # type: ignore[attr-defined]
    try:
        yield c.start()
    finally:
        c.close()


def value(i: int) -> bytes:
    return b"record %06d %s" % (i, b"x" * 40)


def fill(c: Cluster, topic: str, replication: int) -> None:
    c.create_topic(topic, 1, replication, **TOPIC_CONFIG)
    p = producer(c.bootstrap, {"acks": "all", "linger.ms": 5, "batch.num.messages": 50, "compression.type": "none"})
    produce_all(p, topic, (value(i) for i in range(RECORDS)), partition=0)


def partition_dir(broker: BrokerProcess, topic: str) -> Path:
    return broker.data_dir / f"{topic}-0"


def flip_in_closed_segment(broker: BrokerProcess, topic: str) -> int:
    """Flip one byte in the middle of the 4th batch of the second segment; return that batch's base offset."""
    segments = sorted(partition_dir(broker, topic).glob("*.log"))
    assert len(segments) >= 3, segments
    data = segments[1].read_bytes()
    header, position = list(iter_batches(data, validate=False))[3]
    with open(segments[1], "r+b") as f:
        f.seek(position + header.size // 2)
        byte = f.read(1)
        f.seek(position + header.size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    return header.base_offset


def records(broker: BrokerProcess, topic: str) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in the broker's copy, read from its segment files (empty while a
    file is being rewritten under the read)."""
    try:
        return _records(broker, topic)
    except (ValueError, OSError):
        return []


def _records(broker: BrokerProcess, topic: str) -> list[tuple[int, bytes | None]]:
    out = []
    for segment in sorted(partition_dir(broker, topic).glob("*.log")):
        data = segment.read_bytes()
        for header, position in iter_batches(data):
            out.extend((r.offset, r.value) for r in decode_records(data[position:position + header.size]))
    return out


def damaged(c: Cluster, node: int, topic: str) -> float:
    return metric(c.metrics_ports[node], "tidelog_log_damaged_ranges", topic=topic, partition="0")  # type: ignore[attr-defined]


def lines(broker: BrokerProcess, text: str) -> list[str]:
    return [line for line in broker.log_text().splitlines() if text in line]


def test_a_damaged_follower_leaves_the_isr_refetches_from_the_leader_and_rejoins(
    cluster: Cluster, pytestconfig: pytest.Config
) -> None:
    register_failure_report(pytestconfig)
    topic = "scrub-follower"
    fill(cluster, topic, 3)
    leader, replicas, _ = cluster.partition(topic, 0)
    follower = next(r for r in replicas if r != leader)
    f_broker = cluster.brokers[follower]
    base = flip_in_closed_segment(f_broker, topic)

    flipped = time.monotonic()
    wait_until(lambda: lines(f_broker, f"repairing {topic}-0 from leader {leader}"), timeout=20, interval=0.2)
    repaired_after = time.monotonic() - flipped
    [repair] = lines(f_broker, f"repairing {topic}-0")
    # It left the ISR before truncating below the high watermark: no election can pick a replica that
    # lacks committed records.
    [left] = lines(f_broker, "copy is damaged: it left the ISR")
    assert f"{topic}-0" in left and f_broker.log_text().index(left) < f_broker.log_text().index(repair), left
    assert f"to {base}, the start of damaged offsets {base}-" in repair, repair
    wait_until(lambda: damaged(cluster, follower, topic) == 0, timeout=10, interval=0.2)
    assert not (partition_dir(f_broker, topic) / "damaged-ranges").exists()
    want = [(i, value(i)) for i in range(RECORDS)]
    wait_until(lambda: records(f_broker, topic) == want, timeout=10, interval=0.2,
               message="follower copy equals the leader's")
    assert records(cluster.brokers[leader], topic) == want
    cluster.wait_for_isr(topic, 0, {1, 2, 3}, timeout=10)
    assert cluster.partition(topic, 0)[0] == leader  # a follower's damage moves no leadership
    print(f"\nfollower {follower} repaired {RECORDS - base} records from offset {base} {repaired_after:.1f} s after the flip")


def test_a_damaged_leader_hands_over_to_an_in_sync_follower_and_repairs_as_follower(
    cluster: Cluster, pytestconfig: pytest.Config
) -> None:
    register_failure_report(pytestconfig)
    topic = "scrub-leader"
    fill(cluster, topic, 3)
    old_leader = cluster.partition(topic, 0)[0]
    o_broker = cluster.brokers[old_leader]
    base = flip_in_closed_segment(o_broker, topic)

    flipped = time.monotonic()
    new_leader = cluster.wait_for_leader(topic, 0, not_=old_leader, timeout=20)
    moved_after = time.monotonic() - flipped
    [handed] = wait_until(lambda: lines(o_broker, "(in sync) leads it now"), timeout=5, interval=0.2)
    assert f"broker {new_leader} (in sync) leads it now" in handed and f"offsets {base}-" in handed, handed

    # From the new leader, the partition reads whole: no CORRUPT_MESSAGE (consume() fails on any error).
    got = consume(cluster.bootstrap, topic, RECORDS, timeout=20, config={"fetch.error.backoff.ms": 100})
    assert [(m.offset(), m.value()) for m in got] == [(i, value(i)) for i in range(RECORDS)]

    wait_until(lambda: lines(o_broker, f"repairing {topic}-0 from leader"), timeout=20, interval=0.2)
    wait_until(lambda: damaged(cluster, old_leader, topic) == 0, timeout=10, interval=0.2)
    want = [(i, value(i)) for i in range(RECORDS)]
    wait_until(lambda: records(o_broker, topic) == want, timeout=10, interval=0.2,
               message="old leader's copy equals the new leader's")
    cluster.wait_for_isr(topic, 0, {1, 2, 3}, timeout=15)  # the repaired copy rejoins the ISR
    print(f"\nleadership moved {old_leader} -> {new_leader} {moved_after:.1f} s after the flip; "
          f"old leader repaired from offset {base}")


def test_a_damaged_leader_with_no_other_replica_keeps_answering_corrupt_message(
    cluster: Cluster, pytestconfig: pytest.Config
) -> None:
    register_failure_report(pytestconfig)
    topic = "scrub-alone"
    fill(cluster, topic, 1)
    leader = cluster.partition(topic, 0)[0]
    broker = cluster.brokers[leader]
    base = flip_in_closed_segment(broker, topic)

    [stuck] = wait_until(lambda: lines(broker, "no other in-sync replica can lead it"), timeout=20, interval=0.2)
    assert f"{topic}-0 is damaged (offsets {base}-" in stuck and " ERROR " in stuck, stuck
    cons = consumer(cluster.bootstrap, {"fetch.error.backoff.ms": 100})
    cons.assign([TopicPartition(topic, 0, base)])
    error = None
    deadline = time.monotonic() + 15
    try:
        while error is None and time.monotonic() < deadline:
            for m in cons.consume(100, 0.2):
                assert m.error() is not None, f"a record from the damaged range: offset {m.offset()}"
                error = m.error()
    finally:
        cons.close()
    assert error is not None and error.code() == KafkaError.INVALID_MSG, error  # Kafka's CORRUPT_MESSAGE
    assert cluster.partition(topic, 0)[0] == leader
    assert damaged(cluster, leader, topic) == 1
    assert len(lines(broker, "no other in-sync replica can lead it")) == 1  # said once, not at every check
