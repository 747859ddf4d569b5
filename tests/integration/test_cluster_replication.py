"""Three brokers on etcd, driven by confluent-kafka: replication, failover, the ISR rules.

Each test starts its own cluster (etcd + 3 broker subprocesses, 3 s sessions), because each one kills
or stops brokers.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from helpers.broker_process import free_port, register_failure_report, wait_until
from helpers.clients import watermark_offsets
from helpers.cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    started = Cluster(tmp_path).start()
    yield started
    started.close()


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` up to its current end: partition → [(offset, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    ends = {p: watermark_offsets(consumer, TopicPartition(topic, p))[1] for p in range(partitions)}
    consumer.assign(tps)
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout
    while any((got[p][-1][0] + 1 if got[p] else 0) < ends[p] for p in got) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        got[message.partition()].append((message.offset(), message.value()))
    consumer.close()
    return got


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> list[KafkaError | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    errors: list[KafkaError | None] = []
    for value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(60) == 0
    return errors


def test_metadata_lists_every_broker_and_each_partition_is_replicated_over_racks(cluster: Cluster) -> None:
    cluster.create_topic("placed", partitions=6, replication=3)
    md = cluster.admin().list_topics("placed", timeout=5)
    assert sorted(md.brokers) == [1, 2, 3]
    assert md.controller_id in (1, 2, 3)
    leaders = []
    for p in md.topics["placed"].partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3]
        assert p.leader == p.replicas[0]
        leaders.append(p.leader)
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]  # leaders spread evenly


def test_acks_all_writes_survive_the_leaders_kill9(cluster: Cluster) -> None:
    cluster.create_topic("durable", replication=3)
    values = [b"before-%d" % i for i in range(2000)]
    assert produce(cluster.bootstrap, "durable", values) == [None] * len(values)
    leader = cluster.partition("durable", 0)[0]
    cluster.brokers[leader].kill9()
    new_leader = cluster.wait_for_leader("durable", 0, not_=leader)
    assert new_leader != leader
    after = [b"after-%d" % i for i in range(500)]
    assert produce(cluster.bootstrap, "durable", after) == [None] * len(after)
    got = read_all(cluster.bootstrap, "durable", 1)[0]
    assert [v for _, v in got] == values + after
    assert [o for o, _ in got] == list(range(len(values) + len(after)))


def test_a_producer_rides_out_a_leader_kill9_without_losing_or_repeating_a_record(cluster: Cluster) -> None:
    cluster.create_topic("ride", replication=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 2, "message.timeout.ms": 60000})
    acked: list[bytes] = []
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: object) -> None:
        if error is None:
            acked.append(message.value())  # type: ignore[attr-defined]
        else:
            failed.append(error)

    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            producer.produce("ride", value=b"%08d" % i, partition=0, on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.001)
        producer.flush(60)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(1.5)
    leader = cluster.partition("ride", 0)[0]
    killed_at = time.monotonic()
    cluster.brokers[leader].kill9()
    cluster.wait_for_leader("ride", 0, not_=leader)
    took = time.monotonic() - killed_at
    time.sleep(2)
    stop.set()
    thread.join(90)
    assert not failed
    got = [v for _, v in read_all(cluster.bootstrap, "ride", 1)[0]]
    assert len(got) == len(set(got)), "a record was written twice"
    assert set(acked) <= set(got), f"{len(set(acked) - set(got))} acknowledged records lost"
    assert got == sorted(got)  # one producer, one partition: its order is kept
    assert took < 10


def test_min_insync_replicas_refuses_acks_all_when_the_isr_is_too_small(cluster: Cluster) -> None:
    cluster.create_topic("strict", replication=3, **{"min.insync.replicas": "3"})
    leader, replicas, _ = cluster.partition("strict", 0)
    follower = next(r for r in replicas if r != leader)
    cluster.brokers[follower].kill9()
    cluster.wait_for_isr("strict", 0, set(replicas) - {follower})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 3000,
                         "retries": 0})
    errors: list[KafkaError | None] = []
    producer.produce("strict", value=b"x", partition=0, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)
    # acks=1 still works on the leader alone.
    one = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1})
    one.produce("strict", value=b"y", partition=0)
    assert one.flush(10) == 0


def test_a_restarted_follower_catches_up_and_rejoins_the_isr(cluster: Cluster) -> None:
    cluster.create_topic("rejoin", replication=3)
    leader, replicas, _ = cluster.partition("rejoin", 0)
    follower = next(r for r in replicas if r != leader)
    cluster.brokers[follower].stop()
    cluster.wait_for_isr("rejoin", 0, set(replicas) - {follower})
    values = [b"while-away-%d" % i for i in range(1000)]
    assert produce(cluster.bootstrap, "rejoin", values) == [None] * len(values)
    cluster.brokers[follower].start()
    cluster.wait_for_isr("rejoin", 0, set(replicas))
    # The follower now holds everything: with the other two gone it alone can serve it.
    for other in replicas:
        if other != follower:
            cluster.brokers[other].kill9()
    deadline = time.monotonic() + 20
    while cluster.partition("rejoin", 0)[0] != follower and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.partition("rejoin", 0)[0] == follower
    got = read_all(cluster.brokers[follower].bootstrap, "rejoin", 1)[0]
    assert [v for _, v in got] == values


def test_with_every_isr_member_dead_the_partition_stays_offline_until_one_returns(cluster: Cluster) -> None:
    cluster.create_topic("offline", replication=2)
    leader, replicas, _ = cluster.partition("offline", 0)
    values = [b"kept-%d" % i for i in range(100)]
    assert produce(cluster.bootstrap, "offline", values) == [None] * len(values)
    follower = next(r for r in replicas if r != leader)
    cluster.brokers[follower].kill9()
    cluster.wait_for_isr("offline", 0, {leader})
    cluster.brokers[leader].kill9()
    deadline = time.monotonic() + 15
    while cluster.partition("offline", 0)[0] != -1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.partition("offline", 0)[0] == -1  # unclean election is off: no out-of-sync leader
    cluster.brokers[follower].start()
    time.sleep(1)
    assert cluster.partition("offline", 0)[0] == -1  # the returning broker was not in the ISR
    cluster.brokers[leader].start()
    assert cluster.wait_for_leader("offline", 0) == leader
    got = read_all(cluster.bootstrap, "offline", 1)[0]
    assert [v for _, v in got] == values


def _replica_fetch(port: int, replica: int, epoch: int, offset: int) -> int:
    """One Fetch v12 as broker ``replica`` would send it; the partition's error code."""
    import datetime

    from kio.schema.fetch.v12 import request as fetch
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    from helpers.raw_client import RawClient

    with RawClient("127.0.0.1", port) as client:
        response = client.call(fetch.FetchRequest(
            replica_id=BrokerId(replica), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
            min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
            session_epoch=i32(-1), forgotten_topics_data=(),
            topics=(fetch.FetchTopic(topic=TopicName("forged"), partitions=(fetch.FetchPartition(
                partition=i32(0), current_leader_epoch=i32(epoch), fetch_offset=i64(offset),
                partition_max_bytes=i32(1 << 20),
            ),)),),
        ))
    return int(response.responses[0].partitions[0].error_code)


def test_forged_and_stale_follower_fetches_get_kafkas_errors(cluster: Cluster) -> None:
    cluster.create_topic("forged", replication=2)
    leader, replicas, _ = cluster.partition("forged", 0)
    stranger = next(b for b in (1, 2, 3) if b not in replicas)
    follower = next(r for r in replicas if r != leader)
    port = cluster.brokers[leader].port
    assert _replica_fetch(port, stranger, -1, 0) == KafkaError.NOT_LEADER_FOR_PARTITION
    assert _replica_fetch(port, follower, 5, 0) == KafkaError.UNKNOWN_LEADER_EPOCH
    assert _replica_fetch(port, follower, -1, 10_000) == KafkaError.OFFSET_OUT_OF_RANGE
    assert _replica_fetch(cluster.brokers[follower].port, leader, -1, 0) == KafkaError.NOT_LEADER_FOR_PARTITION


def test_a_consumer_group_keeps_its_offsets_when_its_coordinator_dies(cluster: Cluster) -> None:
    cluster.create_topic("work", partitions=3, replication=3)
    values = [b"job-%d" % i for i in range(300)]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce("work", value=value, partition=i % 3)
    assert producer.flush(30) == 0

    def consume(count: int) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "workers", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": 6000})
        consumer.subscribe(["work"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            got.append(message.value())
            if len(got) == count:
                consumer.commit(asynchronous=False)
        consumer.close()
        return got

    first = consume(150)
    assert len(first) == 150
    admin = cluster.admin()
    coordinator = admin.describe_consumer_groups(["workers"])["workers"].result(10).coordinator.id
    cluster.brokers[coordinator].kill9()
    cluster.wait_for_brokers(set(cluster.brokers) - {coordinator}, timeout=20)
    rest = consume(150)
    assert sorted(first + rest) == sorted(values)  # nothing consumed twice, nothing skipped


def test_a_topic_config_altered_through_one_broker_applies_on_the_leader_elsewhere(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    cluster.create_topic("tuned", partitions=3, replication=1)
    md = cluster.admin().list_topics("tuned", timeout=5).topics["tuned"]
    by_leader = {p.leader: p.id for p in md.partitions.values()}
    other = next(node for node in by_leader if node != 1)
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})  # altered through broker 1
    resource = ConfigResource("topic", "tuned", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    time.sleep(0.5)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1, "retries": 0})
    errors: list[KafkaError | None] = []
    producer.produce("tuned", value=b"x" * 5000, partition=by_leader[other], on_delivery=lambda e, _m: errors.append(e))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_delete_records_on_the_leader_moves_the_followers_log_start_too(cluster: Cluster) -> None:
    from confluent_kafka import TopicPartition as TP

    cluster.create_topic("trimmed", replication=3)
    assert produce(cluster.bootstrap, "trimmed", [b"r%d" % i for i in range(100)]) == [None] * 100
    admin = cluster.admin()
    admin.delete_records([TP("trimmed", 0, 60)])[TP("trimmed", 0, 60)].result(10)
    leader = cluster.partition("trimmed", 0)[0]
    time.sleep(1.5)  # a follower fetch or two carries the leader's log start
    cluster.brokers[leader].kill9()
    cluster.wait_for_leader("trimmed", 0, not_=leader)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "x"})
    low, high = watermark_offsets(consumer, TP("trimmed", 0))
    consumer.close()
    assert (low, high) == (60, 100)


def test_leadership_returns_to_the_preferred_replica_after_it_comes_back(cluster: Cluster) -> None:
    cluster.create_topic("preferred", replication=3)
    preferred = cluster.partition("preferred", 0)[1][0]
    cluster.brokers[preferred].stop()
    cluster.wait_for_leader("preferred", 0, not_=preferred)
    cluster.brokers[preferred].start()
    cluster.wait_for_isr("preferred", 0, {1, 2, 3})
    deadline = time.monotonic() + 20
    while cluster.partition("preferred", 0)[0] != preferred and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.partition("preferred", 0)[0] == preferred


def test_followers_roll_on_their_log_dirs_pool_and_keep_every_record(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """A follower's append that would roll its segment has the roll made on the log dir's pool first
    (disk_pools.roll_before_append through the replica fetcher), as a leader's Produce does."""
    register_failure_report(pytestconfig)
    metrics = {node: {"metrics.port": free_port()} for node in (1, 2, 3)}
    cluster = Cluster(tmp_path, per_node=metrics).start()
    try:
        cluster.create_topic("rolled", partitions=1, replication=3, **{"segment.bytes": "16384"})
        values = [b"v%04d-" % i + b"x" * 500 for i in range(300)]  # about 150 KB: nine rolls or so
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                             "batch.size": 4096})  # a request must fit the 16 KiB segments
        errors: list[KafkaError | None] = []
        for value in values:
            producer.produce("rolled", value=value, partition=0, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(60) == 0 and errors == [None] * len(values)
        leader, _, _ = cluster.partition("rolled", 0)
        cluster.wait_for_isr("rolled", 0, {1, 2, 3})
        for node, broker in cluster.brokers.items():
            folder = broker.data_dir / "rolled-0"
            assert wait_until(lambda folder=folder: len(list(folder.glob("*.log"))) >= 5, 30), f"node {node} rolled"
            if node != leader:
                text = urllib.request.urlopen(f"http://127.0.0.1:{metrics[node]['metrics.port']}/metrics",
                                              timeout=5).read().decode()
                assert 'tidelog_disk_work_total{lane="dir",kind="roll"}' in text, f"follower {node} rolled inline"
        assert [v for _, v in read_all(cluster.bootstrap, "rolled", 1)[0]] == values
    finally:
        cluster.close()
