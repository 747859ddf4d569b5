"""Placement policies and nearest-replica reads (KIP-392) on three brokers on etcd, driven by confluent-kafka.

One cluster for the file: brokers 1, 2, 3 in racks r1, r2, r3, broker 3 of weight 2, brokers 1 and 2
in the failure group g-a and broker 3 in g-b, every broker with Kafka's rack-aware replica selector
and a metrics port. Where a consumer's fetches land is read from each broker's
``tidelog_consumer_fetch_partitions_total{role=...}``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

from helpers.broker_process import free_port, register_failure_report
from helpers.cluster import Cluster
from helpers.hostile import metric
from tidelog.controller.placement_policy import CONSISTENT_HASH, PlacementBroker, place

SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
GROUPS = {1: "g-a", 2: "g-a", 3: "g-b"}
WEIGHTS = {1: 1.0, 2: 1.0, 3: 2.0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    per_node = {n: {"metrics.port": free_port(), "broker.rack.group": GROUPS[n], "broker.weight": WEIGHTS[n]}
                for n in (1, 2, 3)}
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
