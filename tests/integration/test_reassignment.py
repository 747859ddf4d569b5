"""Partition reassignments on three brokers, driven by kafka-python's admin client (confluent-kafka
2.16 has no AlterPartitionReassignments): a move with its data, leadership leaving a removed broker,
Kafka's errors for bad requests with nothing changed, a cancelled move restoring the replicas, and
leadership back on the preferred replicas (an even leader count) after a broker restarts.

One cluster for the module; each test uses its own topics.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from helpers.broker_process import register_failure_report
from helpers.cluster import STEADY_SESSION, Cluster


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[object]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors: list[object] = []
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(30) == 0
    return errors


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.close()
    return got


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    started = Cluster(tmp_path_factory.mktemp("reassign"), overrides=STEADY_SESSION).start()
    yield started
    started.close()


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def wait_until_done(admin: KafkaAdminClient, topic: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    ongoing: dict[KTP, object] = {}
    while time.monotonic() < deadline:
        ongoing = {tp: v for tp, v in admin.list_partition_reassignments().items() if tp.topic == topic}
        if not ongoing:
            return
        time.sleep(0.2)
    raise AssertionError(f"still moving after {timeout} s: {ongoing}")


def test_a_move_copies_the_data_to_new_replicas_and_removes_the_old_ones(cluster: Cluster, admin: KafkaAdminClient) -> None:
    cluster.create_topic("moving", partitions=1, replication=2)
    leader, replicas, _ = cluster.partition("moving", 0)
    values = [f"m{i}".encode() * 50 for i in range(500)]
    assert not any(produce(cluster.bootstrap, "moving", values))
    newcomer = next(b for b in (1, 2, 3) if b not in replicas)
    target = [newcomer, next(r for r in replicas if r != leader)]  # the leader leaves
    assert admin.alter_partition_reassignments({KTP("moving", 0): target}) == {KTP("moving", 0): None}
    wait_until_done(admin, "moving")
    new_leader, new_replicas, isr = cluster.partition("moving", 0)
    assert new_replicas == target and set(isr) == set(target) and new_leader in target
    assert read_all(cluster.bootstrap, "moving", len(values)) == values
    deadline = time.monotonic() + 10
    while (cluster.brokers[leader].data_dir / "moving-0").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (cluster.brokers[leader].data_dir / "moving-0").exists(), "the removed replica keeps its log"
    assert (cluster.brokers[newcomer].data_dir / "moving-0").exists()


def test_bad_requests_get_kafkas_errors_and_change_nothing(cluster: Cluster, admin: KafkaAdminClient) -> None:
    cluster.create_topic("refused", partitions=1, replication=2)
    before = cluster.partition("refused", 0)
    tp = KTP("refused", 0)
    answers = admin.alter_partition_reassignments({tp: [1, 99]})
    assert answers == {tp: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: [1, 1]}) == {tp: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    assert admin.alter_partition_reassignments({KTP("refused", 7): [1]}) == {KTP("refused", 7): UnknownTopicOrPartitionError}
    assert admin.alter_partition_reassignments({KTP("no-such-topic", 0): [1]}) == {
        KTP("no-such-topic", 0): UnknownTopicOrPartitionError}
    assert cluster.partition("refused", 0) == before
    assert admin.list_partition_reassignments() == {}


def test_a_cancelled_move_restores_the_original_replicas(cluster: Cluster, admin: KafkaAdminClient) -> None:
    cluster.create_topic("cancelled", partitions=1, replication=1)
    _, replicas, _ = cluster.partition("cancelled", 0)
    assert not any(produce(cluster.bootstrap, "cancelled", [b"x" * 100] * 100))
    describer = cluster.admin()  # kept alive until its future resolves
    controller = describer.describe_cluster().result(10).controller.id
    newcomer = next(b for b in (1, 2, 3) if b not in replicas and b != controller)
    tp = KTP("cancelled", 0)
    stalled = cluster.brokers[newcomer]
    stalled.process.send_signal(signal.SIGSTOP)  # registered for another lease, but copies nothing
    try:
        assert admin.alter_partition_reassignments({tp: [newcomer]}) == {tp: None}
        ongoing = admin.list_partition_reassignments()
        assert ongoing == {tp: {"replicas": [newcomer, *replicas], "adding_replicas": [newcomer],
                                "removing_replicas": replicas}}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
    finally:
        stalled.process.send_signal(signal.SIGCONT)
    assert admin.list_partition_reassignments() == {}
    leader, restored, isr = cluster.partition("cancelled", 0)
    assert (leader, restored, isr) == (replicas[0], replicas, replicas)
    assert len(read_all(cluster.bootstrap, "cancelled", 100)) == 100
    cluster.wait_for_brokers({1, 2, 3})


def test_after_a_broker_restarts_leadership_returns_to_the_preferred_replicas_evenly(cluster: Cluster) -> None:
    topic = "balanced"
    cluster.create_topic(topic, partitions=6, replication=3)
    preferred = {p: cluster.partition(topic, p)[1][0] for p in range(6)}
    assert sorted(preferred.values()) == [1, 1, 2, 2, 3, 3], "placement spreads the preferred leaders"
    restarted = preferred[0]
    cluster.brokers[restarted].stop()  # controlled shutdown: its leadership moves away first
    for p, broker in preferred.items():
        if broker == restarted:
            cluster.wait_for_leader(topic, p, not_=restarted)
    cluster.brokers[restarted].start(timeout=60)
    for p in range(6):
        cluster.wait_for_isr(topic, p, {1, 2, 3}, timeout=60)
    # auto.leader.rebalance.enable (default true), checked every 2 s here (FAST_SESSION).
    deadline = time.monotonic() + 30
    leaders = {}
    while time.monotonic() < deadline:
        leaders = {p: cluster.partition(topic, p)[0] for p in range(6)}
        if leaders == preferred:
            break
        time.sleep(0.5)
    assert leaders == preferred
    counts = [list(leaders.values()).count(b) for b in (1, 2, 3)]
    assert max(counts) - min(counts) <= 1, counts
