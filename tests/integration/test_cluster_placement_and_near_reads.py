"""Placement policies and nearest-replica reads (KIP-392) on three brokers on etcd, driven by confluent-kafka.

One cluster for the file: brokers 1, 2, 3 in racks r1, r2, r3, broker 3 of weight 2, brokers 1 and 2
in the failure group g-a and broker 3 in g-b, every broker with Kafka's rack-aware replica selector
and a metrics port. Where a consumer's fetches land is read from each broker's
``tidelog_consumer_fetch_partitions_total{role=...}``. Broker 2 alone keeps at most 60 kB of a
partition (``log.retention.bytes``, checked every half second): only topics with small segments
lose anything there, so its log start can pass the leader's.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from helpers.broker_process import free_port, register_failure_report
from helpers.cluster import Cluster
from helpers.hostile import metric
from helpers.raw_client import RawClient
from tidelog.controller.placement_policy import CONSISTENT_HASH, PlacementBroker, place

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
GROUPS = {1: "g-a", 2: "g-a", 3: "g-b"}
WEIGHTS = {1: 1.0, 2: 1.0, 3: 2.0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    per_node: dict[int, dict[str, object]] = {
        n: {"metrics.port": free_port(), "broker.rack.group": GROUPS[n], "broker.weight": WEIGHTS[n]} for n in (1, 2, 3)}
    per_node[2].update({"log.retention.bytes": 60_000, "log.retention.check.interval.ms": 500})
    started = Cluster(tmp_path_factory.mktemp("placement"), overrides={"replica.selector.class": SELECTOR},
                      per_node=per_node).start()
    yield started
    started.close()


def _fetches(cluster: Cluster, node: int, role: str) -> float:
    return metric(int(str(cluster.per_node[node]["metrics.port"])), "tidelog_consumer_fetch_partitions_total", role=role)


def _assignment(cluster: Cluster, topic: str) -> list[tuple[int, ...]]:
    partitions = cluster.admin().list_topics(topic, timeout=5).topics[topic].partitions
    return [tuple(partitions[p].replicas) for p in sorted(partitions)]


def _expected_brokers() -> list[PlacementBroker]:
    return [PlacementBroker(n, f"r{n}", GROUPS[n], WEIGHTS[n]) for n in (1, 2, 3)]


def test_consistent_hash_topic_is_placed_by_weight_and_grows_where_the_ring_says(cluster: Cluster) -> None:
    # A fixed name (the cluster is this file's own), so the counts below are the same on every run;
    # the unit tests measure the spread over thousands of partitions.
    topic = "ring-weighted"
    cluster.create_topic(topic, partitions=100, replication=1, **{"placement.policy": CONSISTENT_HASH})
    got = _assignment(cluster, topic)
    assert got == place(CONSISTENT_HASH, _expected_brokers(), topic, 0, 100, 1)
    counts = {n: sum(r == (n,) for r in got) for n in (1, 2, 3)}
    assert counts[3] > max(counts[1], counts[2]), counts  # weight 2 against 1 and 1: 41, 33, 26
    admin = cluster.admin()
    admin.create_partitions([NewPartitions(topic, 110)])[topic].result(15)
    deadline = time.monotonic() + 15
    while len(got := _assignment(cluster, topic)) < 110 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert got[100:] == place(CONSISTENT_HASH, _expected_brokers(), topic, 100, 10, 1)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    config = next(iter(described.values())).result(10)
    assert config["placement.policy"].value == CONSISTENT_HASH


def test_rack_aware_default_spreads_replicas_over_rack_groups(cluster: Cluster) -> None:
    topic = "groups-" + uuid.uuid4().hex[:6]
    cluster.create_topic(topic, partitions=12, replication=2)
    for replicas in _assignment(cluster, topic):
        assert {GROUPS[b] for b in replicas} == {"g-a", "g-b"}, replicas  # never brokers 1 and 2 together


def test_explicit_assignment_and_an_unknown_policy(cluster: Cluster) -> None:
    admin = cluster.admin()
    topic = "manual-" + uuid.uuid4().hex[:6]
    admin.create_topics([NewTopic(topic, 2, -1, replica_assignment=[[2, 1], [1, 2]],
                                  config={"placement.policy": CONSISTENT_HASH})])[topic].result(15)
    cluster.wait_for_leader(topic, 1)
    assert _assignment(cluster, topic) == [(2, 1), (1, 2)]
    bad = "bad-" + uuid.uuid4().hex[:6]
    with pytest.raises(KafkaException, match=r"placement\.policy") as raised:
        admin.create_topics([NewTopic(bad, 1, 1, config={"placement.policy": "round-robin"})])[bad].result(15)
    assert "INVALID_CONFIG" in str(raised.value) or "InvalidConfig" in str(raised.value)


def _produce(cluster: Cluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _consume(cluster: Cluster, topic: str, rack: str, count: int, timeout: float = 30.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "near-" + uuid.uuid4().hex[:6],
                         "client.rack": rack, "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
    finally:
        consumer.close()
    return got


def _topic_with_records(cluster: Cluster, values: list[bytes]) -> tuple[str, int, list[int]]:
    topic = "near-" + uuid.uuid4().hex[:6]
    cluster.wait_for_brokers({1, 2, 3})  # a session lost on a loaded machine comes back within seconds
    cluster.create_topic(topic, partitions=1, replication=3)
    _produce(cluster, topic, values)
    cluster.wait_for_isr(topic, 0, {1, 2, 3})
    leader, replicas, _ = cluster.partition(topic, 0)
    return topic, leader, [r for r in replicas if r != leader]


def test_consumer_reads_from_the_in_sync_replica_in_its_rack(cluster: Cluster) -> None:
    values = [f"near-{i}".encode() for i in range(300)]
    topic, leader, followers = _topic_with_records(cluster, values)
    near = followers[0]
    before = {(n, role): _fetches(cluster, n, role) for n in (1, 2, 3) for role in ("leader", "follower", "redirected")}
    assert _consume(cluster, topic, f"r{near}", len(values)) == values
    delta = {k: _fetches(cluster, *k) - v for k, v in before.items()}
    assert delta[(leader, "redirected")] >= 1
    assert delta[(near, "follower")] >= 1
    assert delta[(leader, "leader")] == 0  # no records came from the leader
    assert delta[(followers[1], "follower")] == 0


def test_consumer_in_no_replicas_rack_reads_from_the_leader(cluster: Cluster) -> None:
    values = [f"far-{i}".encode() for i in range(100)]
    topic, leader, _ = _topic_with_records(cluster, values)
    before = {(n, role): _fetches(cluster, n, role) for n in (1, 2, 3) for role in ("leader", "follower", "redirected")}
    assert _consume(cluster, topic, "elsewhere", len(values)) == values
    delta = {k: _fetches(cluster, *k) - v for k, v in before.items()}
    assert delta[(leader, "leader")] >= 1
    assert sum(v for (_, role), v in delta.items() if role != "leader") == 0


def test_consumer_goes_back_to_the_leader_when_its_near_replica_dies(cluster: Cluster) -> None:
    values = [f"die-{i}".encode() for i in range(200)]
    topic, leader, followers = _topic_with_records(cluster, values[:100])
    near = followers[0]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "die-" + uuid.uuid4().hex[:6],
                         "client.rack": f"r{near}", "enable.auto.commit": False,
                         "topic.metadata.refresh.interval.ms": 1000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
        assert got == values[:100]
        cluster.brokers[near].stop()
        cluster.wait_for_isr(topic, 0, {leader, followers[1]})
        leader_before = _fetches(cluster, leader, "leader")
        _produce(cluster, topic, values[100:])
        deadline = time.monotonic() + 45
        while len(got) < 200 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value() or b"")
        assert got == values
        assert _fetches(cluster, leader, "leader") > leader_before
    finally:
        consumer.close()
        cluster.brokers[near].start()
        cluster.wait_for_brokers({1, 2, 3})


def _preferred_read_replica(cluster: Cluster, leader: int, topic: str, offset: int, rack: str) -> int:
    """A consumer's Fetch v11 from ``rack`` at ``offset``, sent to the leader: its preferred_read_replica."""
    broker = cluster.brokers[leader]
    request = FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(1), rack_id=rack, forgotten_topics_data=(),
                           topics=(FetchTopic(topic=TopicName(topic), partitions=(FetchPartition(
                               partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(1 << 20)),)),))
    with RawClient(broker.host, broker.port) as client:
        response = client.call(request)
    (partition,) = response.responses[0].partitions
    assert partition.error_code == 0, partition
    return int(partition.preferred_read_replica)


def test_the_leader_keeps_a_consumer_whose_offset_the_near_follower_no_longer_holds(cluster: Cluster) -> None:
    topic = "near-start-" + uuid.uuid4().hex[:6]
    cluster.wait_for_brokers({1, 2, 3})
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]], config={"segment.bytes": "16384"})])[topic].result(15)
    cluster.wait_for_leader(topic, 0)
    # Batches of at most 8 kB (a batch larger than segment.bytes is refused): about 19 segments in all,
    # of which broker 2 keeps 3 or 4.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.size": 8000})
    failed: list[object] = []
    for _ in range(300):
        producer.produce(topic, bytes(1000), partition=0, on_delivery=lambda e, _m: failed.append(e) if e else None)
    assert producer.flush(30) == 0 and failed == []
    cluster.wait_for_isr(topic, 0, {1, 2})
    first_segment = Path(str(cluster.brokers[2].properties["log.dirs"])) / f"{topic}-0" / f"{0:020d}.log"
    deadline = time.monotonic() + 20
    while first_segment.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not first_segment.exists(), "broker 2's retention did not move its log start"
    assert cluster.partition(topic, 0)[0] == 1
    # Offset 299 is on broker 2 (in rack r2): the consumer is sent there. Offset 0 is only on the
    # leader any more: once broker 2's next fetch has told the leader its new log start, the
    # leader keeps the consumer (Kafka's selector), where it used to send it to broker 2 for an
    # OFFSET_OUT_OF_RANGE.
    assert _preferred_read_replica(cluster, 1, topic, 299, "r2") == 2
    deadline = time.monotonic() + 10
    while _preferred_read_replica(cluster, 1, topic, 0, "r2") != -1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _preferred_read_replica(cluster, 1, topic, 0, "r2") == -1
    assert _preferred_read_replica(cluster, 1, topic, 299, "r2") == 2
