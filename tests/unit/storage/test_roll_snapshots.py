"""A roll's producer-state snapshot: written without fsync and synced elsewhere when a hook takes it,
durably in the roll otherwise; made durable by a flush before the recovery point moves; and a snapshot
torn by a power loss costs a rebuild, never producer state."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from storage_helpers import NOW, LogFactory, make_batch

from tidelog.common.errors import KafkaError
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

PID, EPOCH = 7, 0
SMALL = LogConfig(segment_bytes=400)  # a few batches per segment


def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every os.fsync from now on, by descriptor (still done)."""
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


def idempotent(log: PartitionLog, seq: int) -> None:
    log.append_as_leader(make_batch(2, pid=PID, epoch=EPOCH, seq=seq), leader_epoch=0, now_ms=NOW)


def rolled(log: PartitionLog, batches: int = 8) -> None:
    for i in range(batches):
        idempotent(log, 2 * i)
    assert len(log.snapshot_files()) >= 2, "the small segments rolled"


def test_a_roll_handed_to_a_syncer_does_no_fsync_and_the_syncer_makes_it_durable(
    open_log: LogFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    handed: list[PartitionLog] = []
    log = open_log(SMALL, on_roll_snapshot=lambda plog: handed.append(plog) or True)
    calls = fsyncs(monkeypatch)
    rolled(log)
    assert calls == [], "the appends that rolled waited for no disk"
    assert handed and all(plog is log for plog in handed)
    written = [p for p in log.snapshot_files() if p.stat().st_size > 0]
    assert len(written) == len(log.snapshot_files())

    log.sync_snapshots()
    assert len(calls) == len(handed) + 1  # each rolled snapshot, then the partition directory once
    calls.clear()
    log.sync_snapshots()
    assert calls == [], "nothing left to sync"


def test_without_a_syncer_the_roll_writes_its_snapshot_durably(open_log: LogFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(SMALL)
    calls = fsyncs(monkeypatch)
    idempotent(log, 0)
    log.roll(now_ms=NOW)
    assert len(calls) == 2  # the snapshot file and its directory, in the roll


def test_a_syncer_that_declines_has_the_roll_sync_at_once(open_log: LogFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(SMALL, on_roll_snapshot=lambda plog: False)
    calls = fsyncs(monkeypatch)
    idempotent(log, 0)
    log.roll(now_ms=NOW)
    assert len(calls) == 2


def test_a_flush_makes_rolled_snapshots_durable_before_the_recovery_point_moves(
    open_log: LogFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = open_log(SMALL, on_roll_snapshot=lambda plog: True)  # taken, never run: only the flush syncs
    rolled(log)
    order: list[str] = []
    sync, flush_segments = log.sync_snapshots, PartitionLog.flush

    def traced_sync() -> None:
        order.append(f"sync at recovery point {log.recovery_point}")
        sync()

    monkeypatch.setattr(log, "sync_snapshots", traced_sync)
    calls = fsyncs(monkeypatch)
    assert flush_segments(log) == log.log_end_offset
    assert order == ["sync at recovery point 0"]
    assert len(calls) > len(log.snapshot_files())  # snapshots, directory, then the segments and indexes


def test_a_snapshot_removed_before_its_sync_needs_nothing(open_log: LogFactory) -> None:
    log = open_log(SMALL, on_roll_snapshot=lambda plog: True)
    rolled(log)
    log.truncate_to(0)  # removes every snapshot above 0
    log.sync_snapshots()
    assert not log.offline


@pytest.mark.parametrize("tear", [lambda p: p.write_bytes(b""), lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])],
                         ids=["empty", "half"])
def test_a_torn_newest_snapshot_is_skipped_and_producer_state_rebuilt(
    tmp_path: Path, tear: Callable[[Path], None],
) -> None:
    log = PartitionLog(tmp_path / "t-0", SMALL, now_ms=NOW, on_roll_snapshot=lambda plog: True)
    rolled(log, batches=8)  # sequences 0..15, never synced: a power loss may tear them
    newest = log.snapshot_files()[-1]
    log.close(clean=False)
    tear(newest)

    reopened = PartitionLog(tmp_path / "t-0", SMALL, now_ms=NOW, recovery_point=0, clean_shutdown=False)
    try:
        last = make_batch(2, pid=PID, epoch=EPOCH, seq=14)
        assert reopened.append_as_leader(last, leader_epoch=0, now_ms=NOW).duplicate, "the last batch is known"
        with pytest.raises(KafkaError) as gap:
            reopened.append_as_leader(make_batch(2, pid=PID, epoch=EPOCH, seq=20), leader_epoch=0, now_ms=NOW)
        assert gap.value.code.name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        idempotent(reopened, 16)
        assert reopened.log_end_offset == 18
    finally:
        reopened.close(clean=False)
