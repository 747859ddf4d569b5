"""A writer process killed with SIGKILL mid-append loses nothing it acknowledged and serves nothing torn.

The child appends through a LogManager with ``flush.messages=1`` (fsync before each acknowledgement)
and prints each acknowledged offset; the parent kills it, optionally damages an index, reopens the
directory (no clean-shutdown marker: full recovery after the recovery point) and checks every
acknowledged record and the integrity of every served batch.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tidelog.protocol.records import decode_records, iter_batches
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager

CONFIG = LogConfig(segment_bytes=32 * 1024, flush_messages=1, index_interval_bytes=1024)

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tidelog.protocol.records import Record, build_batch
    from tidelog.storage.log_config import LogConfig
    from tidelog.storage.manager import LogManager

    manager = LogManager([Path(sys.argv[1])])
    manager.startup()
    log = manager.create_log("crash", 0, LogConfig(segment_bytes=32 * 1024, flush_messages=1,
                                                   index_interval_bytes=1024))
    i = 0
    while True:
        records = [Record(j, 1_700_000_000_000, b"key-%d" % i, b"%d:%d:" % (i, j) + b"p" * (i % 700))
                   for j in range(1 + i % 4)]
        info = log.append_as_leader(build_batch(records), leader_epoch=1, now_ms=1_700_000_000_000)
        if info.needs_flush:
            log.flush()
        manager.write_checkpoints() if i % 50 == 0 else None
        print(info.first_offset, i, flush=True)
        i += 1
    """
)


def run_and_kill(data_dir: Path, acknowledged_wanted: int) -> list[tuple[int, int]]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    acked: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    assert child.stdout is not None
    try:
        while len(acked) < acknowledged_wanted and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            offset, i = line.split()
            acked.append((int(offset), int(i)))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _, errors = child.communicate()
    if len(acked) < acknowledged_wanted:
        pytest.fail(f"writer stopped early: {errors}")
    return acked


def check_recovered(data_dir: Path, acked: list[tuple[int, int]]) -> None:
    manager = LogManager([data_dir])
    manager.startup(lambda _topic: CONFIG)
    log = manager.get_log("crash", 0)
    assert log is not None and log.recovered_unclean
    assert log.log_end_offset >= acked[-1][0] + 1
    everything = log.read(0, 1 << 30).read_bytes()
    headers = list(iter_batches(everything))  # validates framing and CRC of everything served
    assert headers[0][0].base_offset == 0
    for (prev, _), (nxt, _) in itertools.pairwise(headers):
        assert nxt.base_offset == prev.next_offset
    assert headers[-1][0].next_offset == log.log_end_offset
    for offset, i in acked:
        records = decode_records(log.read(offset, 1).read_bytes())  # max_bytes=1: exactly one batch
        first = next(r for r in records if r.offset == offset)
        assert first.key == b"key-%d" % i and first.value is not None and first.value.startswith(b"%d:0:" % i)
    info = log.append_as_leader(everything[: headers[0][0].size], leader_epoch=2, now_ms=1_700_000_000_000)
    assert info.first_offset == log.log_end_offset - info.record_count
    manager.shutdown()


@pytest.mark.parametrize("damage", ["none", "delete-index", "garble-index"])
def test_sigkill_mid_append_keeps_every_acknowledged_record(tmp_path: Path, damage: str) -> None:
    acked = run_and_kill(tmp_path, 250)
    part = tmp_path / "crash-0"
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    indexes = sorted(part.glob("*.index"))
    assert len(indexes) >= 2, "the writer should have rolled at least once"
    if damage == "delete-index":
        for index in indexes:
            index.unlink()
    elif damage == "garble-index":
        for index in indexes:
            index.write_bytes(os.urandom(max(16, index.stat().st_size)))
    check_recovered(tmp_path, acked)


def test_clean_restart_after_recovery_keeps_the_data(tmp_path: Path) -> None:
    acked = run_and_kill(tmp_path, 60)
    check_recovered(tmp_path, acked)
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    manager = LogManager([tmp_path])
    manager.startup(lambda _topic: CONFIG)
    log = manager.get_log("crash", 0)
    assert log is not None and not log.recovered_unclean
    assert log.log_end_offset > acked[-1][0]
    manager.shutdown()
