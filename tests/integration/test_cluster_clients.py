"""kafka-python, aiokafka and the Java client against three brokers on etcd, while a broker is stopped
and started again: RF=3 topics, acks=all, consumer groups."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import KafkaError
from kafka import KafkaConsumer, KafkaProducer

from helpers.broker_process import register_failure_report
from helpers.cluster import Cluster
from helpers.mirror_run import read_all
from tidelog.cli.main import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    started = Cluster(tmp_path_factory.mktemp("cluster-clients")).start()
    yield started
    started.close()


def _bounce_a_broker(cluster: Cluster, topic: str) -> int:
    """Stop (SIGTERM) the leader of the topic's partition 0; its number, to start it again."""
    leader = cluster.partition(topic, 0)[0]
    cluster.brokers[leader].stop()
    cluster.wait_for_leader(topic, 0, not_=leader)
    return leader


def test_kafka_python_produces_and_consumes_in_a_group_through_a_broker_restart(cluster: Cluster) -> None:
    topic = "kp-" + uuid.uuid4().hex[:6]
    cluster.create_topic(topic, partitions=3, replication=3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", retries=20, retry_backoff_ms=200)
    sent = [f"kp-{i}".encode() for i in range(900)]
    for value in sent[:300]:
        producer.send(topic, value)
    producer.flush(30)
    stopped = _bounce_a_broker(cluster, topic)
    for value in sent[300:600]:
        producer.send(topic, value)
    producer.flush(60)
    cluster.brokers[stopped].start()
    cluster.wait_for_isr(topic, 0, {1, 2, 3})
    futures = [producer.send(topic, value) for value in sent[600:]]
    producer.flush(60)
    assert all(f.get(30) for f in futures)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id="kp-group",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000)
    got = [message.value for message in consumer]
    consumer.close()
    assert sorted(got) == sorted(sent)


def test_aiokafka_produces_and_consumes_in_a_group_through_a_broker_restart(cluster: Cluster) -> None:
    topic = "aio-" + uuid.uuid4().hex[:6]
    cluster.create_topic(topic, partitions=3, replication=3)
    sent = [f"aio-{i}".encode() for i in range(600)]

    async def produce(values: list[bytes]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True,
                                    request_timeout_ms=30000, retry_backoff_ms=200)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()

    async def consume(count: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id="aio-group",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        deadline = time.monotonic() + 90
        try:
            while len(got) < count and time.monotonic() < deadline:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for records in batches.values():
                    got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    # Every phase has its own deadline, so that a hang names its phase instead of the test's timeout.
    asyncio.run(asyncio.wait_for(produce(sent[:300]), 60))
    stopped = _bounce_a_broker(cluster, topic)
    asyncio.run(asyncio.wait_for(produce(sent[300:450]), 90))
    cluster.brokers[stopped].start()
    cluster.wait_for_isr(topic, 0, {1, 2, 3})
    asyncio.run(asyncio.wait_for(produce(sent[450:]), 60))
    got = asyncio.run(consume(len(sent)))
    if sorted(got) != sorted(sent):
        # Lost, or only not delivered to the group? Read the partitions directly to tell.
        stored = [r[1] for records in read_all(cluster.bootstrap, topic, 3).values() for r in records]
        missing = set(sent) - set(got)
        raise AssertionError(f"the group read {len(got)} of {len(sent)} records; {len(missing)} missing, "
                             f"{len(set(sent) - set(stored))} of them absent from the partitions too")


@pytest.mark.parametrize("check", ["produce-consume", "group"])
def test_the_java_client_works_against_the_cluster(cluster: Cluster, tmp_path: Path, check: str) -> None:
    libs = subprocess.run([str(REPO / "tests/compat/kafka/install.sh")], capture_output=True, text=True,
                          check=True, timeout=600).stdout.strip()
    source = REPO / "tests/compat/java/CompatClientCheck.java"
    subprocess.run(["javac", "-d", str(tmp_path), "-cp", f"{libs}/*", str(source)], check=True, timeout=180)
    topic = "java-" + uuid.uuid4().hex[:6]
    cluster.create_topic(topic, partitions=2, replication=3)
    done = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{tmp_path}:{libs}/*", "CompatClientCheck",
         cluster.bootstrap, check, topic],
        capture_output=True, text=True, timeout=180, check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines and lines[-1].startswith("DONE"), done.stdout + done.stderr


def test_admin_elect_leaders_moves_leadership_back_to_the_preferred_replica(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from confluent_kafka import ElectionType, TopicPartition

    manual = Cluster(tmp_path / "manual", overrides={"auto.leader.rebalance.enable": "false"}).start()
    try:
        manual.create_topic("elect", replication=3)
        preferred = manual.partition("elect", 0)[1][0]
        manual.brokers[preferred].stop()
        manual.wait_for_leader("elect", 0, not_=preferred)
        manual.brokers[preferred].start()
        manual.wait_for_isr("elect", 0, {1, 2, 3})
        assert manual.partition("elect", 0)[0] != preferred  # no automatic rebalance here
        admin = manual.admin()
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elect", 0)]).result(15)
        assert all(error is None for error in result.values())
        manual.wait_for_leader("elect", 0)
        deadline = time.monotonic() + 10
        while manual.partition("elect", 0)[0] != preferred and time.monotonic() < deadline:
            time.sleep(0.1)
        assert manual.partition("elect", 0)[0] == preferred
        again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elect", 0)]).result(15)
        assert [e.code() for e in again.values() if e is not None] == [KafkaError.ELECTION_NOT_NEEDED]
        # tidelog's own command, as kafka-leader-election.sh: nothing to do is not a failure.
        assert main(["partitions", "elect-leaders", "-b", manual.bootstrap, "--topic", "elect", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert rows == [{"topic": "elect", "partition": 0, "outcome": "already elected", "message": None}]
        assert main(["partitions", "elect-leaders", "-b", manual.bootstrap, "--topic", "elect", "--partition", "7"]) == 1
        assert "UNKNOWN_TOPIC_OR_PART" in capsys.readouterr().out
    finally:
        manual.close()
