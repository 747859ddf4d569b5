import errno
import os
import time
from pathlib import Path

import pytest
from storage_helpers import NOW, make_batch

from tidelog.common.config import BrokerConfig
from tidelog.common.errors import StorageError
from tidelog.storage import segment as segment_module
from tidelog.storage.checkpoint import OffsetCheckpointFile
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import CLEAN_SHUTDOWN_MARKER, LogManager


def test_logs_spread_over_dirs_and_come_back_after_a_clean_restart(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs)
    manager.startup()
    for p in range(4):
        log = manager.create_log("orders", p, LogConfig())
        log.append_as_leader(make_batch(p + 1), leader_epoch=0, now_ms=NOW)
    assert manager.create_log("orders", 0) is manager.get_log("orders", 0)
    assert sorted(len(list(d.glob("orders-*"))) for d in dirs) == [2, 2]
    manager.shutdown()
    assert all((d / CLEAN_SHUTDOWN_MARKER).exists() for d in dirs)
    points = {}
    for d in dirs:
        points.update(OffsetCheckpointFile(d / "recovery-point-offset-checkpoint").read())
    assert points == {("orders", p): p + 1 for p in range(4)}

    again = LogManager(dirs)
    again.startup()
    assert again.all_partitions() == [("orders", p) for p in range(4)]
    log = again.get_log("orders", 3)
    assert log is not None and not log.recovered_unclean and log.log_end_offset == 4
    assert not any((d / CLEAN_SHUTDOWN_MARKER).exists() for d in dirs)
    again.shutdown()


def test_log_start_offsets_are_checkpointed(tmp_path: Path) -> None:
    manager = LogManager([tmp_path])
    manager.startup()
    log = manager.create_log("t", 0, LogConfig())
    for _ in range(3):
        log.append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    log.delete_records_before(3)
    manager.shutdown()
    assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read() == {("t", 0): 3}
    again = LogManager([tmp_path])
    again.startup()
    reopened = again.get_log("t", 0)
    assert reopened is not None and reopened.log_start_offset == 3
    again.shutdown()


def test_deleted_log_dir_is_renamed_then_removed(tmp_path: Path) -> None:
    manager = LogManager([tmp_path])
    manager.startup()
    manager.create_log("gone", 0).append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    manager.delete_log("gone", 0)
    assert manager.get_log("gone", 0) is None
    assert not (tmp_path / "gone-0").exists()
    deadline = time.monotonic() + 5
    while any(p.name.endswith("-delete") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(p.name.startswith("gone-0") for p in tmp_path.iterdir())
    manager.shutdown()


def test_an_io_error_takes_only_its_log_dir_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = LogManager([tmp_path / "a", tmp_path / "b"])
    manager.startup()
    sick = manager.create_log("t", 0)
    healthy = manager.create_log("t", 1)
    sick_fd = sick.active_segment.fd
    real_pwritev = os.pwritev

    def failing(fd: int, parts: list[bytes], offset: int) -> int:
        if fd == sick_fd:
            raise OSError(errno.EIO, "Input/output error")
        return real_pwritev(fd, parts, offset)

    monkeypatch.setattr(segment_module.os, "pwritev", failing)
    with pytest.raises(StorageError):
        sick.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    assert healthy.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW).first_offset == 0
    states = {info.path.name: info.offline for info in manager.describe_log_dirs()}
    assert states == {"a": True, "b": False}
    with pytest.raises(StorageError):
        manager.check_online("t", 0)
    assert manager.create_log("t", 2).dir.parent.name == "b"
    manager.shutdown()
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_MARKER).exists()
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_MARKER).exists()


def test_background_threads_apply_retention_and_flush(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], retention_check_interval_ms=20, flush_scheduler_interval_ms=20,
                         checkpoint_interval_ms=20, cleaner_enable=False)
    manager.startup()
    log = manager.create_log("t", 0, LogConfig(segment_bytes=300, retention_ms=1000, flush_ms=10,
                                                file_delete_delay_ms=0))
    for _ in range(6):
        log.append_as_leader(make_batch(2, ts=1000), leader_epoch=0, now_ms=int(time.time() * 1000))
    manager.start_background()
    deadline = time.monotonic() + 5
    while (len(log.segments) > 1 or log.recovery_point < 12) and time.monotonic() < deadline:
        time.sleep(0.02)
    manager.stop_background()
    assert len(log.segments) == 1 and log.log_start_offset == log.segments[0].base_offset > 0
    assert log.recovery_point == 12
    assert not list(log.dir.glob("*.deleted"))
    manager.shutdown()


def test_built_from_broker_config() -> None:
    config = BrokerConfig.from_properties({"log.retention.check.interval.ms": "1234",
                                           "num.recovery.threads.per.data.dir": "3"})
    manager = LogManager.from_broker_config([Path("/nonexistent")], config)
    assert manager.retention_check_interval_ms == 1234 and manager.recovery_threads_per_dir == 3
    assert manager.producer_id_expiration_ms == 86_400_000


def test_a_replicated_logs_high_watermark_is_checkpointed_and_recovered(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], hw_follows_leo=False)
    manager.startup()
    log = manager.create_log("r", 0, LogConfig())
    log.append_as_leader(make_batch(5), leader_epoch=0, now_ms=NOW)
    assert log.high_watermark == 0  # nothing is committed until the replicas say so
    assert log.update_high_watermark(3) == 3
    manager.shutdown()
    assert OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint").read() == {("r", 0): 3}
    again = LogManager([tmp_path], hw_follows_leo=False)
    again.startup()
    reopened = again.get_log("r", 0)
    assert reopened is not None and (reopened.log_end_offset, reopened.high_watermark) == (5, 3)
    again.shutdown()


def test_a_single_node_writes_no_high_watermark_checkpoint(tmp_path: Path) -> None:
    manager = LogManager([tmp_path])
    manager.startup()
    manager.create_log("s", 0, LogConfig()).append_as_leader(make_batch(2), leader_epoch=0, now_ms=NOW)
    manager.shutdown()
    assert not (tmp_path / "replication-offset-checkpoint").exists()
