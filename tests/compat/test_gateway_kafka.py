"""The gateway in front of Apache Kafka: it reaches the cluster only through the Kafka protocol, so
exactly-once per source must hold there too.

Against the reference Kafka of the compat tier (``reference_kafka``): duplicates are skipped across
a gateway kill -9 and restart, and a stream through two instances, one of them killed mid-stream,
lands exactly once (read_committed checker).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from compat_harness.kafka import ReferenceKafka

from helpers.clients import create_topic
from helpers.gateway_process import GatewayProcess, write_json
from helpers.gateway_stream import check_exactly_once, send_stream


def _bootstrap(kafka: ReferenceKafka) -> str:
    return f"{kafka.host}:{kafka.port}"


def test_gateway_on_kafka_skips_duplicates_across_a_kill9_restart(reference_kafka: ReferenceKafka,
                                                                   tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-dup-{uuid.uuid4().hex[:8]}", 2)
    with GatewayProcess(tmp_path, bootstrap) as gateway:
        first = write_json(gateway.url, topic, "web-1", [(1, ["a"]), (2, ["b"])])
        assert [c["status"] for c in first.json()["chunks"]] == ["written", "written"], first.text
        gateway.kill9()
        gateway.start()
        again = write_json(gateway.url, topic, "web-1", [(2, ["b"]), (3, ["c"])])
        assert [c["status"] for c in again.json()["chunks"]] == ["duplicate", "written"], again.text
        assert again.json()["partition"] == first.json()["partition"]


def test_gateway_on_kafka_stream_through_two_instances_lands_exactly_once(reference_kafka: ReferenceKafka,
                                                                          tmp_path: Path) -> None:
    bootstrap = _bootstrap(reference_kafka)
    topic = create_topic(bootstrap, f"gw-stream-{uuid.uuid4().hex[:8]}", 3)
    group = f"gw-{uuid.uuid4().hex[:8]}"
    first = GatewayProcess(tmp_path / "a", bootstrap, group=group).start()
    second = GatewayProcess(tmp_path / "b", bootstrap, group=group).start()
    restarts: list[threading.Thread] = []

    def on_progress(fraction: float) -> None:
        if fraction >= 0.4 and not restarts:
            first.kill9()
            restarts.append(threading.Thread(target=first.start))
            restarts[0].start()

    try:
        send_stream([first.url, second.url], topic, sources=10, chunks_per_source=30, on_progress=on_progress)
        restarts[0].join(60)
    finally:
        first.close()
        second.close()
    assert check_exactly_once(bootstrap, topic, 3, 10, 30) == 10 * 30 * 2
