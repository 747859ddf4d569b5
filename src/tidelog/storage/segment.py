"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``.

``<base>`` is the offset of the segment's first batch as 20 zero-padded digits, e.g.
``00000000000000001200.log``. The ``.log`` file is record batches (magic 2, see
:mod:`tidelog.protocol.records`) concatenated exactly as they are served to consumers, in offset order,
with offsets already assigned; nothing else: no header, no padding. The index formats are in
:mod:`tidelog.storage.index` and :mod:`tidelog.storage.txn_index`.

A segment that the log removed is renamed with a ``.deleted`` suffix on every file and deleted later
(its file descriptor stays open until then so that a read in flight can finish).

Write path: :meth:`LogSegment.append` writes a buffer of whole batches at the end of the file with
``pwrite`` (one call unless the kernel writes short) and, if a write fails midway (ENOSPC, EIO), cuts
the file back to its previous size so that no partial batch ever becomes visible.

Finding an offset: the offset index has one entry per ``index.interval.bytes`` (4 KiB); from the
entry the batch headers are walked. For the batches after the last index entry (at most one interval
of them, and the end of the log where tail consumers read) the segment also keeps their base and
last offsets and positions in memory (``_tail_bases``, ``_tail_last``, ``_tail_positions``), so a
consumer at the tail finds its batch with one bisect instead of walking up to an interval of
headers. Those lists always describe contiguous batches that end at the segment's end; anything that
rewrites the tail (recovery, truncation, loading) rebuilds them.

Thread-safety: none of its own; :class:`~tidelog.storage.log.PartitionLog` serialises writers under
its lock. ``pread`` on the fd is safe from any thread.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from tidelog.protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, scan_valid_prefix
from tidelog.storage.index import IndexCorrupt, OffsetIndex, TimeIndex
from tidelog.storage.txn_index import TxnIndex

DELETED_SUFFIX = ".deleted"
_SHALLOW = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta, bytes 23-26 of a batch header
_LAST_DELTA_END = 27
_RECOVERY_WINDOW = 32 * 1024 * 1024
_IOV_MAX = 1024
# Small batches' headers are read through a window of this many bytes: one pread serves every header
# in it. It covers a whole index interval (index.interval.bytes, 4 KiB by default) with room to spare,
# so finding an offset from its index entry is one or two preads instead of one per batch.
_SCAN_WINDOW = 16 * 1024
Buffer = bytes | bytearray | memoryview


def file_stem(offset: int) -> str:
    return f"{offset:020d}"


class BatchInfo(NamedTuple):
    """What the log knows about one batch it is appending (position relative to the buffer).

    A NamedTuple: the append path builds one per batch, and it is several times cheaper than a
    frozen dataclass.
    """

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class LogSegment:
    """A ``.log`` file and its indexes (see the module docstring)."""

    def __init__(self, directory: Path, base_offset: int, index_bytes: int, *, load: bool, now_ms: int = -1) -> None:
        self.dir = directory
        self.base_offset = base_offset
        stem = file_stem(base_offset)
        self.log_path = directory / f"{stem}.log"
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | (0 if load else os.O_TRUNC), 0o644)
        # The .log descriptor is closed by close(), or, once the files are deleted, when the last
        # holder of this object (a FetchData in flight) lets it go: a range never meets a reused fd.
        self._fd_closer = weakref.finalize(self, os.close, self.fd)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.max_timestamp_offset = base_offset
        self.first_batch_timestamp = -1
        self.created_ms = now_ms
        self.roll_jitter_ms = -1  # segment.jitter.ms drawn for this segment; -1 until the log draws it
        self.bytes_since_index = 0
        # The batches from the last offset-index entry to the end: base and last offsets, positions
        # (see the module docstring).
        self._tail_bases: list[int] = []
        self._tail_last: list[int] = []
        self._tail_positions: list[int] = []
        self.deleted = False
        self._index_bytes = index_bytes
        self.index_error: str | None = None
        self.recovery_cut_reason: str | None = None  # why recover() cut the file, when it did
        self.recovery_cut_last_offset: int | None = None  # the highest offset the cut bytes claimed
        index_paths = (directory / f"{stem}.index", directory / f"{stem}.timeindex")
        if load and self.size > 0 and not all(p.exists() for p in index_paths):
            self.index_error = "index file missing"
        try:
            self.offset_index = OffsetIndex(directory / f"{stem}.index", base_offset, index_bytes, load=load)
            self.time_index = TimeIndex(directory / f"{stem}.timeindex", base_offset, index_bytes, load=load)
        except IndexCorrupt as exc:
            self.index_error = str(exc)
            self.offset_index = OffsetIndex(directory / f"{stem}.index", base_offset, index_bytes, load=False)
            self.time_index = TimeIndex(directory / f"{stem}.timeindex", base_offset, index_bytes, load=False)
        self.txn_index = TxnIndex(directory / f"{stem}.txnindex", load=load)

    # -- reading headers ------------------------------------------------------------------------

    def read_at(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def headers_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch from ``position`` to the end or a torn tail.

        Among small batches, headers are parsed out of a 16 KiB window of the file (one pread per
        window) rather than read one pread each: a fetch from an index entry walks up to 4 KiB of
        small batches. Among large ones each header is read alone, as a window would copy records
        that sendfile sends anyway (``bench/read_path_bench.py`` has the figures).
        """
        size = self.size
        window: bytes = b""
        start = position
        read_size = HEADER_SIZE  # until a small batch shows that a window is worth reading
        while position + HEADER_SIZE <= size:
            at = position - start
            if at + HEADER_SIZE > len(window):
                window = os.pread(self.fd, min(read_size, size - position), position)
                start, at = position, 0
                if len(window) < HEADER_SIZE:
                    return
            header = BatchHeader.parse(window, at)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > size:
                return
            yield position, header
            position += header.size
            # Among large batches a window would hold one header and copy kilobytes of records for
            # nothing (the records go out by sendfile): read just the next header then.
            read_size = HEADER_SIZE if header.size > _SCAN_WINDOW // 4 else _SCAN_WINDOW

    def batches_from(self, offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from the first whose last offset is >= ``offset``."""
        i = self._tail_slot(offset)
        if i is None:
            start = self.offset_index.lookup(offset)[1]
        elif i == len(self._tail_last):
            return  # past the last batch
        else:
            start = self._tail_positions[i]
        found = False
        for position, header in self.headers_from(start):
            if found or header.last_offset >= offset:
                found = True
                yield position, header

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        return next(self.batches_from(offset), None)

    def _tail_slot(self, offset: int) -> int | None:
        """Where in the tail lists the first batch whose last offset is >= ``offset`` is (their length
        when it is past the last batch); None when ``offset`` is before the tail."""
        tail_last = self._tail_last
        if tail_last and offset >= self._tail_bases[0]:
            return bisect.bisect_left(tail_last, offset)
        return None

    def _locate(self, offset: int) -> tuple[int, int, int, int] | None:
        """(position, base offset, last offset, size) of the first batch whose last offset is >=
        ``offset``; from memory, without reading the file, when that batch is in the tail."""
        i = self._tail_slot(offset)
        if i is not None:
            if i == len(self._tail_last):
                return None
            positions = self._tail_positions
            position = positions[i]
            end = positions[i + 1] if i + 1 < len(positions) else self.size  # batches are contiguous
            return position, self._tail_bases[i], self._tail_last[i], end - position
        found = self.find(offset)
        if found is None:
            return None
        position, header = found
        return position, header.base_offset, header.last_offset, header.size

    def read_range(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[int, int, int]:
        """(position, length, next offset) of whole batches from the one holding ``offset``.

        Stops before ``max_bytes`` would be exceeded (but takes one batch when ``min_one_batch``),
        and before any batch whose last offset reaches ``max_offset`` (exclusive bound). When the
        segment holds no batch at or after ``offset`` (compaction can empty a segment's tail), the
        next offset is the segment's end, so the reader moves on to the next segment.

        Without walking every batch in the range: the end is found from the offset index (the last
        entry at or before the byte limit) and a walk over at most one index interval of headers
        after it, so planning a 1 MiB read of 270 B batches walks ~15 headers, not ~3,900
        (``bench/read_path_bench.py``).
        """
        found = self._locate(offset)
        if found is None:
            return 0, 0, max(offset, self.next_offset)
        start, _, first_last, first_size = found
        bound, bound_offset = self.size, self.next_offset  # the range never passes these
        if max_offset is not None and max_offset < self.next_offset:
            if first_last >= max_offset:
                return start, 0, offset
            limit = self._locate(max_offset)
            if limit is not None:
                bound, bound_offset = limit[0], limit[1]
        if first_size > max_bytes:
            return (start, first_size, first_last + 1) if min_one_batch else (start, 0, offset)
        cut = start + max_bytes
        if cut >= bound:
            return start, bound - start, bound_offset
        # Batches wholly before the last index entry at or before the cut are in; walk from there.
        index = self.offset_index
        i = bisect.bisect_right(index.values, cut) - 1
        end, next_offset = start, offset
        if i >= 0 and index.values[i] > start:
            end, next_offset = index.values[i], index.keys[i]
        for position, header in self.headers_from(end):
            if position + header.size > cut:
                break
            end, next_offset = position + header.size, header.next_offset
        return start, end - start, next_offset

    # -- writing --------------------------------------------------------------------------------

    def append(self, parts: Sequence[Buffer], batches: list[BatchInfo], interval_bytes: int) -> None:
        """Write whole batches (given as consecutive buffers) at the end and index them.

        All or nothing on disk: a failed or short write is cut back to the previous size.
        """
        start = self.size
        total = sum(map(len, parts))
        try:
            written = os.pwritev(self.fd, parts, start) if len(parts) <= _IOV_MAX else 0
            if written < total:
                rest = memoryview(b"".join(parts))
                while written < total:
                    written += os.pwrite(self.fd, rest[written:], start + written)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise
        self.size = start + written
        for batch in batches:
            self._track(batch.base_offset, batch.last_offset, batch.max_timestamp, start + batch.position,
                        batch.size, interval_bytes)

    def _track(self, base: int, last: int, max_ts: int, position: int, size: int, interval_bytes: int) -> None:
        if self.first_batch_timestamp < 0 and position == 0:
            self.first_batch_timestamp = max_ts
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.max_timestamp_offset = base
        if self.bytes_since_index > interval_bytes:
            self.offset_index.append(base, position)
            self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
            self.bytes_since_index = 0
            self._forget_tail()
        self.bytes_since_index += size
        self.next_offset = last + 1
        self._remember_tail(base, last, position)

    def _remember_tail(self, base: int, last: int, position: int) -> None:
        self._tail_bases.append(base)
        self._tail_last.append(last)
        self._tail_positions.append(position)

    def _forget_tail(self) -> None:
        self._tail_bases.clear()
        self._tail_last.clear()
        self._tail_positions.clear()

    @property
    def index_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def roll_due(self, now_ms: int, incoming_max_timestamp: int, segment_ms: int) -> bool:
        """segment.ms is reached, Kafka's way (``LogSegment.shouldRoll``): the incoming batches' max
        timestamp is more than segment.ms after the segment's first batch's timestamp; a segment
        without one falls back to the wall clock since its creation. Records stamped long ago (a
        replay, event time) therefore do not roll a segment per append."""
        if self.size == 0:
            return False
        if self.first_batch_timestamp >= 0:
            return incoming_max_timestamp - self.first_batch_timestamp > segment_ms
        return self.created_ms >= 0 and now_ms - self.created_ms > segment_ms

    def seal(self) -> None:
        """Make the time index end with the segment's max timestamp (done when it stops being active)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)

    def write_indexes(self) -> None:
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def fsync(self) -> None:
        os.fsync(self.fd)
        self.offset_index.fsync()
        self.time_index.fsync()
        self.txn_index.fsync()

    # -- loading and recovery -------------------------------------------------------------------

    def load_clean(self, interval_bytes: int) -> bool:
        """After a clean shutdown: trust the indexes if sane, rebuilding what the scan needs.

        Returns False when an index failed its sanity check (the caller then recovers the segment).
        """
        if self.index_error is not None:
            return False
        try:
            self.offset_index.sanity_check(max(self.size, 1))
        except IndexCorrupt as exc:
            self.index_error = str(exc)
            return False
        first = next(self.headers_from(0), None)
        self.first_batch_timestamp = first[1].max_timestamp if first else -1
        last_ts, last_ts_offset = self.time_index.last_entry
        self.max_timestamp, self.max_timestamp_offset = last_ts, last_ts_offset
        position = self.offset_index.lookup(2**63 - 1)[1]
        self._forget_tail()
        for at, header in self.headers_from(position):
            self._track_tail(header, at)
            position = at + header.size
        if position != self.size:
            return False
        try:
            self.time_index.sanity_check(self.next_offset)
        except IndexCorrupt as exc:
            self.index_error = str(exc)
            return False
        self.bytes_since_index = self.size - self.offset_index.lookup(2**63 - 1)[1]
        return True

    def _track_tail(self, header: BatchHeader, position: int) -> None:
        """A batch after the last index entry, met when the segment is loaded or cut back."""
        self.next_offset = header.next_offset
        self._remember_tail(header.base_offset, header.last_offset, position)
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.max_timestamp_offset = header.base_offset

    def recover(self, interval_bytes: int) -> tuple[list[tuple[BatchHeader, int]], bool]:
        """Validate every batch, rebuild the indexes, cut a torn or corrupt tail.

        Returns the valid batches as (header, position) and whether anything was cut; when something
        was, ``recovery_cut_reason`` says why (for the log's WARN line).
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp, self.max_timestamp_offset = -1, self.base_offset
        self.first_batch_timestamp = -1
        self.bytes_since_index = 0
        self._forget_tail()
        batches: list[tuple[BatchHeader, int]] = []
        position, file_size = 0, self.size
        expected = self.base_offset
        reason = "a torn batch at the end of the file"
        while position < file_size:
            window = min(_RECOVERY_WINDOW, file_size - position)
            result = scan_valid_prefix(os.pread(self.fd, window, position))
            good = self._accept(result.batches, position, expected, interval_bytes, batches)
            if good < len(result.batches):
                position += result.batches[good][1]
                reason = f"the batch at offset {result.batches[good][0].base_offset} is out of offset order"
                break
            if result.error is not None:
                reason = str(result.error)
            if result.batches:
                expected = result.batches[-1][0].next_offset
            position += result.valid_bytes
            if result.error is None:
                continue
            if position - result.valid_bytes + window >= file_size:
                break  # the window reached the end of the file: a real torn or corrupt tail
            if result.valid_bytes > 0:
                continue  # the failing batch may only be cut by the window edge: re-read from it
            big = self._single_large_batch(position, file_size)
            if big is None or self._accept([big], position, expected, interval_bytes, batches) != 1:
                break
            expected = big[0].next_offset
            position += big[0].size
        truncated = position < file_size
        self.recovery_cut_reason = reason if truncated else None
        self.recovery_cut_last_offset = self.last_offset_from(position, expected) if truncated else None
        if truncated:
            os.ftruncate(self.fd, position)
            self.size = position
        return batches, truncated

    def last_offset_from(self, position: int, at_least: int = 0) -> int | None:
        """The highest last offset the batch headers from ``position`` on claim, walking by their length
        fields without checking CRCs (for reporting what a recovery cut: the bytes may be damaged, so
        headers with implausible fields stop the walk). None if no header there is plausible."""
        found: int | None = None
        file_size = os.fstat(self.fd).st_size
        for _ in range(100_000):
            head = os.pread(self.fd, _LAST_DELTA_END, position)
            if len(head) < _LAST_DELTA_END:
                break
            base, length = _SHALLOW.unpack_from(head)
            (delta,) = _LAST_DELTA.unpack_from(head, _LAST_DELTA_END - 4)
            if base < at_least or not 0 <= delta < 2**31 - 1 or length < HEADER_SIZE - LOG_OVERHEAD:
                break
            found = max(found or 0, base + delta)
            position += LOG_OVERHEAD + length
            if position >= file_size:
                break
        return found

    def _single_large_batch(self, position: int, file_size: int) -> tuple[BatchHeader, int] | None:
        """A batch that did not fit in a recovery window: validate it alone."""
        head = os.pread(self.fd, LOG_OVERHEAD, position)
        if len(head) < LOG_OVERHEAD:
            return None
        _, length = _SHALLOW.unpack(head)
        if length < HEADER_SIZE - LOG_OVERHEAD or position + LOG_OVERHEAD + length > file_size:
            return None
        result = scan_valid_prefix(os.pread(self.fd, LOG_OVERHEAD + length, position))
        return result.batches[0] if result.error is None and result.batches else None

    def _accept(
        self, found: list[tuple[BatchHeader, int]], window_start: int, expected: int, interval_bytes: int,
        out: list[tuple[BatchHeader, int]],
    ) -> int:
        """Index valid batches in offset order; return how many were accepted."""
        for i, (header, rel) in enumerate(found):
            if header.base_offset < expected:
                return i
            position = window_start + rel
            self._track(header.base_offset, header.last_offset, header.max_timestamp, position, header.size,
                        interval_bytes)
            out.append((header, position))
            expected = header.next_offset
        return len(found)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch at or after ``offset``, and the batch holding it; return bytes removed."""
        found = self.find(offset)
        if found is None:
            return 0
        position, first_removed = found[0], found[1].base_offset
        removed = self.size - position
        self._forget_tail()
        os.ftruncate(self.fd, position)
        self.size = position
        # From the removed batch's base offset, not ``offset``: an index entry for a batch that
        # straddles ``offset`` would otherwise survive and point at the new end of the file.
        self.offset_index.truncate_to(first_removed)
        self.time_index.truncate_to(first_removed)
        self.txn_index.truncate_to(first_removed)
        self.next_offset = self.base_offset
        self.max_timestamp, self.max_timestamp_offset = -1, self.base_offset
        self.first_batch_timestamp = -1 if position == 0 else self.first_batch_timestamp
        position_i = self.offset_index.lookup(2**63 - 1)[1]
        last_ts, last_ts_offset = self.time_index.last_entry
        self.max_timestamp, self.max_timestamp_offset = last_ts, last_ts_offset
        for at, header in self.headers_from(position_i):
            self._track_tail(header, at)
        self.bytes_since_index = self.size - self.offset_index.lookup(2**63 - 1)[1]
        return removed

    # -- lifecycle ------------------------------------------------------------------------------

    def paths(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def _close_indexes(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def close(self) -> None:
        if self.fd >= 0:
            self._close_indexes()
            self._fd_closer()
            self.fd = -1

    def mark_deleted(self) -> None:
        """Rename every file with the ``.deleted`` suffix; the fd stays open for reads in flight."""
        if self.deleted:
            return
        self.deleted = True
        new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def delete_files(self) -> None:
        """Unlink every file; the .log descriptor stays readable until this object is released."""
        self._close_indexes()
        for path in self.paths():
            path.unlink(missing_ok=True)
