"""``<base>.txnindex``: the aborted transactions whose abort marker lies in a segment.

A flat array of 34-byte big-endian entries, no header (Kafka's ``TransactionIndex`` layout)::

    version             i16   always 0
    producer id         i64
    first offset        i64   offset of the transaction's first batch
    last offset         i64   offset of its ABORT control batch (this segment holds it)
    last stable offset  i64   the partition's LSO right after the abort was written

Entries are in the order the aborts were appended. A fetch at isolation level READ_COMMITTED asks
:meth:`TxnIndex.collect` for every aborted transaction overlapping the fetched range.

Unlike the sparse indexes this one is written through at once (aborts are rare) and is rebuilt with
them during recovery. Thread-safety: mutations under the owning log's lock.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    """Aborted transactions completed in one segment (see the module docstring)."""

    def __init__(self, path: Path, *, load: bool) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | (0 if load else os.O_TRUNC), 0o644)
        self.entries: list[AbortedTxn] = []
        if load:
            size = os.fstat(self._fd).st_size
            data = os.pread(self._fd, size - size % ENTRY_SIZE, 0)
            for version, pid, first, last, lso in _ENTRY.iter_unpack(data):
                if version != 0:
                    break
                self.entries.append(AbortedTxn(pid, first, last, lso))
            if len(self.entries) * ENTRY_SIZE != size:
                os.ftruncate(self._fd, len(self.entries) * ENTRY_SIZE)

    def append(self, txn: AbortedTxn) -> None:
        data = _ENTRY.pack(0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
        os.pwrite(self._fd, data, len(self.entries) * ENTRY_SIZE)
        self.entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions with last offset >= fetch_offset and first offset < upper_bound."""
        return [t for t in self.entries if t.last_offset >= fetch_offset and t.first_offset < upper_bound]

    def truncate_to(self, offset: int) -> None:
        """Forget aborts whose marker is at or after ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            os.ftruncate(self._fd, len(keep) * ENTRY_SIZE)

    def reset(self) -> None:
        self.truncate_to(-1)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path
