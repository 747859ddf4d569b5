"""The link's byte budget: bounded in total, fair between partitions, nothing per idle partition."""

from __future__ import annotations

from tidelog.mirror.budget import MIN_SHARE, FairBudget, fetch_plan


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


def test_preserve_rounds_share_the_budget_over_busy_partitions_and_serve_the_longest_waiting_first() -> None:
    hot, quiet = ("t", 0), ("t", 1)
    others = [("u", p) for p in range(6)]
    leaders = {"a": [hot, quiet, *others[:3]], "b": others[3:]}
    busy = {hot, *others}
    plan = fetch_plan(7 * MIN_SHARE * 4, leaders, busy, served={hot: 9, others[0]: 8})
    assert plan["a"].partition_max_bytes == plan["b"].partition_max_bytes == 4 * MIN_SHARE
    # requests sized by their busy partitions: 4 of 7 at a, 3 of 7 at b; together the budget
    assert (plan["a"].max_bytes, plan["b"].max_bytes) == (16 * MIN_SHARE, 12 * MIN_SHARE)
    # never served first, then by the round of their last data: the hot partition that just brought data goes last
    assert plan["a"].order == [quiet, others[1], others[2], others[0], hot]


def test_preserve_rounds_stay_within_the_budget_with_many_busy_partitions() -> None:
    keys = [("t", p) for p in range(10_000)]
    leaders = {n: keys[n::3] for n in range(3)}
    plan = fetch_plan(64 << 20, leaders, set(keys), {})
    assert {fetch.partition_max_bytes for fetch in plan.values()} == {MIN_SHARE}
    assert sum(fetch.max_bytes for fetch in plan.values()) <= 64 << 20
    idle = fetch_plan(64 << 20, leaders, set(), {})
    assert {fetch.max_bytes for fetch in idle.values()} == {MIN_SHARE}
