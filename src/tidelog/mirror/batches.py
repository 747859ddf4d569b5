"""Source batches made ready for an offset-preserving write: pure, no I/O.

A source Fetch answer holds whole v2 batches, the last one possibly cut short by the fetch's byte
limit (Kafka and tidelog both do that). :func:`ready` keeps the whole ones, from the destination's
log end offset (``position``) on:

- a batch wholly below ``position`` is dropped (the destination has it);
- a batch starting at or past ``position`` is kept byte for byte: data, transactional data and
  control batches alike, so an aborted transaction stays aborted on the destination and a committed
  one committed, and every record keeps its offset, key, headers and timestamps;
- a batch straddling ``position`` can only appear when the source's batch boundaries changed since
  the copy was made (the source compacted the range meanwhile). It is rebuilt with only its records
  at or past ``position``, same producer id, epoch, transactional flag, compression and timestamps,
  and a base sequence moved by the offsets dropped. A control batch holds one record and never
  straddles.

A cut last batch is left for the next fetch (``next_fetch`` is its base offset).
"""

from __future__ import annotations

from typing import NamedTuple

from tidelog.protocol.records import BatchHeader, build_batch, decode_records, scan_valid_prefix

Buffer = bytes | bytearray | memoryview
NO_SEQUENCE = -1


class Ready(NamedTuple):
    records: bytes  # whole batches to send, at or past the position ("" when none)
    batches: int
    record_count: int
    next_fetch: int  # where the next fetch starts: past the last whole batch (or ``position``)
    trimmed: int  # straddling batches rebuilt


def ready(buf: Buffer | None, position: int) -> Ready:
    """The batches of a fetch answer ``buf`` to write at a destination whose log end is ``position``."""
    if not buf:
        return Ready(b"", 0, 0, position, 0)
    scan = scan_valid_prefix(buf)
    view = memoryview(buf)
    parts: list[Buffer] = []
    count = trimmed = 0
    next_fetch = position
    for header, pos in scan.batches:
        if header.last_offset < position:
            continue
        batch = view[pos : pos + header.size]
        if header.base_offset < position:
            batch = memoryview(_trim(batch, header, position))
            trimmed += 1
        parts.append(batch)
        count += header.records_count if header.base_offset >= position else _count(batch)
        next_fetch = header.next_offset
    return Ready(b"".join(parts), len(parts), count, next_fetch, trimmed)


def _count(batch: Buffer) -> int:
    return BatchHeader.parse(batch).records_count


def _trim(batch: Buffer, header: BatchHeader, position: int) -> bytes:
    """``batch`` without its records below ``position``; it still ends at the same last offset."""
    kept = [r for r in decode_records(batch) if r.offset >= position]
    base = kept[0].offset if kept else position
    sequence = header.base_sequence
    if sequence != NO_SEQUENCE:
        sequence += base - header.base_offset
    return build_batch(
        kept, base_offset=base, compression=header.compression, producer_id=header.producer_id,
        producer_epoch=header.producer_epoch, base_sequence=sequence,
        partition_leader_epoch=header.partition_leader_epoch, transactional=header.is_transactional,
        timestamp_type=header.timestamp_type, max_timestamp=header.max_timestamp,
        last_offset_delta=header.last_offset - base)
