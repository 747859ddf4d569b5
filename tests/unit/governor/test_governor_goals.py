"""Each goal on a small hand-written cluster: it sees the violation, the planner fixes it, and the
result holds once executed (simulated); lower goals never undo higher ones."""

from __future__ import annotations

import dataclasses

import pytest

from tidelog.governor.goals import (
    DISK,
    LEADER_IN,
    LEADERS,
    NETWORK_IN,
    NETWORK_OUT,
    REPLICAS,
    BalanceGoal,
    DiskCapacityGoal,
    ExcludedBrokersGoal,
    Goal,
    RackAwareGoal,
    ReplicaCapacityGoal,
    TenantPoolGoal,
    default_goals,
)
from tidelog.governor.model import ClusterModel
from tidelog.governor.planner import execute_in_simulation, plan
from tidelog.governor.state import Exchange, LeaderMove, ReplicaMove, State
from tidelog.governor.synthetic import small_cluster

SIX = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]


def violations_after(model: ClusterModel, goals: list[Goal]) -> dict[str, int]:
    result = plan(model, goals)
    state = State(execute_in_simulation(model, result.moves))
    out = {}
    for g in goals:
        g.prepare(state)
        out[g.name] = g.violations(state)
    return out


def test_rack_awareness_moves_a_replica_off_a_doubled_rack() -> None:
    model = small_cluster(SIX, [("t", [1, 2, 3], 10, 1, 1)])
    goal = RackAwareGoal()
    goal.prepare(State(model))
    assert goal.violations(State(model)) == 1
    result = plan(model, [goal])
    assert result.ok and len(result.moves) == 1
    after = result.moves[0].after
    assert len({dict(SIX)[b] for b in after}) == 3


def test_rack_awareness_allows_two_per_rack_when_racks_are_fewer_than_replicas() -> None:
    model = small_cluster([(1, "a"), (2, "a"), (3, "b"), (4, "b")], [("t", [1, 2, 3], 10, 1, 1)])
    goal = RackAwareGoal()
    assert goal.violations(State(model)) == 0


def test_rack_awareness_refuses_a_move_onto_a_used_rack() -> None:
    model = small_cluster(SIX, [("t", [1, 3, 5], 10, 1, 1)])
    s = State(model)
    goal = RackAwareGoal()
    goal.prepare(s)
    assert not goal.accepts(s, ReplicaMove(0, 0, 2))  # broker 1 (a) -> 3 (b): b already used
    assert goal.accepts(s, ReplicaMove(0, 0, 1))      # a -> a: same rack


def test_excluded_broker_is_emptied_and_keeps_racks_spread() -> None:
    model = small_cluster(SIX, [("t", [1, 3, 5], 10, 1, 1), ("t", [5, 1, 3], 10, 1, 1)]).with_excluded({1: "draining"})
    goals = [ExcludedBrokersGoal(), RackAwareGoal()]
    result = plan(model, goals)
    assert result.ok
    assert all(1 not in m.after for m in result.moves) and len(result.moves) == 2
    assert violations_after(model, goals) == {"excluded-brokers": 0, "rack-awareness": 0}
    # the replacement is broker 2, the other broker of rack a
    assert all(2 in m.after for m in result.moves)


def test_excluded_broker_with_nowhere_to_go_is_reported_unmet() -> None:
    model = small_cluster([(1, "a"), (2, "b")], [("t", [1, 2], 10, 1, 1)]).with_excluded({2: "dead"})
    result = plan(model, [ExcludedBrokersGoal()])
    assert not result.ok and result.unmet_hard == ("excluded-brokers",)


def test_tenant_pool_pulls_a_topic_back_onto_its_brokers() -> None:
    model = small_cluster(SIX, [("billing", [1, 3], 10, 1, 1)], tenants={"billing": ("acme", {3, 4, 5, 6})})
    result = plan(model, [TenantPoolGoal(), RackAwareGoal()])
    assert result.ok
    assert set(result.moves[0].after) <= {3, 4, 5, 6}


def test_replica_capacity_caps_replicas_per_broker() -> None:
    parts = [("t", [1], 10, 1, 1)] * 5
    model = small_cluster([(1, "a"), (2, "b")], parts)
    result = plan(model, [ReplicaCapacityGoal(max_replicas=3)])
    assert result.ok
    final = State(execute_in_simulation(model, result.moves))
    assert max(final.replica_count) <= 3


def test_disk_capacity_moves_bytes_off_a_full_broker() -> None:
    model = small_cluster([(1, "a"), (2, "b"), (3, "c")], [("t", [1], 500, 1, 1), ("t", [1], 400, 1, 1),
                                                           ("t", [2], 100, 1, 1)], disk_capacity=1000)
    result = plan(model, [DiskCapacityGoal(threshold=0.8)])
    assert result.ok
    assert State(execute_in_simulation(model, result.moves)).disk_ratio(0) <= 0.8


def test_disk_capacity_refuses_moves_that_overfill_the_destination() -> None:
    model = small_cluster([(1, "a"), (2, "b")], [("t", [1], 500, 1, 1), ("t", [2], 700, 1, 1)], disk_capacity=1000)
    s, goal = State(model), DiskCapacityGoal(threshold=0.8)
    assert not goal.accepts(s, ReplicaMove(0, 0, 1))


@pytest.mark.parametrize("metric", [DISK, NETWORK_IN, REPLICAS], ids=lambda m: m.name)
def test_balance_goal_evens_a_skewed_cluster(metric: object) -> None:
    parts = [("t", [1 + (i % 2)], 100, 10.0, 10.0) for i in range(8)] + [("u", [1], 100, 10.0, 10.0)] * 4
    model = small_cluster([(1, "a"), (2, "b"), (3, "c"), (4, "d")], parts, disk_capacity=10_000)
    goal = BalanceGoal(metric, 0.10)  # type: ignore[arg-type]
    assert goal.violations(State(model)) > 0
    assert violations_after(model, [goal]) == {metric.name: 0}  # type: ignore[attr-defined]


@pytest.mark.parametrize("metric", [LEADERS, LEADER_IN, NETWORK_OUT], ids=lambda m: m.name)
def test_leader_goals_balance_by_moving_leadership_only(metric: object) -> None:
    # every partition led by broker 1; replicas already spread: only leadership needs to move
    parts = [("t", [1, 2, 3], 100, 10.0, 5.0) for _ in range(6)]
    model = small_cluster([(1, "a"), (2, "b"), (3, "c")], parts)
    goal = BalanceGoal(metric, 0.10)  # type: ignore[arg-type]
    result = plan(model, [goal])
    assert result.replica_moves == 0 and result.leader_moves > 0
    assert result.bytes_to_copy == 0 and all(m.leader_only for m in result.moves)
    assert violations_after(model, [goal]) == {metric.name: 0}  # type: ignore[attr-defined]


def test_lower_goal_never_breaks_rack_awareness() -> None:
    # replica count pulls toward broker 2, but broker 2 shares rack a with broker 1: refused
    parts = [("t", [1, 3], 10, 1, 1)] * 4
    model = small_cluster([(1, "a"), (2, "a"), (3, "b")], parts)
    result = plan(model, [RackAwareGoal(), BalanceGoal(REPLICAS, 0.0)])
    final = State(execute_in_simulation(model, result.moves))
    rack = RackAwareGoal()
    assert rack.violations(final) == 0


def test_leader_move_swaps_the_preferred_leader_to_the_front() -> None:
    model = small_cluster(SIX, [("t", [1, 3, 5], 10, 1, 1)])
    s = State(model)
    s.apply(LeaderMove(0, 0, 4))
    assert s.replicas[0] == (4, 0, 2) and s.leader[0] == 4 and s.leader_count[4] == 1 and s.leader_count[0] == 0


def test_plan_reports_scores_before_and_after_for_every_goal() -> None:
    parts = [("t", [1, 3, 5], 100, 10.0, 5.0) for _ in range(12)]
    model = small_cluster(SIX, parts, disk_capacity=100_000)
    result = plan(model, default_goals())
    names = [g.name for g in result.goals]
    assert names[:5] == ["excluded-brokers", "rack-awareness", "tenant-pools", "replica-capacity", "disk-capacity"]
    disk = next(g for g in result.goals if g.name == "disk-usage")
    assert disk.violations_before > 0 and disk.violations_after == 0 and disk.score_after < disk.score_before


def counts_tight_on_bytes() -> ClusterModel:
    # disk even (400 each), replicas 4 against 8: a single small replica onto broker 1 overfills its
    # disk band (450 > 440); two small ones for one big one moves the counts and no bytes
    parts = [("big", [1], 100, 1.0, 1.0)] * 4 + [("small", [2], 50, 1.0, 1.0)] * 8
    return small_cluster([(1, "a"), (2, "b")], parts, disk_capacity=10_000)


def test_replica_count_converges_by_exchanges_when_the_disk_band_refuses_single_moves() -> None:
    model = counts_tight_on_bytes()
    goals: list[Goal] = [BalanceGoal(DISK, 0.10), BalanceGoal(REPLICAS, 0.10)]
    assert violations_after(model, goals) == {"disk-usage": 0, "replica-count": 0}
    result = plan(model, goals)
    assert result.replica_moves == 3 and result.bytes_to_copy == 200  # one exchange: 2 small over, 1 big back
    assert {m.topic for m in result.moves if m.after == (1,)} == {"small"}
    assert {m.topic for m in result.moves if m.after == (2,)} == {"big"}


def test_without_exchanges_the_replica_count_goal_stays_unmet() -> None:
    single_moves_only = BalanceGoal(dataclasses.replace(REPLICAS, exchanges=False), 0.10)
    assert violations_after(counts_tight_on_bytes(), [BalanceGoal(DISK, 0.10), single_moves_only])["replica-count"] > 0


def test_an_exchange_is_judged_by_its_net_change() -> None:
    s = State(counts_tight_on_bytes())
    disk = BalanceGoal(DISK, 0.10)
    disk.prepare(s)
    small, big = 4, 0  # partition indexes: big-0 on broker index 0, small-0 on broker index 1
    assert not disk.accepts(s, ReplicaMove(small, 1, 0))  # alone: broker 1's disk above its band
    exchange = (ReplicaMove(small, 1, 0), ReplicaMove(small + 1, 1, 0), ReplicaMove(big, 0, 1))
    assert disk.accepts_all(s, exchange)
    assert not disk.accepts_all(s, exchange[:2])
    capacity = DiskCapacityGoal(threshold=0.0405)  # 405 bytes of 10,000: +100 -100 fits, +100 alone does not
    assert capacity.accepts_all(s, exchange) and not capacity.accepts_all(s, exchange[:2])
    s.apply_exchange(Exchange(exchange))
    assert s.replica_count == [5, 7] and s.disk == [400.0, 400.0]
    with pytest.raises(ValueError):
        s.apply_exchange(Exchange((ReplicaMove(small + 2, 1, 0), ReplicaMove(small + 2, 0, 1))))


def test_an_exchange_never_breaks_rack_awareness() -> None:
    # the small replicas could only go to broker 3, on broker 1's rack: the exchange is refused
    parts = [("big", [1, 2], 100, 1.0, 1.0)] * 4 + [("small", [3, 2], 50, 1.0, 1.0)] * 8
    model = small_cluster([(1, "a"), (2, "b"), (3, "a")], parts, disk_capacity=10_000)
    goals: list[Goal] = [RackAwareGoal(), BalanceGoal(DISK, 0.10), BalanceGoal(REPLICAS, 0.10)]
    result = plan(model, goals)
    final = State(execute_in_simulation(model, result.moves))
    assert RackAwareGoal().violations(final) == 0


def leaders_tight_on_network_out() -> ClusterModel:
    # both brokers hold every partition; broker 1 leads six small partitions (leader network out 10
    # each), broker 2 three big ones (20 each): network out even (60/60), leader counts 6 against 3.
    # One leadership moved 1 -> 2 takes broker 1's network out below its band (50 < 54); two small
    # over for one big back moves the counts by one and network out not at all
    parts = [("small", [1, 2], 10, 5.0, 5.0)] * 6 + [("big", [2, 1], 10, 10.0, 10.0)] * 3
    return small_cluster([(1, "a"), (2, "b")], parts, disk_capacity=10_000)


def test_leader_count_converges_by_leadership_exchanges_when_network_out_refuses_single_moves() -> None:
    model = leaders_tight_on_network_out()
    goals: list[Goal] = [BalanceGoal(NETWORK_OUT, 0.10), BalanceGoal(LEADERS, 0.10)]
    s = State(model)
    assert [g.violations(s) for g in goals] == [0, 2]
    assert violations_after(model, goals) == {"network-out": 0, "leader-count": 0}
    result = plan(model, goals)
    # preferred-leader changes only: one exchange, three partitions reordered, nothing copied
    assert (result.replica_moves, result.leader_moves, result.bytes_to_copy) == (0, 3, 0)
    assert all(m.leader_only for m in result.moves)
    assert sorted((m.topic, m.after[0]) for m in result.moves) == [("big", 1), ("small", 2), ("small", 2)]


def test_without_leadership_exchanges_the_leader_count_goal_stays_unmet() -> None:
    single_moves_only = BalanceGoal(dataclasses.replace(LEADERS, leader_exchanges=0), 0.10)
    after = violations_after(leaders_tight_on_network_out(), [BalanceGoal(NETWORK_OUT, 0.10), single_moves_only])
    assert after == {"network-out": 0, "leader-count": 2}


def test_leader_bytes_in_converges_by_leadership_swaps_that_keep_the_counts() -> None:
    # three leaderships each; broker 1's carry 40+30+20 bytes in/s, broker 2's 15+10+5: the counts are
    # held exactly (threshold 0), so only a swap can move bytes in; 40 for 10 evens it (60/60)
    parts = [("hot", [1, 2], 10, rate, 0.0) for rate in (40.0, 30.0, 20.0)]
    parts += [("cold", [2, 1], 10, rate, 0.0) for rate in (15.0, 10.0, 5.0)]
    model = small_cluster([(1, "a"), (2, "b")], parts, disk_capacity=10_000)
    goals: list[Goal] = [BalanceGoal(LEADERS, 0.0), BalanceGoal(LEADER_IN, 0.10)]
    assert violations_after(model, goals) == {"leader-count": 0, "leader-bytes-in": 0}
    result = plan(model, goals)
    assert (result.replica_moves, result.leader_moves, result.bytes_to_copy) == (0, 2, 0)
    final = State(execute_in_simulation(model, result.moves))
    assert final.leader_count == [3, 3] and final.leader_in == [60.0, 60.0]
    swapped = {(m.topic, m.partition): m.after[0] for m in result.moves}
    assert swapped == {("hot", 0): 2, ("cold", 1): 1}


def test_leadership_exchanges_never_break_a_higher_goal() -> None:
    # the same exchange, but broker 2 is excluded (draining): leadership may not go there
    model = leaders_tight_on_network_out().with_excluded({2: "draining"})
    goals: list[Goal] = [ExcludedBrokersGoal(), BalanceGoal(NETWORK_OUT, 0.10), BalanceGoal(LEADERS, 0.10)]
    s = State(model)
    exchange = (LeaderMove(0, 0, 1), LeaderMove(1, 0, 1), LeaderMove(6, 1, 0))
    assert not ExcludedBrokersGoal().accepts_all(s, exchange)
    result = plan(model, goals)
    assert all(m.after[0] != 2 for m in result.moves if m.leader_only)


def test_capacity_goals_count_no_replica_and_no_byte_for_a_leadership_exchange() -> None:
    s = State(leaders_tight_on_network_out())
    exchange = (LeaderMove(0, 0, 1), LeaderMove(1, 0, 1), LeaderMove(6, 1, 0))
    assert ReplicaCapacityGoal(max_replicas=1).accepts_all(s, exchange)
    assert DiskCapacityGoal(threshold=0.0001).accepts_all(s, exchange)
    s.apply_exchange(Exchange(exchange))
    assert s.leader_count == [5, 4] and s.replica_count == [9, 9] and s.nw_out == [60.0, 60.0]


def test_a_leadership_only_plan_copies_nothing_and_reports_what_only_data_moves_could_meet() -> None:
    # replicas all on brokers 1 and 2, all led by 1, broker 3 empty: disk and replica counts need data
    # moves, leadership does not
    parts = [("t", [1, 2], 100, 10.0, 10.0) for _ in range(6)]
    model = small_cluster([(1, "a"), (2, "b"), (3, "c")], parts, disk_capacity=10_000)
    goals = default_goals()
    full = plan(model, goals)
    assert full.bytes_to_copy > 0
    cheap = plan(model, goals, leadership_only=True)
    assert cheap.ok and cheap.replica_moves == 0 and cheap.bytes_to_copy == 0 and cheap.leader_moves > 0
    assert all(m.leader_only for m in cheap.moves)
    reports = {g.name: g for g in cheap.goals}
    assert reports["disk-usage"].violations_after == reports["disk-usage"].violations_before > 0
    assert reports["leader-count"].score_after < reports["leader-count"].score_before
    # a hard goal that only data moves can meet is reported unmet: such a plan must not be executed
    drained = plan(model.with_excluded({1: "draining"}), goals, leadership_only=True)
    assert not drained.ok and "excluded-brokers" in drained.unmet_hard
