"""The LogProducer's disk spool: records that could not reach the cluster, in tidelog's own log format.

Layout of a spool folder::

    <spool.dir>/.lock             flock(2)-ed by the open Spool: one producer per folder, across processes
    <spool.dir>/spool-0/          a :class:`~tidelog.storage.log.PartitionLog` (segments, indexes)
    <spool.dir>/position          checkpoint (storage/checkpoint.py format): one entry ``position <offset>``
    <spool.dir>/clean-shutdown    present only while the spool is closed cleanly

Each :meth:`Spool.append` writes one record batch (magic 2, CRC-32C over the batch, as Kafka and the
broker store them) holding the records of one hand-off, whatever their topics. A spooled record is
the user's record with its destination in trailing headers that replay strips again::

    key, value, timestamp   as sent (the timestamp is the send time, CreateTime, kept on replay)
    headers                 the user's headers, then
      tidelog.spool.topic      the topic (UTF-8)
      tidelog.spool.partition  the partition as decimal text, only when one was chosen

Offsets: the spool's own, one per record, increasing; they have nothing to do with the cluster's.
``position`` is the offset below which every record was acknowledged by the cluster (or dropped):
segments wholly below it are deleted, and a restart replays from it. It is written after the
acknowledgements it records, so a crash can only replay acknowledged records again (at least once),
never skip one.

Recovery: a spool not closed cleanly (kill -9, power loss) is opened by the log's unclean recovery,
which checks every batch's framing and CRC and cuts the log at the first bad batch (a torn tail);
:attr:`Spool.truncated_bytes` reports what was cut, and everything before it is replayed.

Thread-safety: none; the producer's sender thread owns the spool. Other threads may read the plain
attributes ``start_offset``, ``end_offset`` and ``size_bytes`` (copies refreshed after each change).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.clients.errors import SpoolLockedError
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import Record, build_batch, decode_records, iter_batches
from tidelog.storage.checkpoint import CheckpointError, read_entries, write_entries
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

TOPIC_HEADER = "tidelog.spool.topic"
PARTITION_HEADER = "tidelog.spool.partition"
_NEVER = 2**63 - 1
Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class SpooledRecord:
    """One record on its way to the cluster. ``partition`` -1 leaves the choice to the partitioner."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int = -1
    timestamp: int = 0

    @property
    def size(self) -> int:
        """Bytes the record takes in memory and in the spool, near enough for limits."""
        size = 32 + len(self.topic) + len(self.value or b"") + len(self.key or b"")
        for name, value in self.headers:
            size += 8 + len(name) + len(value or b"")
        return size


@dataclass(frozen=True, slots=True)
class SpoolBatch:
    """Records read back from the spool: offsets ``[base_offset, next_offset)``."""

    base_offset: int
    next_offset: int
    records: list[SpooledRecord]


def normalize_headers(headers: object) -> tuple[tuple[str, bytes | None], ...]:
    """Headers as confluent-kafka takes them (a mapping or pairs; str values) as (name, bytes) pairs."""
    if not headers:
        return ()
    items: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers  # type: ignore[assignment]
    return tuple((str(name), value.encode() if isinstance(value, str) else value) for name, value in items)


def _encode(record: SpooledRecord, offset: int) -> Record:
    headers = [*record.headers, (TOPIC_HEADER, record.topic.encode())]
    if record.partition >= 0:
        headers.append((PARTITION_HEADER, str(record.partition).encode()))
    return Record(offset, record.timestamp, record.key, record.value, tuple(headers))


def _decode(record: Record) -> SpooledRecord:
    headers = list(record.headers)
    partition = -1
    if headers and headers[-1][0] == PARTITION_HEADER:
        partition = int(headers.pop()[1] or b"-1")
    if not headers or headers[-1][0] != TOPIC_HEADER:
        raise ValueError(f"spool record at offset {record.offset} has no {TOPIC_HEADER} header")
    topic = (headers.pop()[1] or b"").decode()
    return SpooledRecord(topic, record.value, record.key, tuple(headers), partition, record.timestamp)


class Spool:
    """An append-only spool of records (see the module docstring for the format)."""

    def __init__(self, folder: Path, *, segment_bytes: int = 16 * 1024 * 1024,
                 compression: Compression = Compression.NONE) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.folder / ".lock")
        self.compression = compression
        marker = self.folder / "clean-shutdown"
        clean = marker.exists()
        marker.unlink(missing_ok=True)
        position = self._read_position()
        config = LogConfig(
            segment_bytes=segment_bytes, segment_ms=_NEVER, retention_ms=-1, retention_bytes=-1,
            file_delete_delay_ms=0, max_message_bytes=segment_bytes, message_timestamp_after_max_ms=_NEVER,
        )
        try:
            self.log = PartitionLog(self.folder / "spool-0", config, recovery_point=0,
                                    log_start_offset=position, clean_shutdown=clean)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self.truncated_bytes = self.log.truncated_bytes
        self.recovered_unclean = self.log.recovered_unclean
        if position > self.log.log_end_offset:  # acknowledged up to a tail that recovery cut away
            self.log.truncate_fully_and_start_at(position)
        self._closed = False
        self._refresh()

    # -- facts -----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Copy the log's offsets and size into plain attributes, read by other threads' metrics
        (the log's own properties are not safe to read while the owner truncates it)."""
        self.start_offset = self.log.log_start_offset  # the oldest record not yet acknowledged or dropped
        self.end_offset = self.log.log_end_offset
        self.size_bytes = self.log.size_bytes

    @property
    def record_count(self) -> int:
        return self.end_offset - self.start_offset

    def oldest_timestamp(self) -> int | None:
        """Send time (ms) of the oldest record still spooled, or None when empty."""
        batches = self.read(self.start_offset, 1, limit_records=1)
        return batches[0].records[0].timestamp if batches and batches[0].records else None

    # -- writing -----------------------------------------------------------------------------------

    def encode(self, records: Sequence[SpooledRecord]) -> bytes:
        """The batch :meth:`append` would write: its length is what the spool grows by."""
        encoded = [_encode(record, i) for i, record in enumerate(records)]  # the log assigns the base
        return build_batch(encoded, base_offset=0, compression=self.compression)

    def append(self, batch: bytes) -> tuple[int, int]:
        """Write one batch made by :meth:`encode`; return its offsets ``[first, next)``.

        Raises tidelog's KafkaError(KAFKA_STORAGE_ERROR) when the disk is full (nothing is written then).
        """
        try:
            info = self.log.append_as_leader(batch, leader_epoch=0, now_ms=int(time.time() * 1000))
        finally:
            self._refresh()
        return info.first_offset, info.last_offset + 1

    def read(self, offset: int, max_bytes: int, *, limit_records: int | None = None) -> list[SpoolBatch]:
        """Whole batches from the one holding ``offset`` (at least one), records below it left out."""
        offset = max(offset, self.start_offset)
        if offset >= self.end_offset:
            return []
        data = self.log.read(offset, max_bytes).read_bytes()
        out: list[SpoolBatch] = []
        view = memoryview(data)
        for header, pos in iter_batches(view, validate=True):
            batch = view[pos : pos + header.batch_length + 12]
            records = [_decode(r) for r in decode_records(batch) if r.offset >= offset]
            if limit_records is not None:
                records = records[:limit_records]
            out.append(SpoolBatch(max(header.base_offset, offset), header.next_offset, records))
        return out

    def release(self, position: int) -> int:
        """Everything below ``position`` was acknowledged: delete the segments wholly below it and
        record the position. Returns the new start offset."""
        position = min(position, self.end_offset)
        if position <= self.start_offset:
            return self.start_offset
        if position == self.end_offset:
            self.log.truncate_fully_and_start_at(position)  # empty: free the active segment too
        else:
            self.log.delete_records_before(position)
        self.log.delete_expired_files(0, force=True)
        self._refresh()
        self._write_position(durable=False)
        return self.start_offset

    def drop_oldest(self) -> int:
        """Delete the oldest segment (rolling the active one first if it is the only one); return
        how many records went. Used by the ``drop-oldest`` policy to make room."""
        if self.record_count == 0:
            return 0
        before = self.start_offset
        if len(self.log.segments) == 1:
            self.log.roll()
            self._refresh()
        next_base = self.log.segments[1].base_offset
        self.release(next_base)
        return self.start_offset - before

    def sync(self) -> None:
        """fsync the spooled records and the position (a power loss keeps what was synced)."""
        self.log.flush()
        self._write_position(durable=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._write_position(durable=True)
            self.log.close(clean=True)
            (self.folder / "clean-shutdown").touch()
        finally:
            os.close(self._lock_fd)

    # -- position checkpoint -------------------------------------------------------------------------

    def _read_position(self) -> int:
        try:
            rows = read_entries(self.folder / "position", 2)
        except CheckpointError:
            return 0  # unreadable: replay everything still there (at least once)
        for name, value in rows:
            if name == "position" and value.isdigit():
                return int(value)
        return 0

    def _write_position(self, *, durable: bool) -> None:
        write_entries(self.folder / "position", [("position", self.start_offset)], durable=durable)


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SpoolLockedError(f"{path.parent} is in use by another LogProducer") from None
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    return fd
