"""AlterReplicaLogDirs and DescribeLogDirs driven by kafka-python's admin client on a broker with two
log dirs: a move copies in the background, shows as a future replica, survives a kill -9 mid-copy and
loses nothing; bad requests get Kafka's errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors as kafka_errors
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient, TopicPartitionReplica

from helpers.broker_process import BrokerProcess, register_failure_report, wait_until

COUNT = 160
VALUE = 64 * 1024  # 10 MiB in all
MOVE_RATE = 2_500_000  # replica.alter.log.dirs.io.max.bytes.per.second: the copy takes about 4 s


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("moves")
    dirs = f"{workdir / 'disk-a'},{workdir / 'disk-b'}"
    with BrokerProcess(workdir / "broker", {"log.dirs": dirs, "num.partitions": 1}) as process:
        yield process


def _kafka_python(broker: BrokerProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)


def _where(broker: BrokerProcess, topic: str) -> dict[str, list[tuple[bool, int, int]]]:
    """log dir → [(is_future, size, offset_lag)] of the topic's partition 0, from DescribeLogDirs."""
    admin = _kafka_python(broker)
    try:
        answer: Any = admin.describe_log_dirs()
    finally:
        admin.close()
    found: dict[str, list[tuple[bool, int, int]]] = {}
    for result in answer[0]["log_dirs"]:
        for t in result["topics"]:
            if t["name"] == topic:
                found[result["log_dir"]] = [(p["is_future_key"], p["partition_size"], p["offset_lag"]) for p in t["partitions"]]
    return found


def _records(broker: BrokerProcess, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{topic}", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < COUNT + 1 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.close()
    return got


def _set_move_rate(broker: BrokerProcess, rate: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "replica.alter.log.dirs.io.max.bytes.per.second", str(rate), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)


def test_bad_moves_get_kafkas_errors(broker: BrokerProcess) -> None:
    creator = AdminClient({"bootstrap.servers": broker.bootstrap})  # alive until the future resolves
    creator.create_topics([NewTopic("staying", 1, 1)])["staying"].result(10)
    disk_a = str(broker.workdir.parent / "disk-a")
    admin = _kafka_python(broker)
    try:
        answer = admin.alter_replica_log_dirs({
            TopicPartitionReplica("staying", 0, 1): str(broker.workdir / "not-a-log-dir"),
            TopicPartitionReplica("no-such-topic", 0, 1): disk_a,
        })
    finally:
        admin.close()
    assert answer[TopicPartitionReplica("staying", 0, 1)] is kafka_errors.LogDirNotFoundError
    assert answer[TopicPartitionReplica("no-such-topic", 0, 1)] is kafka_errors.ReplicaNotAvailableError


def test_a_move_survives_a_kill9_mid_copy_and_loses_nothing(broker: BrokerProcess) -> None:
    topic = "moving"
    creator = AdminClient({"bootstrap.servers": broker.bootstrap})
    creator.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(COUNT):
        producer.produce(topic, value=i.to_bytes(4, "big") * (VALUE // 4), partition=0)
    assert producer.flush(30) == 0
    (home,) = _where(broker, topic)
    dest = next(str(d) for d in (broker.workdir.parent / "disk-a", broker.workdir.parent / "disk-b") if str(d) != home)
    _set_move_rate(broker, MOVE_RATE)

    admin = _kafka_python(broker)
    try:
        answer = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 1): dest})
    finally:
        admin.close()
    assert answer == {TopicPartitionReplica(topic, 0, 1): kafka_errors.NoError}
    during = wait_until(lambda: (w := _where(broker, topic)).get(dest) and w[dest][0][1] > 0 and w, timeout=10)
    assert during[home][0][0] is False and during[dest][0][0] is True  # the current replica, and the future one
    assert 0 < during[dest][0][2] < COUNT  # offsets still to copy
    producer.produce(topic, value=b"during the move", partition=0)  # the current log keeps taking appends
    assert producer.flush(10) == 0

    broker.kill9()
    futures = [p for p in Path(dest).iterdir() if p.name.endswith("-future")]
    assert len(futures) == 1 and any(futures[0].glob("*.log"))
    broker.start()
    _set_move_rate(broker, 2**63 - 1)  # the move resumes at full speed
    wait_until(lambda: _where(broker, topic) == {dest: [(False, _where(broker, topic)[dest][0][1], 0)]}, timeout=30)
    assert not any(p.name.endswith("-future") for p in Path(dest).iterdir())
    assert not (Path(home) / f"{topic}-0").exists()
    got = _records(broker, topic)
    assert got[:COUNT] == [i.to_bytes(4, "big") * (VALUE // 4) for i in range(COUNT)]
    assert got[COUNT:] == [b"during the move"]
    producer.produce(topic, value=b"after", partition=0)  # the moved log takes appends
    assert producer.flush(10) == 0
