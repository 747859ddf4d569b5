"""The engine's rounds against an in-memory cluster (a fake at our own seam, ``Cluster``/``Store``):
moves start within the bounds with throttles first, finish with a preferred election and the throttles
removed; the circuit breaker pauses and cancels; a stalled move is cancelled; a new engine on the same
store resumes the plan; a drained or dead broker is healed around."""

from __future__ import annotations

import asyncio

from helpers.governor_fakes import FakeCluster, FakeStore
from tidelog.governor.cluster import PartitionState
from tidelog.governor.config import parse_config
from tidelog.governor.engine import Engine
from tidelog.governor.execution import Throttles

NOW = [0.0]  # seconds; each round advances it by one


def engine(cluster: FakeCluster, store: FakeStore, **props: str) -> Engine:
    config = parse_config({"governor.moves.per.broker": "1", "governor.moves.max": "2", **props})
    return Engine(config, cluster, store, clock=lambda: NOW[0])  # type: ignore[arg-type]


def skewed() -> FakeCluster:
    # four partitions on brokers 1 and 2, none on 3 and 4 (all four on distinct racks)
    return FakeCluster({1: "a", 2: "b", 3: "c", 4: "d"}, {("t", p): (1, 2) for p in range(4)})


def run(e: Engine, rounds: int) -> None:
    async def main() -> None:
        for _ in range(rounds):
            NOW[0] += 1.0
            await e.tick()
    asyncio.run(main())


def test_engine_executes_a_balancing_plan_with_throttles_and_removes_them_at_the_end() -> None:
    cluster, store = skewed(), FakeStore()
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    run(e, 1)
    assert store.records["plan"]["reason"] == "added brokers [3, 4]"  # empty brokers count as added
    run(e, 12)
    assert "plan" not in store.records and store.records["last"]["cancelled"] == 0
    counts = {b: sum(b in p.replicas for p in cluster.partitions.values()) for b in (1, 2, 3, 4)}
    assert counts == {1: 2, 2: 2, 3: 2, 4: 2}
    assert cluster.throttle_history[0].topics and cluster.throttles == Throttles({}, frozenset())
    assert max(len(t.brokers) for t in cluster.throttle_history) > 0


def test_a_cluster_refusing_the_throttle_rates_gets_its_moves_unthrottled_with_a_warning() -> None:
    cluster, store = skewed(), FakeStore()
    cluster.refuse_rates = True
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    run(e, 2)
    assert cluster.moving  # moves started all the same
    assert e.status()["throttlesRefused"][0].endswith("(Unknown config name: leader.replication.throttled.rate)")
    warnings = [ev for ev in e.events if ev["kind"] == "throttle"]
    assert len(warnings) == 1 and "moving unthrottled" in warnings[0]["message"]
    run(e, 12)
    assert "plan" not in store.records and "throttles" not in store.records
    assert store.records["last"]["cancelled"] == 0 and store.records["last"]["throttled"] is False
    assert [ev for ev in e.events if ev["kind"] == "throttle"] == warnings  # warned once per plan
    counts = {b: sum(b in p.replicas for p in cluster.partitions.values()) for b in (1, 2, 3, 4)}
    assert counts == {1: 2, 2: 2, 3: 2, 4: 2}


def test_a_cluster_refusing_the_throttle_rates_aborts_the_plan_when_throttles_are_required() -> None:
    cluster, store = skewed(), FakeStore()
    cluster.refuse_rates = True
    e = engine(cluster, store, **{"governor.auto.balance": "true", "governor.throttle.required": "true"})
    run(e, 2)
    assert not cluster.moving and cluster.partitions == skewed().partitions  # nothing moved
    last = store.records["last"]
    assert "plan" not in store.records and last["cancelled"] == last["moves"] > 0
    assert "refuses the replication throttles" in last["error"] and "governor.throttle.required=true" in last["error"]
    assert [ev["kind"] for ev in e.events][-1] == "abort"


def test_engine_keeps_moves_in_flight_within_the_bounds() -> None:
    cluster, store = skewed(), FakeStore()
    cluster.rounds = 3
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    for _ in range(10):
        run(e, 1)
        assert len(cluster.moving) <= 2


def test_breaker_pauses_new_moves_while_partitions_are_under_replicated() -> None:
    cluster, store = skewed(), FakeStore()
    for p, replicas in enumerate([(1, 3), (2, 4), (3, 1), (4, 2), (1, 4), (2, 3)]):
        cluster.partitions[("other", p)] = PartitionState(replicas, frozenset(replicas), replicas[0])
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    run(e, 1)
    planned = {(m["topic"], m["partition"]) for m in store.records["plan"]["moves"]}
    outside = sorted(set(cluster.partitions) - planned)
    assert outside
    cluster.urp = {outside[0]}
    run(e, 2)
    assert store.records["control"]["paused"] and store.records["control"]["pausedBy"] == "breaker"
    assert f"{outside[0][0]}-{outside[0][1]}" in store.records["control"]["reason"]
    started = dict(cluster.moving)
    run(e, 2)
    assert not cluster.moving or cluster.moving.keys() <= started.keys()


def test_breaker_cancels_in_flight_moves_on_offline_partitions() -> None:
    cluster, store = skewed(), FakeStore()
    cluster.rounds = 5
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    run(e, 2)
    assert cluster.moving
    in_flight = set(cluster.moving)
    cluster.partitions[("dead", 0)] = PartitionState((3,), frozenset(), -1)
    run(e, 1)
    assert set(cluster.cancelled) == in_flight and not cluster.moving
    assert store.records["control"]["paused"] and "offline" in store.records["control"]["reason"]


def test_a_plan_whose_moves_all_finished_ends_though_the_breaker_paused_it() -> None:
    # An under-replicated partition outside the plan pauses it; the moves already started finish all
    # the same, and then the plan ends with its pause: nothing is left to hold back.
    cluster, store = skewed(), FakeStore()
    cluster.rounds = 3
    for p, replicas in enumerate([(1, 3), (2, 4), (3, 1), (4, 2)]):
        cluster.partitions[("other", p)] = PartitionState(replicas, frozenset(replicas), replicas[0])
    e = engine(cluster, store, **{"governor.auto.balance": "true", "governor.moves.per.broker": "50",
                                  "governor.moves.max": "50"})
    run(e, 2)
    planned = {(m["topic"], m["partition"]) for m in store.records["plan"]["moves"]}
    assert cluster.moving and set(cluster.moving) == planned  # every move started
    cluster.urp = {sorted(set(cluster.partitions) - planned)[0]}
    run(e, 1)
    assert store.records["control"]["pausedBy"] == "breaker" and store.records["plan"]
    run(e, 4)
    assert "plan" not in store.records and not cluster.moving
    assert not store.records["control"]["paused"]
    assert any(e_["kind"] == "done" for e_ in e.events)


def test_the_operator_cancels_a_plan_paused_by_the_breaker_and_the_next_plan_can_start() -> None:
    cluster, store = skewed(), FakeStore()
    cluster.rounds = 5
    for p, replicas in enumerate([(1, 3), (2, 4), (3, 1), (4, 2)]):
        cluster.partitions[("other", p)] = PartitionState(replicas, frozenset(replicas), replicas[0])
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    run(e, 2)
    in_flight, plan_id = set(cluster.moving), store.records["plan"]["id"]
    assert in_flight and len(in_flight) < len(store.records["plan"]["moves"])  # some still pending
    planned = {(m["topic"], m["partition"]) for m in store.records["plan"]["moves"]}
    cluster.urp = {sorted(set(cluster.partitions) - planned)[0]}
    run(e, 1)
    assert store.records["control"]["pausedBy"] == "breaker"
    assert asyncio.run(e.cancel_plan("wrong plan")) == plan_id
    assert set(cluster.cancelled) == in_flight and not cluster.moving
    last = store.records["last"]
    assert "plan" not in store.records and last["id"] == plan_id and last["error"] == "cancelled by the operator: wrong plan"
    assert last["cancelled"] == last["moves"] and cluster.throttles == Throttles({}, frozenset())
    assert not store.records["control"]["paused"]  # the breaker's pause went with its plan
    assert asyncio.run(e.cancel_plan("again")) is None
    cluster.urp = set()
    run(e, 1)
    assert store.records["plan"]["id"] != plan_id  # auto-balance plans again


def test_an_operator_pause_outlives_a_cancelled_plan() -> None:
    cluster, store = skewed(), FakeStore()
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    run(e, 1)
    store.write("control", {"paused": True, "pausedBy": "operator", "reason": "freeze", "drained": []})
    run(e, 1)
    assert asyncio.run(e.cancel_plan("freeze first")) is not None
    assert store.records["control"] == {"paused": True, "pausedBy": "operator", "reason": "freeze", "drained": []}


def test_a_move_without_progress_past_the_deadline_is_cancelled() -> None:
    cluster, store = skewed(), FakeStore()
    cluster.stuck = True
    e = engine(cluster, store, **{"governor.auto.balance": "true", "governor.move.stall.ms": "3000"})
    run(e, 8)
    assert cluster.cancelled
    assert any(e_["kind"] == "cancel" and "no progress" in e_["message"] for e_ in e.events)


def test_a_new_engine_resumes_the_stored_plan() -> None:
    cluster, store = skewed(), FakeStore()
    cluster.rounds = 2
    run(engine(cluster, store, **{"governor.auto.balance": "true"}), 2)
    plan_id = store.records["plan"]["id"]
    restarted = engine(cluster, store)  # auto-balance off: it only carries on what is stored
    run(restarted, 15)
    assert "plan" not in store.records and store.records["last"]["id"] == plan_id


def test_operator_pause_is_not_lifted_by_a_healthy_cluster() -> None:
    cluster, store = skewed(), FakeStore()
    e = engine(cluster, store, **{"governor.auto.balance": "true"})
    run(e, 1)
    store.write("control", {"paused": True, "pausedBy": "operator", "reason": "freeze", "drained": []})
    before = dict(cluster.moving)
    run(e, 5)
    assert store.records["control"]["paused"] and store.records["plan"]
    assert cluster.moving.keys() <= before.keys()


def test_a_drained_broker_is_emptied_and_a_dead_one_healed_after_the_grace_period() -> None:
    cluster, store = skewed(), FakeStore()
    store.write("control", {"paused": False, "drained": [1]})
    e = engine(cluster, store, **{"governor.broker.dead.grace.ms": "5000"})  # five rounds
    run(e, 12)
    assert all(1 not in p.replicas for p in cluster.partitions.values())
    assert "drain" not in str(store.records.get("plan"))
    del cluster.brokers[2]  # broker 2 stops answering: missing, then dead after the grace period
    run(e, 3)
    assert "plan" not in store.records or "heal" not in store.records["plan"]["reason"]
    run(e, 20)
    assert all(2 not in p.replicas for p in cluster.partitions.values())
    assert store.records["last"]["reason"].startswith("heal: broker 2 dead for")
