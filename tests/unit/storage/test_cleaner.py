"""Log compaction against the real PartitionLog: newest value per key, offsets unchanged, crash-safe swap."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tidelog.protocol.compression import Compression
from tidelog.protocol.records import (
    BatchHeader,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)
from tidelog.storage.cleaner import (
    CHECKPOINT_FILE,
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    LogCleaner,
    build_offset_map,
    promote_to_swap,
    read_segment_batches,
    recover_cleaner_files,
    write_cleaned_segment,
)
from tidelog.storage.damage import DamagedRange
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager

T0 = 1_700_000_000_000
DAY = 86_400_000


def config(**overrides: object) -> LogConfig:
    settings: dict[str, object] = {
        "cleanup_policy": ("compact",),
        "segment_bytes": 1 << 20,
        "delete_retention_ms": DAY,
        "min_cleanable_dirty_ratio": 0.5,
        "file_delete_delay_ms": 0,
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


def open_log(tmp_path: Path, **overrides: object) -> PartitionLog:
    return PartitionLog(tmp_path / "topic-0", config(**overrides), now_ms=T0)


def append(
    log: PartitionLog,
    pairs: list[tuple[bytes, bytes | None]],
    *,
    codec: Compression = Compression.NONE,
    ts: int = T0,
) -> int:
    batch = build_batch([Record(i, ts + i, k, v) for i, (k, v) in enumerate(pairs)], compression=codec)
    return log.append_as_leader(batch, leader_epoch=0, now_ms=ts).first_offset


def read_all(log: PartitionLog) -> list[Record]:
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read_bytes()
        if not data:
            break
        for header, pos in iter_batches(data):
            out.extend(decode_records(data[pos : pos + header.size]))
            offset = header.next_offset
    return out


def fill(
    log: PartitionLog, rounds: int, keys: int, *, codec: Compression = Compression.NONE
) -> dict[bytes, int]:
    """Append ``rounds`` overwrites of ``keys`` keys, one segment per round; return key → newest offset."""
    newest: dict[bytes, int] = {}
    for r in range(rounds):
        pairs: list[tuple[bytes, bytes | None]] = [(b"k%d" % k, b"r%d-k%d" % (r, k)) for k in range(keys)]
        first = append(log, pairs, codec=codec)
        for i, (k, _) in enumerate(pairs):
            newest[k] = first + i
        log.roll(now_ms=T0)
    return newest


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD, Compression.SNAPPY])
def test_overwrites_compact_to_newest_value_per_key_with_offsets_unchanged(
    tmp_path: Path, codec: Compression
) -> None:
    log = open_log(tmp_path)
    newest = fill(log, rounds=4, keys=10, codec=codec)
    append(log, [(b"k0", b"active")])  # active segment: never cleaned
    end_before = log.log_end_offset
    size_before = log.size_bytes
    result = LogCleaner().clean(log, T0)
    assert result.cleaned
    records = read_all(log)
    cleaned = [r for r in records if r.offset < 40]
    assert sorted(r.offset for r in cleaned) == sorted(newest.values())
    assert {r.key: r.value for r in cleaned} == {b"k%d" % k: b"r3-k%d" % k for k in range(10)}
    assert records[-1].value == b"active" and records[-1].offset == 40
    assert log.log_end_offset == end_before
    assert log.size_bytes < size_before
    for header, _ in (b for s in log.segments_snapshot()[:-1] for b in read_segment_batches(s)):
        assert header.compression == codec


def test_every_offset_of_a_compacted_log_still_reads_from_the_next_survivor(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=3, keys=5)
    LogCleaner().clean(log, T0)
    survivors = [r.offset for r in read_all(log)]
    for offset in range(log.log_start_offset, log.log_end_offset):
        data = log.read(offset, 1 << 20).read_bytes()
        first = next(r.offset for r in decode_records(data) if r.offset >= offset)
        assert first == min(o for o in survivors if o >= offset)


def test_tombstones_survive_until_delete_retention_then_go(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=10_000)
    append(log, [(b"a", b"1"), (b"b", b"1")])
    log.roll(now_ms=T0)
    append(log, [(b"a", None)])
    log.roll(now_ms=T0)
    append(log, [(b"c", b"active")])
    cleaner = LogCleaner()
    assert cleaner.clean(log, T0).cleaned
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"a", None), (b"c", b"active")]
    tombstone_batch = next(
        h for s in log.segments_snapshot()[:-1] for h, _ in read_segment_batches(s) if h.base_offset == 2
    )
    assert tombstone_batch.delete_horizon_ms == T0 + 10_000
    # not dirty, horizon not reached: nothing to do
    assert not cleaner.clean(log, T0 + 9_999).cleaned
    # horizon passed: cleaned although nothing is dirty, and the tombstone is gone
    assert cleaner.clean(log, T0 + 10_000).cleaned
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"c", b"active")]


def test_active_segment_is_never_touched(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_cleanable_dirty_ratio=0.0)
    for i in range(5):
        append(log, [(b"same", b"v%d" % i)])
    assert len(log.segments_snapshot()) == 1
    result = LogCleaner().clean(log, T0, force=True)
    assert not result.cleaned
    assert [r.value for r in read_all(log)] == [b"v%d" % i for i in range(5)]


def test_dirty_ratio_below_threshold_means_no_clean(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_cleanable_dirty_ratio=0.9)
    fill(log, rounds=3, keys=4)
    cleaner = LogCleaner()
    assert cleaner.clean(log, T0).cleaned  # first clean: everything dirty
    fill(log, rounds=1, keys=1)  # a small dirty segment after a big clean one
    ratio = cleaner.dirty_ratio(log, cleaner.cleanable_segments(log, T0))
    assert 0 < ratio < 0.9
    before = [(r.offset, r.value) for r in read_all(log)]
    assert not cleaner.clean(log, T0).cleaned
    assert [(r.offset, r.value) for r in read_all(log)] == before


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=60_000)
    fill(log, rounds=3, keys=4)
    cleaner = LogCleaner()
    cleaner.clean(log, T0)
    fill(log, rounds=1, keys=1)
    assert not cleaner.clean(log, T0 + 1_000).cleaned
    assert cleaner.clean(log, T0 + 120_000).cleaned


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_compaction_lag_ms=60_000)
    fill(log, rounds=3, keys=4)
    assert not LogCleaner().clean(log, T0 + 1_000).cleaned
    assert LogCleaner().clean(log, T0 + 61_000).cleaned


def test_emptied_last_batch_of_a_producer_keeps_an_empty_header(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    batch = build_batch([Record(0, T0, b"x", b"old")], producer_id=7, producer_epoch=0, base_sequence=0)
    log.append_as_leader(batch, leader_epoch=0, now_ms=T0)
    plain = build_batch([Record(0, T0, b"y", b"old")])
    log.append_as_leader(plain, leader_epoch=0, now_ms=T0)
    log.roll(now_ms=T0)
    append(log, [(b"x", b"new"), (b"y", b"new")])
    log.roll(now_ms=T0)
    LogCleaner().clean(log, T0)
    headers = [h for s in log.segments_snapshot()[:-1] for h, _ in read_segment_batches(s)]
    empty = [h for h in headers if h.records_count == 0]
    assert [(h.producer_id, h.base_offset, h.last_sequence) for h in empty] == [(7, 0, 0)]
    assert 1 not in {h.base_offset for h in headers}  # the non-idempotent emptied batch is gone
    assert [(r.key, r.value) for r in read_all(log)] == [(b"x", b"new"), (b"y", b"new")]


def test_aborted_transaction_data_is_dropped_and_markers_outlive_their_data(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=1_000)
    aborted = build_batch(
        [Record(0, T0, b"t", b"aborted")],
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    log.append_as_leader(aborted, leader_epoch=0, now_ms=T0)
    marker = build_control_batch(ControlType.ABORT, 9, 0, 0, T0)
    log.append_as_leader(marker, leader_epoch=0, now_ms=T0, from_client=False)
    committed = build_batch(
        [Record(0, T0, b"u", b"committed")],
        producer_id=9,
        producer_epoch=0,
        base_sequence=1,
        transactional=True,
    )
    log.append_as_leader(committed, leader_epoch=0, now_ms=T0)
    log.append_as_leader(
        build_control_batch(ControlType.COMMIT, 9, 0, 0, T0), leader_epoch=0, now_ms=T0, from_client=False
    )
    log.roll(now_ms=T0)
    append(log, [(b"z", b"active")])
    cleaner = LogCleaner()
    cleaner.clean(log, T0)
    values = [(r.offset, r.value) for r in read_all(log)]
    assert (0, b"aborted") not in values and (2, b"committed") in values
    controls = [
        h.base_offset
        for s in log.segments_snapshot()[:-1]
        for h, _ in read_segment_batches(s)
        if h.is_control
    ]
    assert controls == [1, 3]
    assert [t.last_offset for t in log.aborted_transactions(0, 10)] == [1]
    cleaner.clean(log, T0 + 2_000)
    controls = [
        h.base_offset
        for s in log.segments_snapshot()[:-1]
        for h, _ in read_segment_batches(s)
        if h.is_control
    ]
    assert controls == [3]  # ABORT marker gone with its data; COMMIT stays while its data stays
    assert log.aborted_transactions(0, 10) == []


def test_offset_map_stops_at_a_batch_boundary_when_full(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for r in range(4):
        append(log, [(b"k%d-%d" % (r, i), b"v") for i in range(3)])
    log.roll(now_ms=T0)
    segment = log.segments_snapshot()[0]
    offset_map = build_offset_map(read_segment_batches(segment), 0, segment.next_offset, max_keys=7)
    assert offset_map.end == 6 and len(offset_map.offsets) == 6


def test_offset_map_limit_still_compacts_correctly(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=4, keys=6)
    cleaner = LogCleaner(max_map_keys=8)
    while cleaner.clean(log, T0).cleaned:
        pass
    latest = {r.key: r.value for r in read_all(log)}
    assert latest == {b"k%d" % k: b"r3-k%d" % k for k in range(6)}


def test_reopened_log_after_clean_reads_the_same(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=3, keys=5)
    LogCleaner().clean(log, T0)
    before = read_all(log)
    log.close()
    again = PartitionLog(tmp_path / "topic-0", config(), clean_shutdown=True, now_ms=T0)
    assert read_all(again) == before
    again.close()
    recovered = PartitionLog(tmp_path / "topic-0", config(), clean_shutdown=False, now_ms=T0)
    assert read_all(recovered) == before


# ---------------------------------------------------------------------------------------- crash safety


def _prepare_group(log: PartitionLog, *, commit: bool) -> list[Record]:
    """Write a cleaned version of the first two segments as a crashed cleaner would leave it."""
    segments = log.segments_snapshot()[:2]
    newest = {r.key: r.offset for r in read_all(log) if r.offset < segments[-1].next_offset}
    kept = []
    for header, view in (b for s in segments for b in read_segment_batches(s)):
        records = [r for r in decode_records(view) if newest[r.key] == r.offset]
        if records:
            kept.append(
                build_batch(
                    records, base_offset=header.base_offset, last_offset_delta=header.last_offset_delta
                )
            )
    write_cleaned_segment(
        log.dir,
        segments[0].base_offset,
        ((BatchHeader.parse(b), b) for b in kept),
        [],
        index_bytes=1 << 20,
        index_interval_bytes=4096,
    )
    if commit:
        promote_to_swap(log.dir, segments[0].base_offset)
    return [r for b in kept for r in decode_records(b)]


def test_crash_before_commit_leaves_the_old_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=3, keys=4)
    before = read_all(log)
    _prepare_group(log, commit=False)
    log.close()
    assert list(log.dir.glob(f"*{CLEANED_SUFFIX}"))
    reopened = PartitionLog(log.dir, config(), now_ms=T0)
    assert read_all(reopened) == before
    assert not list(log.dir.glob(f"*{CLEANED_SUFFIX}"))


def test_crash_after_commit_finishes_the_swap(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=3, keys=4)
    tail = [r for r in read_all(log) if r.offset >= 8]
    cleaned = _prepare_group(log, commit=True)
    log.close()
    assert list(log.dir.glob(f"*.log{SWAP_SUFFIX}"))
    reopened = PartitionLog(log.dir, config(), now_ms=T0)
    assert read_all(reopened) == cleaned + tail
    assert not list(log.dir.glob(f"*{SWAP_SUFFIX}"))
    assert len(reopened.segments_snapshot()) == 3  # cleaned group, third round, empty active


def test_stray_index_swap_without_log_swap_is_discarded(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=2, keys=3)
    before = read_all(log)
    _prepare_group(log, commit=False)
    stem = f"{0:020d}"
    (log.dir / f"{stem}.index{CLEANED_SUFFIX}").rename(log.dir / f"{stem}.index{SWAP_SUFFIX}")
    log.close()
    recover_cleaner_files(log.dir)
    assert not list(log.dir.glob(f"*{SWAP_SUFFIX}")) and not list(log.dir.glob(f"*{CLEANED_SUFFIX}"))
    assert read_all(PartitionLog(log.dir, config(), now_ms=T0)) == before


# ------------------------------------------------------------------------------ checkpoint and manager


def test_first_dirty_offset_survives_a_cleaner_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=3, keys=4)
    assert LogCleaner().clean(log, T0).cleaned
    assert (tmp_path / CHECKPOINT_FILE).exists()
    restarted = LogCleaner()
    assert restarted.dirty_ratio(log, restarted.cleanable_segments(log, T0)) == 0.0
    assert not restarted.clean(log, T0).cleaned


def test_checkpoint_beyond_the_log_end_counts_as_all_dirty(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text("0\n1\ntopic 0 999999\n")
    log = open_log(tmp_path)
    fill(log, rounds=3, keys=4)
    cleaner = LogCleaner()
    assert cleaner.dirty_ratio(log, cleaner.cleanable_segments(log, T0)) == 1.0
    assert cleaner.clean(log, T0).cleaned
    assert len(read_all(log)) == 4


def test_log_manager_runs_the_cleaner_on_compacted_logs_only(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], clock=lambda: T0)
    manager.startup()
    compacted = manager.create_log("kv", 0, config())
    plain = manager.create_log("events", 0, config(cleanup_policy=("delete",)))
    for target in (compacted, plain):
        for r in range(3):
            append(target, [(b"k", b"v%d" % r)])
            target.roll(now_ms=T0)
    manager.run_cleaner()
    assert [r.value for r in read_all(compacted)] == [b"v2"]
    assert [r.value for r in read_all(plain)] == [b"v0", b"v1", b"v2"]
    manager.shutdown()


def test_a_segment_with_a_damaged_range_is_left_uncleaned_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=4, keys=10)  # four closed segments of 10 records, then the active one
    append(log, [(b"k0", b"active")])
    damaged_segment = log.segments_snapshot()[2]
    damage = DamagedRange(23, 25, damaged_segment.base_offset, 100, 50, T0, "crc-mismatch")
    assert log.record_damage(damaged_segment, damage, lambda: True)
    untouched = {s.base_offset: s.log_path.read_bytes() for s in log.segments_snapshot()[2:-1]}
    cleaner = LogCleaner()
    with caplog.at_level(logging.WARNING, logger="tidelog.storage.cleaner"):
        result = cleaner.clean(log, T0, force=True)
        cleaner.clean(log, T0, force=True)
    assert result.cleaned and result.end_offset == 20  # segments 0-19 cleaned, nothing from the damaged one on
    assert {s.base_offset: s.log_path.read_bytes() for s in log.segments_snapshot()[1:-1]} == untouched
    # Keys in the damaged segment and after it were not mapped: round 1 survives, round 0 does not.
    assert [r.offset for r in read_all_until(log, 20)] == list(range(10, 20))
    warnings = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(warnings) == 1 and "topic-0 from segment 00000000000000000020.log on" in warnings[0], warnings

    # A repair: the follower truncates to the range (here to 20: the damaged batch starts there) and
    # fetches the data again; the range is gone and the next clean goes past where it was.
    assert log.truncate_to(23) == 20 and log.damaged_ranges == ()
    fill(log, rounds=1, keys=10)
    append(log, [(b"k0", b"active")])
    assert cleaner.clean(log, T0, force=True).end_offset == 30


def read_all_until(log: PartitionLog, end: int) -> list[Record]:
    return [r for s in log.segments_snapshot()[:-1] for h, v in read_segment_batches(s)
            for r in decode_records(bytes(v)) if r.offset < end]
