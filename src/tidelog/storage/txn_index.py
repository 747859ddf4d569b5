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

from tidelog.storage.index import with_existing_file

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
        self.entries: list[AbortedTxn] = []
        # Opened only while read or written (see index.py): no descriptor held per segment.
        if not load:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            return
        with open(path, "a+b") as handle:
            handle.seek(0)
            data = handle.read()
        size = len(data)
        for version, pid, first, last, lso in _ENTRY.iter_unpack(data[: size - size % ENTRY_SIZE]):
            if version != 0:
                break
            self.entries.append(AbortedTxn(pid, first, last, lso))
        if len(self.entries) * ENTRY_SIZE != size:
            os.truncate(path, len(self.entries) * ENTRY_SIZE)

    def append(self, txn: AbortedTxn) -> None:
        data = _ENTRY.pack(0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
        start = len(self.entries) * ENTRY_SIZE
        with_existing_file(self.path, lambda fd: os.pwrite(fd, data, start))
        self.entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions with last offset >= fetch_offset and first offset < upper_bound."""
        return [t for t in self.entries if t.last_offset >= fetch_offset and t.first_offset < upper_bound]

    def truncate_to(self, offset: int) -> None:
        """Forget aborts whose marker is at or after ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            with_existing_file(self.path, lambda fd: os.ftruncate(fd, len(keep) * ENTRY_SIZE))

    def reset(self) -> None:
        self.truncate_to(-1)

    def fsync(self) -> None:
        with_existing_file(self.path, os.fsync)

    def close(self) -> None:
        """Nothing is held open; kept for the segment's close sequence."""

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path
