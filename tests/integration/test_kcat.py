"""kcat (Debian 12's 1.7.1 on librdkafka 2.0.2) as a subprocess against a tidelog broker.

kcat's old librdkafka is the pickiest client: it enables compression and record batches v2 only if
the broker advertises old API versions too (see PROTOCOL_NOTES.md), so these tests also read the
broker's segment files to check that batches arrived, and stayed, compressed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from helpers.broker_process import BrokerProcess, stored_batches
from helpers.clients import produce_all, producer

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def kcat_run(kcat: str, bootstrap: str, args: Sequence[str], stdin: bytes = b"", timeout: float = 30.0) -> bytes:
    completed = subprocess.run(
        [kcat, "-b", bootstrap, "-X", "socket.timeout.ms=10000", *args],
        input=stdin, capture_output=True, timeout=timeout, check=False,
    )
    assert completed.returncode == 0, (
        f"kcat {' '.join(args)} exited with {completed.returncode}: {completed.stderr.decode(errors='replace')}"
    )
    return completed.stdout


def kcat_consume(kcat: str, bootstrap: str, topic: str, extra: Sequence[str] = ()) -> list[dict[str, object]]:
    out = kcat_run(kcat, bootstrap, ["-C", "-t", topic, "-o", "beginning", "-e", "-J", *extra])
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def test_metadata_lists_the_broker_and_the_topic_partitions(kcat: str, bootstrap: str,
                                                            new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)

    listing = json.loads(kcat_run(kcat, bootstrap, ["-L", "-J", "-t", topic]))

    assert listing["brokers"] == [{"id": 1, "name": bootstrap}]
    assert listing["controllerid"] == 1
    (described,) = listing["topics"]
    assert described["topic"] == topic
    assert described.get("error") is None
    assert [(p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in described["partitions"]] == [
        (i, 1, [{"id": 1}], [{"id": 1}]) for i in range(3)
    ]


def test_keys_headers_and_null_values_round_trip(kcat: str, bootstrap: str, topic: str) -> None:
    kcat_run(kcat, bootstrap, ["-P", "-t", topic, "-K", ":", "-Z", "-H", "trace=abc", "-H", "n=2"],
             stdin=b"k1:first\nk2:second\nk3:\n")

    messages = kcat_consume(kcat, bootstrap, topic, ["-Z"])

    assert [(m["offset"], m["key"], m["payload"]) for m in messages] == [
        (0, "k1", "first"), (1, "k2", "second"), (2, "k3", None)]
    assert all(m["headers"] == ["trace", "abc", "n", "2"] for m in messages)
    now = time.time() * 1000
    assert all(m["tstype"] == "create" and now - 60_000 < int(str(m["ts"])) <= now + 1000 for m in messages)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_stored_compressed_and_consumed_intact(
    kcat: str, bootstrap: str, broker: BrokerProcess, topic: str, codec: str
) -> None:
    lines = [f"kcat {codec} line {i} {'x' * (i % 40)}" for i in range(300)]

    kcat_run(kcat, bootstrap, ["-P", "-t", topic, "-X", f"compression.codec={codec}", "-X", "linger.ms=50"],
             stdin="\n".join(lines).encode() + b"\n")

    assert [m["payload"] for m in kcat_consume(kcat, bootstrap, topic)] == lines
    codecs = {codec_id for _, _, codec_id in stored_batches(broker, topic)}
    assert codecs == {CODEC_IDS[codec]}


def test_a_one_mebibyte_record_round_trips(kcat: str, bootstrap: str, new_topic: Callable[..., str],
                                           tmp_path: Path) -> None:
    topic = new_topic(config={"max.message.bytes": str(2 * 1024 * 1024)})
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(1024 * 1024))

    kcat_run(kcat, bootstrap, ["-P", "-t", topic, "-X", "message.max.bytes=4000000", str(payload)])
    out = kcat_run(kcat, bootstrap, ["-C", "-t", topic, "-o", "beginning", "-c", "1", "-f", "%s"])

    assert out == payload.read_bytes()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_records_sent_with_each_acks_setting_are_stored(kcat: str, bootstrap: str, topic: str, acks: str) -> None:
    lines = [f"acks {acks} #{i}" for i in range(40)]

    kcat_run(kcat, bootstrap, ["-P", "-t", topic, "-X", f"acks={acks}"], stdin="\n".join(lines).encode())

    assert [m["payload"] for m in kcat_consume(kcat, bootstrap, topic)] == lines


def test_idempotent_producer_stores_each_line_once(kcat: str, bootstrap: str, broker: BrokerProcess,
                                                   topic: str) -> None:
    lines = [f"idempotent line {i}" for i in range(1000)]

    kcat_run(kcat, bootstrap, ["-P", "-t", topic, "-X", "enable.idempotence=true", "-X", "linger.ms=1"],
             stdin="\n".join(lines).encode())

    assert [m["payload"] for m in kcat_consume(kcat, bootstrap, topic)] == lines
    assert sum(count for _, count, _ in stored_batches(broker, topic)) == len(lines)


def test_random_partitioner_spreads_lines_over_thirty_two_partitions(
    kcat: str, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=32)
    lines = [f"spread {i}" for i in range(640)]

    kcat_run(kcat, bootstrap, ["-P", "-t", topic, "-p", "-1", "-X", "sticky.partitioning.linger.ms=0"],
             stdin="\n".join(lines).encode())

    messages = kcat_consume(kcat, bootstrap, topic)
    assert sorted(str(m["payload"]) for m in messages) == sorted(lines)
    assert len({m["partition"] for m in messages}) > 16


def test_query_mode_finds_offsets_by_timestamp(kcat: str, bootstrap: str, topic: str) -> None:
    t0 = int(time.time() * 1000) - 30_000
    prod = producer(bootstrap)
    for i in range(3):
        prod.produce(topic, value=f"r{i}".encode(), timestamp=t0 + 100 * i)
        assert prod.flush(10) == 0

    def offset_at(ts: int) -> str:
        return kcat_run(kcat, bootstrap, ["-Q", "-t", f"{topic}:0:{ts}"]).decode().strip()

    assert offset_at(t0 + 50) == f"{topic} [0] offset 1"
    assert offset_at(t0 + 200) == f"{topic} [0] offset 2"
    assert offset_at(t0) == f"{topic} [0] offset 0"


def test_consuming_from_the_end_of_an_empty_partition_exits_cleanly(kcat: str, bootstrap: str, topic: str) -> None:
    assert kcat_consume(kcat, bootstrap, topic) == []
    produce_all(producer(bootstrap), topic, [b"late"])
    assert [m["payload"] for m in kcat_consume(kcat, bootstrap, topic)] == ["late"]
