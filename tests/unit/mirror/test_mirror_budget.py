"""The link's byte budget: bounded in total, fair between partitions, nothing per idle partition."""

from __future__ import annotations

from tidelog.mirror.budget import MIN_SHARE, FairBudget


def test_a_hot_partition_is_paused_at_its_share_while_others_keep_going() -> None:
    budget = FairBudget(total=8 * MIN_SHARE)
    for p in range(4):
        assert not budget.add(("t", p), 1000)
    share = budget.share()
    assert share == 2 * MIN_SHARE
    while not budget.add(("t", 0), 64 * 1024):
        assert budget.per_partition[("t", 0)] <= share
    assert share < budget.per_partition[("t", 0)] <= share + 64 * 1024
    assert not budget.add(("t", 0), 10)  # paused once, reported once
    assert not budget.add(("t", 1), 64 * 1024)
    assert budget.paused == {("t", 0)}


def test_full_when_the_total_is_in_flight_and_release_frees_and_resumes() -> None:
    budget = FairBudget(total=4 * MIN_SHARE)
    budget.add(("t", 0), MIN_SHARE)
    budget.add(("t", 1), MIN_SHARE)
    assert budget.add(("t", 0), 2 * MIN_SHARE)  # over its share of two: paused
    assert budget.full()
    assert budget.release({("t", 0)}) == {("t", 0)}
    assert budget.in_flight == MIN_SHARE and not budget.full()
    assert budget.release() == set() and budget.in_flight == 0 and budget.per_partition == {}


def test_the_share_never_drops_below_the_minimum_with_many_partitions() -> None:
    budget = FairBudget(total=16 * MIN_SHARE)
    for p in range(10_000):
        budget.add(("t", p), 100)
    assert budget.share() == MIN_SHARE
    assert len(budget.paused) == 0


def test_for_link_splits_prefetch_and_transactions() -> None:
    budget = FairBudget.for_link(64 << 20)
    assert budget.total == 48 << 20
    assert budget.prefetch_kbytes * 1024 == 16 << 20
