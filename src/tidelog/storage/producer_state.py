"""Idempotent-producer and transaction state of one partition, and its ``.snapshot`` files.

For every producer id the partition remembers its epoch, the metadata of its last five batches
(first/last sequence, first/last offset, max timestamp), the time of its last write, the coordinator
epoch of its last transaction marker and the first offset of its open transaction (-1 if none). This
is what lets the leader answer a retried batch with its original offsets, refuse a sequence gap
(OUT_OF_ORDER_SEQUENCE_NUMBER) or a fenced epoch (INVALID_PRODUCER_EPOCH), and compute the last
stable offset (the first offset of the oldest open transaction).

Sequence rules (Kafka 4, KIP-360): a producer the partition does not know (never seen, expired, or
removed with its segments) may start at any sequence; a known producer with a *new* epoch must start
at sequence 0; within an epoch each batch must start right after the previous one's last sequence,
where 2**31-1 is followed by 0.

Snapshot file ``<20-digit offset>.snapshot`` in the partition directory: the state after applying
every batch below ``offset``. Big-endian::

    version            i16   1
    crc                u32   CRC-32C of every byte after this field
    producer count     i32
    per producer:
      producer id      i64
      epoch            i16
      last timestamp   i64
      coordinator epoch i32
      txn first offset i64   -1: no open transaction
      batch count      i8    0..5, oldest first
      per batch:
        first seq      i32
        last seq       i32
        first offset   i64
        last offset    i64
        max timestamp  i64

Snapshots are taken when a segment rolls and at clean shutdown; on open, the newest snapshot at or
below the log end offset is loaded and the batches after it are replayed (headers only, plus the one
record of each control batch). A snapshot whose CRC fails is deleted and the next older one is used.

Thread-safety: none; the owning log calls it under its lock.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.storage.checkpoint import write_atomically

SUFFIX = ".snapshot"
MAX_BATCHES = 5
NO_EPOCH = -1
_MAX_SEQ = 2**31 - 1

_HEADER = struct.Struct(">hIi")
_PRODUCER = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")
_VERSION = 1


def next_sequence(seq: int, increment: int) -> int:
    """``seq + increment`` in the 31-bit sequence space (2**31-1 is followed by 0)."""
    return (seq + increment) % (_MAX_SEQ + 1)


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SUFFIX}"


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerStateManager:
    """Producer entries of one partition plus its open transactions (see the module docstring)."""

    def __init__(self, partition_dir: Path, expiration_ms: int = 86_400_000) -> None:
        self.dir = partition_dir
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self._ongoing: list[int] = []  # sorted first offsets of open transactions
        self.map_end_offset = 0

    # -- validation (leader appends) ------------------------------------------------------------

    def check(
        self, pid: int, epoch: int, first_seq: int, last_seq: int, pending: dict[int, tuple[int, int]]
    ) -> BatchMetadata | None:
        """Validate a client batch; return the original batch if it is a retry, else None.

        ``pending`` carries (epoch, last seq) of batches accepted earlier in the same append and is
        updated. Raises KafkaError(INVALID_PRODUCER_EPOCH | OUT_OF_ORDER_SEQUENCE_NUMBER).
        """
        entry = self.producers.get(pid)
        if pid in pending:
            cur_epoch, cur_last = pending[pid]
        elif entry is not None:
            duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
            if duplicate is not None:
                return duplicate
            cur_epoch, cur_last = entry.epoch, entry.last_seq
        else:
            cur_epoch, cur_last = NO_EPOCH, -1
        if epoch < cur_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH, f"producer {pid}: epoch {epoch} is older than {cur_epoch}"
            )
        if cur_epoch != NO_EPOCH:
            if epoch != cur_epoch and first_seq != 0:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid}: new epoch {epoch} must start at sequence 0, not {first_seq}",
                )
            if epoch == cur_epoch and first_seq != next_sequence(cur_last, 1):
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid}: expected sequence {next_sequence(cur_last, 1)}, got {first_seq}",
                )
        pending[pid] = (epoch, last_seq)
        return None

    def check_marker_epoch(self, pid: int, epoch: int) -> None:
        entry = self.producers.get(pid)
        if entry is not None and epoch < entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, f"producer {pid}: marker epoch {epoch} is fenced")

    # -- updates (leader, follower and replay) --------------------------------------------------

    def _entry(self, pid: int, epoch: int) -> ProducerEntry:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if entry.epoch != epoch:
            entry.epoch = epoch
            entry.batches.clear()
        return entry

    def record_batch(
        self, pid: int, epoch: int, first_seq: int, last_seq: int, first_offset: int, last_offset: int,
        max_timestamp: int, transactional: bool,
    ) -> None:
        """Apply a data batch written at [first_offset, last_offset]."""
        entry = self._entry(pid, epoch)
        if first_seq >= 0:
            entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, max_timestamp)
        if transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
            bisect.insort(self._ongoing, first_offset)
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)

    def record_marker(
        self, pid: int, epoch: int, offset: int, commit: bool, coordinator_epoch: int, timestamp: int
    ) -> CompletedTxn | None:
        """Apply a COMMIT/ABORT control batch at ``offset``; return the transaction it ends, if any."""
        entry = self._entry(pid, epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        self.map_end_offset = max(self.map_end_offset, offset + 1)
        first = entry.txn_first_offset
        if first < 0:
            return None
        entry.txn_first_offset = -1
        i = bisect.bisect_left(self._ongoing, first)
        if i < len(self._ongoing) and self._ongoing[i] == first:
            del self._ongoing[i]
        return CompletedTxn(pid, first, offset, not commit)

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (the LSO bound), or None."""
        return self._ongoing[0] if self._ongoing else None

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` without an open transaction; return how many."""
        dead = [
            pid for pid, e in self.producers.items()
            if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms
        ]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    def reset(self, offset: int) -> None:
        """Forget everything; the state now describes an empty log ending at ``offset``."""
        self.producers.clear()
        self._ongoing.clear()
        self.map_end_offset = offset

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        out = []
        for path in self.dir.glob("*" + SUFFIX):
            stem = path.name[: -len(SUFFIX)]
            if stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def take_snapshot(self, *, durable: bool = True) -> Path:
        """Write ``<map end offset>.snapshot`` atomically and return its path. ``durable=False`` leaves
        out the fsyncs (the caller makes the file and its directory durable later; until then a power
        loss may leave it torn or missing, which ``load_snapshot`` skips by its CRC)."""
        path = self.dir / snapshot_name(self.map_end_offset)
        write_atomically(path, self._encode(), durable=durable)
        return path

    def encode(self) -> bytes:
        """The snapshot file's bytes for the current state (what :meth:`take_snapshot` writes)."""
        return self._encode()

    def _encode(self) -> bytes:
        parts = [struct.pack(">i", len(self.producers))]
        for e in self.producers.values():
            parts.append(
                _PRODUCER.pack(e.producer_id, e.epoch, e.last_timestamp, e.coordinator_epoch,
                               e.txn_first_offset, len(e.batches))
            )
            parts.extend(
                _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                for b in e.batches
            )
        body = b"".join(parts)
        return struct.pack(">hI", _VERSION, crc32c.crc32c(body)) + body

    def _decode(self, data: bytes) -> dict[int, ProducerEntry]:
        version, crc, count = _HEADER.unpack_from(data, 0)
        if version != _VERSION or crc != crc32c.crc32c(data[6:]):
            raise ValueError("bad version or CRC")
        pos = _HEADER.size
        producers: dict[int, ProducerEntry] = {}
        for _ in range(count):
            pid, epoch, last_ts, coord, txn_first, nbatches = _PRODUCER.unpack_from(data, pos)
            pos += _PRODUCER.size
            entry = ProducerEntry(pid, epoch, deque(maxlen=MAX_BATCHES), last_ts, coord, txn_first)
            for _ in range(nbatches):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                pos += _BATCH.size
            producers[pid] = entry
        if pos != len(data):
            raise ValueError("trailing bytes")
        return producers

    def load_snapshot(self, log_end_offset: int) -> int:
        """Load the newest valid snapshot at or below ``log_end_offset``; return its offset.

        Snapshots above the log end are deleted, so are unreadable ones. With no usable snapshot the
        state is emptied and 0 is returned (the caller replays from the log start).
        """
        for offset in reversed(self.snapshot_offsets()):
            path = self.dir / snapshot_name(offset)
            if offset > log_end_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                producers = self._decode(path.read_bytes())
            except (ValueError, struct.error, OSError):
                path.unlink(missing_ok=True)
                continue
            self.producers = producers
            self._ongoing = sorted(e.txn_first_offset for e in producers.values() if e.txn_first_offset >= 0)
            self.map_end_offset = offset
            return offset
        self.reset(0)
        return 0

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        """Delete snapshots with offset < ``below`` (keeping the newest one) or > ``above``."""
        offsets = self.snapshot_offsets()
        newest = offsets[-1] if offsets else None
        for offset in offsets:
            drop_low = below is not None and offset < below and offset != newest
            drop_high = above is not None and offset > above
            if drop_low or drop_high:
                (self.dir / snapshot_name(offset)).unlink(missing_ok=True)

    def fsync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
