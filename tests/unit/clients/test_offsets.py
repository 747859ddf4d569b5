"""DonePrefix: the committable position when items finish out of order."""

from __future__ import annotations

import pytest

from tidelog.clients.offsets import DonePrefix


def test_position_waits_for_the_oldest_unfinished_item() -> None:
    prefix = DonePrefix(0)
    for offset in range(5):
        prefix.begin(offset, offset + 1)
    assert not prefix.finish(3)
    assert not prefix.finish(1)
    assert prefix.position == 0
    assert prefix.finish(0)
    assert prefix.position == 2  # 0 and 1 done, 2 not
    prefix.finish(2)
    assert prefix.position == 4
    prefix.finish(4)
    assert (prefix.position, prefix.in_flight) == (5, 0)


def test_gaps_between_items_count_as_done() -> None:
    prefix = DonePrefix(10)
    prefix.begin(12, 13)  # 10 and 11 are transaction markers: never handed out
    prefix.begin(20, 25)
    assert prefix.position == 12
    prefix.finish(20)
    assert prefix.position == 12
    prefix.finish(12)
    assert prefix.position == 25


@pytest.mark.parametrize(("start", "end"), [(4, 4), (2, 3)])
def test_items_must_be_begun_in_order_and_non_empty(start: int, end: int) -> None:
    prefix = DonePrefix(0)
    prefix.begin(3, 4)
    with pytest.raises(ValueError):
        prefix.begin(start, end)


def test_late_and_unknown_completions_never_move_the_position() -> None:
    prefix = DonePrefix(0)
    prefix.begin(0, 1)
    prefix.begin(1, 2)
    prefix.reset(0)  # a rewind: the items are handed out again
    assert not prefix.finish(1)
    assert not prefix.finish(0)
    assert prefix.position == 0


def test_advance_to_skips_dropped_items_and_releases_finished_ones_behind_them() -> None:
    prefix = DonePrefix(0)
    for start in (0, 10, 20):
        prefix.begin(start, start + 10)
    prefix.finish(20)
    prefix.advance_to(20)  # items [0, 20) were dropped
    assert prefix.position == 30
