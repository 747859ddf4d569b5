"""Where a source partition stands on the destination: checkpoints, shards and offset translation (pure).

The link topic (``__tidelog_mirror.<link>`` on the destination, compacted, one partition per shard)
holds one checkpoint record per mirrored source partition, in the partition of its shard, written in
the same destination transaction as the records it covers::

    key   = "<source topic>|<partition>"                                   (UTF-8)
    value = {"topic": "orders", "partition": 3, "next": 1200, "dest_next": 1187,
             "at": 1716900000000, "ts": 1716899999000,
             "syncs": [[1000, 990], [1100, 1090], [1200, 1187]]}           (JSON)

``next`` is the source offset just after the last mirrored record (where copying resumes);
``dest_next`` the destination offset just after its copy; ``at`` when the transaction committed
(ms since the epoch) and ``ts`` the timestamp of the last record copied. ``syncs`` are the last
``MAX_SYNCS`` (next, dest_next) pairs, one per transaction: the translation table. A pair (s, d) says
every source record before s is at a destination offset before d, and every one from s on is at d or
later (control records and aborted data are not copied, so the two sides' offsets drift apart).

Invariant: a checkpoint is visible (read_committed) exactly when the records it covers are, so the
destination alone says where to resume; nothing is kept on the mirror's disk.

Every mirrored record also carries its source offset in a header (``offset.header``, ASCII
decimal), which makes the translation exact: from the pair below a group's offset, the destination
is scanned to the first record whose source offset is at least the group's.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_SYNCS = 32


def shard_of(topic: str, partition: int, shards: int) -> int:
    """The shard a source partition belongs to: stable across processes, restarts and added partitions."""
    return zlib.crc32(f"{topic}|{partition}".encode()) % shards


@dataclass
class Checkpoint:
    topic: str
    partition: int
    next: int
    dest_next: int
    at: int = 0
    ts: int = -1
    syncs: list[tuple[int, int]] = field(default_factory=list)

    @property
    def key(self) -> bytes:
        return f"{self.topic}|{self.partition}".encode()

    def advanced(self, next_source: int, dest_next: int, at: int, ts: int) -> Checkpoint:
        syncs = [*self.syncs, (next_source, dest_next)][-MAX_SYNCS:]
        return Checkpoint(self.topic, self.partition, next_source, dest_next, at, ts, syncs)

    def encode(self) -> bytes:
        return json.dumps({"topic": self.topic, "partition": self.partition, "next": self.next,
                           "dest_next": self.dest_next, "at": self.at, "ts": self.ts,
                           "syncs": [list(s) for s in self.syncs]}, separators=(",", ":")).encode()

    @staticmethod
    def decode(value: bytes) -> Checkpoint:
        """Raises ValueError for a record that is not a checkpoint."""
        try:
            data: dict[str, Any] = json.loads(value)
            return Checkpoint(str(data["topic"]), int(data["partition"]), int(data["next"]), int(data["dest_next"]),
                              int(data.get("at", 0)), int(data.get("ts", -1)),
                              [(int(s), int(d)) for s, d in data.get("syncs", [])])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a mirror checkpoint: {exc!r}") from None


def start_of_scan(syncs: Sequence[tuple[int, int]], offset: int) -> int | None:
    """The destination offset from which the copy of source ``offset`` is to be looked for: the
    ``dest_next`` of the last pair whose ``next`` is at most ``offset``; None when no pair is (the scan
    starts at the destination's log start)."""
    best: int | None = None
    for source_next, dest_next in syncs:
        if source_next <= offset:
            best = dest_next if best is None else max(best, dest_next)
    return best


def translate(syncs: Sequence[tuple[int, int]], offset: int) -> int | None:
    """The destination offset equivalent to a group's committed source ``offset``, without scanning:
    exact when ``offset`` is a pair's ``next``, else the safe lower bound (records may be read again,
    none skipped). None when no pair is at or below ``offset``."""
    return start_of_scan(syncs, offset)


def encode_offset(offset: int) -> bytes:
    return b"%d" % offset


def decode_offset(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> int | None:
    """The source offset a mirrored record carries in header ``name``; None for other records."""
    for key, value in headers or ():
        if key == name and value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None
