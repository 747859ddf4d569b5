"""How the coordinator's records reach ``__consumer_offsets`` and come back: the port and the codec.

The broker implements :class:`OffsetsLog` over its partition logs; tests use an in-memory one. A
write is one record batch (magic 2, no producer id, the records' keys and values as in ``records``,
timestamps = the write's time), so the records of one coordinator decision are appended atomically.
Loading reads whole batches from the start of a partition and replays each record in offset order;
control batches (transaction markers) are skipped, and so are transactional batches, since this
coordinator does not commit offsets inside transactions yet.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from tidelog.common.errors import KafkaError
from tidelog.coordinator.coordinator import GroupCoordinator
from tidelog.coordinator.records import CoordinatorRecord, InvalidRecord, decode, encode_key, encode_value
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import LOG_OVERHEAD, Record, build_batch, decode_records, iter_batches

log = logging.getLogger(__name__)


class OffsetsLog(Protocol):
    """``__consumer_offsets`` as the coordinator needs it. Each call concerns one partition."""

    def append(self, partition: int, batch: bytes) -> int:
        """Append one record batch; return the log end offset after it. Raises KafkaError (with the
        code the append failed with) when nothing was appended."""
        ...

    def flush(self, partition: int) -> None:
        """Make everything appended so far durable (blocking; the shell runs it off its loop)."""
        ...

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Whole batches from ``offset`` (at least one if any remain, else empty) and the offset after them."""
        ...

    def start_offset(self, partition: int) -> int:
        """The first offset still in the log."""
        ...

    def end_offset(self, partition: int) -> int:
        """The offset the next append will get."""
        ...


def encode_batch(records: Sequence[CoordinatorRecord], now_ms: int, compression: Compression = Compression.NONE) -> bytes:
    """One record batch holding ``records`` in order."""
    return build_batch(
        [Record(i, now_ms, encode_key(r), encode_value(r)) for i, r in enumerate(records)],
        compression=compression,
    )


def decode_batches(data: bytes) -> list[CoordinatorRecord]:
    """The coordinator records in ``data`` (whole batches), in offset order.

    Records of kinds this coordinator does not keep are skipped; so is a record that does not decode
    (logged): one damaged record must not keep every group of its partition offline.
    """
    out: list[CoordinatorRecord] = []
    for header, pos in iter_batches(data, validate=True):
        if header.is_control or header.is_transactional:
            continue
        batch = memoryview(data)[pos : pos + header.batch_length + LOG_OVERHEAD]
        for record in decode_records(batch):
            if record.key is None:
                log.warning("__consumer_offsets record at offset %d has no key: skipped", record.offset)
                continue
            try:
                decoded = decode(record.key, record.value)
            except InvalidRecord as exc:
                log.warning("__consumer_offsets record at offset %d does not decode (%s): skipped", record.offset, exc)
                continue
            if decoded is not None:
                out.append(decoded)
    return out


def read_records(log_: OffsetsLog, partition: int, offset: int, max_bytes: int) -> tuple[list[CoordinatorRecord], int]:
    """Decode the next chunk of a partition: (records, offset to continue from)."""
    data, next_offset = log_.read(partition, offset, max_bytes)
    return decode_batches(data), next_offset


def load_partition(log_: OffsetsLog, coordinator: GroupCoordinator, partition: int, max_bytes: int) -> int:
    """Replay a whole partition into ``coordinator`` (already told to begin loading); return records read."""
    offset, end, count = log_.start_offset(partition), log_.end_offset(partition), 0
    while offset < end:
        try:
            records, next_offset = read_records(log_, partition, offset, max_bytes)
        except KafkaError:
            log.exception("reading __consumer_offsets-%d at %d failed", partition, offset)
            raise
        if next_offset <= offset:
            break
        for record in records:
            coordinator.replay(record)
        count += len(records)
        offset = next_offset
    return count
