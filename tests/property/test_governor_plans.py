"""Properties of governor plans on random synthetic clusters:

- a plan never breaks a hard goal that held before, and the planner's own bookkeeping agrees with a
  fresh look at the executed (simulated) cluster;
- draining a broker empties it whenever the other brokers can take its replicas;
- with many small partitions, executing the plan brings disk usage within the balance threshold;
- replica counts skewed while the disk is even (every single move breaks the disk band) converge by
  2-for-1 exchanges;
- leader counts skewed while network out is even converge the same way by leadership exchanges,
  copying nothing.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.governor.goals import DISK, LEADERS, NETWORK_OUT, REPLICAS, BalanceGoal, Goal, default_goals
from tidelog.governor.model import ClusterModel
from tidelog.governor.planner import execute_in_simulation, plan
from tidelog.governor.state import State
from tidelog.governor.synthetic import small_cluster, synthetic_cluster

clusters = st.builds(
    lambda brokers, racks, partitions, rf, seed, hot, empty: synthetic_cluster(
        brokers=brokers, racks=min(racks, brokers), partitions=partitions, rf=min(rf, brokers - empty), seed=seed,
        topics=3, hot_brokers=hot, empty_brokers=empty, disk_capacity=2**40),
    brokers=st.integers(3, 9), racks=st.integers(1, 4), partitions=st.integers(1, 80), rf=st.integers(1, 3),
    seed=st.integers(0, 10_000), hot=st.integers(0, 2), empty=st.integers(0, 1),
)


def violations(model: ClusterModel, goals: list[Goal]) -> dict[str, int]:
    s = State(model)
    out = {}
    for g in goals:
        g.prepare(s)
        out[g.name] = g.violations(s)
    return out


@settings(max_examples=60, deadline=None)
@given(clusters)
def test_plan_never_breaks_a_hard_goal_that_held(model: ClusterModel) -> None:
    goals = default_goals()
    before = violations(model, goals)
    result = plan(model, goals)
    after = violations(execute_in_simulation(model, result.moves), goals)
    for g in goals:
        if g.hard and before[g.name] == 0:
            assert after[g.name] == 0, g.name
    assert {r.name: r.violations_after for r in result.goals} == after
    assert sum(State(execute_in_simulation(model, result.moves)).disk) == sum(State(model).disk)


@settings(max_examples=40, deadline=None)
@given(clusters, st.data())
def test_drain_empties_the_broker_when_the_others_can_hold_its_replicas(model: ClusterModel, data: st.DataObject) -> None:
    victim = data.draw(st.sampled_from(model.broker_ids))
    drained = model.with_excluded({victim: "draining"})
    max_rf = max((len(r) for r in model.replicas), default=0)
    result = plan(drained, [g for g in default_goals() if g.hard])
    if model.broker_count - 1 >= max_rf:
        assert result.ok
        final = execute_in_simulation(drained, result.moves)
        assert all(drained.broker_ids.index(victim) not in r for r in final.replicas)


@settings(max_examples=30, deadline=None)
@given(brokers=st.integers(3, 8), seed=st.integers(0, 10_000), empty=st.integers(0, 2))
def test_disk_balance_reaches_its_threshold_with_many_small_partitions(brokers: int, seed: int, empty: int) -> None:
    model = synthetic_cluster(brokers=brokers, racks=1, partitions=brokers * 40, rf=1, seed=seed, topics=2,
                              hot_brokers=1, empty_brokers=empty, skew=3.0, max_size_spread=0.2, disk_capacity=2**40)
    goal = BalanceGoal(DISK, 0.10)
    result = plan(model, [goal])
    assert violations(execute_in_simulation(model, result.moves), [goal]) == {"disk-usage": 0}


@settings(max_examples=40, deadline=None)
@given(big=st.integers(2, 12), unit=st.integers(10, 5_000), spread=st.lists(st.floats(-0.03, 0.03), min_size=40,
                                                                           max_size=40))
def test_replica_count_converges_by_exchanges_when_disk_is_already_even(big: int, unit: int,
                                                                        spread: list[float]) -> None:
    # broker 1: ``big`` replicas of about 2 units, broker 2: twice as many of about 1 unit, so the disk
    # is even and every single move toward even counts breaks the disk band
    sizes = iter(spread)
    parts = ([("big", [1], round(2 * unit * (1 + next(sizes))), 1.0, 1.0) for _ in range(big)]
             + [("small", [2], round(unit * (1 + next(sizes))), 1.0, 1.0) for _ in range(2 * big)])
    model = small_cluster([(1, "a"), (2, "b")], parts, disk_capacity=2**40)
    goals: list[Goal] = [BalanceGoal(DISK, 0.10), BalanceGoal(REPLICAS, 0.10)]
    before = violations(model, goals)
    assert before["disk-usage"] == 0
    result = plan(model, goals)
    after = violations(execute_in_simulation(model, result.moves), goals)
    assert after == {"disk-usage": 0, "replica-count": 0}, (before, after)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), unit=st.floats(1.0, 1e6), spread=st.lists(st.floats(-0.03, 0.03), min_size=36,
                                                                        max_size=36))
def test_leader_count_converges_by_leadership_exchanges_when_network_out_is_already_even(
        n: int, unit: float, spread: list[float]) -> None:
    # every partition on both brokers; broker 1 leads 2n with about 1 unit of leader network out each,
    # broker 2 leads n with about 2 units: network out even, leader counts 2n against n
    rates = iter(spread)
    parts = ([("light", [1, 2], 1, unit / 2 * (1 + next(rates)), unit / 2) for _ in range(2 * n)]
             + [("heavy", [2, 1], 1, unit * (1 + next(rates)), unit) for _ in range(n)])
    model = small_cluster([(1, "a"), (2, "b")], parts, disk_capacity=2**40)
    goals: list[Goal] = [BalanceGoal(NETWORK_OUT, 0.10), BalanceGoal(LEADERS, 0.10)]
    assert violations(model, goals)["network-out"] == 0
    result = plan(model, goals)
    assert result.bytes_to_copy == 0 and all(m.leader_only for m in result.moves)
    after = violations(execute_in_simulation(model, result.moves), goals)
    assert after == {"network-out": 0, "leader-count": 0}
