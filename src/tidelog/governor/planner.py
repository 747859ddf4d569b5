"""The planner: goals in priority order over one working ``State``; the result is a ``Plan``.

For goal k, the planner asks it for candidate moves (single replica or leader moves, or exchanges:
several replica moves judged by their sum) and applies each one that goals 0..k-1 all accept (so a
lower goal never undoes a higher one), repeating passes until the goal is met, a pass
applies nothing, or ``max_passes`` is reached. A hard goal left unmet is reported in
``Plan.unmet_hard`` and the plan must not be executed (``Plan.ok``).

The moves of one partition are collapsed into one ``PartitionMove``: its replica list before and
after (leader first, so that the preferred-leader election that ends an execution puts leadership
where the plan wants it). A move is leader-only when the replica set is unchanged; it copies no bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from tidelog.governor.goals import Allowed, Goal, Proposal
from tidelog.governor.model import ClusterModel
from tidelog.governor.state import Exchange, ReplicaMove, State


@dataclass(frozen=True, slots=True)
class PartitionMove:
    topic: str
    partition: int
    before: tuple[int, ...]  # broker ids, current replica list
    after: tuple[int, ...]   # broker ids, target replica list, leader first
    size: int                # bytes of one replica

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.after if b not in self.before)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(b for b in self.before if b not in self.after)

    @property
    def leader_only(self) -> bool:
        return set(self.before) == set(self.after)

    @property
    def bytes_to_copy(self) -> int:
        return self.size * len(self.adding)

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "before": list(self.before),
                "after": list(self.after), "size": self.size}

    @staticmethod
    def from_json(d: dict[str, object]) -> PartitionMove:
        def ids(key: str) -> tuple[int, ...]:
            value = d[key]
            if not isinstance(value, list):
                raise ValueError(f"{key} must be a list of broker ids")
            return tuple(int(b) for b in value)
        return PartitionMove(str(d["topic"]), int(str(d["partition"])), ids("before"), ids("after"), int(str(d["size"])))


@dataclass(frozen=True, slots=True)
class GoalReport:
    name: str
    hard: bool
    score_before: float
    score_after: float
    violations_before: int
    violations_after: int

    def to_json(self) -> dict[str, object]:
        return {"goal": self.name, "hard": self.hard, "scoreBefore": round(self.score_before, 4),
                "scoreAfter": round(self.score_after, 4), "violationsBefore": self.violations_before,
                "violationsAfter": self.violations_after}


@dataclass(frozen=True)
class Plan:
    moves: tuple[PartitionMove, ...]
    goals: tuple[GoalReport, ...]
    replica_moves: int
    leader_moves: int
    seconds: float
    unmet_hard: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.unmet_hard

    @property
    def bytes_to_copy(self) -> int:
        return sum(m.bytes_to_copy for m in self.moves)

    def estimated_seconds(self, throttle_bytes_per_s: float) -> float:
        """Copy time under a per-broker replication throttle: the busiest receiving broker's bytes over
        the rate (brokers receive in parallel)."""
        if throttle_bytes_per_s <= 0:
            return 0.0
        incoming: dict[int, int] = {}
        for m in self.moves:
            for b in m.adding:
                incoming[b] = incoming.get(b, 0) + m.size
        return max(incoming.values(), default=0) / throttle_bytes_per_s

    def to_json(self, throttle_bytes_per_s: float = 0.0) -> dict[str, object]:
        return {"ok": self.ok, "unmetHardGoals": list(self.unmet_hard), "partitionMoves": len(self.moves),
                "replicaMoves": self.replica_moves, "leaderMoves": self.leader_moves,
                "bytesToCopy": self.bytes_to_copy, "planSeconds": round(self.seconds, 3),
                "estimatedCopySeconds": round(self.estimated_seconds(throttle_bytes_per_s), 1),
                "goals": [g.to_json() for g in self.goals], "moves": [m.to_json() for m in self.moves]}


def _scores(goals: Sequence[Goal], s: State) -> list[tuple[float, int]]:
    out = []
    for g in goals:
        g.prepare(s)
        out.append((g.score(s), g.violations(s)))
    return out


class _PassExhausted(Exception):
    """Raised through a goal's generator when higher goals refused too many candidates in a row."""


def _copies(move: Proposal) -> bool:
    """Whether ``move`` moves a replica (copies data), not only leadership."""
    return isinstance(move, ReplicaMove) or (isinstance(move, Exchange)
                                             and any(isinstance(m, ReplicaMove) for m in move.moves))


def _passes(s: State, goal: Goal, source: Callable[[State, Allowed], Iterator[Proposal]], prior: Sequence[Goal],
            counts: list[int], max_passes: int, max_refusals: int, leadership_only: bool) -> None:
    """Apply what ``source`` proposes and ``prior`` allows, pass after pass, until the goal is met or a
    pass applies nothing; ``counts`` (replica moves, leader moves) is added to. With
    ``leadership_only`` a proposal that moves a replica is refused like one a higher goal refuses."""
    for _ in range(max_passes):
        if goal.violations(s) == 0:
            return
        applied = 0
        refusals = 0

        def allowed(move: Proposal) -> bool:
            nonlocal refusals
            if not (leadership_only and _copies(move)) and all(
                    h.accepts_all(s, move.moves) if isinstance(move, Exchange) else h.accepts(s, move) for h in prior):
                refusals = 0
                return True
            refusals += 1
            if refusals >= max_refusals:
                raise _PassExhausted
            return False

        try:
            for move in source(s, allowed):
                applied += 1
                if isinstance(move, Exchange):
                    s.apply_exchange(move)
                    for m in move.moves:
                        counts[0 if isinstance(m, ReplicaMove) else 1] += 1
                else:
                    s.apply(move)
                    counts[0 if isinstance(move, ReplicaMove) else 1] += 1
        except _PassExhausted:
            pass
        if applied == 0:
            return


def plan(model: ClusterModel, goals: Sequence[Goal], *, max_passes: int = 6, max_refusals: int = 3_000,
         leadership_only: bool = False) -> Plan:
    """``max_refusals``: a pass of a goal ends after that many candidate moves in a row were refused by
    higher goals (the goal is then as good as single moves under the higher goals make it).
    ``leadership_only``: preferred-leader changes only, no data copied (the cheap part of a rebalance,
    run first by an operator); a hard goal that only replica moves could meet is then reported unmet."""
    started = time.perf_counter()
    s = State(model)
    before = _scores(goals, s)
    counts = [0, 0]  # replica moves, leader moves
    for k, goal in enumerate(goals):
        goal.prepare(s)
        # single moves first, then (for the goals that have them) exchanges, each with passes of its own
        for source in (goal.propose, goal.propose_exchanges):
            _passes(s, goal, source, goals[:k], counts, max_passes, max_refusals, leadership_only)
    after = _scores(goals, s)
    reports = tuple(GoalReport(g.name, g.hard, b[0], a[0], b[1], a[1]) for g, b, a in zip(goals, before, after, strict=True))
    unmet = tuple(r.name for r in reports if r.hard and r.violations_after > 0)
    return Plan(_collapse(model, s), reports, counts[0], counts[1], time.perf_counter() - started, unmet)


def _collapse(model: ClusterModel, s: State) -> tuple[PartitionMove, ...]:
    ids = model.broker_ids
    moves = []
    for p, (old, new) in enumerate(zip(model.replicas, s.replicas, strict=True)):
        leader = s.leader[p]
        target = (leader, *(b for b in new if b != leader)) if leader in new else new
        if new == old and leader == model.leader[p]:
            continue
        moves.append(PartitionMove(model.topics[model.p_topic[p]], model.p_index[p], tuple(ids[b] for b in old),
                                   tuple(ids[b] for b in target), model.size[p]))
    return tuple(moves)


def execute_in_simulation(model: ClusterModel, moves: Sequence[PartitionMove]) -> ClusterModel:
    """The model once every move has completed and the preferred leaders were elected."""
    index = model.broker_index()
    by_name = {(model.topics[model.p_topic[p]], model.p_index[p]): p for p in range(model.partition_count)}
    replicas = list(model.replicas)
    leader = list(model.leader)
    for m in moves:
        p = by_name[(m.topic, m.partition)]
        replicas[p] = tuple(index[b] for b in m.after)
        leader[p] = replicas[p][0]
    return model.with_placement(replicas, leader)
