"""Damaged ranges of a partition's log: batches the scrubber found corrupt in a closed segment.

A range is a run of bytes of one segment that does not hold valid batches (CRC mismatch, broken
framing, offsets out of order), from the first bad byte to the next valid batch the scrubber could
resynchronise on, or to the segment's end. Its offsets come from the valid batches around it, never
from the damaged bytes: ``start_offset`` is the offset after the last valid batch before it (the
segment's base offset when the damage starts at byte 0) and ``end_offset`` (inclusive) is the one
before the next valid batch (the next segment's base offset minus one when the damage runs to the
end). While a range is known, :meth:`~tidelog.storage.log.PartitionLog.read` refuses offsets in it
with CORRUPT_MESSAGE and stops reads that start before it at its first offset.

File ``damaged-ranges`` in the partition directory, in the checkpoint format of checkpoint.py
(replaced atomically; absent when no range is known)::

    0                                   <- version
    1                                   <- number of ranges
    1200 1263 1024 53248 4130 1718000000000 crc-mismatch
    ^    ^    ^    ^     ^    ^             ^ kind: crc-mismatch | bad-framing | offset-order
    |    |    |    |     |    found at (epoch ms)
    |    |    |    |     bytes
    |    |    |    byte position in the segment's .log
    |    |    segment base offset
    |    end offset (inclusive)
    start offset

The file lives with the partition, so deleting the partition forgets its ranges; truncation and
retention drop the ranges whose offsets left the log (see log.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tidelog.storage.checkpoint import CheckpointError, fsync_dir, read_entries, write_entries

FILE_NAME = "damaged-ranges"
KINDS = ("crc-mismatch", "bad-framing", "offset-order")


@dataclass(frozen=True, order=True, slots=True)
class DamagedRange:
    start_offset: int
    end_offset: int  # inclusive
    segment_base: int
    position: int
    length: int
    found_ms: int
    kind: str

    def holds(self, offset: int) -> bool:
        return self.start_offset <= offset <= self.end_offset

    def describe(self) -> str:
        return (f"offsets {self.start_offset}-{self.end_offset}, {self.length} bytes at byte {self.position} of "
                f"segment {self.segment_base:020d}.log ({self.kind})")


def read_damage(partition_dir: Path) -> list[DamagedRange]:
    """The ranges recorded in the directory (none when there is no file); CheckpointError if malformed."""
    out = []
    for row in read_entries(partition_dir / FILE_NAME, 7):
        *numbers, kind = row
        if kind not in KINDS:
            raise CheckpointError(f"{partition_dir / FILE_NAME}: unknown kind {kind!r}")
        try:
            start, end, base, position, length, found = (int(n) for n in numbers)
        except ValueError:
            raise CheckpointError(f"{partition_dir / FILE_NAME}: bad entry {' '.join(row)}") from None
        out.append(DamagedRange(start, end, base, position, length, found, kind))
    return sorted(out)


def write_damage(partition_dir: Path, ranges: list[DamagedRange]) -> None:
    """Replace the file (durably); remove it when ``ranges`` is empty."""
    path = partition_dir / FILE_NAME
    if not ranges:
        if path.exists():
            path.unlink()
            fsync_dir(partition_dir)
        return
    write_entries(path, ((r.start_offset, r.end_offset, r.segment_base, r.position, r.length, r.found_ms, r.kind)
                         for r in sorted(ranges)))
