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

In memory a process keeps the committed checkpoint of every partition it copies, so ``syncs`` is
packed (``Syncs``: one array of 64-bit integers, 16 bytes a pair): as tuples of ints the 32 pairs
took about 4 KiB a partition, 40 MiB at 10,000 partitions.
"""

from __future__ import annotations

import json
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

MAX_SYNCS = 32


def shard_of(topic: str, partition: int, shards: int) -> int:
    """The shard a source partition belongs to: stable across processes, restarts and added partitions."""
    return zlib.crc32(f"{topic}|{partition}".encode()) % shards


class Syncs(Sequence[tuple[int, int]]):
    """An immutable sequence of (next, dest_next) pairs, packed in one ``array("q")``."""

    __slots__ = ("_flat",)

    def __init__(self, pairs: Iterable[tuple[int, int]] = ()) -> None:
        self._flat = array("q", [offset for pair in pairs for offset in pair])

    @classmethod
    def _of(cls, flat: array[int]) -> Syncs:
        syncs = cls.__new__(cls)
        syncs._flat = flat
        return syncs

    def appended(self, pair: tuple[int, int], keep: int) -> Syncs:
        """These pairs and ``pair``, the last ``keep`` of them."""
        flat = self._flat[-2 * (keep - 1):] if keep > 1 else array("q")
        flat.extend(pair)
        return Syncs._of(flat)

    def __len__(self) -> int:
        return len(self._flat) // 2

    @overload
    def __getitem__(self, index: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[int, int]]: ...
    def __getitem__(self, index: int | slice) -> tuple[int, int] | Sequence[tuple[int, int]]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("sync pair index out of range")
        return self._flat[2 * index], self._flat[2 * index + 1]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        flat = self._flat
        return zip(flat[::2], flat[1::2], strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Syncs):
            return self._flat == other._flat
        if isinstance(other, Sequence):
            return list(self) == [tuple(pair) for pair in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Syncs({list(self)!r})"


@dataclass(slots=True)
class Checkpoint:
    """``syncs`` may be given as any sequence of pairs; it is kept as ``Syncs``."""

    topic: str
    partition: int
    next: int
    dest_next: int
    at: int = 0
    ts: int = -1
    syncs: Sequence[tuple[int, int]] = field(default_factory=Syncs)

    def __post_init__(self) -> None:
        if not isinstance(self.syncs, Syncs):
            self.syncs = Syncs(self.syncs)

    @property
    def key(self) -> bytes:
        return f"{self.topic}|{self.partition}".encode()

    def advanced(self, next_source: int, dest_next: int, at: int, ts: int) -> Checkpoint:
        syncs = self.syncs if isinstance(self.syncs, Syncs) else Syncs(self.syncs)
        return Checkpoint(self.topic, self.partition, next_source, dest_next, at, ts,
                          syncs.appended((next_source, dest_next), MAX_SYNCS))

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
