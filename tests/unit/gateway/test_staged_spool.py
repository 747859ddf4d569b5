"""The staged API's spool files: every acknowledged frame read back, a torn tail cut, the steps replayed
into the transaction's state, and a finished transaction's outcome winning over a leftover spool."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.gateway.model import Record
from tidelog.gateway.staged_spool import (
    COMMITTING,
    REQUESTED,
    STORED,
    Spool,
    chunk_frame,
    chunk_records,
    read_spool,
)

BEGIN = {"transactionId": "t1", "topic": "logs", "partition": 2, "transactionalId": "gw-staged-i-t1",
         "createdMs": 1000}


def spool_with_chunks(folder: Path) -> Spool:
    spool = Spool(folder)
    spool.open()
    spool.create(BEGIN)
    spool.append("t1", chunk_frame(1, (Record(b"a"), Record(None, b"k", (("h", b"\x00\xff"),)))))
    spool.append("t1", chunk_frame(2, (Record(b"c"),)))
    return spool


def test_chunks_are_read_back_with_keys_headers_and_binary_values(tmp_path: Path) -> None:
    spool = spool_with_chunks(tmp_path)
    frames = spool.chunks("t1")
    assert [list(chunk_records(f)) for f in frames] == [
        [(None, b"a", []), (b"k", None, [("h", b"\x00\xff")])], [(None, b"c", [])]]
    facts = read_spool(spool.path("t1"))
    assert (facts.state, facts.chunks, facts.records, facts.last_seqno, facts.partition) == (STORED, 2, 3, 2, 2)


def test_a_torn_last_frame_is_cut_and_the_acknowledged_ones_kept(tmp_path: Path) -> None:
    spool = spool_with_chunks(tmp_path)
    whole = spool.path("t1").stat().st_size
    with spool.path("t1").open("ab") as handle:
        handle.write(b"\x00\x00\x01\x00\x12\x34")  # a frame header whose body never reached the disk
    recovered, done, problems = Spool(tmp_path).open()
    assert [r.chunks for r in recovered] == [2]
    assert spool.path("t1").stat().st_size == whole
    assert done == {} and "torn tail" in problems[0]


def test_a_frame_failing_its_crc_ends_the_replay(tmp_path: Path) -> None:
    spool = spool_with_chunks(tmp_path)
    data = bytearray(spool.path("t1").read_bytes())
    data[-3] ^= 0xFF  # inside the last chunk frame's JSON
    spool.path("t1").write_bytes(bytes(data))
    assert read_spool(spool.path("t1")).chunks == 1


@pytest.mark.parametrize(("steps", "state"), [
    ([{"type": "requesting"}], "requesting"),
    ([{"type": "requesting"}, {"type": "requested", "first": 5, "last": 7, "records": 3}], REQUESTED),
    ([{"type": "requested", "first": 5, "last": 7, "records": 3}, {"type": "committing"}], COMMITTING),
    ([{"type": "requested", "first": 5, "last": 7, "records": 3}, {"type": "aborted", "reason": "restart"}], STORED),
])
def test_steps_replay_into_the_state(tmp_path: Path, steps: list[dict[str, object]], state: str) -> None:
    spool = spool_with_chunks(tmp_path)
    for step in steps:
        spool.append("t1", step)
    facts = read_spool(spool.path("t1"))
    assert facts.state == state
    if state == STORED:
        assert (facts.aborted_reason, facts.first_offset) == ("restart", -1)


def test_an_outcome_file_wins_over_a_spool_left_by_a_crash(tmp_path: Path) -> None:
    spool = spool_with_chunks(tmp_path)
    (tmp_path / "t1.done").write_text('{"state": "committed", "finishedMs": 5}')
    recovered, done, _ = Spool(tmp_path).open()
    assert recovered == [] and done["t1"]["state"] == "committed"
    assert not spool.path("t1").exists()


def test_finish_writes_the_outcome_then_removes_the_spool(tmp_path: Path) -> None:
    spool = spool_with_chunks(tmp_path)
    spool.finish("t1", {"state": "expired", "finishedMs": 9})
    assert not spool.path("t1").exists()
    assert Spool(tmp_path).open()[1] == {"t1": {"state": "expired", "finishedMs": 9}}
    spool.forget("t1")
    assert Spool(tmp_path).open()[1] == {}
