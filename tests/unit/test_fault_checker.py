"""The fault checker's verdict (tests/helpers/checker.py) catches each way a log can betray a producer."""

from __future__ import annotations

import pytest

from helpers.checker import Ack, Figures, compare, longest_write_gap


def acked(*entries: tuple[bytes, int, int]) -> dict[bytes, Ack]:
    return {value: Ack(partition, offset, 0.0) for value, partition, offset in entries}


def verdict(acks: dict[bytes, Ack], read: dict[int, list[tuple[int, bytes]]]) -> dict[str, int]:
    figures = Figures("t", acknowledged=len(acks))
    compare(figures, acks, read)
    return {name: getattr(figures, name) for name in ("lost", "duplicated", "misplaced", "offset_gaps", "reordered")
            if getattr(figures, name)}


ACKS = acked((b"0:0", 0, 0), (b"0:1", 0, 1), (b"1:0", 0, 2))


@pytest.mark.parametrize(("read", "expected"), [
    ({0: [(0, b"0:0"), (1, b"0:1"), (2, b"1:0")]}, {}),
    ({0: [(0, b"0:0"), (1, b"0:1"), (2, b"1:0"), (3, b"1:1")]}, {}),  # unacknowledged but written: fine
    ({0: [(0, b"0:0"), (1, b"1:0")]}, {"lost": 1, "misplaced": 1}),
    ({0: [(0, b"0:0"), (1, b"0:1"), (2, b"1:0"), (3, b"0:1")]}, {"duplicated": 1, "reordered": 1}),
    ({0: [(0, b"0:0"), (1, b"0:1"), (3, b"1:0")]}, {"offset_gaps": 1, "misplaced": 1}),
    ({0: [(0, b"0:1"), (1, b"0:0"), (2, b"1:0")]}, {"misplaced": 2, "reordered": 1}),
])
def test_the_verdict_counts_what_went_wrong(read: dict[int, list[tuple[int, bytes]]], expected: dict[str, int]) -> None:
    assert verdict(ACKS, read) == expected


def test_the_longest_write_gap_is_per_partition() -> None:
    acks = [Ack(0, 0, 1.0), Ack(1, 0, 1.5), Ack(0, 1, 4.0), Ack(1, 1, 2.0)]
    assert longest_write_gap(acks) == 3.0
