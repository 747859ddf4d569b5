"""A roll planned on one thread and completed on another (storage/roll_plan.py): the plan makes no
system call, the files are made and installed elsewhere, any other write settles the plan first, a
truncation voids a snapshot not yet written, and a crash at any step leaves a log that recovers
every record and the producer state."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from storage_helpers import NOW, LogFactory, make_batch

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.storage import log as log_module
from tidelog.storage import roll_plan as roll_plan_module
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.roll_plan import PendingSnapshot

PID, EPOCH = 9, 0
SMALL = LogConfig(segment_bytes=400)


def append(log: PartitionLog, seq: int) -> int:
    return log.append_as_leader(make_batch(2, pid=PID, epoch=EPOCH, seq=seq), leader_epoch=0, now_ms=NOW).first_offset


def full(log: PartitionLog) -> int:
    """Append until the next batch would roll; return the next sequence."""
    seq = 0
    while not log.would_roll(make_batch(2, pid=PID, epoch=EPOCH, seq=seq), NOW):
        append(log, seq)
        seq += 2
    return seq


def test_planning_a_roll_touches_no_file_and_another_thread_completes_it(
    open_log: LogFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = open_log(SMALL)
    seq = full(log)
    leo = log.log_end_offset
    opened: list[str] = []
    real_open = os.open

    def traced_open(path: object, *args: int, **kwargs: int) -> int:
        opened.append(f"{threading.current_thread().name} {path}")
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", traced_open)
    plan = log.begin_roll(NOW)
    assert plan is not None and plan.base == leo and log.rolling
    assert opened == [], "the plan made no system call"
    assert log.begin_roll(NOW) is None, "one roll at a time"

    worker = threading.Thread(target=log.complete_roll, args=(plan,), name="pool-thread")
    worker.start()
    worker.join(10)
    assert not log.rolling and log.active_segment.base_offset == leo and len(log.segments) == 2
    assert opened and all(entry.startswith("pool-thread") for entry in opened), "every file made off the caller"
    assert (log.dir / f"{leo:020d}.snapshot").exists(), "the snapshot written by the completing thread"
    assert not list(log.dir.glob("*.tmp"))
    assert append(log, seq) == leo, "the next append starts the new segment"


def test_an_append_settles_an_open_plan_first_and_the_late_completion_does_nothing(open_log: LogFactory) -> None:
    log = open_log(SMALL)
    seq = full(log)
    leo = log.log_end_offset
    plan = log.begin_roll(NOW)
    assert plan is not None
    assert append(log, seq) == leo  # settled in the append: the files made here, then the batch written
    assert not log.rolling and [s.base_offset for s in log.segments][-1] == leo
    log.complete_roll(plan)  # the pool's turn comes after: nothing left to do
    assert [s.base_offset for s in log.segments][-1] == leo and len(log.segments) == 2
    assert (log.dir / f"{leo:020d}.snapshot").exists()
    assert log.read(0, 1 << 20).end_offset == log.log_end_offset


def test_a_truncation_voids_a_rolled_snapshot_being_written(open_log: LogFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(SMALL)
    full(log)
    leo = log.log_end_offset
    plan = log.begin_roll(NOW)
    assert plan is not None
    real_write = log_module.write_snapshot_tmp

    def write_then_truncate(snapshot: PendingSnapshot) -> Path:
        tmp = real_write(snapshot)
        log.truncate_to(2)  # a new leader cut the log while the snapshot was on its way to disk
        return tmp

    monkeypatch.setattr(log_module, "write_snapshot_tmp", write_then_truncate)
    log.complete_roll(plan)
    assert log.log_end_offset == 2
    assert not (log.dir / f"{leo:020d}.snapshot").exists(), "a snapshot of a cut history is never renamed in"
    assert not list(log.dir.glob("*.tmp"))


def test_a_flush_writes_the_snapshot_a_settled_plan_left(open_log: LogFactory) -> None:
    log = open_log(SMALL)
    seq = full(log)
    leo = log.log_end_offset
    plan = log.begin_roll(NOW)
    assert plan is not None
    append(log, seq)  # settled by the append: the snapshot is encoded, waiting for a disk thread
    assert not (log.dir / f"{leo:020d}.snapshot").exists()
    log.flush()
    assert (log.dir / f"{leo:020d}.snapshot").exists()


@pytest.mark.parametrize("crash_at", ["planned", "files made", "installed, snapshot unwritten"])
def test_a_crash_during_a_roll_recovers_every_record_and_the_producers(open_log: LogFactory, tmp_path: Path,
                                                                         crash_at: str) -> None:
    log = open_log(SMALL)
    seq = full(log)
    leo = log.log_end_offset
    plan = log.begin_roll(NOW)
    assert plan is not None
    if crash_at != "planned":
        assert plan.claim()
        plan.make_files()
    if crash_at == "installed, snapshot unwritten":
        with log._lock:
            log._settle_roll()
    # kill -9: nothing more happens; the page cache (the files as written) is what a restart finds
    reopened = PartitionLog(tmp_path / "t-0", SMALL, now_ms=NOW, recovery_point=0, clean_shutdown=False)
    try:
        assert reopened.log_end_offset == leo
        assert reopened.read(0, 1 << 20).end_offset == leo, "every record readable"
        retried = reopened.append_as_leader(make_batch(2, pid=PID, epoch=EPOCH, seq=seq - 2), leader_epoch=0, now_ms=NOW)
        assert retried.duplicate, "the producer's last batch is known after the restart"
        assert append(reopened, seq) == leo
        assert not list(reopened.dir.glob("*.tmp"))
    finally:
        reopened.close(clean=False)


def test_a_close_settles_an_open_plan(open_log: LogFactory, tmp_path: Path) -> None:
    log = open_log(SMALL)
    full(log)
    leo = log.log_end_offset
    assert log.begin_roll(NOW) is not None
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", SMALL, now_ms=NOW, recovery_point=leo, clean_shutdown=True)
    try:
        assert reopened.log_end_offset == leo and reopened.active_segment.base_offset == leo
    finally:
        reopened.close(clean=False)


def test_a_roll_that_cannot_make_its_files_fails_alone_and_leaves_none_behind(
    open_log: LogFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = open_log(SMALL)
    seq = full(log)
    leo = log.log_end_offset
    plan = log.begin_roll(NOW)
    assert plan is not None

    def disk_full(directory: Path, base: int, *args: object, **kwargs: object) -> None:
        (directory / f"{base:020d}.log").write_bytes(b"")  # the .log was made, its indexes were not
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(roll_plan_module, "LogSegment", disk_full)
    with pytest.raises(KafkaError) as failed:
        log.complete_roll(plan)
    assert failed.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    assert not log.offline and not log.rolling, "ENOSPC fails the roll, not the log"
    assert not (log.dir / f"{leo:020d}.log").exists(), "no empty segment left to claim the next offsets"
    monkeypatch.undo()
    assert append(log, seq) == leo, "space is back: the next append rolls and is written"
