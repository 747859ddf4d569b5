"""A partition's log: the ordered list of segments in ``<log dir>/<topic>-<partition>/``.

Directory contents (Kafka's layout)::

    00000000000000000000.log / .index / .timeindex / .txnindex   one segment (see segment.py)
    00000000000000052311.log ...                                 the last one is the *active* segment
    00000000000000052311.snapshot                                producer state (producer_state.py)
    leader-epoch-checkpoint                                      leader epochs (leader_epoch.py)
    *.deleted                                                    removed segments awaiting deletion

The log start offset and recovery point are not stored here but in the log dir's checkpoint files
(the :class:`~tidelog.storage.manager.LogManager` writes them); they are passed to the constructor.

Offsets: every batch appended by the leader gets offsets ``[log end offset, ...]`` by rewriting its
base offset and partition leader epoch in a private copy of the request buffer; records are not
decoded on this path, except where the topic's ``compression.type`` names a codec: a batch in
another codec then has its records section decompressed, checked, renumbered where its records'
offset deltas do not run 0, 1, 2... and compressed again (``recompress_batch``), as Kafka's
LogValidator does. A compressed batch kept as sent has its records' offset deltas checked instead
(every record out of place is named in INVALID_RECORD's ``record_errors``). Reads return byte ranges of whole batches, as stored.

Durability: the OS page cache holds appends until :meth:`PartitionLog.flush` fsyncs them (when
``flush.messages`` / ``flush.ms`` ask for it the append says ``needs_flush``; the caller runs the flush
off its event loop). The *recovery point* is the offset below which everything is fsynced.

A roll writes the producer-state snapshot at the new segment's base. With an ``on_roll_snapshot``
hook (the log manager's, which the broker points at the log dir's disk pool) the snapshot is written
*without* its fsyncs, inside the roll, and the hook has :meth:`sync_snapshots` (fsync the file, then
the partition directory) run elsewhere, as Kafka's roll leaves it to its scheduler: an append that
rolls never waits for the disk. :meth:`flush` makes such snapshots durable before it moves the
recovery point, so a snapshot is durable before the recovery point passes it. Until then a power
loss may leave the newest snapshot torn or missing: ``ProducerStateManager.load_snapshot`` skips a
snapshot that fails its CRC and rebuilds from an older one (or the log start) by replaying batch
headers, so nothing is lost but time. A hook that declines (returns False: no pool) has the roll
sync at once; without a hook the snapshot is written durably, as before. The file format is unchanged.

Rolling off the caller's thread (roll_plan.py has the steps and the crash argument): the broker asks
:meth:`would_roll` before an append, and when it would, plans the roll (:meth:`begin_roll`, no system
call) and runs :meth:`complete_roll` on the log dir's pool: the new segment's files are made there
without the lock, then installed under it, and the snapshot is written and fsynced there too. While a
plan is open nothing is appended: the broker's appends to the partition await the roll, and every
other write to the log (an append, a truncation, a close) settles the plan first in its own thread.
So at any instant the segment files on disk describe a valid log (a made, not yet installed segment
is an empty active segment above every offset), and a ``kill -9`` anywhere in a roll recovers.

Opening: after a clean shutdown, segments are loaded with their indexes (sanity-checked: an index
that fails is rebuilt by rescanning its segment). After an unclean shutdown every segment from the
one holding the recovery point on is scanned: each batch's framing, CRC and offsets are checked, the
indexes are rebuilt from scratch, and the first invalid batch and everything after it (later
segments too) are cut away. Producer state is then loaded from the newest snapshot and rebuilt by
replaying the batch headers after it.

Thread-safety: one re-entrant lock per log guards the segment list, offsets and indexes. Appends,
truncations, rolls and retention take it for their whole duration; :meth:`read` takes it only to
compute byte ranges (the bytes themselves are read without it); :meth:`flush` takes it to collect
what to sync and to advance the recovery point, but fsyncs without it, so appends continue during a
flush. Ranges handed out by :meth:`read` stay valid for ``file.delete.delay.ms`` after their segment
is removed (the file is renamed ``.deleted`` and its descriptor kept open until then).
"""

from __future__ import annotations

import bisect
import errno
import importlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from tidelog.common.errors import ErrorCode, KafkaError, RecordValidationError, StorageError
from tidelog.protocol.compression import Compression, InflatedTooLarge
from tidelog.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    ControlType,
    decode_records,
    inner_offset_errors,
    iter_batches,
    parse_control_record,
    recompress_batch,
    record_stamps,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from tidelog.storage import source_offsets
from tidelog.storage.checkpoint import CheckpointError, fsync_dir
from tidelog.storage.damage import DamagedRange, read_damage, write_damage
from tidelog.storage.leader_epoch import LeaderEpochCache
from tidelog.storage.log_config import LogConfig
from tidelog.storage.producer_state import SUFFIX as SNAPSHOT_SUFFIX
from tidelog.storage.producer_state import ProducerStateManager, snapshot_name
from tidelog.storage.roll_plan import PendingSnapshot, RollPlan, write_snapshot_tmp
from tidelog.storage.segment import DELETED_SUFFIX, BatchInfo, LogSegment
from tidelog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview
_MAX_RELATIVE_OFFSET = 2**31 - 1
_REWRITTEN = 16  # base offset, batch length, partition leader epoch: the bytes before magic
_UNBOUNDED_MS = 2**63 - 1  # Long.MAX_VALUE: message.timestamp.before.max.ms with no lower bound


class AppendInfo(NamedTuple):
    """The outcome of one append (what a ProduceResponse partition needs). A NamedTuple: one is
    built per appended partition, and it costs a quarter of a frozen dataclass."""

    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool
    max_timestamp: int
    max_timestamp_offset: int
    needs_flush: bool


class PreparedAppend(NamedTuple):
    """Batches validated (and recompressed) by :meth:`PartitionLog.prepare_append` under ``config``."""

    buf: memoryview
    headers: list[tuple[BatchHeader, int]]
    config: LogConfig
    from_client: bool
    original: Buffer  # the records as received, prepared again if the topic's config changes meanwhile


@dataclass
class FetchData:
    """Whole batches as (fd, position, length) ranges, plus the log's offsets at read time.

    ``end_offset`` is one past the last offset returned (the requested offset when empty).

    A range stays readable as long as this object lives, even if its segment is removed meanwhile
    (``holders`` keeps the segment, hence its descriptor, alive).
    """

    ranges: list[tuple[int, int, int]]  # (fd, position, length)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    end_offset: int = -1
    aborted: list[AbortedTxn] = field(default_factory=list)
    # The segments the ranges point into: holding them keeps their descriptors open (see segment.py).
    holders: list[object] = field(default_factory=list, repr=False, compare=False)

    @property
    def size(self) -> int:
        return sum(length for _, _, length in self.ranges)

    def read_bytes(self) -> bytes:
        """The batches as one buffer: one ``pread`` per range."""
        return read_ranges(self.ranges)


def read_ranges(ranges: list[tuple[int, int, int]]) -> bytes:
    """The bytes of (fd, position, length) ranges, one ``pread`` each; OSError if a file is shorter."""
    parts = []
    for fd, position, length in ranges:
        data = os.pread(fd, length, position)
        if len(data) != length:
            raise OSError(f"file range shorter than its index says: {len(data)} of {length} bytes at {position}")
        parts.append(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# A future replica's directory (AlterReplicaLogDirs, storage/dir_mover.py): ``<topic>-<p>.<32 hex>-future``.
FUTURE_DIR = re.compile(r"\.[0-9a-f]{32}-future\Z")


def parse_dir_name(name: str) -> tuple[str, int]:
    """``orders-3`` → ("orders", 3); a future replica's ``orders-3.<uuid>-future`` too."""
    topic, _, partition = FUTURE_DIR.sub("", name).rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"not a partition directory name: {name}")
    return topic, int(partition)


def _cleaner_hook(name: str, *args: object) -> None:
    """Call ``tidelog.storage.cleaner.<name>`` (written in parallel; absent until it lands)."""
    try:
        module = importlib.import_module("tidelog.storage.cleaner")
    except ModuleNotFoundError:
        return
    getattr(module, name)(*args)


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    """One partition's log (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        producer_id_expiration_ms: int = 86_400_000,
        hw_follows_leo: bool = True,
        high_watermark: int | None = None,
        now_ms: int | None = None,
        on_io_error: Callable[[PartitionLog, OSError], None] | None = None,
        on_roll_snapshot: Callable[[PartitionLog], bool] | None = None,
    ) -> None:
        self.dir = directory
        # Called by a roll (log lock held, any thread) to have sync_snapshots run elsewhere; False: do it now.
        self.on_roll_snapshot = on_roll_snapshot
        self._unsynced_snapshots: list[Path] = []  # written by rolls without fsync, not yet made durable
        # A roll whose files another thread is making (roll_plan.py); nothing is appended until it settles.
        self._roll_plan: RollPlan | None = None
        self._pending_snapshots: list[PendingSnapshot] = []  # encoded by installed plans, not yet written
        self.snapshot_epoch = 0  # bumped whenever producer state is rewound: a late snapshot write is void
        self.topic, self.partition = parse_dir_name(directory.name)
        self.config = config
        self.hw_follows_leo = hw_follows_leo
        self.on_io_error = on_io_error
        self.offline = False
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms() if now_ms is None else now_ms
        self.recovered_unclean = False
        self.truncated_bytes = 0
        self.recovery_truncations = 0  # cuts recovery made when the log was opened (0 or 1)
        directory.mkdir(parents=True, exist_ok=True)
        self.epoch_cache = LeaderEpochCache(directory)
        self.producers = ProducerStateManager(directory, producer_id_expiration_ms)
        self._load(recovery_point, log_start_offset, clean_shutdown, self._last_flush_ms)
        self._damaged = self._load_damage()
        if hw_follows_leo:
            self._high_watermark = self.log_end_offset
        else:  # replicated: the checkpointed high watermark (replication-offset-checkpoint), else the recovery point
            known = recovery_point if high_watermark is None else high_watermark
            self._high_watermark = max(self.log_start_offset, min(known, self.log_end_offset))

    # -- opening --------------------------------------------------------------------------------

    def _load(self, recovery_point: int, log_start_offset: int, clean: bool, now_ms: int) -> None:
        _cleaner_hook("recover_cleaner_files", self.dir)
        for path in self.dir.iterdir():
            if path.name.endswith((DELETED_SUFFIX, ".tmp")):
                path.unlink(missing_ok=True)
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        interval = self.config.index_interval_bytes
        recover_from = len(bases)
        for i, base in enumerate(bases):
            seg = LogSegment(self.dir, base, self.config.segment_index_bytes, load=True, now_ms=now_ms)
            self._add_segment(seg)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            below_recovery_point = next_base is not None and next_base <= recovery_point
            if (clean or below_recovery_point) and seg.load_clean(interval):
                continue
            recover_from = i
            break
        for i in range(recover_from, len(bases)):
            if i >= len(self._segments):
                self._add_segment(
                    LogSegment(self.dir, bases[i], self.config.segment_index_bytes, load=True, now_ms=now_ms)
                )
            seg = self._segments[i]
            self.recovered_unclean = True
            size_before = seg.size
            headers, truncated = seg.recover(interval)
            for header, _ in headers:
                self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            seg.seal()
            seg.write_indexes()
            if truncated:
                cut_at, last = seg.size, seg.recovery_cut_last_offset
                self.truncated_bytes += size_before - cut_at
                for later in bases[i + 1 :]:
                    gone = LogSegment(self.dir, later, self.config.segment_index_bytes, load=True)
                    self.truncated_bytes += gone.size
                    last = max(last or later, gone.last_offset_from(0, later) or later)
                    gone.delete_files()
                self.recovery_truncations += 1
                self._report_truncation(seg, cut_at, last, len(bases) - i - 1)
                break
        if not self._segments:
            self._add_segment(LogSegment(self.dir, log_start_offset, self.config.segment_index_bytes,
                                         load=False, now_ms=now_ms))
        if self.recovered_unclean:
            for seg in self._segments:
                seg.fsync()
        self.log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        leo = self.log_end_offset
        self.epoch_cache.truncate_from_end(leo)
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        self.epoch_cache.flush()  # epochs re-learnt from recovered batches, before the recovery point moves
        self.recovery_point = leo if self.recovered_unclean or clean else min(recovery_point, leo)
        # Recovery reset the .txnindex of the segments it re-read: their aborts are indexed again.
        reindex_from = self._segments[recover_from].base_offset if recover_from < len(self._segments) else None
        self._rebuild_producer_state(leo, reindex_from)

    def _load_damage(self) -> list[DamagedRange]:
        try:
            known = read_damage(self.dir)
        except CheckpointError as exc:
            log.warning("ignoring unreadable damaged-ranges file of %s-%d (the scrubber finds them again): %s",
                        self.topic, self.partition, exc)
            return []
        kept = [r for r in known if self.log_start_offset <= r.end_offset and r.start_offset < self.log_end_offset]
        for r in kept:
            log.error("%s-%d has a damaged range (found by the scrubber earlier): %s", self.topic, self.partition,
                      r.describe())
        return kept

    def _report_truncation(self, seg: LogSegment, cut_at: int, last: int | None, later_segments: int) -> None:
        offsets = f"offsets {seg.next_offset} to {last}" if last is not None and last >= seg.next_offset else \
            f"offsets from {seg.next_offset}"
        log.warning(
            "recovery of %s-%d removed %d bytes, %s: %s (segment %s cut at byte %d%s)", self.topic, self.partition,
            self.truncated_bytes, offsets, seg.recovery_cut_reason, seg.log_path.name, cut_at,
            f", {later_segments} later segment(s) deleted" if later_segments else "",
        )

    def _add_segment(self, seg: LogSegment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def _rebuild_producer_state(self, leo: int, reindex_from: int | None = None) -> None:
        """Producer state at ``leo``: the newest usable snapshot, then the batches after it.

        With ``reindex_from`` (the first offset whose segments' .txnindex was reset) the replay
        starts at or before it and every abort it meets from there is appended to its segment's
        .txnindex again.
        """
        self.producers.delete_snapshots(above=leo if reindex_from is None else min(leo, reindex_from))
        start = self.producers.load_snapshot(leo)
        if start < self.log_start_offset:
            self.producers.reset(self.log_start_offset)
            start = self.log_start_offset
        for seg, header, position in self._walk(start):
            aborted = self._apply_producer(seg, header, position)
            if aborted is not None and reindex_from is not None and header.base_offset >= reindex_from:
                seg.txn_index.append(aborted)
        self.producers.map_end_offset = leo

    def _walk(self, start_offset: int) -> Iterator[tuple[LogSegment, BatchHeader, int]]:
        """Every batch from the one holding ``start_offset`` to the end (headers only)."""
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        for seg in self._segments[i:]:
            for position, header in seg.batches_from(start_offset):
                yield seg, header, position

    def _apply_producer(
        self, seg: LogSegment, header: BatchHeader, position: int, base_offset: int | None = None
    ) -> AbortedTxn | None:
        """Update producer state for a batch now in the log; return the aborted txn it ends, if any.

        ``base_offset``: the offset the batch was written at, when ``header`` was parsed before the
        leader assigned it (the header's own base offset otherwise)."""
        if not header.has_producer_id:
            return None
        first = header.base_offset if base_offset is None else base_offset
        if header.is_control:
            records = decode_records(seg.read_at(position, header.size))
            if not records:
                return None
            kind, coordinator_epoch = parse_control_record(records[0])
            done = self.producers.record_marker(
                header.producer_id, header.producer_epoch, first,
                kind is ControlType.COMMIT, coordinator_epoch, header.max_timestamp,
            )  # fmt: skip
            if done is None or not done.aborted:
                return None
            unstable = self.producers.first_unstable_offset()
            lso = unstable if unstable is not None else done.last_offset + 1
            return AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso)
        self.producers.record_batch(
            header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
            first, first + header.last_offset_delta, header.max_timestamp, header.is_transactional,
        )  # fmt: skip
        return None

    # -- offsets --------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    def segments_snapshot(self) -> list[LogSegment]:
        """The segments in base-offset order, the active one last (a copy taken under the lock)."""
        return self.segments

    def replace_segments(self, old: list[LogSegment], new_base: int, *, now_ms: int | None = None) -> bool:
        """Swap cleaned segments in (the cleaner wrote ``<new_base>.*.swap`` files covering ``old``).

        Returns False, changing nothing, if any of ``old`` left the log meanwhile. Old segments are
        renamed ``.deleted`` and their files deleted after ``file.delete.delay.ms``; readers holding
        them keep reading through their open descriptors.
        """
        with self._lock:
            self._check_online()
            ids = [id(s) for s in self._segments]
            if not old or any(id(s) not in ids for s in old) or old[-1] is self.active_segment:
                return False
            first = ids.index(id(old[0]))
            if [id(s) for s in self._segments[first : first + len(old)]] != [id(s) for s in old]:
                return False
            now = _now_ms() if now_ms is None else now_ms
            try:
                for seg in old:
                    self._retire(seg, now)
                _cleaner_hook("complete_swap", self.dir, new_base)
                new = LogSegment(self.dir, new_base, self.config.segment_index_bytes, load=True, now_ms=now)
                if not new.load_clean(self.config.index_interval_bytes):
                    new.recover(self.config.index_interval_bytes)
                    new.seal()
                    new.write_indexes()
            except OSError as exc:
                raise self._io_failed(exc, "replace segments") from exc
            self._segments[first : first + len(old)] = [new]
            self._bases[first : first + len(old)] = [new_base]
            return True

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        with self._lock:
            unstable = self.producers.first_unstable_offset()
            hw = self._high_watermark
            return hw if unstable is None else min(hw, unstable)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(seg.size for seg in self._segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (replication); clamped to [log start, log end]. Returns it."""
        with self._lock:
            self._high_watermark = max(self.log_start_offset, min(offset, self.log_end_offset))
            return self._high_watermark

    # -- damage found by the scrubber ----------------------------------------------------------

    @property
    def damaged_ranges(self) -> tuple[DamagedRange, ...]:
        return tuple(self._damaged)

    def record_damage(self, seg: LogSegment, found: DamagedRange, still_damaged: Callable[[], bool]) -> bool:
        """Remember ``found`` (in ``seg``) and persist it; False when it is already known, or when ``seg`` is
        no longer a closed segment of this log or ``still_damaged()`` (called under the lock, so no
        truncation or append runs meanwhile) says the bytes are fine after all."""
        with self._lock:
            self._check_online()
            closed = any(s is seg for s in self._segments[:-1]) and not seg.deleted
            known = any(r.segment_base == found.segment_base and r.position == found.position for r in self._damaged)
            if not closed or known or not still_damaged():
                return False
            self._damaged = sorted([*self._damaged, found])
            self._save_damage()
            return True

    def forget_damage(self) -> None:
        """Drop every known range (after the data was replaced, e.g. by a repair)."""
        with self._lock:
            if self._damaged:
                self._damaged = []
                self._save_damage()

    def _prune_damage(self) -> None:
        """Drop the ranges whose offsets left the log (truncation, retention); under the lock."""
        kept = [r for r in self._damaged
                if r.end_offset >= self.log_start_offset and r.start_offset < self.log_end_offset]
        if len(kept) != len(self._damaged):
            self._damaged = kept
            self._save_damage()

    def _save_damage(self) -> None:
        try:
            write_damage(self.dir, self._damaged)
        except OSError as exc:
            raise self._io_failed(exc, "record damaged ranges") from exc

    def _damage_bound(self, offset: int, max_offset: int | None) -> int | None:
        """``max_offset`` lowered to the first damaged range after ``offset``; CORRUPT_MESSAGE when
        ``offset`` is in one (under the lock)."""
        for r in self._damaged:
            if r.holds(offset):
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"offset {offset} of {self.topic}-{self.partition} is in a damaged range: {r.describe()}")
            if r.start_offset > offset:
                return r.start_offset if max_offset is None else min(max_offset, r.start_offset)
        return max_offset

    def _check_online(self) -> None:
        if self.offline:
            raise StorageError(f"log {self.dir.name} is offline")

    def _io_failed(self, exc: OSError, action: str) -> KafkaError:
        """Map an OSError: ENOSPC fails the operation only; anything else takes the log offline."""
        if exc.errno == errno.ENOSPC:
            return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{action} on {self.dir.name}: no space left on device")
        self.offline = True
        if self.on_io_error is not None:
            self.on_io_error(self, exc)
        return StorageError(f"{action} on {self.dir.name}: {exc}")

    # -- appending ------------------------------------------------------------------------------

    def inflates(self, records: Buffer) -> bool:
        """Would appending ``records`` decompress a batch? Every compressed data batch is: its inflated
        size is checked against max.message.bytes, and it is recompressed or its keys checked where
        the topic asks. Reads batch headers only: callers use it to move the append off their event
        loop (:meth:`prepare_append`)."""
        try:
            return any(h.attributes & 0x07 and not h.is_control for h, _ in iter_batches(records, validate=False))
        except KafkaError:
            return False

    def prepare_append(self, records: Buffer, *, now_ms: int, from_client: bool = True) -> PreparedAppend:
        """Validate ``records`` and recompress them to the topic's codec: the lock-free, CPU-bound half
        of an append, safe on any thread. Decompression is capped at max.message.bytes (Kafka's
        rule: a batch's records, once decompressed, must fit it), MESSAGE_TOO_LARGE past it."""
        config = self.config
        # Zero copy unless LogAppendTime must rewrite the batches: the new base offset and leader
        # epoch go into a 16-byte copy of each batch's start, written with the rest by one pwritev.
        buf = memoryview(bytearray(records) if config.log_append_time else records)
        if len(buf) > config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"{len(buf)} bytes exceed segment.bytes {config.segment_bytes}")
        headers = list(iter_batches(buf, validate=True, from_producer=from_client))
        if not headers:
            raise KafkaError(ErrorCode.INVALID_RECORD, "no record batch in the request")
        for header, position in headers:
            self._validate_batch(config, buf, header, position, now_ms, from_client)
        if config.target_compression is not None:
            buf, headers = self._recompressed(config, buf, headers, config.target_compression)
        return PreparedAppend(buf, headers, config, from_client, records)

    def append_as_leader(
        self, records: Buffer | PreparedAppend, *, leader_epoch: int, now_ms: int, from_client: bool = True
    ) -> AppendInfo:
        """Validate, assign offsets and write ``records`` (one or more v2 batches) as the leader.

        ``records`` may come from :meth:`prepare_append` (run on a worker thread); it is prepared
        again if the topic's config changed since. ``from_client=False`` is for the broker's own
        writes (transaction markers, coordinators): control batches are accepted and sequence checks
        skipped. Raises KafkaError with CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE,
        RECORD_LIST_TOO_LARGE, INVALID_TIMESTAMP, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH or
        KAFKA_STORAGE_ERROR; nothing is written then.
        """
        if isinstance(records, PreparedAppend):
            if records.config is not self.config or records.from_client != from_client:
                records = self.prepare_append(records.original, now_ms=now_ms, from_client=from_client)
        else:
            records = self.prepare_append(records, now_ms=now_ms, from_client=from_client)
        buf, headers = records.buf, records.headers
        with self._lock:
            self._check_online()
            pending: dict[int, tuple[int, int]] = {}
            for header, _ in headers:
                if header.has_producer_id and from_client and not header.is_control:
                    duplicate = self.producers.check(
                        header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                        pending,
                    )
                    if duplicate is not None:
                        return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1,
                                          self.log_start_offset, header.records_count, True,
                                          duplicate.timestamp, duplicate.first_offset, False)
                elif header.is_control and header.has_producer_id:
                    self.producers.check_marker_epoch(header.producer_id, header.producer_epoch)
            return self._assign_and_write(buf, headers, leader_epoch, now_ms)

    @staticmethod
    def _recompressed(
        config: LogConfig, buf: memoryview, headers: list[tuple[BatchHeader, int]], codec: Compression
    ) -> tuple[memoryview, list[tuple[BatchHeader, int]]]:
        """The batches with ``codec`` where the topic's compression.type names one (Kafka's LogValidator).

        Batches already in ``codec`` and control batches (never compressed, as in Kafka) are kept as
        they are; when every batch is, ``buf`` itself comes back (no copy). A rebuilt batch must still
        fit max.message.bytes (MESSAGE_TOO_LARGE, as Kafka answers a batch that grew).
        """
        if all(h.is_control or h.compression is codec for h, _ in headers):
            return buf, headers
        level = config.compression_level
        cap = config.max_message_bytes
        parts: list[Buffer] = []
        for header, position in headers:
            batch = buf[position : position + header.size]
            parts.append(batch if header.is_control or header.compression is codec
                         else recompress_batch(batch, codec, level, max_inflated=cap))
        rebuilt = memoryview(bytearray(b"".join(parts)))
        if len(rebuilt) > config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"{len(rebuilt)} bytes once compressed by {codec.name} exceed segment.bytes "
                             f"{config.segment_bytes}")
        new_headers = list(iter_batches(rebuilt, validate=False))
        for header, _ in new_headers:
            if header.size > cap:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"batch of {header.size} bytes once compressed by {codec.name} exceeds "
                                 f"max.message.bytes {cap}")
        return rebuilt, new_headers

    @staticmethod
    def _validate_batch(config: LogConfig, buf: memoryview, header: BatchHeader, position: int, now_ms: int,
                        from_client: bool) -> None:
        if header.size > config.max_message_bytes:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}")
        if header.is_control and from_client:
            raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
        batch = buf[position : position + header.size]
        cap = config.max_message_bytes
        check_timestamps = not config.log_append_time and from_client
        lowest = now_ms - config.message_timestamp_before_max_ms
        highest = now_ms + config.message_timestamp_after_max_ms
        # A record's timestamp delta may be negative: the header bounds every record only from above,
        # so a topic with a lower bound has its records' timestamps read.
        timestamps_out = check_timestamps and (
            header.max_timestamp > highest or header.base_timestamp < lowest
            or config.message_timestamp_before_max_ms < _UNBOUNDED_MS
        )
        if config.compact or timestamps_out:
            PartitionLog._validate_records(config, batch, timestamps_out, lowest, highest)
        if header.attributes & 0x07 and config.target_compression in (None, header.compression):
            # Kept as sent (compression.type=producer or the same codec): inflated under the cap (no
            # reader meets a bomb later) and its records' offset deltas checked, as Kafka's
            # LogValidator checks them; a batch to recompress is renumbered instead (recompress_batch).
            PartitionLog._check_inner_offsets(batch, cap)

    @staticmethod
    def _validate_records(config: LogConfig, batch: memoryview, check_timestamps: bool, lowest: int, highest: int) -> None:
        """Kafka's per-record checks, reported for every failing record (KIP-467): a null key on a
        compacted topic (INVALID_RECORD), a CreateTime timestamp outside [lowest, highest]
        (INVALID_TIMESTAMP, which wins for the partition). A record fails at most once, key first.
        The records are read under the ``max.message.bytes`` inflation cap."""
        failed: dict[int, str] = {}
        bad_time = False
        for index, (timestamp, keyless) in enumerate(record_stamps(batch, max_inflated=config.max_message_bytes)):
            if keyless and config.compact:
                failed[index] = "a compacted topic refuses records without a key"
            elif check_timestamps and timestamp != -1 and not lowest <= timestamp <= highest:
                bad_time = True
                failed[index] = f"timestamp {timestamp} is outside [{lowest}, {highest}]"
        if not failed:
            return
        errors = tuple(sorted(failed.items()))
        shown = "; ".join(f"record {i}: {why}" for i, why in errors[:3])
        if bad_time:
            raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                        f"{len(errors)} records refused for invalid timestamps ({shown})", errors)
        raise RecordValidationError(ErrorCode.INVALID_RECORD, f"{len(errors)} records refused ({shown})", errors)

    @staticmethod
    def _check_inner_offsets(batch: memoryview, cap: int) -> None:
        """Refuse a compressed batch kept as sent whose records' offset deltas do not run 0, 1, 2...,
        naming every record out of place (KIP-467). Kafka 4 fails such an append too, though by an
        internal error (UNKNOWN_SERVER_ERROR, no record named): it renumbers the records of a batch it
        keeps by rebuilding it, from records it read without their keys (docs/compat.md)."""
        misplaced = inner_offset_errors(batch, max_inflated=cap)
        if not misplaced:
            return
        errors = tuple((index, f"offset delta {delta} where {index} was expected: the records of a compressed "
                               "batch must have offset deltas 0, 1, 2...") for index, delta in misplaced)
        shown = "; ".join(f"record {index}: offset delta {delta}" for index, delta in misplaced[:3])
        raise RecordValidationError(ErrorCode.INVALID_RECORD,
                                    f"{len(errors)} records out of order in a compressed batch ({shown})", errors)

    def _assign_and_write(
        self, buf: memoryview, headers: list[tuple[BatchHeader, int]], leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        if self._roll_plan is not None:
            self._settle_roll()
        if len(headers) == 1 and not self.config.log_append_time:
            return self._assign_and_write_one(buf, headers, leader_epoch, now_ms)
        incoming_ts = now_ms if self.config.log_append_time else max(h.max_timestamp for h, _ in headers)
        self._maybe_roll(len(buf), sum(h.last_offset_delta + 1 for h, _ in headers), now_ms, incoming_ts)
        first = next_offset = self.log_end_offset
        append_time = now_ms if self.config.log_append_time else -1
        infos: list[BatchInfo] = []
        parts: list[Buffer] = []
        max_ts, max_ts_offset, count = -1, first, 0
        for header, position in headers:
            batch_ts = header.max_timestamp
            if append_time >= 0 and not header.is_control:
                set_log_append_time(buf, position, now_ms)
                batch_ts = now_ms
            head = bytearray(buf[position : position + _REWRITTEN])
            set_base_offset(head, 0, next_offset)
            if leader_epoch >= 0:
                set_partition_leader_epoch(head, 0, leader_epoch)
            parts.append(head)
            parts.append(buf[position + _REWRITTEN : position + header.size])
            last = next_offset + header.last_offset_delta
            infos.append(BatchInfo(position, header.size, next_offset, last, batch_ts))
            if batch_ts > max_ts:
                max_ts, max_ts_offset = batch_ts, next_offset
            count += header.records_count
            next_offset = last + 1
        self._write(parts, headers, infos, leader_epoch)
        needs_flush = self._note_appended(count, now_ms)
        return AppendInfo(first, next_offset - 1, append_time, self.log_start_offset, count, False,
                          max_ts, max_ts_offset, needs_flush)

    def _assign_and_write_one(
        self, buf: memoryview, headers: list[tuple[BatchHeader, int]], leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        """``_assign_and_write`` for the common case, one batch in CreateTime (a producer's request
        for one partition): the same steps without the loops. The batch is the whole buffer."""
        header = headers[0][0]
        size, max_ts = header.batch_length + LOG_OVERHEAD, header.max_timestamp
        self._maybe_roll(size, header.last_offset_delta + 1, now_ms, max_ts)
        first = self.log_end_offset
        last = first + header.last_offset_delta
        head = bytearray(buf[:_REWRITTEN])
        set_base_offset(head, 0, first)
        if leader_epoch >= 0:
            set_partition_leader_epoch(head, 0, leader_epoch)
        self._write([head, buf[_REWRITTEN:size]], headers, [BatchInfo(0, size, first, last, max_ts)], leader_epoch)
        count = header.records_count
        return AppendInfo(first, last, -1, self.log_start_offset, count, False, max_ts, first,
                          self._note_appended(count, now_ms))

    def _write(
        self, parts: list[Buffer], headers: list[tuple[BatchHeader, int]], infos: list[BatchInfo], leader_epoch: int
    ) -> None:
        """Write batches whose offsets are assigned, then update offsets, epochs and producer state."""
        seg = self.active_segment
        start_position = seg.size
        try:
            seg.append(parts, infos, self.config.index_interval_bytes)
        except OSError as exc:
            raise self._io_failed(exc, "append") from exc
        if leader_epoch >= 0:
            self.epoch_cache.assign(leader_epoch, infos[0].base_offset)
        for (header, _), info in zip(headers, infos, strict=True):
            if not header.has_producer_id:
                continue
            aborted = self._apply_producer(seg, header, start_position + info.position, info.base_offset)
            if aborted is not None:
                seg.txn_index.append(aborted)
        if self.hw_follows_leo:
            self._high_watermark = self.log_end_offset

    def last_data_offset(self, producer_id: int) -> int | None:
        """Last offset of the producer's newest data batch still remembered, or None (for the cleaner)."""
        with self._lock:
            entry = self.producers.producers.get(producer_id)
            return entry.batches[-1].last_offset if entry is not None and entry.batches else None

    def flush_due(self, now_ms: int) -> bool:
        """True when there are unflushed messages and ``flush.ms`` elapsed since the last flush."""
        return self._unflushed_messages > 0 and now_ms - self._last_flush_ms >= self.config.flush_ms

    def flush_owed(self, now_ms: int) -> bool:
        """True when the log's flush policy (``flush.messages``, ``flush.ms``) asks for an fsync now: what
        an append's ``needs_flush`` says, for writers that append without a client's request (the
        coordinators' records, transaction markers). Never with Kafka's defaults, which leave it to the OS."""
        unflushed = self._unflushed_messages
        return unflushed > 0 and (unflushed >= self.config.flush_messages
                                  or now_ms - self._last_flush_ms >= self.config.flush_ms)

    def _note_appended(self, count: int, now_ms: int) -> bool:
        self._unflushed_messages += count
        return (self._unflushed_messages >= self.config.flush_messages
                or now_ms - self._last_flush_ms >= self.config.flush_ms)

    def append_as_follower(self, records: Buffer, *, now_ms: int | None = None) -> AppendInfo:
        """Append batches whose offsets the leader assigned (replication); no producer checks.

        The first batch must start at or after the log end offset and offsets must increase.
        """
        buf = bytearray(records)
        headers = list(iter_batches(buf, validate=True))
        if not headers:
            raise KafkaError(ErrorCode.INVALID_RECORD, "no record batch to append")
        with self._lock:
            self._check_online()
            expected = self.log_end_offset
            for header, _ in headers:
                if header.base_offset < expected:
                    raise KafkaError(ErrorCode.INVALID_RECORD,
                                     f"follower batch at {header.base_offset} is below {expected}")
                expected = header.next_offset
            return self._append_at_offsets(buf, headers, None, _now_ms() if now_ms is None else now_ms)

    def append_at_source_offsets(
        self, records: Buffer, *, leader_epoch: int, now_ms: int, source_log_start: int = -1
    ) -> tuple[AppendInfo, int]:
        """Append a mirror's batches at the offsets they carry (``offsets=preserve``, source_offsets.py).

        As a follower append (no producer checks; producer state, the transaction index and the
        last stable offset follow every batch, control batches included), but the batches are
        stamped with this leader's ``leader_epoch``, as if it had written them: the source's epochs
        mean nothing here, and this cluster's followers truncate by this cluster's epochs. Batches
        wholly below the log end are duplicates, acknowledged and not written; a straddling batch or
        disordered offsets raise INVALID_RECORD. An empty log restarts where the source's log starts
        (``source_log_start``, or the first batch's offset when unknown or past it), so a source that
        starts at 1000 gives a destination that starts at 1000.
        Returns (what was appended, or the duplicates' span with ``duplicate`` set; duplicates).
        """
        buf = bytearray(records)
        headers = list(iter_batches(buf, validate=True))
        spans = [(h.base_offset, h.last_offset) for h, _ in headers]
        with self._lock:
            self._check_online()
            leo = self.log_end_offset
            decision = source_offsets.decide(spans, leo)
            if not decision.writes:
                return AppendInfo(spans[0][0], spans[-1][1], -1, self.log_start_offset,
                                  sum(h.records_count for h, _ in headers), True,
                                  -1, -1, False), decision.duplicates
            kept = headers[decision.duplicates:]
            restart = decision.first_offset if not 0 <= source_log_start <= decision.first_offset else source_log_start
            if decision.gap and self.log_start_offset == leo and restart > leo:
                self.truncate_fully_and_start_at(restart)
            for _, position in kept:
                set_partition_leader_epoch(buf, position, leader_epoch)
            start = kept[0][1]
            view = memoryview(buf)[start:]
            kept = [(h, p - start) for h, p in kept]
            return self._append_at_offsets(view, kept, leader_epoch, now_ms), decision.duplicates

    def _append_at_offsets(
        self, buf: Buffer, headers: list[tuple[BatchHeader, int]], leader_epoch: int | None, now: int
    ) -> AppendInfo:
        """Write ``buf`` (whole batches whose offsets are final, at or past the log end) under the lock.

        A gap in offsets stays inside the active segment (segments may skip offsets, as compacted
        ones do); a new segment starts at the first batch only when the active one is empty or the
        gap would overflow its relative offsets. ``leader_epoch`` None: each batch's own epoch goes
        to the leader-epoch cache (replication)."""
        if self._roll_plan is not None:
            self._settle_roll()
        first = headers[0][0].base_offset
        last_offset = headers[-1][0].last_offset
        active = self.active_segment
        if first > self.log_end_offset and (active.size == 0
                                            or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET):
            self.roll(now_ms=now, start_offset=first)
        else:
            span = last_offset + 1 - self.log_end_offset
            self._maybe_roll(len(buf), span, now, max(h.max_timestamp for h, _ in headers))
        infos = [BatchInfo(p, h.size, h.base_offset, h.last_offset, h.max_timestamp) for h, p in headers]
        seg = self.active_segment
        start_position = seg.size
        try:
            seg.append([buf], infos, self.config.index_interval_bytes)
        except OSError as exc:
            raise self._io_failed(exc, "append") from exc
        if leader_epoch is not None:
            self.epoch_cache.assign(leader_epoch, first)
        for header, position in headers:
            if leader_epoch is None:
                self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            aborted = self._apply_producer(seg, header, start_position + position)
            if aborted is not None:
                seg.txn_index.append(aborted)
        if self.hw_follows_leo:
            self._high_watermark = self.log_end_offset
        count = sum(h.records_count for h, _ in headers)
        max_h = max((h for h, _ in headers), key=lambda h: h.max_timestamp)
        return AppendInfo(first, last_offset, -1, self.log_start_offset, count, False,
                          max_h.max_timestamp, max_h.base_offset, self._note_appended(count, now))

    # -- rolling --------------------------------------------------------------------------------

    def _maybe_roll(self, size: int, offsets: int, now_ms: int, max_timestamp: int) -> None:
        """Roll before appending ``size`` bytes of ``offsets`` offsets whose max timestamp is ``max_timestamp``."""
        if self._roll_due(size, offsets, now_ms, max_timestamp):
            self.roll(now_ms=now_ms)

    def _roll_due(self, size: int, offsets: int, now_ms: int, max_timestamp: int) -> bool:
        seg = self.active_segment
        if seg.size == 0:
            return False
        if seg.roll_jitter_ms < 0:
            seg.roll_jitter_ms = self.config.random_segment_jitter()
        return (seg.size + size > self.config.segment_bytes
                or seg.index_full
                or seg.roll_due(now_ms, max_timestamp, self.config.segment_ms - seg.roll_jitter_ms)
                or self.log_end_offset + offsets - seg.base_offset > _MAX_RELATIVE_OFFSET)

    def would_roll(self, records: Buffer | PreparedAppend, now_ms: int) -> bool:
        """Would appending ``records`` as the leader roll the active segment first? Batch headers only,
        no validation (a bad batch answers False: the append refuses it). Callers roll ahead off their
        event loop (:meth:`begin_roll`); an append the estimate misses rolls inside itself, as before."""
        if not isinstance(records, PreparedAppend) and len(records) >= HEADER_SIZE:
            first = BatchHeader.parse(records)
            if first.size == len(records):  # one batch, the common request: one unpack, no list
                return self._would_roll(len(records), first.last_offset_delta + 1, now_ms, first.max_timestamp)
        if isinstance(records, PreparedAppend):
            size, headers = len(records.buf), records.headers
        else:
            try:
                size, headers = len(records), list(iter_batches(records, validate=False))
            except KafkaError:
                return False
        if not headers:
            return False
        offsets = sum(h.last_offset_delta + 1 for h, _ in headers)
        return self._would_roll(size, offsets, now_ms, max(h.max_timestamp for h, _ in headers))

    def _would_roll(self, size: int, offsets: int, now_ms: int, max_timestamp: int) -> bool:
        with self._lock:
            if self.offline or self._roll_plan is not None:
                return False
            max_ts = now_ms if self.config.log_append_time else max_timestamp
            return self._roll_due(size, offsets, now_ms, max_ts)

    @property
    def rolling(self) -> bool:
        """A roll is planned and its files not installed yet (appends settle it first)."""
        return self._roll_plan is not None

    def begin_roll(self, now_ms: int) -> RollPlan | None:
        """Plan a roll at the log end offset, making no system call (roll_plan.py, step 1); the caller
        hands the plan to :meth:`complete_roll` on another thread. None when the active segment is
        empty, a roll is already planned, or the log is offline."""
        with self._lock:
            seg = self.active_segment
            if self.offline or self._roll_plan is not None or seg.size == 0:
                return None
            self._roll_plan = RollPlan(self.dir, seg, self.log_end_offset, self.config.segment_index_bytes, now_ms)
            return self._roll_plan

    def complete_roll(self, plan: RollPlan, *, write_snapshot: bool = True) -> None:
        """Make a planned roll's files (no lock held), install them (under the lock) and write its
        snapshot (roll_plan.py, steps 2 and 3; ``write_snapshot=False`` leaves that to a later
        :meth:`write_pending_snapshots`, so the partition's next append need not wait for its
        fsyncs). A plan another thread settled meanwhile needs nothing more here. Raises what the
        roll's disk work raised (KAFKA_STORAGE_ERROR)."""
        if plan.claim():
            plan.make_files()
        with self._lock:
            if self._roll_plan is plan:
                self._settle_roll()
        if write_snapshot:
            self.write_pending_snapshots()

    def _settle_roll(self) -> None:
        """Under the lock: finish the planned roll, if any, before the log is written or cut."""
        plan = self._roll_plan
        if plan is None:
            return
        self._roll_plan = None
        plan.settle_files()  # the maker (if another thread) holds no lock: waiting cannot deadlock
        if self.offline:
            plan.discard()
            return
        if self.active_segment is not plan.old or self.log_end_offset != plan.base:
            # Cannot happen while every write settles the plan first; never install a wrong base.
            log.error("%s-%d: a planned roll at %d no longer fits the log (end %d): dropped", self.topic,
                      self.partition, plan.base, self.log_end_offset)
            if plan.base not in self._bases:
                plan.discard()
            return
        self._install(plan, inline=False)

    def roll(self, *, now_ms: int | None = None, start_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty), in
        this thread: the segment's files, and the snapshot written as ``on_roll_snapshot`` says."""
        with self._lock:
            self._check_online()
            self._settle_roll()
            seg = self.active_segment
            base = self.log_end_offset if start_offset is None else start_offset
            if seg.size == 0 and start_offset is None:
                return seg
            now = _now_ms() if now_ms is None else now_ms
            plan = RollPlan(self.dir, seg, base, self.config.segment_index_bytes, now)
            plan.settle_files()
            return self._install(plan, inline=True)

    def _install(self, plan: RollPlan, *, inline: bool) -> LogSegment:
        """Under the lock: seal the old segment and make the plan's segment the active one. ``inline``:
        the snapshot is written here (its fsyncs as ``on_roll_snapshot`` says); else it is queued for
        :meth:`write_pending_snapshots`."""
        seg, new = plan.old, plan.new
        if plan.error is not None or new is None:
            error = plan.error or OSError(errno.EIO, "roll made no segment")
            raise self._io_failed(error, "roll") from error
        try:
            seg.seal()
            seg.write_indexes()
            self.producers.map_end_offset = self.log_end_offset
            if inline:
                deferred = self.on_roll_snapshot is not None
                snapshot = self.producers.take_snapshot(durable=not deferred)
                if deferred:
                    self._unsynced_snapshots.append(snapshot)
            else:
                path = self.dir / snapshot_name(self.producers.map_end_offset)
                self._pending_snapshots.append(PendingSnapshot(path, self.producers.encode(), self.snapshot_epoch))
            if seg.size == 0:
                self._segments.pop()
                self._bases.pop()
                seg.delete_files()
        except OSError as exc:
            plan.discard()
            raise self._io_failed(exc, "roll") from exc
        self._add_segment(new)
        if inline and self.on_roll_snapshot is not None and not self.on_roll_snapshot(self):
            self.sync_snapshots()
        return new

    def _rewind_snapshots(self) -> None:
        """Under the lock, before producer state is rewound (truncation): snapshots encoded for the
        history being cut must never be written."""
        self.snapshot_epoch += 1
        self._pending_snapshots.clear()

    def write_pending_snapshots(self) -> None:
        """Write the snapshots of rolls installed by :meth:`complete_roll` (roll_plan.py, step 3): each
        to ``.tmp`` and fsynced without the lock, renamed into place under it unless a truncation
        voided it meanwhile, then the directory fsynced. Safe from any thread, never on the event loop."""
        with self._lock:
            pending, self._pending_snapshots = self._pending_snapshots, []
        if not pending:
            return
        try:
            for snapshot in pending:
                tmp = write_snapshot_tmp(snapshot)
                with self._lock:
                    if snapshot.epoch == self.snapshot_epoch and not self.offline:
                        os.replace(tmp, snapshot.path)
                    else:
                        tmp.unlink(missing_ok=True)
            fsync_dir(self.dir)
        except FileNotFoundError:
            return  # the partition was deleted (its directory renamed away)
        except OSError as exc:
            with self._lock:
                raise self._io_failed(exc, "snapshot write") from exc

    def sync_snapshots(self) -> None:
        """Make durable the snapshots rolls wrote without fsync: each file, then the partition's
        directory (their names). Safe from any thread; the lock is held only to take the list. A
        snapshot deleted meanwhile (truncation, retention, the partition deleted) needs nothing."""
        with self._lock:
            if self.offline:
                return
            pending, self._unsynced_snapshots = self._unsynced_snapshots, []
        if not pending:
            return
        try:
            for path in pending:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            try:
                fsync_dir(self.dir)
            except FileNotFoundError:
                return  # the partition was deleted (its directory renamed away)
        except OSError as exc:
            with self._lock:
                raise self._io_failed(exc, "snapshot sync") from exc

    # -- reading --------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True,
        isolation_committed: bool = False,
    ) -> FetchData:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but one batch at least
        when ``min_one_batch``), none reaching ``max_offset`` (exclusive: the HW or the LSO).

        OFFSET_OUT_OF_RANGE when ``offset`` is below the log start or above the log end; at the log
        end the answer is empty. With ``isolation_committed`` the aborted transactions overlapping
        the range are listed in ``FetchData.aborted``.
        """
        with self._lock:
            self._check_online()
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"offset {offset} outside [{self.log_start_offset}, {leo}]")
            if self._damaged:
                max_offset = self._damage_bound(offset, max_offset)
            if offset == leo or (max_offset is not None and offset >= max_offset):
                # Nothing to read (a consumer at the tail, waiting for the next append): no file access.
                return FetchData([], self._high_watermark, self.log_start_offset, leo, self.last_stable_offset,
                                 offset, holders=[])
            ranges: list[tuple[int, int, int]] = []
            holders: list[object] = []
            remaining = max_bytes
            position_offset = offset
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            try:
                for seg in self._segments[i:]:
                    if remaining <= 0 and not (min_one_batch and not ranges):
                        break
                    pos, length, nxt = seg.read_range(position_offset, remaining, max_offset,
                                                      min_one_batch and not ranges)
                    if length:
                        ranges.append((seg.fd, pos, length))
                        holders.append(seg)
                        remaining -= length
                    position_offset = nxt
                    if position_offset < seg.next_offset:
                        break  # a batch of this segment was left out: never skip over it
                    if max_offset is not None and position_offset >= max_offset:
                        break
            except OSError as exc:
                raise self._io_failed(exc, "read") from exc
            data = FetchData(ranges, self._high_watermark, self.log_start_offset, leo, self.last_stable_offset,
                             position_offset, holders=holders)
            if isolation_committed and ranges:
                data.aborted = self.aborted_transactions(offset, position_offset)
            return data

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, end)."""
        with self._lock:
            out: list[AbortedTxn] = []
            i = max(0, bisect.bisect_right(self._bases, start) - 1)
            for seg in self._segments[i:]:
                out.extend(seg.txn_index.collect(start, end))
            return out

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record with timestamp >= ``timestamp``."""
        with self._lock:
            self._check_online()
            for seg in self._segments:
                if seg.max_timestamp < timestamp or seg.next_offset <= self.log_start_offset:
                    continue
                start = max(seg.time_index.lookup(timestamp)[1], self.log_start_offset)
                for position, header in seg.batches_from(start):
                    if header.max_timestamp < timestamp:
                        continue
                    for offset, ts in self._timestamps(seg, position, header):
                        if ts >= timestamp and offset >= self.log_start_offset:
                            return offset, ts, header.partition_leader_epoch
            return None

    def max_timestamp_offset(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the record with the largest timestamp (ListOffsets -3)."""
        with self._lock:
            self._check_online()
            candidates = [s for s in self._segments if s.size and s.next_offset > self.log_start_offset]
            if not candidates:
                return None
            seg = max(reversed(candidates), key=lambda s: s.max_timestamp)
            target = seg.max_timestamp
            start = max(seg.time_index.lookup(target)[1], self.log_start_offset, seg.base_offset)
            best: tuple[int, int, int] | None = None
            for position, header in seg.batches_from(start):
                if header.max_timestamp != target:
                    continue
                for offset, ts in self._timestamps(seg, position, header):
                    if best is None or ts > best[1]:
                        best = (offset, ts, header.partition_leader_epoch)
            return best

    def begin_leader_epoch(self, epoch: int) -> None:
        """This broker leads from now on in ``epoch``: record the epoch's start offset (the log end).

        OffsetForLeaderEpoch then answers followers with where this leader's history begins, even
        before anything was appended in the epoch (Kafka's makeLeader does the same)."""
        with self._lock:
            self.epoch_cache.assign(epoch, self.log_end_offset)
            self.epoch_cache.flush()

    def _timestamps(self, seg: LogSegment, position: int, header: BatchHeader) -> list[tuple[int, int]]:
        """(offset, timestamp) of each record of a batch, decompressed under max.message.bytes.

        A batch stored as the producer sent it (``compression.type=producer``) may inflate past that
        cap; it then answers for itself with its first offset and its max timestamp, rather than being
        inflated whole to find the exact record.
        """
        try:
            records = decode_records(seg.read_at(position, header.size), max_inflated=self.config.max_message_bytes)
        except InflatedTooLarge:
            return [(header.base_offset, header.max_timestamp)]
        return [(r.offset, r.timestamp) for r in records]

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers; (-1, -1) when unknown."""
        with self._lock:
            return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- truncation and deletion ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch at or after ``offset`` (replication); return the new log end offset.

        A batch straddling ``offset`` goes too. Below the log start the log is emptied and restarts
        at ``offset``.
        """
        with self._lock:
            self._check_online()
            if offset >= self.log_end_offset:
                return self.log_end_offset
            if offset < self.log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return offset
            self._settle_roll()
            self._rewind_snapshots()
            try:
                while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                    self._bases.pop()
                    self._retire(self._segments.pop(), _now_ms())
                self.active_segment.truncate_to(offset)
            except OSError as exc:
                raise self._io_failed(exc, "truncate") from exc
            leo = self.log_end_offset
            # A batch holding the log start offset went (it straddled ``offset``): the log start may
            # not stay above the end. Nothing below it becomes readable: [leo, leo) is empty.
            self.log_start_offset = min(self.log_start_offset, leo)
            self.epoch_cache.truncate_from_end(leo)
            self._high_watermark = min(self._high_watermark, leo)
            self.recovery_point = min(self.recovery_point, leo)
            self.producers.delete_snapshots(above=leo)
            self._rebuild_producer_state(leo)
            self._prune_damage()
            return leo

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset``."""
        with self._lock:
            self._settle_roll()
            self._rewind_snapshots()
            try:
                for seg in self._segments:
                    self._retire(seg, _now_ms())
                self._segments.clear()
                self._bases.clear()
                self._add_segment(LogSegment(self.dir, offset, self.config.segment_index_bytes, load=False,
                                             now_ms=_now_ms()))
            except OSError as exc:
                raise self._io_failed(exc, "truncate") from exc
            self.log_start_offset = self.recovery_point = self._high_watermark = offset
            self.epoch_cache.clear()
            self.producers.delete_snapshots(above=-1)
            self.producers.reset(offset)
            self._prune_damage()

    def delete_records_before(self, offset: int, *, now_ms: int | None = None) -> int:
        """DeleteRecords: move the log start offset up to ``offset``; return the new log start.

        Whole segments below the new start are removed (deferred deletion). OFFSET_OUT_OF_RANGE when
        ``offset`` is above the high watermark.
        """
        with self._lock:
            self._check_online()
            if offset > self._high_watermark:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"offset {offset} is above the high watermark {self._high_watermark}")
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self.epoch_cache.truncate_from_start(offset)
                self._delete_prefix(lambda seg, _next: seg.next_offset <= offset and seg is not self.active_segment,
                                    _now_ms() if now_ms is None else now_ms)
            return self.log_start_offset

    def _delete_prefix(self, doomed: Callable[[LogSegment, LogSegment | None], bool], now_ms: int) -> int:
        """Remove the longest run of oldest non-active segments for which ``doomed`` holds."""
        count = 0
        while len(self._segments) > 1 and doomed(self._segments[0], self._segments[1]):
            self._bases.pop(0)
            self._retire(self._segments.pop(0), now_ms)
            count += 1
        if count:
            self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            self.producers.delete_snapshots(below=self._segments[0].base_offset)
            self._prune_damage()
        return count

    def _retire(self, seg: LogSegment, now_ms: int) -> None:
        """Rename a segment removed from the log ``.deleted``; delete it after file.delete.delay.ms."""
        try:
            seg.write_indexes()
            seg.mark_deleted()
        except OSError as exc:
            raise self._io_failed(exc, "delete segment") from exc
        self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))

    def apply_retention(self, now_ms: int) -> int:
        """Delete old non-active segments by ``retention.ms``, ``retention.bytes`` and log start.

        Returns how many segments were removed (their files go after ``file.delete.delay.ms``).
        """
        with self._lock:
            if self.offline:
                return 0
            removed = self._delete_prefix(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                                          now_ms)
            if not self.config.delete:
                return removed
            retention_ms = self.config.retention_ms
            if retention_ms >= 0:
                removed += self._delete_prefix(lambda seg, _n: now_ms - self._segment_time(seg) > retention_ms,
                                               now_ms)
            limit = self.config.retention_bytes
            if limit >= 0:
                excess = sum(seg.size for seg in self._segments) - limit

                def over(seg: LogSegment, _n: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True

                removed += self._delete_prefix(over, now_ms)
            return removed

    @staticmethod
    def _segment_time(seg: LogSegment) -> int:
        if seg.max_timestamp >= 0:
            return seg.max_timestamp
        return int(os.fstat(seg.fd).st_mtime * 1000)

    def delete_expired_files(self, now_ms: int, *, force: bool = False) -> int:
        """Delete ``.deleted`` segment files whose delay passed; return how many segments went."""
        with self._lock:
            due = [(t, s) for t, s in self._pending_deletes if force or t <= now_ms]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if not (force or t <= now_ms)]
        for _, seg in due:
            try:
                seg.delete_files()
            except OSError:
                continue
        return len(due)

    def remove_expired_producers(self, now_ms: int) -> int:
        with self._lock:
            return self.producers.remove_expired(now_ms)

    # -- durability -----------------------------------------------------------------------------

    def flush(self, now_ms: int | None = None) -> int:
        """fsync everything appended so far; return the new recovery point.

        Safe from any thread; the lock is held only to collect segments and advance the recovery
        point, never during fsync.
        """
        self.write_pending_snapshots()
        self.sync_snapshots()  # Kafka's order: a roll's snapshot is durable before the segments it follows
        with self._lock:
            self._check_online()
            target = self.log_end_offset
            i = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
            dirty = self._segments[i:]
            for seg in dirty:
                seg.write_indexes()
            self._unflushed_messages = 0
            self._last_flush_ms = _now_ms() if now_ms is None else now_ms
        try:
            for seg in dirty:
                if seg.fd >= 0 and not seg.deleted:
                    seg.fsync()
        except OSError as exc:
            with self._lock:
                raise self._io_failed(exc, "flush") from exc
        with self._lock:
            self.epoch_cache.flush()  # durable before the recovery point passes its newest entry
            self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
            return self.recovery_point

    def close(self, *, clean: bool = True) -> None:
        """Write indexes and (when ``clean``) fsync and snapshot producer state; release files."""
        with self._lock:
            if self.offline or not clean:
                self._pending_snapshots.clear()  # an unclean close keeps what the disk has, as a crash would
                plan, self._roll_plan = self._roll_plan, None
                if plan is not None:
                    plan.settle_files()
                    plan.discard()
            else:
                self._settle_roll()
            if clean and not self.offline:
                self.flush()
                self.active_segment.seal()
                self.producers.map_end_offset = self.log_end_offset
                self.producers.take_snapshot()
            for seg in self._segments:
                try:
                    seg.close()
                except OSError:
                    continue
            self.delete_expired_files(0, force=True)

    def snapshot_files(self) -> list[Path]:
        return sorted(self.dir.glob("*" + SNAPSHOT_SUFFIX))
