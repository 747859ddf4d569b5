"""A damaged batch found by recovery after a crash: the cut is logged at WARN and counted.

The issue's case: recovery after a kill -9 truncated 889 acknowledged records of a corrupted batch and
said nothing. Here a broker subprocess is killed, one byte in the middle of its second batch flipped,
and the restarted broker must name the partition, the offsets and bytes removed and the reason, and
count the cut in a metric; it then serves the records before the damage and accepts new ones.
"""

from __future__ import annotations

import re
import struct
import time
from pathlib import Path

import pytest

from helpers.broker_process import BrokerProcess, free_port, register_failure_report
from helpers.clients import create_topic, producer
from helpers.hostile import metric, peak_rss

MIB = 1 << 20


def batch_positions(segment: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each batch in a segment file, from the length fields."""
    data = segment.read_bytes()
    found, position = [], 0
    while position + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        found.append((position, base, 12 + length))
        position += 12 + length
    return found


def test_recovery_that_cuts_a_damaged_batch_logs_the_partition_offsets_bytes_and_reason(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    register_failure_report(pytestconfig)
    port = free_port()
    broker = BrokerProcess(tmp_path / "broker", {"metrics.port": port, "auto.create.topics.enable": "false"})
    broker.start()
    try:
        create_topic(broker.bootstrap, "ledger")
        p = producer(broker.bootstrap, {"linger.ms": 0, "batch.num.messages": 1000, "compression.type": "none"})
        for batch in range(3):
            for i in range(1000):
                p.produce("ledger", b"record %d-%d" % (batch, i))
            assert p.flush(15) == 0
        broker.kill9()
        segment = broker.data_dir / "ledger-0" / "00000000000000000000.log"
        batches = batch_positions(segment)
        damaged = next(b for b in batches if b[1] >= 1000)
        data = bytearray(segment.read_bytes())
        data[damaged[0] + damaged[2] // 2] ^= 0xFF
        segment.write_bytes(bytes(data))
        removed = len(data) - damaged[0]

        started = time.monotonic()
        broker.start()
        took = time.monotonic() - started
        line = next((text for text in broker.log_text().splitlines() if "recovery of ledger-0" in text), None)
        print(f"\n{line}\nrestart took {took:.1f} s; broker peak RSS {peak_rss(broker.pid) / MIB:.0f} MiB")
        assert line is not None and " WARNING " in line, "the truncation was not logged at WARN"
        match = re.search(r"removed (\d+) bytes, offsets (\d+) to (\d+): (.*) \(segment", line)
        assert match, line
        assert int(match[1]) == removed
        assert int(match[2]) == damaged[1] and int(match[3]) == 2999
        assert "crc" in match[4].lower()
        labels = {"topic": "ledger", "partition": "0"}
        assert metric(port, "tidelog_log_recovery_truncations_total", **labels) == 1
        assert metric(port, "tidelog_log_recovery_truncated_bytes_total", **labels) == removed
        assert metric(port, "tidelog_log_end_offset", **labels) == damaged[1]
        p = producer(broker.bootstrap)
        p.produce("ledger", b"after the cut")
        assert p.flush(15) == 0
    finally:
        broker.close()
