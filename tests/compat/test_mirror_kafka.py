"""tidelog mirror with Apache Kafka on one side: it speaks only the Kafka protocol to both clusters, so
exactly-once must hold from Kafka to tidelog and from tidelog to Kafka alike.

Against the reference Kafka of the compat tier (``reference_kafka``) and the tier's tidelog broker:
the source is written by plain, idempotent and transactional producers (some transactions aborted)
while two mirror processes run, one of them killed -9 at random moments three times; at the end
the destination equals the source record for record (committed records only), nothing twice
(helpers/mirror_run.py). Kafka's group.min.session.timeout.ms is 6 s, hence the link's session.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from compat_harness.kafka import ReferenceKafka

from helpers.broker_process import BrokerProcess
from helpers.clients import create_topic
from helpers.mirror_run import kill_and_cut_scenario

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
