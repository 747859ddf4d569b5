"""Decompression bombs against a broker subprocess: refused or kept as they are, never inflated whole.

Every path that inflates a batch is driven: recompression on append (the topic's compression.type
differs from the batch's), the key check of a compacted topic, the cleaner (a bomb stored under
``compression.type=producer``, then the topic made compacted), and the ``tidelog consume`` CLI reading
it. Each case measures the broker's peak RSS and the p99 latency of a producer working meanwhile.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from helpers.bombs import SECTIONS, batch
from helpers.broker_process import BrokerProcess, register_failure_report, wait_until
from helpers.clients import admin_client, create_topic
from helpers.hostile import Bystander, peak_rss
from helpers.raw_client import RawClient, record_batch

GIB = 1 << 30
MIB = 1 << 20
CAP = 1_048_588  # max.message.bytes' default
# Inflated size per codec: the 1.1 GiB zstd bombs, and as large as each codec allows while its
# compressed batch still fits max.message.bytes (lz4 and xerial snappy inflate ~250x and ~21x at most).
BOMBS = {"zstd": int(1.1 * GIB), "zstd-lying": int(1.1 * GIB), "zstd-sized": int(1.1 * GIB),
         "gzip": 256 * MIB, "lz4": 200 * MIB, "snappy": 20 * MIB}
# Headroom over the broker's peak before the bombs: two inflation workers each hold at most the cap
# plus a chunk, and the bystander's traffic and the responses take a few more megabytes.
MARGIN = 40 * MIB
P99_LIMIT_MS = 50.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("hostile-bombs"),
                            {"auto.create.topics.enable": "false", "log.cleaner.backoff.ms": 200})
    process.start()
    create_topic(process.bootstrap, "bystander")
    create_topic(process.bootstrap, "recompressed", config={"compression.type": "lz4"})
    create_topic(process.bootstrap, "compacted", config={"cleanup.policy": "compact"})
    create_topic(process.bootstrap, "as-sent")  # compression.type=producer: batches kept as sent
    create_topic(process.bootstrap, "admitted", config={"max.message.bytes": str(2**31 - 1)})
    yield process
    process.close()


def produce(raw: RawClient, topic: str, records: bytes) -> int:
    request = ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=records),)),),
    )
    (topic_response,) = raw.call(request).responses
    (partition,) = topic_response.partition_responses
    return int(partition.error_code)


@pytest.mark.parametrize("topic", ["recompressed", "compacted", "as-sent"])
def test_bombs_to_a_topic_that_inflates_batches_are_refused_without_taking_memory_or_time(
    broker: BrokerProcess, topic: str
) -> None:
    bombs = {kind: batch(*SECTIONS[kind](size)) for kind, size in BOMBS.items()}
    assert all(len(b) < CAP for b in bombs.values())
    before = peak_rss(broker.pid)
    with Bystander(broker.bootstrap, "bystander") as bystander, RawClient(broker.host, broker.port, timeout=60) as raw:
        time.sleep(0.3)
        errors = {}
        for _ in range(4):  # the four requests, one after another
            errors = {kind: produce(raw, topic, bomb) for kind, bomb in bombs.items()}
        time.sleep(0.3)
    grown = peak_rss(broker.pid) - before
    print(f"\n{topic}: broker peak RSS {before / MIB:.0f} -> {(before + grown) / MIB:.0f} MiB, "
          f"bystander p99 {bystander.p99_ms():.1f} ms over {len(bystander.latencies)} records")
    # MESSAGE_TOO_LARGE (10); the lying zstd frame (declares 1000 bytes) is CORRUPT_MESSAGE (2). A batch
    # kept as sent (same codec, or compression.type=producer) has its inflated size counted all the same.
    assert errors == {kind: 2 if kind == "zstd-lying" else 10 for kind in bombs}
    assert not bystander.errors
    assert grown < MARGIN, f"broker peak RSS grew by {grown / MIB:.0f} MiB"
    assert bystander.p99_ms() < P99_LIMIT_MS


def test_a_bomb_admitted_before_the_cap_was_lowered_explodes_neither_the_cleaner_nor_the_cli_consumer(
    broker: BrokerProcess,
) -> None:
    section, codec = SECTIONS["zstd-record"](BOMBS["zstd"])
    before = peak_rss(broker.pid)
    with RawClient(broker.host, broker.port, timeout=60) as raw:
        # Under a 2 GiB max.message.bytes the bomb is admitted: counted chunk by chunk, never held.
        assert produce(raw, "admitted", batch(section, codec)) == 0
        for round_ in range(3):
            keys = [b"k%d" % i for i in range(10)]
            assert produce(raw, "admitted", record_batch([b"round %d" % round_] * 10, keys=keys)) == 0
    admitted = peak_rss(broker.pid) - before
    with Bystander(broker.bootstrap, "bystander") as bystander, RawClient(broker.host, broker.port) as raw:
        # The cleaner meets the bomb once the topic turns compacted and its segment rolls.
        _alter(broker, "admitted", {"cleanup.policy": "compact", "segment.ms": "100",
                                    "min.cleanable.dirty.ratio": "0.01", "max.message.bytes": str(CAP)})
        time.sleep(0.2)
        assert produce(raw, "admitted", record_batch([b"last"], keys=[b"k0"])) == 0
        wait_until(lambda: "cleaner keeps the batch at offset 0" in broker.log_text(), timeout=20,
                   message="the cleaner to meet the bomb")
        output, code, cli_rss = _cli_consume(broker, "admitted")
    grown = peak_rss(broker.pid) - before
    print(f"\nadmitting the bomb grew the broker's peak RSS {admitted / MIB:.1f} MiB, the cleaner then "
          f"{grown / MIB:.1f} MiB in all; bystander p99 {bystander.p99_ms():.1f} ms; "
          f"CLI consumer peak RSS {cli_rss / MIB:.0f} MiB")
    assert admitted < MARGIN and grown < MARGIN
    assert bystander.p99_ms() < P99_LIMIT_MS
    # librdkafka refuses a zstd frame inflating past receive.message.max.bytes; the CLI names the record
    # and stops instead of fetching it again forever.
    assert code == 1 and "partition 0 offset 0: _BAD_COMPRESSION" in output, output
    assert "--skip-message-on-error" in output
    # librdkafka inflates a zstd frame up to receive.message.max.bytes (100 MB) into a buffer it grows by
    # doubling, so its peak varies from run to run (98-265 MiB seen); the bomb itself inflates to 1.1 GiB.
    assert cli_rss < 400 * MIB, "the CLI consumer inflated the bomb"


def _alter(broker: BrokerProcess, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = admin_client(broker.bootstrap)  # must outlive its futures
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def _cli_consume(broker: BrokerProcess, topic: str) -> tuple[str, int, int]:
    """``tidelog consume`` from the beginning: its output, exit code and peak RSS (wait4's rusage)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog", "consume", topic, "--bootstrap-server", broker.bootstrap,
         "--from-beginning", "-e"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return out, proc.returncode, usage.ru_maxrss * 1024
