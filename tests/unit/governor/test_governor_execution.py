"""Execution decisions: smallest first within bounds, derived move states, throttles, stalls; the
circuit breaker's verdicts; the self-healing rules."""

from __future__ import annotations

from tidelog.governor.breaker import BreakerLimits, Health, isr_shrinks, judge
from tidelog.governor.execution import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    Limits,
    Progress,
    classify,
    next_moves,
    throttles,
    track,
)
from tidelog.governor.healing import added_brokers, exclusions, missing_since
from tidelog.governor.planner import PartitionMove


def move(p: int, before: tuple[int, ...], after: tuple[int, ...], size: int = 100, topic: str = "t") -> PartitionMove:
    return PartitionMove(topic, p, before, after, size)


def test_moves_start_smallest_first_and_leader_only_moves_before_all() -> None:
    moves = [move(0, (1, 2), (3, 2), 500), move(1, (1, 2), (4, 2), 100), move(2, (1, 2), (2, 1), 900)]
    chosen = next_moves(moves, [], Limits(per_broker=10, cluster=2))
    assert [m.partition for m in chosen] == [2, 1]


def test_moves_in_flight_per_broker_are_bounded() -> None:
    moves = [move(p, (1, 2), (1, 2 + p), 100 + p) for p in range(1, 5)]  # each adds one broker, copies from 1
    chosen = next_moves(moves, [], Limits(per_broker=2, cluster=10))
    assert len(chosen) == 2  # broker 1 is the source of all of them
    assert next_moves(moves[2:], chosen, Limits(per_broker=2, cluster=10)) == []


def test_moves_in_flight_cluster_wide_are_bounded() -> None:
    moves = [move(p, (p * 10,), (p * 10 + 1,)) for p in range(1, 6)]
    assert len(next_moves(moves, moves[:1], Limits(per_broker=5, cluster=3))) == 2


def test_move_state_is_derived_from_the_cluster() -> None:
    a, b, c, d = move(0, (1, 2), (3, 2)), move(1, (1, 2), (1, 4)), move(2, (1, 2), (2, 1)), move(3, (1, 2), (5, 2))
    current = {("t", 0): (3, 2), ("t", 1): (1, 2, 4), ("t", 2): (1, 2), ("t", 3): (1, 2)}
    done, flying, pending = classify([a, b, c, d], current, reassigning=[("t", 1)])
    assert done == [a] and flying == [b] and pending == [c, d]
    done, _, _ = classify([c], {("t", 2): (2, 1)}, reassigning=[])
    assert done == [c]  # a leader-only move is done once the order is the target's


def test_throttles_name_the_source_and_the_new_replicas() -> None:
    t = throttles([move(0, (1, 2), (3, 2)), move(4, (2, 5), (2, 6)), move(1, (1, 2), (2, 1))])
    assert t.topics == {"t": {LEADER_REPLICAS: "0:1,0:2,4:2,4:5", FOLLOWER_REPLICAS: "0:3,4:6"}}
    assert t.brokers == {1, 2, 3, 5, 6}
    assert throttles([]).topics == {} and not throttles([]).brokers


def test_a_move_that_stops_growing_is_stalled_after_the_deadline() -> None:
    m = move(0, (1,), (2,))
    limits = Limits(stall_ms=1000)
    progress, stalled = track({}, [m], {("t", 0): 10}, 0, limits)
    assert progress[("t", 0)] == Progress(10, 0) and not stalled
    progress, stalled = track(progress, [m], {("t", 0): 10}, 999, limits)
    assert not stalled
    _, stalled = track(progress, [m], {("t", 0): 10}, 1000, limits)
    assert stalled == [m]
    progress, stalled = track(progress, [m], {("t", 0): 20}, 1500, limits)
    assert not stalled and progress[("t", 0)] == Progress(20, 1500)


def test_breaker_pauses_on_under_replication_latency_and_isr_shrinks() -> None:
    limits = BreakerLimits(max_p99_ms=200)
    assert judge(Health(), limits).action == "ok"
    verdict = judge(Health(under_replicated=2, p99_ms=350.0, isr_shrinks=1), limits)
    assert verdict.action == "pause"
    assert "2 under-replicated" in verdict.reason and "p99 350 ms" in verdict.reason and "ISR" in verdict.reason


def test_breaker_cancels_on_offline_partitions_or_a_nearly_full_disk() -> None:
    limits = BreakerLimits()
    assert judge(Health(offline_partitions=1), limits).action == "cancel"
    assert judge(Health(disk_ratio=0.9), limits).action == "pause"
    full = judge(Health(disk_ratio=0.97), limits)
    assert full.action == "cancel" and "97% full" in full.reason


def test_isr_shrinks_ignore_moving_partitions() -> None:
    before = {("t", 0): frozenset({1, 2}), ("t", 1): frozenset({1, 2})}
    after = {("t", 0): frozenset({1}), ("t", 1): frozenset({1})}
    replicas = {("t", 0): (1, 2), ("t", 1): (1, 2)}
    assert isr_shrinks(before, after, replicas, moving={("t", 1)}) == 1


def test_a_replica_removed_by_a_finished_move_is_not_an_isr_shrink() -> None:
    before = {("t", 0): frozenset({1, 2})}
    assert isr_shrinks(before, {("t", 0): frozenset({2})}, {("t", 0): (2,)}, moving=set()) == 0


def test_broker_missing_past_the_grace_period_is_excluded_as_dead() -> None:
    seen = missing_since({}, registered=[1, 2], referenced=[1, 2, 3], now_ms=1000)
    assert seen == {3: 1000}
    seen = missing_since(seen, registered=[1, 2], referenced=[1, 2, 3], now_ms=5000)
    assert exclusions(seen, [], [], 5000, grace_ms=10_000) == {}
    assert exclusions(seen, [], [], 11_000, grace_ms=10_000) == {3: "dead for 10 s"}
    assert missing_since(seen, registered=[1, 2, 3], referenced=[1, 2, 3], now_ms=12_000) == {}


def test_offline_dirs_and_drains_exclude_at_once() -> None:
    assert exclusions({}, offline_dirs=[2], drained=[4], now_ms=0, grace_ms=1) == {2: "offline log dir", 4: "draining"}


def test_an_empty_registered_broker_is_an_added_broker() -> None:
    assert added_brokers({1: 10, 2: 12, 3: 0}, excluded=[]) == [3]
    assert added_brokers({1: 10, 3: 0}, excluded=[3]) == []
    assert added_brokers({1: 0, 2: 0}, excluded=[]) == []
