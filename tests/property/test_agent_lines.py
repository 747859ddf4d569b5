"""LineSplitter: however a file's bytes arrive, the same records come out, and they rebuild the file."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.agent.lines import Line, LineSplitter

START = re.compile(rb"^S")
chunks = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"\n")), max_size=30)
cuts = st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=20)


def split(data: bytes, sizes: list[int], max_bytes: int, pattern: re.Pattern[bytes] | None) -> list[Line]:
    splitter = LineSplitter(7, max_bytes, pattern)
    out: list[Line] = []
    start, i = 0, 0
    while start < len(data):
        size = sizes[i % len(sizes)]
        out.extend(splitter.feed(data[start : start + size]))
        start += size
        i += 1
    out.extend(splitter.finish())
    return out


@settings(max_examples=200, deadline=None)
@given(chunks, cuts)
def test_lines_rebuild_the_file_whatever_the_read_sizes(parts: list[bytes], sizes: list[int]) -> None:
    data = b"".join(parts)
    lines = split(data, sizes, 1 << 20, None)
    assert lines == split(data, [len(data) or 1], 1 << 20, None)
    rebuilt = b"\n".join(line.value for line in lines) + (b"\n" if data.endswith(b"\n") else b"")
    assert rebuilt == data
    ends = [line.end for line in lines]
    assert ends == sorted(set(ends)) and (not lines or ends[-1] == 7 + len(data))


@settings(max_examples=200, deadline=None)
@given(chunks, cuts, st.integers(min_value=1, max_value=12), st.booleans())
def test_records_are_the_same_whatever_the_read_sizes_and_never_exceed_the_maximum(
    parts: list[bytes], sizes: list[int], max_bytes: int, multiline: bool
) -> None:
    data = b"".join(parts)
    pattern = START if multiline else None
    lines = split(data, sizes, max_bytes, pattern)
    assert lines == split(data, [len(data) or 1], max_bytes, pattern)
    assert all(len(line.value) <= max_bytes for line in lines)
    assert all(line.original_size == 0 or line.original_size > max_bytes for line in lines)
    ends = [line.end for line in lines]
    assert ends == sorted(set(ends)) and (not lines or ends[-1] == 7 + len(data))
