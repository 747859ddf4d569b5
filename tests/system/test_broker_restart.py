"""A broker stopped gracefully or killed, then started again on the same data directory.

Graceful (SIGTERM, SIGINT): everything produced is there after the restart, topics keep their
partitions and configs, the clean-shutdown marker is written. Killed (SIGKILL) with
``log.flush.interval.messages=1``: every record acknowledged with acks=all survives recovery, at
the offset it was acknowledged with, and the log accepts new writes after it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Message
from confluent_kafka.admin import ConfigResource, ResourceType

from helpers.broker_process import BrokerProcess, wait_until
from helpers.clients import (
    DeliveryLog,
    admin_client,
    consume,
    create_topic,
    produce_all,
    producer,
    topic_partition_count,
    watermarks,
)

SHUTDOWN_BOUND_S = 5.0


def by_partition(messages: list[Message]) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    out: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    for m in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        out.setdefault(m.partition(), []).append((m.offset(), m.key(), m.value()))
    return out


def stop_gracefully(broker: BrokerProcess, sig: int = signal.SIGTERM) -> None:
    started = time.monotonic()
    code = broker.stop(sig, timeout=15)
    elapsed = time.monotonic() - started
    assert code in (0, 128 + sig), f"exit code {code} after signal {sig}"  # a JVM exits 128+sig after its hooks
    assert elapsed < SHUTDOWN_BOUND_S, f"shutdown took {elapsed:.1f} s"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_everything_produced_is_there_after_a_graceful_restart(
    fresh_broker: Callable[..., BrokerProcess], sig: int
) -> None:
    broker = fresh_broker()
    topic = create_topic(broker.bootstrap, "restart-me", partitions=3)
    log = DeliveryLog()
    prod = producer(broker.bootstrap, {"acks": "all", "linger.ms": 2})
    for i in range(300):
        prod.produce(topic, key=f"k{i % 17}".encode(), value=f"v{i}".encode(), partition=i % 3, on_delivery=log)
    assert prod.flush(20) == 0 and not log.errors
    before = by_partition(log.acked)

    stop_gracefully(broker, sig)
    assert (broker.data_dir / ".kafka_cleanshutdown").exists(), "no clean-shutdown marker after a graceful stop"
    broker.start()

    assert by_partition(consume(broker.bootstrap, topic, 300, partitions=range(3))) == before
    assert watermarks(broker.bootstrap, topic, range(3)) == {p: (0, 100) for p in range(3)}
    after = produce_all(producer(broker.bootstrap), topic, [b"after restart"], partition=1)
    assert after.acked[0].offset() == 100


def test_topics_keep_partitions_configs_and_deletions_across_a_restart(
    fresh_broker: Callable[..., BrokerProcess],
) -> None:
    broker = fresh_broker()
    kept = create_topic(broker.bootstrap, "kept", partitions=2, config={"retention.ms": "7777777"})
    gone = create_topic(broker.bootstrap, "gone")
    admin = admin_client(broker.bootstrap)
    admin.delete_topics([gone])[gone].result(timeout=10)
    produce_all(producer(broker.bootstrap), kept, [b"x"], partition=1)

    stop_gracefully(broker)
    broker.start()

    wait_until(lambda: topic_partition_count(broker.bootstrap, kept) == 2, message="kept topic back")
    admin = admin_client(broker.bootstrap)
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, kept)]).values()
    assert future.result(timeout=10)["retention.ms"].value == "7777777"
    assert topic_partition_count(broker.bootstrap, gone) == 0
    assert [m.value() for m in consume(broker.bootstrap, kept, 1, partitions=[1])] == [b"x"]


def test_records_acknowledged_with_acks_all_survive_sigkill(fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker({"log.flush.interval.messages": 1, "auto.create.topics.enable": "false"})
    topic = create_topic(broker.bootstrap, "killed", partitions=2)
    log = DeliveryLog()
    prod = producer(broker.bootstrap, {"acks": "all", "linger.ms": 0, "message.timeout.ms": 5000,
                                       "retries": 0})
    stop_producing = threading.Event()

    def produce_until_stopped() -> None:
        i = 0
        while not stop_producing.is_set():
            try:
                prod.produce(topic, value=f"v{i}".encode(), partition=i % 2, on_delivery=log)
                i += 1
            except BufferError:
                pass
            prod.poll(0.001)

    writer = threading.Thread(target=produce_until_stopped, daemon=True)
    writer.start()
    try:
        wait_until(lambda: len(log.acked) >= 300, timeout=30, message="300 acknowledged records")
        broker.kill9()  # mid-stream: some requests are in flight
    finally:
        stop_producing.set()
        writer.join(10)
    prod.purge()
    prod.flush(10)
    acknowledged = {(m.partition(), m.offset(), m.value()) for m in log.acked}

    broker.start()

    marks = watermarks(broker.bootstrap, topic, range(2))
    stored = consume(broker.bootstrap, topic, sum(high for _, high in marks.values()), partitions=range(2))
    stored_set = {(m.partition(), m.offset(), m.value()) for m in stored}
    missing = sorted(acknowledged - stored_set)
    assert not missing, f"{len(missing)} acknowledged records lost, first ones: {missing[:5]}"
    for partition in range(2):  # recovery leaves no holes
        offsets = sorted(m.offset() for m in stored if m.partition() == partition)
        assert offsets == list(range(len(offsets)))
    after = produce_all(producer(broker.bootstrap), topic, [b"after recovery"], partition=0)
    assert after.acked[0].offset() == marks[0][1]


@pytest.mark.parametrize("roll_delay_ms", [0, 5], ids=["rolls", "slow-rolls"])
def test_an_idempotent_producer_keeps_its_sequences_across_sigkill_after_many_rolls(
    fresh_broker: Callable[..., BrokerProcess], tmp_path: Path, roll_delay_ms: int,
) -> None:
    """Every roll is planned in the append and completed on the log dir's pool (the new segment's
    files, the snapshot and its fsyncs; storage/roll_plan.py). Killed mid-stream and restarted, the
    broker rebuilds producer state from those snapshots: the same idempotent producer's retries are
    recognised (no duplicates), its new batches accepted in sequence, and nothing it was told is
    written is lost. ``slow-rolls``: the dir's pool work (rolls, flushes) sleeps 5 ms first (the test
    seam), so the kill may land while a roll's files are being made or its snapshot written (the unit tests
    in tests/unit/storage/test_roll_plan.py crash at each step on purpose)."""
    overrides: dict[str, object] = {"log.flush.interval.messages": 1, "auto.create.topics.enable": "false"}
    if roll_delay_ms:  # fresh_broker's first broker keeps its data in <tmp_path>/broker-0/data
        overrides["tidelog.test.log.dir.read.delay"] = f"{tmp_path / 'broker-0' / 'data'}:{roll_delay_ms}"
    broker = fresh_broker(overrides)
    topic = create_topic(broker.bootstrap, "rolling", partitions=1, config={"segment.bytes": "16384"})
    log = DeliveryLog()
    prod = producer(broker.bootstrap, {"enable.idempotence": True, "acks": "all", "linger.ms": 2,
                                       "batch.size": 4096, "message.timeout.ms": 60000})
    stop_producing = threading.Event()
    sent = [0]

    def produce_until_stopped() -> None:
        while not stop_producing.is_set():
            try:
                prod.produce(topic, value=f"r{sent[0]}".encode() + b"x" * 200, partition=0, on_delivery=log)
                sent[0] += 1
            except BufferError:
                pass
            prod.poll(0.001)

    writer = threading.Thread(target=produce_until_stopped, daemon=True)
    writer.start()
    try:
        wait_until(lambda: len(log.acked) >= 2000, timeout=60, message="2000 acknowledged records")
        broker.kill9()
        acked_before_kill = len(log.acked)
        broker.start()
        wait_until(lambda: len(log.acked) >= acked_before_kill + 1000, timeout=60, message="1000 more after the restart")
    finally:
        stop_producing.set()
        writer.join(10)
    assert prod.flush(60) == 0
    assert not log.errors, log.errors[:3]
    snapshots = list((broker.data_dir / f"{topic}-0").glob("*.snapshot"))
    assert len(snapshots) > 20, "the segments rolled many times"

    stored = consume(broker.bootstrap, topic, sent[0], partitions=[0])
    values = [m.value() for m in stored]
    assert len(values) == len(set(values)) == sent[0], "every record once: the retries were recognised"
    assert [int(v[1:].split(b"x", 1)[0]) for v in values] == list(range(sent[0])), "in the order sent"
