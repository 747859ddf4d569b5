"""The log cleaner: compaction of ``cleanup.policy=compact`` partitions, Kafka's way.

What a clean does (two passes, like Kafka's ``LogCleaner``):

1. **Range.** Only whole, non-active segments below the *first uncleanable offset* are touched:
   ``min(active segment base, last stable offset, high watermark)``, lowered further to the first
   segment holding a record younger than ``min.compaction.lag.ms``. The *dirty* part starts at the
   first dirty offset (where the previous clean stopped; the log start after a restart).
2. **Map.** Read the dirty part and map each key to its newest offset (control batches and aborted
   transactional data do not count). The map holds at most ``max_map_keys`` keys; when full it stops at
   a batch boundary and the dirty part beyond waits for the next round.
3. **Rewrite.** Rewrite every cleanable segment from the log start up to the end of the map, in groups
   of consecutive segments whose total size fits ``segment.bytes``. A record is kept when no newer
   offset for its key is mapped (``offset >= map.get(key, -1)``). Offsets never change: a batch keeps
   its base offset, lastOffsetDelta, producer id/epoch and base sequence; surviving records keep their
   deltas. A batch that loses nothing is copied byte for byte (compressed batches stay as they are);
   otherwise it is rebuilt with the same codec.

Rules for what else disappears:

- **Keyless records** cannot be compacted; they are dropped (the log refuses them on append anyway).
- **Tombstones** (null value) and **transaction markers** get a *delete horizon* the first time a clean
  keeps them: ``now + delete.retention.ms`` stored in the batch (KIP-534: attribute bit 6, baseTimestamp,
  record timestamps unchanged). A later clean drops tombstones of batches whose horizon has passed, so
  consumers have ``delete.retention.ms`` to see a delete. A log whose earliest horizon has passed is
  cleaned even when it is not dirty.
- **Aborted transactions**: data batches covered by an aborted transaction (from the segments'
  ``.txnindex``) are dropped. A marker is dropped once its horizon has passed *and* no data of its
  transaction remains in the rewritten range (a COMMIT marker stays while committed data stays, so
  producer state rebuilt from the log still sees the transaction end). A ``.txnindex`` entry goes with
  its ABORT marker.
- **Emptied batches**: a data batch whose records all went is dropped, except when it is the last batch
  of its producer in the cleaned range: then a header-only batch (0 records, same lastOffsetDelta,
  producer id, epoch and base sequence) is kept so that the producer's last sequence survives, as Kafka
  does. (Kafka asks the producer state whether it is the last batch in the whole log; the range check is
  conservative: at worst an empty batch survives one more round.)

Files and crash safety (Kafka's ``.cleaned`` / ``.swap`` scheme). For a group whose first segment has
base offset B (``stem`` = B as 20 digits, see :mod:`tidelog.storage.segment`):

1. write ``stem.log.cleaned``, ``stem.index.cleaned``, ``stem.timeindex.cleaned``,
   ``stem.txnindex.cleaned``; fsync each;
2. rename the three index files to ``.swap``, then ``stem.log.cleaned`` to ``stem.log.swap`` (the commit
   point), fsync the directory;
3. the log, under its lock (:meth:`CleanableLog.replace_segments`), renames the old segments' files
   to ``.deleted`` (their fds stay open for readers in flight; files are deleted after
   ``file.delete.delay.ms``), then :func:`complete_swap` renames the index swaps and finally
   ``stem.log.swap`` to their final names, and the log opens the new segment.

:func:`recover_cleaner_files` runs at load, before segments are listed: ``.cleaned`` files and index
``.swap`` files without a ``stem.log.swap`` are an unfinished clean: deleted (the old segments are intact).
A ``stem.log.swap`` is a committed clean: every segment whose base offset lies in
``[B, last offset of the swap]`` is deleted, then the swap is completed. A crash at any point therefore
leaves either the old segments or the cleaned ones, never both and never neither.

Readers see a consistent log throughout: the cleaned segment holds the same offsets (minus removed
records), a reader holding an old segment keeps reading its fd, and the swap happens under the log lock.

Decompression is capped at the topic's ``max.message.bytes`` (as on append). A batch that inflates past it
(stored as the producer sent it under ``compression.type=producer``, or before the cap was lowered) is
neither inflated whole nor lost: its keys stay out of the offset map and the batch is copied as it is,
with a warning naming the partition and offset. Keeping it can only keep older records too, never drop one.

Damaged ranges (found by the scrubber, storage/damage.py) are never cleaned: the first segment holding
one ends the cleanable range, like the first uncleanable offset, so the cleaner neither rebuilds its
batches (which would give garbage records a fresh, valid CRC) nor lets keys read from it remove older
records. It says so once per range at WARN; the segments before it are still cleaned, and cleaning goes
past it once a repair (a follower's refetch) or retention removed the range.

Thread-safety: a :class:`LogCleaner` runs in one background thread; it reads only non-active segments
(immutable apart from deletion) through ``os.pread`` and changes the log only through
``replace_segments``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tidelog.common.errors import KafkaError
from tidelog.protocol.compression import DEFAULT_MAX_INFLATED, InflatedTooLarge
from tidelog.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    build_batch,
    decode_records,
    iter_batches,
)
from tidelog.storage.checkpoint import CheckpointError, OffsetCheckpointFile, fsync_dir
from tidelog.storage.damage import DamagedRange
from tidelog.storage.index import OffsetIndex, TimeIndex
from tidelog.storage.log_config import LogConfig
from tidelog.storage.txn_index import AbortedTxn, TxnIndex

__all__ = [
    "CHECKPOINT_FILE",
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleanResult",
    "CleanableLog",
    "CleanableSegment",
    "LogCleaner",
    "OffsetMap",
    "build_offset_map",
    "clean_batches",
    "complete_swap",
    "group_segments",
    "promote_to_swap",
    "read_segment_batches",
    "recover_cleaner_files",
    "write_cleaned_segment",
]

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_INDEX_KINDS = (".index", ".timeindex", ".txnindex")
CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_READ_CHUNK = 8 * 1024 * 1024
_MAX_OFFSET_SPAN = 2**31 - 1
NO_HORIZON = 2**63 - 1


def _stem(offset: int) -> str:
    return f"{offset:020d}"


# --------------------------------------------------------------------------------- what the log offers


class CleanableSegment(Protocol):
    """The parts of :class:`~tidelog.storage.segment.LogSegment` the cleaner reads."""

    base_offset: int
    fd: int
    size: int
    next_offset: int
    max_timestamp: int
    first_batch_timestamp: int

    @property
    def txn_index(self) -> TxnIndex: ...


class CleanableLog(Protocol):
    """The parts of :class:`~tidelog.storage.log.PartitionLog` the cleaner uses (docs/dev/cleaner-needs.md)."""

    @property
    def dir(self) -> Path: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def segments_snapshot(self) -> Sequence[CleanableSegment]: ...

    @property
    def damaged_ranges(self) -> Sequence[DamagedRange]: ...

    def replace_segments(self, old: Sequence[CleanableSegment], new_base: int) -> bool: ...


# ------------------------------------------------------------------------------------ reading batches


def read_segment_batches(segment: CleanableSegment) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield the batches of a (non-active) segment, reading it in chunks of whole batches."""
    position, size = 0, segment.size
    while position < size:
        chunk = os.pread(segment.fd, min(_READ_CHUNK, size - position), position)
        view = memoryview(chunk)
        used = 0
        while used + LOG_OVERHEAD <= len(view):
            length = int.from_bytes(view[used + 8 : used + 12], "big", signed=True)
            if used + LOG_OVERHEAD + length > len(view):
                break
            [(header, _)] = iter_batches(view[used : used + LOG_OVERHEAD + length], validate=False)
            yield header, view[used : used + header.size]
            used += header.size
        if used == 0:  # one batch larger than the chunk: read it whole
            head = os.pread(segment.fd, LOG_OVERHEAD, position)
            length = int.from_bytes(head[8:12], "big", signed=True)
            whole = memoryview(os.pread(segment.fd, LOG_OVERHEAD + length, position))
            [(header, _)] = iter_batches(whole, validate=False)
            yield header, whole
            used = header.size
        position += used


# ----------------------------------------------------------------------------------------- offset map


@dataclass
class OffsetMap:
    """Key → newest offset over the dirty range ``[start, end)``."""

    start: int
    end: int
    offsets: dict[bytes, int] = field(default_factory=dict)

    def get(self, key: bytes) -> int:
        return self.offsets.get(key, -1)


class _Aborted:
    """Aborted transactions by producer id: is a transactional data batch aborted?"""

    def __init__(self, txns: Iterable[AbortedTxn]) -> None:
        self._by_pid: dict[int, list[tuple[int, int]]] = {}
        for txn in txns:
            self._by_pid.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))

    def covers(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._by_pid.get(header.producer_id, ())
        return any(first <= header.base_offset <= last for first, last in ranges)


def build_offset_map(
    batches: Iterable[tuple[BatchHeader, memoryview]],
    start: int,
    stop: int,
    *,
    max_keys: int,
    aborted: Iterable[AbortedTxn] = (),
    max_inflated: int = DEFAULT_MAX_INFLATED,
) -> OffsetMap:
    """Map every key of records in ``[start, stop)`` to its newest offset (see the module docstring).

    ``end`` is ``stop`` unless the map filled up first, then the base offset of the first batch left out.
    """
    result = OffsetMap(start, stop)
    abort = _Aborted(aborted)
    for header, view in batches:
        if header.last_offset < start or header.is_control or abort.covers(header):
            continue
        if header.base_offset >= stop:
            break
        if result.offsets and len(result.offsets) + header.records_count > max_keys:
            result.end = max(header.base_offset, start)
            break
        try:
            records = decode_records(view, max_inflated=max_inflated)
        except InflatedTooLarge:
            continue  # kept as it is by the rewrite (see the module docstring)
        for record in records:
            if record.key is not None and start <= record.offset < stop:
                result.offsets[record.key] = record.offset
    return result


# -------------------------------------------------------------------------------------- batch filter


@dataclass
class CleanStats:
    batches_read: int = 0
    batches_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    next_horizon_ms: int = NO_HORIZON


@dataclass
class _CleanState:
    """What the rewrite remembers while walking the range in offset order."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    aborted: _Aborted
    producer_last_offset: Mapping[int, int]
    max_inflated: int = DEFAULT_MAX_INFLATED
    txn_has_data: dict[int, bool] = field(default_factory=dict)
    kept_markers: set[int] = field(default_factory=set)
    stats: CleanStats = field(default_factory=CleanStats)

    def horizon_for(self, header: BatchHeader) -> int:
        horizon = header.delete_horizon_ms
        return self.now_ms + self.delete_retention_ms if horizon is None else horizon


def _clean_control(header: BatchHeader, view: memoryview, state: _CleanState) -> bytes | memoryview | None:
    has_data = state.txn_has_data.pop(header.producer_id, False)
    horizon = header.delete_horizon_ms
    if horizon is not None and state.now_ms >= horizon and not has_data:
        return None
    state.kept_markers.add(header.base_offset)
    state.stats.next_horizon_ms = min(state.stats.next_horizon_ms, state.horizon_for(header))
    if horizon is not None:
        return view
    return _rebuild(header, decode_records(view), state.horizon_for(header))


def _clean_data(header: BatchHeader, view: memoryview, state: _CleanState) -> bytes | memoryview | None:
    try:
        records = decode_records(view, max_inflated=state.max_inflated)
    except InflatedTooLarge as exc:
        log.warning("cleaner keeps the batch at offset %d as it is: %s", header.base_offset, exc.message)
        if header.is_transactional:
            state.txn_has_data[header.producer_id] = True
        return view
    state.stats.records_read += len(records)
    if state.aborted.covers(header):
        kept: list[Record] = []
    else:
        horizon = header.delete_horizon_ms
        tombstones_expire = horizon is not None and state.now_ms >= horizon
        kept = [
            r
            for r in records
            if r.key is not None
            and r.offset >= state.offset_map.get(r.key)
            and not (r.value is None and tombstones_expire)
        ]
    state.stats.records_kept += len(kept)
    if header.is_transactional and kept:
        state.txn_has_data[header.producer_id] = True
    elif header.is_transactional:
        state.txn_has_data.setdefault(header.producer_id, False)
    if not kept:
        if (
            header.has_producer_id
            and state.producer_last_offset.get(header.producer_id) == header.last_offset
        ):
            return _rebuild(header, [], header.delete_horizon_ms)
        return None
    has_tombstone = any(r.value is None for r in kept)
    if has_tombstone:
        state.stats.next_horizon_ms = min(state.stats.next_horizon_ms, state.horizon_for(header))
    needs_horizon = has_tombstone and header.delete_horizon_ms is None
    if len(kept) == len(records) and not needs_horizon:
        return view
    return _rebuild(header, kept, state.horizon_for(header) if has_tombstone else header.delete_horizon_ms)


def _rebuild(header: BatchHeader, records: Sequence[Record], horizon: int | None) -> bytes:
    return build_batch(
        records,
        base_offset=header.base_offset,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        transactional=header.is_transactional,
        control=header.is_control,
        timestamp_type=header.timestamp_type,
        base_timestamp=None if records else header.base_timestamp,
        max_timestamp=header.max_timestamp,
        last_offset_delta=header.last_offset_delta,
        delete_horizon_ms=horizon,
    )


def clean_batches(
    batches: Iterable[tuple[BatchHeader, memoryview]], state: _CleanState
) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
    """Filter batches in offset order; yield each survivor (unchanged view or rebuilt bytes)."""
    for header, view in batches:
        state.stats.batches_read += 1
        state.stats.bytes_read += header.size
        out = _clean_control(header, view, state) if header.is_control else _clean_data(header, view, state)
        if out is None:
            continue
        new_header = header if out is view else BatchHeader.parse(out)
        state.stats.batches_written += 1
        state.stats.bytes_written += new_header.size
        yield new_header, out


# ---------------------------------------------------------------------------------------- file layer


def write_cleaned_segment(
    directory: Path,
    base_offset: int,
    batches: Iterable[tuple[BatchHeader, bytes | memoryview]],
    aborted: Iterable[AbortedTxn],
    *,
    index_bytes: int,
    index_interval_bytes: int,
) -> int:
    """Write ``stem.*.cleaned`` files for one cleaned group and fsync them; return the log's size."""
    stem = _stem(base_offset)
    log_path = directory / f"{stem}.log{CLEANED_SUFFIX}"
    offset_index = OffsetIndex(
        directory / f"{stem}.index{CLEANED_SUFFIX}", base_offset, index_bytes, load=False
    )
    time_index = TimeIndex(
        directory / f"{stem}.timeindex{CLEANED_SUFFIX}", base_offset, index_bytes, load=False
    )
    txn_index = TxnIndex(directory / f"{stem}.txnindex{CLEANED_SUFFIX}", load=False)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    position, since_index, max_ts, max_ts_offset = 0, 0, -1, base_offset
    try:
        for header, data in batches:
            if since_index > index_interval_bytes:
                offset_index.append(header.base_offset, position)
                time_index.maybe_append(max_ts, max_ts_offset)
                since_index = 0
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, header.base_offset
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            position += header.size
            since_index += header.size
        if max_ts >= 0:
            time_index.maybe_append(max_ts, max_ts_offset)
        for txn in aborted:
            txn_index.append(txn)
        os.fsync(fd)
        for index in (offset_index, time_index):
            index.write_pending()
            index.fsync()
        txn_index.fsync()
    finally:
        os.close(fd)
        offset_index.close()
        time_index.close()
        txn_index.close()
    return position


def promote_to_swap(directory: Path, base_offset: int) -> None:
    """Rename a group's ``.cleaned`` files to ``.swap``: indexes first, the ``.log`` last (commit)."""
    stem = _stem(base_offset)
    for kind in (*_INDEX_KINDS, ".log"):
        os.replace(directory / f"{stem}{kind}{CLEANED_SUFFIX}", directory / f"{stem}{kind}{SWAP_SUFFIX}")
    fsync_dir(directory)


def complete_swap(directory: Path, base_offset: int) -> None:
    """Give a group's ``.swap`` files their final names (indexes first, the ``.log`` last)."""
    stem = _stem(base_offset)
    for kind in (*_INDEX_KINDS, ".log"):
        swap = directory / f"{stem}{kind}{SWAP_SUFFIX}"
        if swap.exists():
            os.replace(swap, directory / f"{stem}{kind}")
    fsync_dir(directory)


def discard_group(directory: Path, base_offset: int) -> None:
    """Remove a group's ``.cleaned`` and ``.swap`` files (a clean that was given up)."""
    stem = _stem(base_offset)
    for kind in (*_INDEX_KINDS, ".log"):
        for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
            (directory / f"{stem}{kind}{suffix}").unlink(missing_ok=True)


def _swap_next_offset(path: Path, base_offset: int) -> int:
    data = path.read_bytes()
    next_offset = base_offset
    try:
        for header, _ in iter_batches(data, validate=False):
            next_offset = header.next_offset
    except KafkaError:
        pass  # a torn tail cannot happen (the swap was fsynced first); the loader re-validates anyway
    return next_offset


def recover_cleaner_files(directory: Path) -> None:
    """Finish or undo a clean interrupted by a crash (see the module docstring). Run before loading."""
    for path in directory.glob(f"*{CLEANED_SUFFIX}"):
        path.unlink()
    swaps = sorted(directory.glob(f"*.log{SWAP_SUFFIX}"))
    committed = {p.name.split(".", 1)[0] for p in swaps}
    for path in directory.glob(f"*{SWAP_SUFFIX}"):
        if path.name.split(".", 1)[0] not in committed:
            path.unlink()
    for swap in swaps:
        stem = swap.name.split(".", 1)[0]
        base = int(stem)
        end = _swap_next_offset(swap, base)
        for old in directory.glob("*.log"):
            old_base = int(old.name.split(".", 1)[0]) if old.name.split(".", 1)[0].isdigit() else -1
            if old_base == base or base < old_base < end:
                old.unlink()
                if old_base != base:
                    for kind in _INDEX_KINDS:
                        (directory / f"{_stem(old_base)}{kind}").unlink(missing_ok=True)
        complete_swap(directory, base)
    if swaps:
        fsync_dir(directory)


# ----------------------------------------------------------------------------------------- scheduling


def group_segments(segments: Sequence[CleanableSegment], max_bytes: int) -> list[list[CleanableSegment]]:
    """Split consecutive segments into groups that fit in one segment (size and offset span)."""
    groups: list[list[CleanableSegment]] = []
    for segment in segments:
        if groups:
            group = groups[-1]
            size = sum(s.size for s in group) + segment.size
            span = segment.next_offset - group[0].base_offset
            if size <= max_bytes and span <= _MAX_OFFSET_SPAN:
                group.append(segment)
                continue
        groups.append([segment])
    return groups


@dataclass(frozen=True)
class CleanResult:
    """What one clean of one log did (``cleaned`` False when it was not due)."""

    cleaned: bool
    first_dirty_offset: int
    end_offset: int
    dirty_ratio: float
    stats: CleanStats = field(default_factory=CleanStats)


class LogCleaner:
    """Decides when a compacted log is due and cleans it (see the module docstring).

    The first dirty offset of each partition is kept in memory and in ``cleaner-offset-checkpoint``
    of its log dir (Kafka's file and format: ``topic partition offset`` lines), rewritten after each
    clean. A checkpointed offset outside the log (a recreated topic) counts as "all dirty".
    """

    def __init__(self, manager: object = None, *, max_map_keys: int = 4_000_000) -> None:
        # ``manager`` is the LogManager that schedules the cleaner (it passes itself); the logs to clean
        # come through run_once, so the cleaner keeps no reference to it.
        del manager
        self.max_map_keys = max_map_keys
        self.first_dirty: dict[Path, int] = {}
        self.next_horizon: dict[Path, int] = {}
        self._loaded_dirs: set[Path] = set()
        self._damage_logged: set[tuple[Path, int, int]] = set()  # each damaged range is logged once

    def _checkpointed_first_dirty(self, partition_log: CleanableLog) -> int:
        log_dir = partition_log.dir.parent
        if log_dir not in self._loaded_dirs:
            self._loaded_dirs.add(log_dir)
            try:
                entries = OffsetCheckpointFile(log_dir / CHECKPOINT_FILE).read()
            except (CheckpointError, OSError):
                log.warning("ignoring unreadable %s in %s", CHECKPOINT_FILE, log_dir)
                entries = {}
            for (topic, partition), offset in entries.items():
                self.first_dirty.setdefault(log_dir / f"{topic}-{partition}", offset)
        return self.first_dirty.get(partition_log.dir, -1)

    def _first_dirty(self, partition_log: CleanableLog) -> int:
        offset = self._checkpointed_first_dirty(partition_log)
        segments = partition_log.segments_snapshot()
        if segments and offset > segments[-1].next_offset:
            offset = self.first_dirty[partition_log.dir] = -1
        return offset

    def _write_checkpoint(self, log_dir: Path) -> None:
        entries: dict[tuple[str, int], int] = {}
        for path, offset in self.first_dirty.items():
            if path.parent == log_dir and path.is_dir():
                topic, _, partition = path.name.rpartition("-")
                if topic and partition.isdigit():
                    entries[(topic, int(partition))] = offset
        OffsetCheckpointFile(log_dir / CHECKPOINT_FILE).write(entries)

    def run_once(self, logs: Iterable[CleanableLog], now_ms: int) -> list[CleanResult]:
        """Clean every compacted log that is due; a failing log is logged and skipped."""
        results = []
        for partition_log in logs:
            if not partition_log.config.compact:
                continue
            try:
                results.append(self.clean(partition_log, now_ms))
            except (KafkaError, OSError):
                log.exception("cleaning %s failed", partition_log.dir)
        return results

    def cleanable_segments(self, partition_log: CleanableLog, now_ms: int) -> list[CleanableSegment]:
        """Whole non-active segments below the first uncleanable offset."""
        segments = list(partition_log.segments_snapshot())
        if len(segments) < 2:
            return []
        limit = min(segments[-1].base_offset, partition_log.last_stable_offset, partition_log.high_watermark)
        lag = partition_log.config.min_compaction_lag_ms
        damaged = partition_log.damaged_ranges
        out = []
        for segment in segments[:-1]:
            if segment.next_offset > limit:
                break
            if lag > 0 and segment.max_timestamp > now_ms - lag:
                break
            hit = next((r for r in damaged if segment.base_offset <= r.end_offset and r.start_offset < segment.next_offset), None)
            if hit is not None:
                self._skip_damaged(partition_log, segment.base_offset, hit)
                break
            out.append(segment)
        return out

    def _skip_damaged(self, partition_log: CleanableLog, segment_base: int, damaged: DamagedRange) -> None:
        key = (partition_log.dir, damaged.start_offset, damaged.found_ms)
        if key not in self._damage_logged:
            self._damage_logged.add(key)
            log.warning("not cleaning %s from segment %s.log on: it holds damaged %s (the cleaner neither rewrites "
                        "nor copies a damaged range; cleaning goes on once it is repaired or gone)",
                        partition_log.dir.name, _stem(segment_base), damaged.describe())

    def dirty_ratio(self, partition_log: CleanableLog, segments: Sequence[CleanableSegment]) -> float:
        first_dirty = self._first_dirty(partition_log)
        dirty = sum(s.size for s in segments if s.next_offset > first_dirty)
        total = sum(s.size for s in segments)
        return dirty / total if total else 0.0

    def _due(self, partition_log: CleanableLog, segments: Sequence[CleanableSegment], now_ms: int) -> bool:
        config = partition_log.config
        first_dirty = self._first_dirty(partition_log)
        dirty = [s for s in segments if s.next_offset > first_dirty]
        if not dirty:
            return self.next_horizon.get(partition_log.dir, NO_HORIZON) <= now_ms
        if self.dirty_ratio(partition_log, segments) >= config.min_cleanable_dirty_ratio:
            return True
        first_ts = dirty[0].first_batch_timestamp
        if first_ts >= 0 and now_ms - first_ts > config.max_compaction_lag_ms:
            return True
        return self.next_horizon.get(partition_log.dir, NO_HORIZON) <= now_ms

    def clean(self, partition_log: CleanableLog, now_ms: int, *, force: bool = False) -> CleanResult:
        """Clean ``partition_log`` if it is due (or ``force``); see the module docstring."""
        segments = self.cleanable_segments(partition_log, now_ms)
        ratio = self.dirty_ratio(partition_log, segments)
        first_dirty = max(self._first_dirty(partition_log), segments[0].base_offset if segments else 0)
        if not segments or not (force or self._due(partition_log, segments, now_ms)):
            return CleanResult(False, first_dirty, first_dirty, ratio)
        config = partition_log.config
        aborted = [txn for s in partition_log.segments_snapshot() for txn in s.txn_index.entries]
        stop = segments[-1].next_offset
        dirty_segments = [s for s in segments if s.next_offset > first_dirty]
        offset_map = build_offset_map(
            (b for s in dirty_segments for b in read_segment_batches(s)),
            first_dirty,
            stop,
            max_keys=self.max_map_keys,
            aborted=aborted,
            max_inflated=config.max_message_bytes,
        )
        to_clean = [s for s in segments if s.base_offset < offset_map.end]
        state = _CleanState(
            offset_map=offset_map,
            now_ms=now_ms,
            delete_retention_ms=config.delete_retention_ms,
            aborted=_Aborted(aborted),
            producer_last_offset=_producer_last_offsets(to_clean),
            max_inflated=config.max_message_bytes,
        )
        complete = all(
            self._clean_group(partition_log, group, state)
            for group in group_segments(to_clean, config.segment_bytes)
        )
        if not complete:  # the log changed under us (retention, truncation): start over next round
            return CleanResult(True, first_dirty, first_dirty, ratio, state.stats)
        self.first_dirty[partition_log.dir] = offset_map.end
        self.next_horizon[partition_log.dir] = state.stats.next_horizon_ms
        try:
            self._write_checkpoint(partition_log.dir.parent)
        except OSError:
            log.warning("could not write %s in %s", CHECKPOINT_FILE, partition_log.dir.parent, exc_info=True)
        return CleanResult(True, first_dirty, offset_map.end, ratio, state.stats)

    def _clean_group(
        self, partition_log: CleanableLog, group: list[CleanableSegment], state: _CleanState
    ) -> bool:
        directory, base = partition_log.dir, group[0].base_offset
        config = partition_log.config
        survivors = clean_batches((b for s in group for b in read_segment_batches(s)), state)
        try:
            write_cleaned_segment(
                directory,
                base,
                survivors,
                [t for s in group for t in s.txn_index.entries],
                index_bytes=config.segment_index_bytes,
                index_interval_bytes=config.index_interval_bytes,
            )
            _filter_txn_index(directory, base, state.kept_markers)
            promote_to_swap(directory, base)
            if partition_log.replace_segments(group, base):
                return True
        except BaseException:
            discard_group(directory, base)
            raise
        discard_group(directory, base)
        return False


def _filter_txn_index(directory: Path, base: int, kept_markers: set[int]) -> None:
    """Keep only the aborted-transaction entries whose ABORT marker survived the clean."""
    path = directory / f"{_stem(base)}.txnindex{CLEANED_SUFFIX}"
    index = TxnIndex(path, load=True)
    entries = [e for e in index.entries if e.last_offset in kept_markers]
    if len(entries) != len(index.entries):
        index.reset()
        for entry in entries:
            index.append(entry)
        index.fsync()
    index.close()


def _iter_headers(segment: CleanableSegment) -> Iterator[BatchHeader]:
    """Batch headers of a segment, one small ``pread`` each (no record bytes read)."""
    position = 0
    while position + HEADER_SIZE <= segment.size:
        header = BatchHeader.parse(os.pread(segment.fd, HEADER_SIZE, position))
        yield header
        position += header.size


def _producer_last_offsets(segments: Sequence[CleanableSegment]) -> dict[int, int]:
    last: dict[int, int] = {}
    for segment in segments:
        for header in _iter_headers(segment):
            if header.has_producer_id and not header.is_control:
                last[header.producer_id] = header.last_offset
    return last
