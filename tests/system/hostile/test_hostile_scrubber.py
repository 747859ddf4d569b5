"""Damage below the recovery point: the scrubber finds it, consumers get CORRUPT_MESSAGE, not garbage.

The issue's case: a byte flipped in a closed segment was never noticed (recovery checks only what lies
after the recovery point, fetches send bytes as they are) and a consumer received a garbage record. Here
a running broker subprocess (scrubber at a fast rate, a pass every half second) has one byte flipped in
the records of a closed segment of partition 0. The scrubber must log and count the damaged range, a
confluent-kafka consumer must get every record before the range, then an error for partition 0 while
partition 1 is served whole, and the knowledge must survive a restart.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import consumer, create_topic, producer
from helpers.hostile import metric

RECORDS = 3000
# librdkafka names error code 2 (Kafka's CORRUPT_MESSAGE) INVALID_MSG.
TOPIC = "scrubbed"


def batches(segment: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch in a segment file, from the length fields."""
    data = segment.read_bytes()
    found, position = [], 0
    while position + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        found.append((position, base, 12 + length))
        position += 12 + length
    return found


def read_partitions(bootstrap: str, start: dict[int, int], timeout: float = 20.0) -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, KafkaError]]:
    """Records and first error per partition, read from ``start`` offsets until both partitions are done."""
    cons = consumer(bootstrap, {"fetch.error.backoff.ms": 100})
    cons.assign([TopicPartition(TOPIC, p, offset) for p, offset in start.items()])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in start}
    errors: dict[int, KafkaError] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not (0 in errors and len(got[1]) >= RECORDS - start.get(1, 0)):
            for m in cons.consume(500, 0.2):
                if m.error() is not None:
                    if m.partition() is not None and m.partition() >= 0:
                        errors.setdefault(m.partition(), m.error())
                    continue
                got[m.partition()].append((m.offset(), m.value()))
    finally:
        cons.close()
    return got, errors


def test_scrubber_marks_flipped_bytes_and_consumers_get_corrupt_message_not_garbage(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    register_failure_report(pytestconfig)
    port = free_port()
    broker = BrokerProcess(tmp_path / "broker", {
        "metrics.port": port, "auto.create.topics.enable": "false",
        "log.scrubber.bytes.per.second": 64 * 1024 * 1024, "log.scrubber.interval.ms": 500,
    })
    broker.start()
    try:
        create_topic(broker.bootstrap, TOPIC, 2, {"segment.bytes": "16384"})
        p = producer(broker.bootstrap, {"linger.ms": 5, "batch.num.messages": 50, "compression.type": "none"})
        for i in range(RECORDS):
            for partition in (0, 1):
                p.produce(TOPIC, b"record %06d %s" % (i, b"x" * 40), partition=partition)
        assert p.flush(15) == 0
        del p
        segments = sorted((broker.data_dir / f"{TOPIC}-0").glob("*.log"))
        assert len(segments) >= 3
        in_segment = batches(segments[1])
        position, base, size = in_segment[3]  # a batch in the middle of a closed segment
        got_end = in_segment[4][1] - 1
        with open(segments[1], "r+b") as f:  # the broker keeps running: the page cache sees the change
            f.seek(position + size // 2)
            byte = f.read(1)
            f.seek(position + size // 2)
            f.write(bytes([byte[0] ^ 0xFF]))

        labels = {"topic": TOPIC, "partition": "0"}
        flipped = time.monotonic()
        wait_until(lambda: metric(port, "tidelog_log_damaged_ranges", **labels) == 1, timeout=15)
        found_after = time.monotonic() - flipped
        assert metric(port, "tidelog_log_damaged_ranges", topic=TOPIC, partition="1") == 0
        assert metric(port, "tidelog_log_scrubber_damaged_ranges_found_total") == 1
        assert metric(port, "tidelog_log_scrubber_verified_bytes_total") > 0
        errors_logged = [line for line in broker.log_text().splitlines() if "scrubber: scrubbed-0 is damaged" in line]
        assert len(errors_logged) == 1 and " ERROR " in errors_logged[0], errors_logged

        started = time.monotonic()
        got, errors = read_partitions(broker.bootstrap, {0: 0, 1: 0})
        print(f"\nfound in {found_after:.1f} s; consumer saw the error after {time.monotonic() - started:.1f} s: {errors}")
        assert errors[0].code() == KafkaError.INVALID_MSG, errors
        assert 1 not in errors
        assert [offset for offset, _ in got[0]] == list(range(base)), "records before the range, nothing after"
        assert all(value == b"record %06d %s" % (offset, b"x" * 40) for offset, value in got[0] + got[1])
        assert len(got[1]) == RECORDS

        broker.stop()
        broker.start()
        assert any("has a damaged range" in line for line in broker.log_text().splitlines())
        got, errors = read_partitions(broker.bootstrap, {0: base + 1, 1: RECORDS - 5})
        assert errors[0].code() == KafkaError.INVALID_MSG and got[0] == []
        described = subprocess.run(
            [sys.executable, "-m", "tidelog", "log-dirs", "describe", "--log-dir", str(broker.data_dir),
             "--damaged-only", "--json"], capture_output=True, text=True, check=True,
        )
        [row] = json.loads(described.stdout)
        [damage] = row["damaged_ranges"]
        assert (row["topic"], row["partition"], damage["start_offset"], damage["kind"]) == (TOPIC, 0, base, "crc-mismatch")
        assert damage["end_offset"] == got_end  # the last offset before the next good batch
    finally:
        broker.close()
