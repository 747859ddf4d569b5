"""The leader-epoch cache of a partition and its ``leader-epoch-checkpoint`` file.

Each entry says: from ``start offset`` on, batches were written by the leader of ``epoch``. Entries
are strictly increasing in both fields. The file uses the checkpoint format of
:mod:`tidelog.storage.checkpoint` with entries ``<epoch> <start offset>``::

    0
    2
    0 0
    3 1500

The file is rewritten (atomically) whenever the cache changes; changes are rare (a new leader epoch,
a truncation, a log start offset moving past an epoch's start).

Durability, as Kafka does since KAFKA-15046: a new epoch learnt from an append (``assign``) is
written without fsync, because that happens on the produce path (the first append of every partition
would otherwise wait for two fsyncs: 64 of them on a fresh 64-partition topic); ``flush()`` makes the
file durable and the log calls it before it moves its recovery point past the new entry. After a
crash the file may lack that entry, but the batches above the recovery point are re-read and their
epochs assigned again. Truncations are rare and written durably at once.

Thread-safety: none; the owning log calls it under its lock.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from tidelog.storage.checkpoint import CheckpointError, read_entries, write_entries

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochCache:
    """Epoch → start offset entries of one partition, persisted on every change."""

    def __init__(self, partition_dir: Path) -> None:
        self.path = partition_dir / FILE_NAME
        try:
            rows = read_entries(self.path, 2)
            entries = [(int(e), int(o)) for e, o in rows]
        except (CheckpointError, ValueError):
            entries = []  # a garbled cache is rebuilt from the batches' epochs during recovery
        self.epochs = [e for e, _ in entries]
        self.offsets = [o for _, o in entries]
        self.unflushed = False  # the file on disk may lack an entry (written without fsync)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self.epochs, self.offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else UNDEFINED

    def _save(self, *, durable: bool = True) -> None:
        write_entries(self.path, self.entries(), durable=durable)
        self.unflushed = not durable

    def flush(self) -> None:
        """Make the file durable if an entry was written without fsync."""
        if self.unflushed:
            self._save()

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if already known)."""
        if epoch < 0 or (self.epochs and self.epochs[-1] == epoch):
            return
        # Drop entries that conflict with the new one (a later epoch, or a start at/after it).
        while self.epochs and (self.epochs[-1] >= epoch or self.offsets[-1] >= start_offset):
            self.epochs.pop()
            self.offsets.pop()
        self.epochs.append(epoch)
        self.offsets.append(start_offset)
        self._save(durable=False)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, start offset of the next epoch) as OffsetForLeaderEpoch answers.

        The latest epoch ends at the log end offset. An epoch above every known one, or an
        undefined epoch, answers (-1, -1).
        """
        if epoch == UNDEFINED or not self.epochs:
            return UNDEFINED, UNDEFINED
        if epoch == self.epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self.epochs, epoch)
        if higher == len(self.epochs):
            return UNDEFINED, UNDEFINED
        if higher == 0:
            return epoch, self.offsets[0]
        return self.epochs[higher - 1], self.offsets[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range contains ``offset`` (-1 if before the first entry)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.epochs[i] if i >= 0 else UNDEFINED

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there)."""
        keep = bisect.bisect_left(self.offsets, end_offset)
        if keep < len(self.epochs):
            del self.epochs[keep:]
            del self.offsets[keep:]
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs wholly before it, clamp the one in it."""
        i = bisect.bisect_right(self.offsets, start_offset) - 1
        if i < 0 or (i == 0 and self.offsets[0] == start_offset):
            return
        del self.epochs[:i]
        del self.offsets[:i]
        self.offsets[0] = start_offset
        self._save()

    def clear(self) -> None:
        if self.epochs:
            self.epochs.clear()
            self.offsets.clear()
            self._save()
