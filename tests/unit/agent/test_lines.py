"""LineSplitter: records end at newlines, long lines are cut and say so, multi-line records join."""

from __future__ import annotations

import re

import pytest

from tidelog.agent.lines import Line, LineSplitter

START = re.compile(rb"^\d{4}-")


def feed_in_pieces(splitter: LineSplitter, data: bytes, piece: int) -> list[Line]:
    out: list[Line] = []
    for i in range(0, len(data), piece):
        out.extend(splitter.feed(data[i : i + piece]))
    return out


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1000])
def test_lines_end_at_their_newline_whatever_the_read_sizes(piece: int) -> None:
    data = b"first\n\nthird line\n"
    lines = feed_in_pieces(LineSplitter(100, 1024), data, piece)
    assert lines == [Line(b"first", 106), Line(b"", 107), Line(b"third line", 118)]


def test_bytes_after_the_last_newline_wait_and_are_not_committed() -> None:
    splitter = LineSplitter(0, 1024)
    assert splitter.feed(b"done\npart") == [Line(b"done", 5)]
    assert splitter.committed_end == 5 and splitter.offset == 9
    assert splitter.feed(b"ial\n") == [Line(b"partial", 13)]


def test_a_finished_file_ships_its_last_line_without_a_newline() -> None:
    splitter = LineSplitter(0, 1024)
    splitter.feed(b"a\ntail")
    assert splitter.finish() == [Line(b"tail", 6)]
    assert splitter.committed_end == 6


@pytest.mark.parametrize("piece", [1, 4, 100])
def test_a_line_longer_than_the_maximum_keeps_its_head_and_its_size(piece: int) -> None:
    data = b"0123456789abcdef\nok\n"
    lines = feed_in_pieces(LineSplitter(0, 10), data, piece)
    assert lines == [Line(b"0123456789", 17, original_size=16), Line(b"ok", 20)]


@pytest.mark.parametrize("piece", [1, 5, 1000])
def test_continuation_lines_join_the_record_their_start_line_began(piece: int) -> None:
    data = b"2026-01-01 boom\n  at a\n  at b\n2026-01-02 fine\n"
    splitter = LineSplitter(0, 1024, START)
    lines = feed_in_pieces(splitter, data, piece)
    assert lines == [Line(b"2026-01-01 boom\n  at a\n  at b", 30)]
    assert splitter.committed_end == 30 and splitter.has_pending
    assert splitter.flush_pending() == [Line(b"2026-01-02 fine", 46)]


def test_lines_before_the_first_start_line_form_a_record() -> None:
    splitter = LineSplitter(0, 1024, START)
    assert splitter.feed(b"orphan\n  more\n2026-01-01 x\n") == [Line(b"orphan\n  more", 14)]


def test_a_pending_record_is_flushed_without_the_partial_line_after_it() -> None:
    splitter = LineSplitter(0, 1024, START)
    splitter.feed(b"2026-01-01 x\n  y\n  par")
    assert splitter.flush_pending() == [Line(b"2026-01-01 x\n  y", 17)]
    assert splitter.feed(b"tial\n") == []
    assert splitter.finish() == [Line(b"  partial", 27)]


def test_a_multi_line_record_is_cut_at_the_maximum_with_its_full_size() -> None:
    splitter = LineSplitter(0, 12, START)
    lines = splitter.feed(b"2026-1 abc\n  defgh\n  ij\n2026-2\n")
    assert lines == [Line(b"2026-1 abc\n ", 24, original_size=23)]
    assert splitter.finish() == [Line(b"2026-2", 31)]
