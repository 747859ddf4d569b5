"""The exactly-once rule per source, as pure functions: state and chunks in, decisions out.

A *source* (one file on one host) is named by ``sourceId`` and writes to one topic. Each chunk it sends
carries a ``seqno`` that only grows. The gateway keeps, per (topic, sourceId), a ``SourceState``: the
last seqno written and the partition every chunk of the source goes to. The rule (``plan``):

- chunks are taken in the order the request lists them;
- a chunk is **written** iff its seqno is greater than the last seqno written (the stored one, or one
  written earlier in the same request); otherwise it is a **duplicate**: skipped, nothing written;
- the partition is the stored one; a source seen for the first time gets ``default_partition(source,
  partition_count)`` (Kafka's murmur2 of the sourceId), and keeps it from then on even if the topic
  grows, so that a source's chunks stay in order in one partition.

Seqnos are integers in [0, 2**63 - 1]; ``check_seqno`` rejects anything else (bools too) before
any decision is taken. Nothing here does I/O; the shard writer applies a plan inside one Kafka
transaction together with the new state (``state_codec``), so that the state moves iff the data lands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_SEQNO = 2**63 - 1


@dataclass(frozen=True)
class SourceState:
    seqno: int
    partition: int


@dataclass(frozen=True)
class Plan:
    partition: int
    write: tuple[bool, ...]  # one per chunk, in request order: True = write, False = duplicate
    last_seqno: int  # the source's last seqno once the plan is applied (the stored one if nothing is written)

    @property
    def writes_anything(self) -> bool:
        return any(self.write)


class SeqnoError(ValueError):
    """A seqno is not an integer in [0, 2**63 - 1]."""


def check_seqno(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQNO:
        raise SeqnoError(f"seqno must be an integer from 0 to {MAX_SEQNO}, got {value!r}")
    return value


def plan(state: SourceState | None, seqnos: Sequence[int], new_partition: int) -> Plan:
    """Which chunks to write, to which partition. ``new_partition`` is used only for a new source."""
    last = state.seqno if state is not None else -1
    write = []
    for seqno in seqnos:
        fresh = seqno > last
        write.append(fresh)
        if fresh:
            last = seqno
    partition = state.partition if state is not None else new_partition
    return Plan(partition, tuple(write), last)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), as a signed 32-bit int."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, partition_count: int) -> int:
    """Kafka's keyed choice: ``toPositive(murmur2(key)) % partitions``."""
    if partition_count <= 0:
        raise ValueError("a topic has at least one partition")
    return (murmur2(key) & 0x7FFFFFFF) % partition_count
