"""LogProducer and LogConsumer against Apache Kafka 4.3, the compat tier's reference broker.

The client frameworks reach a cluster only through the Kafka protocol; these tests check that what
they promise holds on Kafka itself: a spool filled while no cluster answered is replayed into Kafka
by a new LogProducer, in order per key, next to live records; a LogConsumer commits only the done
prefix and handles every record; an exactly-once transform (Kafka transactions, a consumer group
rebalancing between two LogConsumers) yields every output once under read_committed; and
``tidelog agent`` ships a file through renames, copytruncates and two kill -9s exactly once
(helpers/agent_run.py), with its positions in a Kafka transaction.
"""

from __future__ import annotations

import random
from pathlib import Path

from compat_harness.kafka import ReferenceKafka
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from helpers.agent_run import rotate_and_kill_scenario
from helpers.broker_process import free_port, wait_until
from helpers.clients import FAST_CLIENT, consume, create_topic, producer, unique_topic
from helpers.flaky_handler import FlakyHandler
from helpers.ledger import check_at_least_once, check_exactly_once
from tidelog.clients import ConsumedRecord, LogConsumer, LogProducer, OutputRecord

PARTITIONS = 3
KEYS = 20


def send(lp: LogProducer, topic: str, sent: dict[bytes, int], count: int) -> None:
    for i in range(count):
        key = f"k{i % KEYS}".encode()
        lp.send(topic, str(sent.get(key, 0)).encode(), key)
        sent[key] = sent.get(key, 0) + 1


def fill(bootstrap: str, topic: str, count: int) -> dict[bytes, int]:
    prod = producer(bootstrap, {"enable.idempotence": True})
    sent: dict[bytes, int] = {}
    for i in range(count):
        key = f"k{i % KEYS}".encode()
        prod.produce(topic, str(sent.get(key, 0)).encode(), key)
        sent[key] = sent.get(key, 0) + 1
        prod.poll(0)
    assert prod.flush(30) == 0
    return sent


def committed_and_ends(bootstrap: str, group: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = cons.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        ends = {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
        return {tp.partition: tp.offset for tp in tps}, ends
    finally:
        cons.close()


def all_committed(bootstrap: str, group: str, topic: str) -> bool:
    try:
        done, ends = committed_and_ends(bootstrap, group, topic)
    except KafkaException as exc:  # a coordinator still loading or moving: asked again by wait_until
        if exc.args[0].code() in (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
            return False
        raise
    return done == ends


def consumer_config(bootstrap: str, group: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 50, **FAST_CLIENT}


def test_log_producer_spool_filled_while_no_cluster_answered_is_replayed_into_kafka(
    reference_kafka: ReferenceKafka, tmp_path: Path
) -> None:
    bootstrap = reference_kafka.bootstrap
    topic = create_topic(bootstrap, unique_topic("lp"), PARTITIONS)
    spool = tmp_path / "spool"
    quick = {"spool.outage.ms": 1000, "spool.probe.interval.ms": 200, "linger.ms": 5, **FAST_CLIENT}
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens: every send goes to the spool
    first = LogProducer({"bootstrap.servers": nowhere, "spool.dir": str(spool), **quick})
    sent: dict[bytes, int] = {}
    send(first, topic, sent, 4000)
    first.close(timeout=5)
    assert first.metrics().spooled == 4000
    second = LogProducer({"bootstrap.servers": bootstrap, "spool.dir": str(spool), **quick})
    try:
        send(second, topic, sent, 1000)  # queued behind the spooled records of the same keys
        wait_until(lambda: second.metrics().spooled == 0 and second.metrics().mode == "live", timeout=60,
                   message="spool replayed into Kafka")
        assert second.flush(30)
        metrics = second.metrics()
    finally:
        second.close(timeout=10)
    assert metrics.replayed_total >= 4000  # sends made while it replays queue in the spool too
    messages = consume(bootstrap, topic, 5000, partitions=range(PARTITIONS), timeout=30, settle=0.3)
    counts = check_at_least_once([(m.key() or b"", int(m.value() or b"-1")) for m in messages], sent)
    assert counts["unique"] == 5000


def test_log_consumer_commits_only_the_done_prefix_on_kafka(reference_kafka: ReferenceKafka) -> None:
    bootstrap = reference_kafka.bootstrap
    topic = create_topic(bootstrap, unique_topic("lc"), PARTITIONS)
    sent = fill(bootstrap, topic, 2000)
    handler = FlakyHandler(seed=11)
    handled = handler.handled

    group = unique_topic("g")
    lc = LogConsumer(consumer_config(bootstrap, group), [topic], handler, workers=4, retry_backoff_ms=1)
    lc.start()
    try:
        wait_until(lambda: all_committed(bootstrap, group, topic), timeout=60, interval=0.3,
                   message="every offset committed in Kafka")
        metrics = lc.metrics()
    finally:
        lc.stop(10)
    assert sorted(handled) == sorted((k, s) for k, n in sent.items() for s in range(n))
    assert metrics.handled_total == 2000 and metrics.retries_total > 0


def test_log_consumer_exactly_once_transform_through_a_rebalance_on_kafka(reference_kafka: ReferenceKafka) -> None:
    bootstrap = reference_kafka.bootstrap
    topic_in = create_topic(bootstrap, unique_topic("in"), PARTITIONS)
    topic_out = create_topic(bootstrap, unique_topic("out"), PARTITIONS)
    sent = fill(bootstrap, topic_in, 2000)
    rng = random.Random(5)

    def transform(record: ConsumedRecord) -> list[OutputRecord]:
        if rng.random() < 0.03:
            raise RuntimeError("transient")
        return [OutputRecord(topic_out, record.value, record.key, partition=record.partition)]

    group = unique_topic("g")
    config = consumer_config(bootstrap, group)
    consumers = [LogConsumer(config, [topic_in], transform, mode="exactly-once", retry_backoff_ms=1,
                             commit_interval_ms=200, producer_config={"transactional.id": f"{group}-{name}"})
                 for name in ("a", "b")]
    try:
        consumers[0].start()
        wait_until(lambda: sum(max(v, 0) for v in committed_and_ends(bootstrap, group, topic_in)[0].values()) > 300,
                   timeout=60, message="some transactions committed")
        consumers[1].start()  # the group rebalances: partitions move with their done prefix
        wait_until(lambda: all_committed(bootstrap, group, topic_in), timeout=90, interval=0.3,
                   message="every input offset committed")
    finally:
        for lc in consumers:
            lc.stop(10)
    out = consume(bootstrap, topic_out, 2000, partitions=range(PARTITIONS), settle=0.5, timeout=30,
                  config={"isolation.level": "read_committed"})
    check_exactly_once([(m.key() or b"", int(m.value() or b"-1")) for m in out], sent)


def test_agent_ships_every_line_once_through_rotations_and_two_kills_on_kafka(
    reference_kafka: ReferenceKafka, tmp_path: Path
) -> None:
    rotate_and_kill_scenario(reference_kafka.bootstrap, tmp_path)
