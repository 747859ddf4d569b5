"""Source: one path followed through renames, copytruncate and truncation, with rewinds and restarts."""

from __future__ import annotations

import os
from pathlib import Path

from tidelog.agent.config import FileGroup
from tidelog.agent.files import Source

GROUP = FileGroup(paths=("*.log",), topic="t")
WAIT = 1.0


def drain(source: Source, now: float) -> list[tuple[int, bytes, int]]:
    source.check(now)
    return [(gen.number, line.value, line.end) for gen, line in source.read(1000, now, WAIT, WAIT)]


def open_source(path: Path) -> Source:
    source = Source(f"h:{path}", str(path), GROUP)
    assert source.open_path(0.0)
    return source


def test_a_renamed_file_is_read_to_its_end_before_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\n")
    source = open_source(log)
    assert drain(source, 0.0) == [(0, b"a", 2)]
    with log.open("ab") as f:
        f.write(b"b\n")
    log.rename(tmp_path / "app.log.1")
    log.write_bytes(b"c\n")
    assert drain(source, 1.0) == [(0, b"b", 4)]  # generation 1 waits while 0 may still grow
    with (tmp_path / "app.log.1").open("ab") as f:
        f.write(b"late")
    assert drain(source, 1.5) == []  # partial: the writer may finish it
    assert drain(source, 3.0) == [(0, b"late", 8), (1, b"c", 2)]
    source.committed()
    assert [g.number for g in source.generations] == [1]


def test_a_deleted_file_is_still_read_through_its_descriptor(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\n")
    source = open_source(log)
    with log.open("ab") as f:
        f.write(b"b\n")
    log.unlink()
    assert drain(source, 0.0) == [(0, b"a", 2), (0, b"b", 4)]
    assert drain(source, 5.0) == []
    source.committed()
    assert source.generations == []
    log.write_bytes(b"again\n")
    assert drain(source, 6.0) == [(1, b"again", 6)]


def test_copytruncate_continues_in_the_copy_then_reads_the_emptied_file(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"one\n")
    source = open_source(log)
    assert drain(source, 0.0) == [(0, b"one", 4)]
    with log.open("ab") as f:
        f.write(b"two\n")
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())
    os.truncate(log, 0)
    with log.open("ab") as f:
        f.write(b"three is longer\n")  # regrown past the old size: seen by the changed head
    assert drain(source, 1.0) == [(0, b"two", 8), (1, b"three is longer", 16)]


def test_truncation_without_a_copy_reports_the_unread_bytes_lost(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"one\n")
    source = open_source(log)
    assert drain(source, 0.0) == [(0, b"one", 4)]
    with log.open("ab") as f:
        f.write(b"two\n")
    source.check(0.5)  # sees the growth
    os.truncate(log, 0)
    log.write_bytes(b"x\n")
    assert drain(source, 1.0) == [(1, b"x", 2)]
    assert source.lost_bytes == 4


def test_a_rewind_reads_again_from_the_committed_positions(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\nb\n")
    source = open_source(log)
    assert drain(source, 0.0) == [(0, b"a", 2), (0, b"b", 4)]
    source.rewind()
    assert drain(source, 0.1) == [(0, b"a", 2), (0, b"b", 4)]
    source.committed()
    source.rewind()
    assert drain(source, 0.2) == []


def test_a_restart_finds_a_file_renamed_while_the_agent_was_down(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\n")
    source = open_source(log)
    drain(source, 0.0)
    source.committed()
    saved, next_gen = source.saved_state(), source.next_generation
    source.close()
    with log.open("ab") as f:
        f.write(b"b\n")
    log.rename(tmp_path / "app.log.1")
    log.write_bytes(b"c\n")
    restarted = Source(source.source_id, str(log), GROUP)
    restarted.restore(saved, next_gen, 0.0)
    assert drain(restarted, 0.0) == [(0, b"b", 4), (1, b"c", 2)]


def test_a_restart_finds_the_copy_of_a_file_truncated_while_the_agent_was_down(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\n")
    source = open_source(log)
    drain(source, 0.0)
    source.committed()
    saved = source.saved_state()
    source.close()
    with log.open("ab") as f:
        f.write(b"b\n")
    (tmp_path / "app.log.1").write_bytes(log.read_bytes())
    log.write_bytes(b"c\n")  # truncates the same inode
    restarted = Source(source.source_id, str(log), GROUP)
    restarted.restore(saved, 1, 0.0)
    assert drain(restarted, 0.0) == [(0, b"b", 4), (1, b"c", 2)]


def test_a_restart_resumes_the_same_file_at_its_position(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"a\n")
    source = open_source(log)
    drain(source, 0.0)
    source.committed()
    saved = source.saved_state()
    source.close()
    with log.open("ab") as f:
        f.write(b"b\n")
    restarted = Source(source.source_id, str(log), GROUP)
    restarted.restore(saved, 1, 0.0)
    assert drain(restarted, 0.0) == [(0, b"b", 4)]
