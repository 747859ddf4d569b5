"""tidelog mirror with Apache Kafka on one side: it speaks only the Kafka protocol to both clusters, so
exactly-once must hold from Kafka to tidelog and from tidelog to Kafka alike.

Against the reference Kafka of the compat tier (``reference_kafka``) and the tier's tidelog broker:
the source is written by plain, idempotent and transactional producers (some transactions aborted)
while two mirror processes run, one of them killed -9 at random moments three times; at the end
the destination equals the source record for record (committed records only), nothing twice
(helpers/mirror_run.py). Kafka's group.min.session.timeout.ms is 6 s, hence the link's session.

``offsets = "preserve"`` writes with MirrorProduce (tidelog's API key 32001), which Kafka does not
serve: with Kafka as the destination the link must stop at start, saying so, with nothing created
there; with Kafka as the source it copies Kafka's own batches (transaction markers included) to
tidelog at their offsets.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from compat_harness.kafka import ReferenceKafka
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from helpers.broker_process import BrokerProcess, wait_until
from helpers.cli_runner import run_cli
from helpers.clients import create_topic
from helpers.mirror_run import MirrorProcess, kill_and_cut_scenario, produce_mixed, write_config

PARTITIONS = 6
RECORDS = 15_000


@pytest.mark.parametrize("direction", ["kafka-to-tidelog", "tidelog-to-kafka"])
def test_mirror_with_kafka_on_one_side_copies_every_committed_record_once(
        direction: str, reference_kafka: ReferenceKafka, tidelog_broker: BrokerProcess, tmp_path: Path) -> None:
    kafka = f"{reference_kafka.host}:{reference_kafka.port}"
    source, destination = (kafka, tidelog_broker.bootstrap) if direction == "kafka-to-tidelog" else (
        tidelog_broker.bootstrap, kafka)
    topic = create_topic(source, f"mirror-{direction}-{uuid.uuid4().hex[:8]}", PARTITIONS)
    written = kill_and_cut_scenario(source, destination, tmp_path, topic=topic, partitions=PARTITIONS,
                                    records=RECORDS, processes=2, kills=2, seed=len(direction),
                                    link={"session.timeout.ms": 6000}, timeout=180)
    assert written > RECORDS // 2


def test_preserve_mode_refuses_an_apache_kafka_destination_at_start(
        reference_kafka: ReferenceKafka, tidelog_broker: BrokerProcess, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    kafka = f"{reference_kafka.host}:{reference_kafka.port}"
    topic = create_topic(tidelog_broker.bootstrap, f"keep-{uuid.uuid4().hex[:8]}", 2)
    config = write_config(tmp_path / "keep.toml", name=f"keep-{uuid.uuid4().hex[:6]}", source=tidelog_broker.bootstrap,
                          destination=kafka, include=[topic], link={"offsets": "preserve"})
    started = time.monotonic()
    run = run_cli(capsys, "mirror", "run", "--config", str(config))
    assert run.code != 0 and time.monotonic() - started < 30
    assert (f'link.offsets = "preserve" needs a tidelog destination: the broker at {kafka} does not serve '
            "MirrorProduce (API key 32001)") in run.err, run.err
    status = run_cli(capsys, "mirror", "status", "--config", str(config))
    assert status.code != 0 and "needs a tidelog destination" in status.err, status.out + status.err
    assert topic not in AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=15).topics


def offsets_and_values(bootstrap: str, topic: str, partition: int, committed: bool) -> list[tuple[int, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False,
                         "isolation.level": "read_committed" if committed else "read_uncommitted"})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1]
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple[int, bytes | None]] = []
        deadline = time.monotonic() + 30
        while consumer.position([TopicPartition(topic, partition)])[0].offset < end:
            assert time.monotonic() < deadline
            out += [(m.offset() or 0, m.value()) for m in consumer.consume(500, 0.2) if m.error() is None]
        return out
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{uuid.uuid4().hex[:8]}"})
    try:
        return [int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]) for p in range(partitions)]
    finally:
        consumer.close()


def test_preserve_mode_copies_an_apache_kafka_source_at_its_offsets(
        reference_kafka: ReferenceKafka, tidelog_broker: BrokerProcess, tmp_path: Path) -> None:
    kafka = f"{reference_kafka.host}:{reference_kafka.port}"
    topic = create_topic(kafka, f"keep-from-kafka-{uuid.uuid4().hex[:8]}", 2)
    produce_mixed(kafka, topic, 2, 600, abort_every=3)
    config = write_config(tmp_path / "keep.toml", name=f"keep-{uuid.uuid4().hex[:6]}", source=kafka,
                          destination=tidelog_broker.bootstrap, include=[topic],
                          link={"offsets": "preserve", "session.timeout.ms": 6000})
    ends = high_watermarks(kafka, topic, 2)

    def copied() -> bool:
        try:
            return high_watermarks(tidelog_broker.bootstrap, topic, 2) == ends
        except KafkaException:
            return False  # not created yet

    mirror = MirrorProcess(config, tmp_path / "mirror.log").start()
    try:
        wait_until(copied, timeout=60, message=f"copied from Kafka:\n{mirror.tail()}")
    finally:
        mirror.close()
    for p in range(2):
        for committed in (True, False):
            assert offsets_and_values(tidelog_broker.bootstrap, topic, p, committed) == offsets_and_values(
                kafka, topic, p, committed), (p, committed)
