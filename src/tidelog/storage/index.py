"""The sparse per-segment indexes: ``.index`` (offset → position) and ``.timeindex`` (time → offset).

Both files are flat arrays of fixed-size big-endian entries with no header; the file length is always
a multiple of the entry size and holds exactly the entries (no preallocated zero tail).

``<base>.index``, 8 bytes per entry::

    relative offset  u32   offset - segment base offset, of the first record of a batch
    position         u32   byte position of that batch in ``<base>.log``

``<base>.timeindex``, 12 bytes per entry::

    timestamp        i64   the largest timestamp seen in the segment up to and including the batch
    relative offset  u32   offset - base offset of the *first* record of the batch that raised it

Entries are strictly increasing in both fields (timestamps only grow: an entry is added only when the
segment's max timestamp went up). An entry is added every ``index.interval.bytes`` of log, so a lookup
returns a lower bound from which the caller scans batches forward:

* ``OffsetIndex.lookup(o)``: the last entry with offset <= o, else (base offset, position 0);
* ``TimeIndex.lookup(t)``: the last entry with timestamp <= t, else (-1, base offset).

Writing strategy (measured, see bench/RESULTS.md): entries live in memory and are appended to the file
lazily, by :meth:`write_pending` (called from the log's flush, roll and close). An index is never
trusted after an unclean shutdown (the log rebuilds it from the ``.log``), so losing unwritten entries
in a crash is harmless, and the append path makes no index syscall at all. After a clean shutdown an
index that fails :meth:`sanity_check` is rebuilt too.

Thread-safety: none of its own; the owning :class:`~tidelog.storage.log.PartitionLog` serialises
mutations under its lock. ``lookup`` reads two lists that are only appended to or truncated, so a
reader racing a writer sees a valid (possibly slightly old) entry.
"""

from __future__ import annotations

import abc
import bisect
import os
import struct
from collections.abc import Callable
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


def with_existing_file(path: Path, action: Callable[[int], object]) -> None:
    """Run ``action`` on a short-lived descriptor of ``path``; a file removed meanwhile is skipped
    (its segment was deleted; indexes are rebuilt from the log whenever they are missing)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        action(fd)
    finally:
        os.close(fd)


class IndexCorrupt(ValueError):
    """An index file fails its sanity check and must be rebuilt."""


class _Index(abc.ABC):
    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int, *, load: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.entry.size)
        self.keys: list[int] = []  # offsets (OffsetIndex) or timestamps (TimeIndex), absolute
        self.values: list[int] = []  # positions (OffsetIndex) or absolute offsets (TimeIndex)
        # The file is opened only while it is read or written, never held: a broker with thousands of
        # partitions would otherwise spend three descriptors per segment on indexes it rarely touches
        # (entries live in memory; the file is appended at flush, roll and close).
        self._written = 0
        self._closed = False
        if load:
            with open(path, "a+b") as handle:  # created empty when missing: rebuilt from the log
                handle.seek(0)
                data = handle.read()
            self._load(data)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))

    def _with_file(self, action: Callable[[int], object]) -> None:
        with_existing_file(self.path, action)

    def _load(self, data: bytes) -> None:
        size = len(data)
        if size % self.entry.size:
            raise IndexCorrupt(f"{self.path}: size {size} is not a multiple of {self.entry.size}")
        for a, b in self.entry.iter_unpack(data):
            self._load_entry(a, b)
        self._written = len(self.keys)

    @abc.abstractmethod
    def _load_entry(self, a: int, b: int) -> None:
        """Add one entry decoded from the file."""

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return len(self.keys) * self.entry.size

    @abc.abstractmethod
    def _pack(self, i: int) -> bytes:
        """The file form of entry ``i``."""

    def write_pending(self) -> None:
        """Append entries not yet in the file (no fsync)."""
        if self._written == len(self.keys):
            return
        data = b"".join(self._pack(i) for i in range(self._written, len(self.keys)))
        start = self._written * self.entry.size
        self._with_file(lambda fd: os.pwrite(fd, data, start))
        self._written = len(self.keys)

    def fsync(self) -> None:
        self._with_file(os.fsync)

    def _truncate_entries(self, keep: int) -> None:
        del self.keys[keep:]
        del self.values[keep:]
        if self._written > keep:
            self._with_file(lambda fd: os.ftruncate(fd, keep * self.entry.size))
            self._written = keep

    def reset(self) -> None:
        """Drop every entry (the index is about to be rebuilt)."""
        self._truncate_entries(0)

    def close(self) -> None:
        if not self._closed:
            self.write_pending()
            self._closed = True

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path


class OffsetIndex(_Index):
    """Sparse offset → file position index of one segment (see the module docstring)."""

    entry = _OFFSET_ENTRY

    def _load_entry(self, a: int, b: int) -> None:
        self.keys.append(self.base_offset + a)
        self.values.append(b)

    def _pack(self, i: int) -> bytes:
        return self.entry.pack(self.keys[i] - self.base_offset, self.values[i])

    def append(self, offset: int, position: int) -> None:
        if self.keys and offset <= self.keys[-1]:
            raise ValueError(f"index offset {offset} not after {self.keys[-1]}")
        self.keys.append(offset)
        self.values.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last (offset, position) entry at or before ``offset``, else (base offset, 0)."""
        i = bisect.bisect_right(self.keys, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.keys[i], self.values[i]

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        self._truncate_entries(bisect.bisect_left(self.keys, offset))

    def sanity_check(self, log_size: int) -> None:
        """Raise IndexCorrupt unless entries increase and point inside a log of ``log_size`` bytes."""
        prev_o, prev_p = self.base_offset - 1, -1
        for o, p in zip(self.keys, self.values, strict=True):
            if o <= prev_o or p <= prev_p or p >= log_size:
                raise IndexCorrupt(f"{self.path}: entry ({o}, {p}) out of order or past the log")
            prev_o, prev_p = o, p


class TimeIndex(_Index):
    """Sparse timestamp → offset index of one segment (see the module docstring)."""

    entry = _TIME_ENTRY

    def _load_entry(self, a: int, b: int) -> None:
        self.keys.append(a)
        self.values.append(self.base_offset + b)

    def _pack(self, i: int) -> bytes:
        return self.entry.pack(self.keys[i], self.values[i] - self.base_offset)

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset) when empty."""
        if not self.keys:
            return -1, self.base_offset
        return self.keys[-1], self.values[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if ``timestamp`` is larger than the last one and ``offset`` is new."""
        if self.keys and (timestamp <= self.keys[-1] or offset <= self.values[-1]):
            return
        self.keys.append(timestamp)
        self.values.append(offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last (timestamp, offset) entry with timestamp <= ``timestamp``, else (-1, base)."""
        i = bisect.bisect_right(self.keys, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self.keys[i], self.values[i]

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset``."""
        self._truncate_entries(bisect.bisect_left(self.values, offset))

    def sanity_check(self, next_offset: int) -> None:
        """Raise IndexCorrupt unless entries increase and stay below ``next_offset``."""
        prev_t, prev_o = None, self.base_offset - 1
        for t, o in zip(self.keys, self.values, strict=True):
            if (prev_t is not None and t <= prev_t) or o <= prev_o or o >= next_offset:
                raise IndexCorrupt(f"{self.path}: entry ({t}, {o}) out of order or past the log")
            prev_t, prev_o = t, o
