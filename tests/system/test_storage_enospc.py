"""A full disk fails the append with KAFKA_STORAGE_ERROR, shows no partial batch, and recovers.

Runs on a 2 MiB tmpfs mounted for the test (needs root or CAP_SYS_ADMIN; skipped otherwise).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.records import Record, build_batch, iter_batches
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager

NOW = 1_700_000_000_000


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_full_disk_fails_the_append_cleanly_and_appends_resume_after_space_returns(small_fs: Path) -> None:
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * 600 * 1024)
    manager = LogManager([small_fs / "data"])
    manager.startup()
    log = manager.create_log("full", 0, LogConfig())
    batch = build_batch([Record(i, NOW, b"k", b"x" * 1000) for i in range(30)])
    acknowledged = 0
    with pytest.raises(KafkaError) as err:
        for _ in range(10_000):
            log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
            acknowledged += 1
    assert err.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    assert "no space" in str(err.value).lower()
    assert acknowledged > 10
    assert log.log_end_offset == acknowledged * 30
    segment = log.active_segment
    assert segment.log_path.stat().st_size == acknowledged * len(batch), "a partial batch stayed on disk"
    stored = log.read(0, 1 << 30).read_bytes()
    assert len(list(iter_batches(stored))) == acknowledged
    assert not manager.describe_log_dirs()[0].offline

    with pytest.raises(KafkaError):
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    filler.unlink()
    info = log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    assert info.first_offset == acknowledged * 30
    assert len(list(iter_batches(log.read(0, 1 << 30).read_bytes()))) == acknowledged + 1
    manager.shutdown()
