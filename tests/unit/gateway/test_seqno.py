"""The exactly-once rule per source, without sockets."""

from __future__ import annotations

import pytest

from tidelog.gateway.seqno import (
    MAX_SEQNO,
    SeqnoError,
    SourceState,
    check_seqno,
    default_partition,
    murmur2,
    plan,
)


@pytest.mark.parametrize(("state", "seqnos", "write", "last"), [
    (None, [1], (True,), 1),
    (None, [0], (True,), 0),
    (SourceState(5, 2), [5], (False,), 5),
    (SourceState(5, 2), [3, 4, 5], (False, False, False), 5),
    (SourceState(5, 2), [5, 6, 7], (False, True, True), 7),
    (SourceState(5, 2), [7, 6, 8], (True, False, True), 8),   # a smaller seqno after a written one is a duplicate
    (SourceState(5, 2), [9, 9], (True, False), 9),            # the same seqno twice in one request: written once
    (SourceState(5, 2), [100], (True,), 100),                  # gaps are allowed: seqnos only have to grow
])
def test_chunk_is_written_iff_its_seqno_is_above_the_last_written(
        state: SourceState | None, seqnos: list[int], write: tuple[bool, ...], last: int) -> None:
    decision = plan(state, seqnos, new_partition=0)
    assert decision.write == write
    assert decision.last_seqno == last


def test_known_source_keeps_its_partition_and_new_source_takes_the_default() -> None:
    assert plan(SourceState(1, 7), [2], new_partition=3).partition == 7
    assert plan(None, [2], new_partition=3).partition == 3


def test_nothing_to_write_leaves_the_last_seqno_as_stored() -> None:
    decision = plan(SourceState(10, 0), [1, 2], new_partition=0)
    assert not decision.writes_anything
    assert decision.last_seqno == 10


@pytest.mark.parametrize("bad", [-1, MAX_SEQNO + 1, True, 1.0, "3", None])
def test_seqno_outside_the_range_or_not_an_integer_is_refused(bad: object) -> None:
    with pytest.raises(SeqnoError):
        check_seqno(bad)


def test_murmur2_matches_kafkas_java_client() -> None:
    # Values of org.apache.kafka.common.utils.Utils.murmur2 (from Kafka's UtilsTest).
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_default_partition_is_stable_and_in_range() -> None:
    picks = {default_partition(f"source-{i}".encode(), 6) for i in range(200)}
    assert picks == set(range(6))
    assert default_partition(b"web-1", 6) == default_partition(b"web-1", 6)
    with pytest.raises(ValueError):
        default_partition(b"x", 0)
