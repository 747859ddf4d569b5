"""Checkpoints, shards and offset translation: the mirror's position recovery, without sockets."""

from __future__ import annotations

import tracemalloc

import pytest

from tidelog.mirror.position import (
    MAX_SYNCS,
    Checkpoint,
    Syncs,
    decode_offset,
    shard_of,
    start_of_scan,
    translate,
)


def test_checkpoint_round_trips_and_keeps_the_last_syncs() -> None:
    checkpoint = Checkpoint("orders", 3, 0, 0)
    for i in range(1, MAX_SYNCS + 5):
        checkpoint = checkpoint.advanced(i * 100, i * 90, 1_000 + i, 500 + i)
    again = Checkpoint.decode(checkpoint.encode())
    assert again == checkpoint
    assert (again.next, again.dest_next, again.key) == ((MAX_SYNCS + 4) * 100, (MAX_SYNCS + 4) * 90, b"orders|3")
    assert len(again.syncs) == MAX_SYNCS and again.syncs[0] == (500, 450)


def test_syncs_read_as_the_pairs_they_were_given() -> None:
    pairs = [(100, 95), (200, 180), (2**40, 2**40 - 7)]
    syncs = Syncs(pairs)
    assert list(syncs) == pairs and len(syncs) == 3
    assert (syncs[0], syncs[-1], syncs[1:]) == ((100, 95), (2**40, 2**40 - 7), pairs[1:])
    assert syncs == pairs and syncs == Syncs(pairs) and syncs != Syncs(pairs[:2])
    assert syncs.appended((300, 260), 3) == [(200, 180), (2**40, 2**40 - 7), (300, 260)]
    assert syncs == pairs  # appended() makes a new one
    with pytest.raises(IndexError):
        syncs[3]
    assert Checkpoint("t", 0, 1, 1, syncs=pairs) == Checkpoint("t", 0, 1, 1, syncs=Syncs(pairs))


def test_a_full_checkpoint_takes_about_a_kib_in_memory() -> None:
    """A process holds the committed checkpoint of every partition it copies; with MAX_SYNCS pairs each
    as tuples of ints that was about 4 KiB a partition (43.7 MiB for 10,000); packed, about 1 KiB."""
    tracemalloc.start()
    try:
        kept = []
        for partition in range(2_000):
            checkpoint = Checkpoint("orders", partition, 0, 0)
            for i in range(MAX_SYNCS + 1):
                checkpoint = checkpoint.advanced(10**9 + i * 1000 + partition, 10**9 + i * 990, 1_764_700_000_000, 1)
            kept.append(checkpoint)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(kept[-1].syncs) == MAX_SYNCS
    assert held / 2_000 < 1536, f"{held / 2_000:.0f} bytes a checkpoint"


@pytest.mark.parametrize("value", [b"", b"{}", b"[1]", b'{"topic":"t","partition":"x","next":1,"dest_next":1}'])
def test_a_record_that_is_not_a_checkpoint_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError, match="not a mirror checkpoint"):
        Checkpoint.decode(value)


def test_shards_are_stable_and_spread() -> None:
    shards = [shard_of("orders", p, 16) for p in range(1000)]
    assert shards == [shard_of("orders", p, 16) for p in range(1000)]
    assert set(shards) == set(range(16))
    assert max(shards.count(s) for s in range(16)) < 2 * 1000 // 16


SYNCS = [(100, 95), (200, 180), (300, 260)]


@pytest.mark.parametrize(("offset", "expected"), [
    (50, None),    # below every pair: scan from the destination's start
    (100, 95),     # exactly a boundary: exact
    (150, 95),     # inside a transaction: the boundary below, a safe lower bound
    (300, 260),
    (1000, 260),
])
def test_translation_takes_the_last_boundary_at_or_below(offset: int, expected: int | None) -> None:
    assert start_of_scan(SYNCS, offset) == expected
    assert translate(SYNCS, offset) == expected


def test_the_offset_header_is_read_back() -> None:
    headers = [("h", b"1"), ("tidelog.mirror.offset", b"1234")]
    assert decode_offset(headers, "tidelog.mirror.offset") == 1234
    assert decode_offset([("tidelog.mirror.offset", b"x")], "tidelog.mirror.offset") is None
    assert decode_offset(None, "tidelog.mirror.offset") is None
