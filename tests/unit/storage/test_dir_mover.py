"""Moves of a replica between the log dirs of one broker (storage/dir_mover.py, LogManager.alter_log_dir)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from storage_helpers import NOW, make_batch

from tidelog.common.errors import ErrorCode, KafkaError, StorageError
from tidelog.protocol.records import decode_records, iter_batches
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager

SMALL_SEGMENTS = LogConfig.from_topic_config({"segment.bytes": 4096})


def _manager(tmp_path: Path) -> tuple[LogManager, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, default_config=SMALL_SEGMENTS)
    manager.startup()
    return manager, dirs


def _fill(log: PartitionLog, batches: int, epoch: int = 0) -> None:
    for _ in range(batches):
        log.append_as_leader(make_batch(5), leader_epoch=epoch, now_ms=NOW)


def _values(log: PartitionLog) -> list[bytes | None]:
    buf = log.read(log.log_start_offset, 1 << 30).read_bytes()
    return [r.value for header, pos in iter_batches(buf) for r in decode_records(memoryview(buf)[pos:pos + 12 + header.batch_length])]


def _located(manager: LogManager, dirs: list[Path], source: Path) -> tuple[PartitionLog, Path]:
    log = manager.create_log("t", 0)
    home = manager.log_dir_of("t", 0)
    assert home is not None
    return log, next(d for d in dirs if d != home) if source == home else source


def test_a_replica_moves_to_the_other_dir_with_every_batch_and_keeps_taking_appends(tmp_path: Path) -> None:
    manager, dirs = _manager(tmp_path)
    log = manager.create_log("t", 0)
    _fill(log, 40)
    before = _values(log)
    home = manager.log_dir_of("t", 0)
    dest = next(d for d in dirs if d != home)
    manager.alter_log_dir("t", 0, str(dest))
    assert manager.moves() == {("t", 0): dest}
    future_dirs = [p.name for p in dest.iterdir() if p.name.endswith("-future")]
    assert len(future_dirs) == 1 and future_dirs[0].startswith("t-0.")
    described = {str(i.path): i for i in manager.describe_log_dirs()}
    assert ("t", 0) in described[str(dest)].futures and ("t", 0) in described[str(home)].partition_sizes
    manager.run_moves(budget=1000)  # a part only
    _fill(log, 3)  # appends go on in the current log meanwhile
    manager.run_moves()
    moved = manager.get_log("t", 0)
    assert moved is not None and moved is not log
    assert manager.log_dir_of("t", 0) == dest and manager.moves() == {}
    assert _values(moved) == before + _values(moved)[len(before):] and moved.log_end_offset == 215
    assert moved.epoch_cache.latest_epoch == 0
    with pytest.raises(StorageError):  # the old object refuses use instead of writing to a deleted dir
        log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    assert not (home / "t-0").exists() and (dest / "t-0").is_dir()
    moved.append_as_leader(make_batch(1), leader_epoch=0, now_ms=NOW)
    manager.shutdown()


def test_errors_are_kafkas(tmp_path: Path) -> None:
    manager, dirs = _manager(tmp_path)
    manager.create_log("t", 0)
    with pytest.raises(KafkaError) as missing_dir:
        manager.alter_log_dir("t", 0, str(tmp_path / "elsewhere"))
    assert missing_dir.value.code is ErrorCode.LOG_DIR_NOT_FOUND
    with pytest.raises(KafkaError) as no_replica:
        manager.alter_log_dir("absent", 0, str(dirs[0]))
    assert no_replica.value.code is ErrorCode.REPLICA_NOT_AVAILABLE
    manager.dirs[1].offline = True
    with pytest.raises(StorageError) as offline:
        manager.alter_log_dir("t", 0, str(dirs[1]))
    assert offline.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    manager.dirs[1].offline = False
    manager.shutdown()


def test_moving_back_to_the_current_dir_cancels_the_move(tmp_path: Path) -> None:
    manager, dirs = _manager(tmp_path)
    _fill(manager.create_log("t", 0), 10)
    home = manager.log_dir_of("t", 0)
    assert home is not None
    dest = next(d for d in dirs if d != home)
    manager.alter_log_dir("t", 0, str(dest))
    manager.alter_log_dir("t", 0, str(home))
    assert manager.moves() == {} and manager.log_dir_of("t", 0) == home
    assert not any(p.name.endswith("-future") for p in dest.iterdir())
    manager.shutdown()


def test_a_move_interrupted_by_a_crash_resumes_from_the_future_logs_end(tmp_path: Path) -> None:
    manager, dirs = _manager(tmp_path)
    log = manager.create_log("t", 0)
    _fill(log, 40)
    before = _values(log)
    home = manager.log_dir_of("t", 0)
    dest = next(d for d in dirs if d != home)
    manager.alter_log_dir("t", 0, str(dest))
    manager.run_moves(budget=2000)
    # a crash: nothing closed, no clean-shutdown marker; the next start finds both dirs
    again = LogManager(dirs, default_config=SMALL_SEGMENTS)
    again.startup()
    assert again.moves() == {("t", 0): dest} and again.log_dir_of("t", 0) == home
    future = again._futures[("t", 0)][1]
    assert 0 < future.log_end_offset < 200  # resumes where the copy was, not from zero
    again.run_moves()
    moved = again.get_log("t", 0)
    assert moved is not None and again.log_dir_of("t", 0) == dest and _values(moved) == before
    again.shutdown()


def test_a_crash_between_the_two_renames_finishes_the_move_at_the_next_start(tmp_path: Path) -> None:
    manager, dirs = _manager(tmp_path)
    log = manager.create_log("t", 0)
    _fill(log, 20)
    before = _values(log)
    home = manager.log_dir_of("t", 0)
    assert home is not None
    dest = next(d for d in dirs if d != home)
    manager.alter_log_dir("t", 0, str(dest))
    manager.run_moves(budget=1)  # one batch: the future is not caught up
    future = manager._futures[("t", 0)][1]
    from tidelog.storage import dir_mover

    dir_mover.copy(log, future, 1 << 30)
    future.close()
    log.close()
    # step 2 done (the current dir renamed for deletion), step 3 not: only the future is left
    os.replace(home / "t-0", home / f"t-0.{uuid.uuid4().hex}-delete")
    again = LogManager(dirs, default_config=SMALL_SEGMENTS)
    again.startup()
    moved = again.get_log("t", 0)
    assert moved is not None and again.log_dir_of("t", 0) == dest and again.moves() == {}
    assert _values(moved) == before and (dest / "t-0").is_dir()
    again.shutdown()


def test_a_future_ahead_of_a_truncated_current_log_is_cut_back(tmp_path: Path) -> None:
    manager, dirs = _manager(tmp_path)
    log = manager.create_log("t", 0)
    _fill(log, 10, epoch=0)
    home = manager.log_dir_of("t", 0)
    dest = next(d for d in dirs if d != home)
    manager.alter_log_dir("t", 0, str(dest))
    future = manager._futures[("t", 0)][1]
    from tidelog.storage import dir_mover

    dir_mover.copy(log, future, 1 << 30)
    log.truncate_to(25)  # a follower's truncation after a leader change
    _fill(log, 2, epoch=1)
    manager.run_moves()
    moved = manager.get_log("t", 0)
    assert moved is not None and manager.log_dir_of("t", 0) == dest
    assert moved.log_end_offset == 35 and moved.end_offset_for_epoch(0) == (0, 25)
    manager.shutdown()


def test_the_move_rate_holds_even_with_batches_larger_than_one_pass(tmp_path: Path) -> None:
    """replica.alter.log.dirs.io.max.bytes.per.second: 20 passes (2 s) at 100 kB/s copy about 200 kB,
    although each batch (about 50 kB) is five times one pass's share."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, move_bytes_per_second=lambda: 100_000)
    manager.startup()
    log = manager.create_log("t", 0)
    for _ in range(40):
        log.append_as_leader(make_batch(50, value=b"x" * 1000), leader_epoch=0, now_ms=NOW)
    batch_size = log.size_bytes // 40
    home = manager.log_dir_of("t", 0)
    manager.alter_log_dir("t", 0, str(next(d for d in dirs if d != home)))
    future = manager._futures[("t", 0)][1]
    for _ in range(20):
        manager._move_tick()
    assert 200_000 - batch_size <= future.size_bytes <= 200_000 + batch_size
    manager.shutdown()
