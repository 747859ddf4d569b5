"""Which batches of an offset-preserving (mirror) append are written: a pure decision.

A mirror in ``offsets=preserve`` mode sends whole batches that keep the base offsets they have on
the source cluster. The destination partition holds them at exactly those offsets, so a committed
consumer offset means the same record on both clusters. Given the batches' offset spans (in the
order sent) and the partition's log end offset, :func:`decide` says what happens:

- a batch wholly below the log end (``last < log_end``) is a **duplicate**: it was written by an
  earlier attempt (a retry after a lost answer, or a mirror restarted after ``kill -9`` that read
  again what it had already copied). It is acknowledged and not written. Duplicates can only come
  first, since the spans must increase;
- a batch **straddling** the log end (``base < log_end <= last``) is refused: half of it is there
  already, which a copy of the same source bytes cannot produce. It means the source's batch
  boundaries changed (the source was compacted between two reads) or another writer got in; the
  mirror must trim it (``tidelog.mirror.batches``) and send it again. Nothing of the request is
  written then;
- every other batch is written at its own offsets. A batch above the log end leaves a **gap**, as
  compaction or retention leaves on the source: gaps are allowed, and reads skip them as they do
  any compacted range.

Spans must strictly increase (each base above the previous batch's last offset); otherwise the
request is refused. Refusals are ``KafkaError(INVALID_RECORD)`` with the offsets in the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from tidelog.common.errors import ErrorCode, KafkaError


class SourceAppend(NamedTuple):
    duplicates: int  # leading batches already in the log: acknowledged, not written
    first_offset: int  # base offset of the first batch written (-1 when every batch is a duplicate)
    gap: int  # offsets skipped between the log end and the first batch written

    @property
    def writes(self) -> bool:
        return self.first_offset >= 0


def decide(spans: Sequence[tuple[int, int]], log_end: int) -> SourceAppend:
    """The decision for batches spanning ``spans`` (base, last) against ``log_end`` (see the module)."""
    if not spans:
        raise KafkaError(ErrorCode.INVALID_RECORD, "no record batch to append")
    previous = -1
    duplicates = 0
    for base, last in spans:
        if base < 0 or last < base:
            raise KafkaError(ErrorCode.INVALID_RECORD, f"batch has offsets [{base}, {last}]")
        if base <= previous:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"batches out of offset order: [{base}, {last}] follows offset {previous}")
        previous = last
        if last < log_end:
            duplicates += 1
        elif base < log_end:
            raise KafkaError(ErrorCode.INVALID_RECORD,
                             f"batch [{base}, {last}] straddles the log end offset {log_end}: offsets "
                             f"{base}-{log_end - 1} are already written; send it from {log_end} on")
    if duplicates == len(spans):
        return SourceAppend(duplicates, -1, 0)
    first = spans[duplicates][0]
    return SourceAppend(duplicates, first, first - log_end)
