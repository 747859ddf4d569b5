"""The scrubber: re-reads closed segments in the background and checks every batch's framing and CRC.

Why: recovery after a crash checks only the segments above the recovery point, and a fetch sends
segment bytes as they are (sendfile), so bytes that rot below the recovery point (a bad sector, a
stray write) would reach consumers as garbage records. The scrubber finds them first and records a
:class:`~tidelog.storage.damage.DamagedRange`; the log then answers CORRUPT_MESSAGE for its offsets,
and in a cluster a follower repairs it from the leader (replication/fetcher.py).

What is checked, per batch, in closed segments only (never the active one, which is being written):
the length framing (a batch ends inside the segment, its length is not below the header), magic 2,
the CRC-32C, the record count against the offset delta, and that base offsets increase. After a bad
batch the scrubber resynchronises: first on the position its length field claims, then byte by byte
on the next position holding a valid batch whose offsets fit between the last good batch and the next
segment; failing both, the damage runs to the segment's end.

Pace: every read goes through a :class:`RateLimiter` (``log.scrubber.bytes.per.second``, default
10 MiB/s), in windows of 1 MiB, one partition's segment at a time, so the disk and the CPU see a low,
steady load. Each partition has a *pass*: starting from its log start, every closed segment is
verified once; then the partition rests until ``log.scrubber.interval.ms`` after the pass began, and
a new pass starts from the log start again. A segment that closes during the rest is verified at once
(the cursor simply has new segments ahead of it). An idle broker whose passes are done only compares
a few integers per partition every few seconds.

Checkpoint, per log dir, ``scrubber-checkpoint`` (the checkpoint format of checkpoint.py, written at
most every 10 s while scrubbing, after each finished pass and at stop)::

    0                      <- version
    2                      <- entries
    orders 0 1718000000000 5300
    orders 1 1718000450000 0
    ^      ^ ^             ^ cursor: every closed segment's batches below this offset were verified in this pass
    |      | pass started at (epoch ms)
    topic  partition

A restart resumes each partition's pass at its cursor (at the batch holding it, found through the
offset index, so a segment rewritten by the cleaner meanwhile is resumed correctly). A partition
missing from the file starts a pass at once.

Thread-safety: one scrubber thread; it holds a partition's lock only to list segments and to record
damage (re-checking the bytes under the lock, so a truncation racing with the scan is never reported
as damage). Reads use ``pread`` on the segment's descriptor, which stays valid while the scrubber
holds the segment object, even if the log removes the segment meanwhile.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidelog.common.errors import KafkaError
from tidelog.protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, scan_valid_prefix
from tidelog.storage.checkpoint import CheckpointError, read_entries, write_entries
from tidelog.storage.damage import DamagedRange
from tidelog.storage.log import PartitionLog
from tidelog.storage.segment import LogSegment

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "scrubber-checkpoint"
WINDOW = 1024 * 1024
_MIN_BATCH_CAP = 16 * 1024 * 1024  # a length field claiming more than this (and max.message.bytes) is damage
_CHECKPOINT_EVERY_S = 10.0
_IDLE_POLL_S = 5.0
_MAGIC_AT = 16


def _now_ms() -> int:
    return int(time.time() * 1000)


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return True


class RateLimiter:
    """Paces reads to ``bytes_per_second`` on average: a read of n bytes may start at once, and the next
    one waits until n / rate seconds after it. No credit is saved while idle, so a scrubber that rested
    does not burst. ``sleep(seconds)`` returns False when the wait was interrupted (the broker stops)."""

    def __init__(self, bytes_per_second: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], bool] | None = None) -> None:
        if bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be positive")
        self.rate = bytes_per_second
        self.clock = clock
        self.sleep = sleep or _sleep
        self._next = float("-inf")

    def acquire(self, n: int) -> bool:
        now = self.clock()
        start = max(self._next, now)
        self._next = start + n / self.rate
        return self.sleep(start - now) if start > now else True


@dataclass
class Cursor:
    """One partition's progress: the pass began at ``pass_start_ms``; closed segments are verified below ``offset``."""

    pass_start_ms: int
    offset: int


class _Stopped(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Found:
    """A damaged run of bytes, and where the scan resumed after it."""

    position: int
    length: int
    first_offset: int
    last_offset: int
    kind: str
    resume_at: int
    resume_offset: int


def read_cursors(log_dir: Path) -> dict[tuple[str, int], Cursor]:
    out: dict[tuple[str, int], Cursor] = {}
    for topic, partition, started, offset in read_entries(log_dir / CHECKPOINT_FILE, 4):
        try:
            out[(topic, int(partition))] = Cursor(int(started), int(offset))
        except ValueError:
            raise CheckpointError(f"{log_dir / CHECKPOINT_FILE}: bad entry {topic} {partition}") from None
    return out


def write_cursors(log_dir: Path, cursors: dict[tuple[str, int], Cursor]) -> None:
    write_entries(log_dir / CHECKPOINT_FILE,
                  ((t, p, c.pass_start_ms, c.offset) for (t, p), c in sorted(cursors.items())))


class SegmentScan:
    """Verifies one closed segment from a batch boundary, reading through the limiter."""

    def __init__(self, seg: LogSegment, next_base: int, limiter: RateLimiter, batch_cap: int) -> None:
        self.seg = seg
        self.end = seg.size
        self.next_base = next_base
        self.limiter = limiter
        self.batch_cap = batch_cap
        self.bytes_read = 0

    def _read(self, position: int, length: int) -> bytes:
        if not self.limiter.acquire(length):
            raise _Stopped
        data = os.pread(self.seg.fd, length, position)
        self.bytes_read += len(data)
        return data

    def run(self, position: int, expected: int, on_progress: Callable[[int], None]) -> list[Found]:
        """Scan from ``position`` (a batch boundary whose batch starts at or after offset ``expected``)
        to the segment's end; return the damage found. ``on_progress(offset)`` is called with the
        offset verified up to after each window."""
        found: list[Found] = []
        while position < self.end:
            data = self._read(position, min(WINDOW, self.end - position))
            result = scan_valid_prefix(data)
            good = 0
            for header, _ in result.batches:
                if header.base_offset < expected:
                    break
                expected = header.next_offset
                good += 1
            if good < len(result.batches):
                bad_at, kind = position + result.batches[good][1], "offset-order"
            else:
                position += result.valid_bytes
                if result.error is None:
                    on_progress(expected)
                    continue
                size = self._cut_by_window(position, data, result.valid_bytes)
                if size and result.valid_bytes:
                    on_progress(expected)
                    continue  # the next window starts with that batch
                alone = self._alone(position, size, expected) if size else None
                if alone is not None:
                    position, expected = position + alone.size, alone.next_offset
                    on_progress(expected)
                    continue
                bad_at, kind = position, self._kind(data, result.valid_bytes)
            damage = self._damage(bad_at, expected, kind)
            found.append(damage)
            position, expected = damage.resume_at, damage.resume_offset
            on_progress(expected)
        return found

    def _cut_by_window(self, position: int, data: bytes, at: int) -> int:
        """The size of the batch at ``position`` (``at`` in ``data``) when it only runs past the window,
        not past the segment (0 otherwise: the batch is damaged)."""
        head = data[at:at + HEADER_SIZE]
        if len(head) < HEADER_SIZE:
            head = self.seg.read_at(position, HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                return 0
        header = BatchHeader.parse(head)
        size = header.size
        if header.magic != 2 or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            return 0
        return size if len(data) - at < size and position + size <= self.end and size <= self.batch_cap else 0

    def _alone(self, position: int, size: int, expected: int) -> BatchHeader | None:
        """A batch larger than a window, verified on its own."""
        result = scan_valid_prefix(self._read(position, size))
        if result.error is not None or not result.batches or result.batches[0][0].base_offset < expected:
            return None
        return result.batches[0][0]

    @staticmethod
    def _kind(data: bytes, at: int) -> str:
        result = scan_valid_prefix(data[at:])
        message = str(result.error) if result.error is not None else ""
        return "crc-mismatch" if "CRC" in message else "bad-framing"

    def _damage(self, bad_at: int, expected: int, kind: str) -> Found:
        resync = self._resync(bad_at, expected)
        if resync is None:
            return Found(bad_at, self.end - bad_at, expected, max(expected, self.next_base - 1), kind,
                         self.end, self.next_base)
        at, header = resync
        return Found(bad_at, at - bad_at, expected, max(expected, header.base_offset - 1), kind, at, header.base_offset)

    def _resync(self, bad_at: int, expected: int) -> tuple[int, BatchHeader] | None:
        """The first position after ``bad_at`` holding a valid batch whose offsets lie in
        [``expected``, next segment base): the claimed length first, then byte by byte."""
        head = self.seg.read_at(bad_at, HEADER_SIZE)
        if len(head) == HEADER_SIZE:
            claimed = bad_at + BatchHeader.parse(head).size
            header = self._valid_at(claimed, expected) if bad_at < claimed < self.end else None
            if header is not None:
                return claimed, header
        position = bad_at + 1
        while position + HEADER_SIZE <= self.end:
            window = self._read(position, min(WINDOW, self.end - position))
            at = window.find(b"\x02", _MAGIC_AT)
            while at >= 0:
                candidate = position + at - _MAGIC_AT
                header = self._valid_at(candidate, expected)
                if header is not None:
                    return candidate, header
                at = window.find(b"\x02", at + 1)
            position += max(1, len(window) - HEADER_SIZE)
        return None

    def _valid_at(self, position: int, expected: int) -> BatchHeader | None:
        head = self.seg.read_at(position, HEADER_SIZE)
        if len(head) < HEADER_SIZE:
            return None
        header = BatchHeader.parse(head)
        if (header.magic != 2 or header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > self.end
                or header.size > self.batch_cap or not expected <= header.base_offset < self.next_base):
            return None
        result = scan_valid_prefix(self.seg.read_at(position, header.size))
        return header if result.error is None and result.batches else None


def still_damaged(seg: LogSegment, position: int, length: int, kind: str) -> bool:
    """Whether the bytes at ``position`` still fail the checks (called under the log's lock). Batches out
    of offset order are valid on their own: only the segment check of ``record_damage`` applies."""
    if kind == "offset-order":
        return True
    data = seg.read_at(position, length)
    result = scan_valid_prefix(data)
    return len(data) < length or result.error is not None or result.valid_bytes < length


class Scrubber:
    """The scrubber thread's work over the logs a :class:`~tidelog.storage.manager.LogManager` lists."""

    def __init__(
        self, logs: Callable[[], list[tuple[Path, PartitionLog]]], *, bytes_per_second: int, interval_ms: int,
        stop: threading.Event, clock_ms: Callable[[], int] = _now_ms, limiter: RateLimiter | None = None,
    ) -> None:
        self.logs = logs
        self.interval_ms = interval_ms
        self.stop_event = stop
        self.clock_ms = clock_ms
        self.limiter = limiter or RateLimiter(bytes_per_second, sleep=lambda s: not stop.wait(s))
        self.cursors: dict[Path, dict[tuple[str, int], Cursor]] = {}
        self.verified_bytes = 0
        self.damage_found = 0
        self._dirty: set[Path] = set()
        self._last_saved = time.monotonic()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                worked = self.run_once()
            except _Stopped:
                break
            except Exception:
                log.exception("scrubber pass failed")
                worked = False
            if not worked and self.stop_event.wait(min(_IDLE_POLL_S, self.interval_ms / 1000)):
                break
        self.save()

    def run_once(self) -> bool:
        """Verify the next closed segment of each partition that has one due; True if any was read."""
        worked = False
        for log_dir, plog in self.logs():
            if self.stop_event.is_set():
                break
            if not plog.offline:
                worked |= self._step(log_dir, plog)
        if self._dirty and (not worked or time.monotonic() - self._last_saved >= _CHECKPOINT_EVERY_S):
            self.save()
        return worked

    def _cursor(self, log_dir: Path, plog: PartitionLog) -> Cursor:
        by_dir = self.cursors.get(log_dir)
        if by_dir is None:
            try:
                by_dir = read_cursors(log_dir)
            except CheckpointError as exc:
                log.warning("ignoring unreadable %s: %s", log_dir / CHECKPOINT_FILE, exc)
                by_dir = {}
            self.cursors[log_dir] = by_dir
        key = (plog.topic, plog.partition)
        cursor = by_dir.get(key)
        if cursor is None:
            cursor = by_dir[key] = Cursor(self.clock_ms(), plog.log_start_offset)
            self._dirty.add(log_dir)
        return cursor

    def _step(self, log_dir: Path, plog: PartitionLog) -> bool:
        cursor = self._cursor(log_dir, plog)
        segments = plog.segments_snapshot()
        closed = segments[:-1]
        cursor.offset = max(cursor.offset, plog.log_start_offset)
        if not closed or cursor.offset >= closed[-1].next_offset or cursor.offset >= segments[-1].base_offset:
            if self.clock_ms() - cursor.pass_start_ms < self.interval_ms:
                return False
            cursor.pass_start_ms, cursor.offset = self.clock_ms(), plog.log_start_offset
            self._dirty.add(log_dir)
            if not closed:
                return False
        for i, seg in enumerate(closed):
            if seg.next_offset > cursor.offset:
                self._scan(log_dir, plog, seg, segments[i + 1].base_offset, cursor)
                return True
        return False

    def _scan(self, log_dir: Path, plog: PartitionLog, seg: LogSegment, next_base: int, cursor: Cursor) -> None:
        start = seg.find(cursor.offset) if cursor.offset > seg.base_offset else None
        position, expected = (start[0], start[1].base_offset) if start is not None else (0, seg.base_offset)
        cap = max(plog.config.max_message_bytes + LOG_OVERHEAD, _MIN_BATCH_CAP)
        scan = SegmentScan(seg, next_base, self.limiter, cap)

        def progress(offset: int) -> None:
            cursor.offset = max(cursor.offset, offset)
            self._dirty.add(log_dir)

        try:
            damage = scan.run(position, expected, progress)
        except OSError as exc:  # the segment went away (closed at shutdown, deleted): try again later
            log.debug("scrubbing %s of %s-%d stopped: %s", seg.log_path.name, plog.topic, plog.partition, exc)
            return
        finally:
            self.verified_bytes += scan.bytes_read
        cursor.offset = max(cursor.offset, next_base)
        for d in damage:
            self._record(plog, seg, DamagedRange(d.first_offset, d.last_offset, seg.base_offset, d.position, d.length,
                                                 self.clock_ms(), d.kind))

    def _record(self, plog: PartitionLog, seg: LogSegment, found: DamagedRange) -> None:
        try:
            recorded = plog.record_damage(seg, found, lambda: still_damaged(seg, found.position, found.length, found.kind))
        except (KafkaError, OSError) as exc:
            log.warning("could not record damage in %s-%d: %s", plog.topic, plog.partition, exc)
            return
        if recorded:
            self.damage_found += 1
            log.error("scrubber: %s-%d is damaged: %s; fetches of these offsets answer CORRUPT_MESSAGE",
                      plog.topic, plog.partition, found.describe())

    def save(self) -> None:
        for log_dir in list(self._dirty):
            live = {(pl.topic, pl.partition) for d, pl in self.logs() if d == log_dir}
            cursors = {k: c for k, c in self.cursors.get(log_dir, {}).items() if k in live}
            try:
                write_cursors(log_dir, cursors)
            except OSError as exc:
                log.warning("could not write %s: %s", log_dir / CHECKPOINT_FILE, exc)
                continue
            self._dirty.discard(log_dir)
        self._last_saved = time.monotonic()
