"""Transactions on three brokers (etcd), driven by confluent-kafka: the coordinator follows leadership
of ``__transaction_state``, markers cross brokers with WriteTxnMarkers, and a transaction survives the
kill -9 of its coordinator.

Topics have three partitions with their leaders spread over the three brokers, so every transaction
here has markers written by at least two brokers other than its coordinator.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as wtm
from kio.static.primitive import i8, i16, i32

from helpers.broker_process import register_failure_report
from helpers.cluster import Cluster
from helpers.raw_client import RawClient

TXN_CLUSTER = {
    "transaction.state.log.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}
NONE, NOT_LEADER_OR_FOLLOWER, TRANSACTION_COORDINATOR_FENCED = 0, 6, 52


def start_cluster(tmp_path: Path, pytestconfig: pytest.Config) -> Cluster:
    register_failure_report(pytestconfig)
    return Cluster(tmp_path, overrides=TXN_CLUSTER).start()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    """For the tests that kill nothing."""
    cluster = start_cluster(tmp_path_factory.mktemp("txn-cluster"), pytestconfig)
    yield cluster
    cluster.close()


@pytest.fixture
def cluster(tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    """Each kill -9 test gets its own."""
    started = start_cluster(tmp_path, pytestconfig)
    yield started
    started.close()


def spread_topic(cluster: Cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(name, partitions=3, replication=3)
    leaders = {cluster.partition(name, p)[0] for p in range(3)}
    assert leaders == {1, 2, 3}, f"leaders of {name}: {leaders}"
    return name


def txn_producer(cluster: Cluster, txn_id: str, **extra: Any) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})
    producer.init_transactions(30)
    return producer


def coordinator_of(cluster: Cluster, txn_id: str, *, not_: int | None = None) -> int:
    """The broker FindCoordinator(TRANSACTION) names (other than ``not_``), asked of a live broker."""
    broker = next(b for b in cluster.brokers.values() if b.is_running())
    deadline = time.monotonic() + 20
    while True:
        with RawClient("127.0.0.1", broker.port) as client:
            found = client.call(FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(txn_id,))).coordinators[0]
        if int(found.error_code) == NONE and int(found.node_id) != not_:
            return int(found.node_id)
        assert time.monotonic() < deadline, f"no new coordinator for {txn_id}: error {int(found.error_code)}"
        time.sleep(0.2)


def read_topic(bootstrap: str, topic: str, isolation: str, expected: int, timeout: float = 30.0) -> list[bytes]:
    """Values of every partition of ``topic`` from the start, until ``expected`` arrived and a second
    passed with nothing more (or ``timeout``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_until = deadline
    try:
        while time.monotonic() < min(deadline, quiet_until):
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            values.append(message.value())
            if len(values) >= expected:
                quiet_until = time.monotonic() + 1.0
    finally:
        consumer.close()
    return sorted(values)


def produce_round(producer: Producer, topic: str, label: str) -> list[bytes]:
    values = [f"{label}-{p}-{i}".encode() for p in range(3) for i in range(5)]
    for value in values:
        producer.produce(topic, value, partition=int(value.split(b"-")[-2]))
    return values


def test_commit_and_abort_across_partitions_led_by_different_brokers(shared: Cluster) -> None:
    topic = spread_topic(shared, "spread")
    producer = txn_producer(shared, "spread-writer")
    producer.begin_transaction()
    first = produce_round(producer, topic, "c1")
    producer.commit_transaction(30)
    producer.begin_transaction()
    aborted = produce_round(producer, topic, "ab")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    last = produce_round(producer, topic, "c2")
    producer.commit_transaction(30)
    committed = sorted(first + last)
    assert read_topic(shared.bootstrap, topic, "read_committed", len(committed)) == committed
    assert read_topic(shared.bootstrap, topic, "read_uncommitted", 45) == sorted(committed + aborted)


def test_consume_transform_produce_commits_output_and_offsets_together(shared: Cluster) -> None:
    source, sink = spread_topic(shared, "source"), spread_topic(shared, "sink")
    feeder = Producer({"bootstrap.servers": shared.bootstrap, "acks": "all"})
    inputs = [f"in-{p}-{i}".encode() for p in range(3) for i in range(20)]
    for value in inputs:
        feeder.produce(source, value, partition=int(value.split(b"-")[1]))
    assert feeder.flush(30) == 0
    group = f"ctp-{uuid.uuid4().hex[:6]}"

    def run(limit: int, commit: bool) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": shared.bootstrap, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        consumer.subscribe([source])
        producer = txn_producer(shared, "transformer")
        producer.begin_transaction()
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < limit and time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is None or message.error():
                continue
            seen.append(message.value())
            producer.produce(sink, message.value().upper(), partition=message.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        consumer.close()
        return seen

    wasted = run(25, commit=False)  # aborted: neither its output nor its offsets count
    assert len(wasted) == 25
    done = run(len(inputs), commit=True)
    assert sorted(done) == sorted(inputs)  # the aborted round's offsets were not committed
    assert read_topic(shared.bootstrap, sink, "read_committed", len(inputs)) == sorted(v.upper() for v in inputs)
    check = Consumer({"bootstrap.servers": shared.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(source, p) for p in range(3)], 10)
    check.close()
    assert [tp.offset for tp in committed] == [20, 20, 20]


def _markers(port: int, producer_id: int, coordinator_epoch: int, topic: str, partition: int) -> int:
    with RawClient("127.0.0.1", port) as client:
        response = client.call(wtm.WriteTxnMarkersRequest(markers=(wtm.WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(0), transaction_result=False,
            coordinator_epoch=i32(coordinator_epoch),
            topics=(wtm.WritableTxnMarkerTopic(name=TopicName(topic), partition_indexes=(i32(partition),)),),
        ),)))
    return int(response.markers[0].topics[0].partitions[0].error_code)


def test_write_txn_markers_is_refused_by_followers_and_from_an_older_coordinator_epoch(shared: Cluster) -> None:
    topic = spread_topic(shared, "markers")
    leader, replicas, _ = shared.partition(topic, 0)
    follower = next(r for r in replicas if r != leader)
    assert _markers(shared.brokers[follower].port, 4242, 0, topic, 0) == NOT_LEADER_OR_FOLLOWER
    assert _markers(shared.brokers[leader].port, 4242, 5, topic, 0) == NONE
    assert _markers(shared.brokers[leader].port, 4242, 4, topic, 0) == TRANSACTION_COORDINATOR_FENCED


def test_an_open_transaction_is_aborted_after_its_coordinator_is_killed_and_the_producer_goes_on(cluster: Cluster) -> None:
    topic = spread_topic(cluster, "orphan")
    zombie = txn_producer(cluster, "survivor")
    zombie.begin_transaction()
    committed = produce_round(zombie, topic, "before")
    zombie.commit_transaction(30)
    zombie.begin_transaction()
    orphaned = produce_round(zombie, topic, "open")
    zombie.flush(30)
    coordinator = coordinator_of(cluster, "survivor")
    cluster.brokers[coordinator].kill9()
    coordinator_of(cluster, "survivor", not_=coordinator)
    successor = txn_producer(cluster, "survivor")  # the new coordinator aborts the open transaction
    successor.begin_transaction()
    committed += produce_round(successor, topic, "after")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)  # fenced by the successor's epoch
    assert read_topic(cluster.bootstrap, topic, "read_committed", len(committed)) == sorted(committed)
    everything = read_topic(cluster.bootstrap, topic, "read_uncommitted", len(committed) + len(orphaned))
    assert set(orphaned) <= set(everything)


def test_a_commit_the_dead_coordinator_could_not_finish_is_finished_by_the_new_one(cluster: Cluster) -> None:
    topic = spread_topic(cluster, "unfinished")
    coordinator = coordinator_of(cluster, "finisher")
    # A partition whose only replica is neither the coordinator nor the broker that takes over from
    # it: while that broker is down the commit cannot be finished.
    others = sorted(set(cluster.brokers) - {coordinator})
    lonely = f"lonely-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin()
    admin.create_topics([NewTopic(lonely, 1, -1, replica_assignment=[[others[1]]])])[lonely].result(15)
    cluster.wait_for_leader(lonely, 0)
    producer = txn_producer(cluster, "finisher", **{"transaction.timeout.ms": 60000})
    producer.begin_transaction()
    values = produce_round(producer, topic, "late")
    producer.produce(lonely, b"late-lonely", partition=0)
    producer.flush(30)
    cluster.brokers[others[1]].kill9()
    with pytest.raises(KafkaException):
        producer.commit_transaction(3)  # PrepareCommit is written; one marker cannot be
    cluster.brokers[coordinator].kill9()
    cluster.brokers[others[1]].start()
    coordinator_of(cluster, "finisher", not_=coordinator)
    deadline = time.monotonic() + 60
    while True:  # librdkafka retries the EndTxn it timed out on with the new coordinator
        try:
            producer.commit_transaction(10)
            break
        except KafkaException as exc:
            assert exc.args[0].retriable() and time.monotonic() < deadline, exc
    assert read_topic(cluster.bootstrap, topic, "read_committed", len(values)) == sorted(values)
    lonely_reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lonely",
                              "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    lonely_reader.assign([TopicPartition(lonely, 0, 0)])
    got = None
    deadline = time.monotonic() + 20
    while got is None and time.monotonic() < deadline:
        message = lonely_reader.poll(0.3)
        if message is not None and not message.error():
            got = message.value()
    lonely_reader.close()
    assert got == b"late-lonely"
