"""Execution decisions, pure: which moves start next, which replicas are throttled, which moves are
done, stalled or in flight. The operator (``engine``) applies them through the Admin APIs.

Ordering and bounds: moves start smallest first (``bytes_to_copy``, leader-only moves first of all:
they copy nothing). A move occupies every broker it adds a replica to and the broker its data is
copied from (the current leader stands for it); at most ``per_broker`` moves may occupy one broker and
at most ``cluster`` moves may be in flight overall.

A move's state is derived, never stored: *done* when the partition's replica list equals the target
(as a set, with no reassignment listed for it), *in flight* when ListPartitionReassignments lists it,
else *pending*. So a governor restarted mid-plan resumes from the cluster's own answer.

Throttles follow Kafka's tool (kafka-reassign-partitions): for each topic with moves in flight,
``leader.replication.throttled.replicas`` lists ``partition:broker`` for every current replica (the
ones a new replica may copy from) and ``follower.replication.throttled.replicas`` the replicas being
added; ``leader.replication.throttled.rate``/``follower.replication.throttled.rate`` are set on every
broker involved. When nothing is in flight any more, all of them are removed.

Progress: the bytes a new replica holds (DescribeLogDirs on the destination). A move whose new
replicas have not grown for ``stall_ms`` is cancelled (its replicas are restored by the cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidelog.governor.planner import PartitionMove

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Limits:
    per_broker: int = 2
    cluster: int = 20
    stall_ms: int = 10 * 60_000


def key(move: PartitionMove) -> TopicPartition:
    return move.topic, move.partition


def classify(moves: Sequence[PartitionMove], current: Mapping[TopicPartition, tuple[int, ...]],
             reassigning: Iterable[TopicPartition], finished: Iterable[TopicPartition] = ()
             ) -> tuple[list[PartitionMove], list[PartitionMove], list[PartitionMove]]:
    """(done, in flight, pending). A partition that no longer exists counts as done (nothing to move),
    and so do ``finished`` ones (moves cancelled for good)."""
    busy, over = set(reassigning), set(finished)
    done, flying, pending = [], [], []
    for m in moves:
        k = key(m)
        replicas = current.get(k)
        if k in busy:
            flying.append(m)
        elif replicas is None or k in over or reached(m, replicas):
            done.append(m)
        else:
            pending.append(m)
    return done, flying, pending


def reached(move: PartitionMove, replicas: Sequence[int]) -> bool:
    """The cluster's replica list is the target (a leader-only move needs the order too)."""
    return tuple(replicas) == move.after or (not move.leader_only and set(replicas) == set(move.after))


def occupied(move: PartitionMove, leader: int | None) -> set[int]:
    brokers = set(move.adding)
    if brokers:
        brokers.add(leader if leader is not None and leader >= 0 else move.before[0])
    return brokers


def next_moves(pending: Sequence[PartitionMove], in_flight: Sequence[PartitionMove], limits: Limits,
               leaders: Mapping[TopicPartition, int] | None = None) -> list[PartitionMove]:
    """Moves to start now: smallest first, within the per-broker and cluster-wide bounds."""
    leaders = leaders or {}
    load: dict[int, int] = {}
    for m in in_flight:
        for b in occupied(m, leaders.get(key(m))):
            load[b] = load.get(b, 0) + 1
    room = limits.cluster - len(in_flight)
    chosen = []
    for m in sorted(pending, key=lambda m: (m.bytes_to_copy, m.topic, m.partition)):
        if room <= 0:
            break
        brokers = occupied(m, leaders.get(key(m)))
        if any(load.get(b, 0) >= limits.per_broker for b in brokers):
            continue
        for b in brokers:
            load[b] = load.get(b, 0) + 1
        chosen.append(m)
        room -= 1
    return chosen


@dataclass(frozen=True)
class Throttles:
    topics: dict[str, dict[str, str]]  # topic -> {config name: value}
    brokers: frozenset[int]


LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


def throttles(in_flight: Sequence[PartitionMove]) -> Throttles:
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for m in in_flight:
        if not m.adding:
            continue
        leaders.setdefault(m.topic, []).extend(f"{m.partition}:{b}" for b in m.before)
        followers.setdefault(m.topic, []).extend(f"{m.partition}:{b}" for b in m.adding)
        brokers.update(m.before)
        brokers.update(m.adding)
    topics = {t: {LEADER_REPLICAS: ",".join(leaders[t]), FOLLOWER_REPLICAS: ",".join(followers[t])} for t in leaders}
    return Throttles(topics, frozenset(brokers))


@dataclass(frozen=True)
class Progress:
    bytes: int
    since_ms: int  # when ``bytes`` was first seen


def track(previous: Mapping[TopicPartition, Progress], in_flight: Sequence[PartitionMove],
          copied: Mapping[TopicPartition, int], now_ms: int, limits: Limits
          ) -> tuple[dict[TopicPartition, Progress], list[PartitionMove]]:
    """New progress per in-flight move and the moves stalled past ``limits.stall_ms``."""
    out: dict[TopicPartition, Progress] = {}
    stalled = []
    for m in in_flight:
        k = key(m)
        seen = copied.get(k, 0)
        before = previous.get(k)
        if before is None or seen > before.bytes:
            out[k] = Progress(seen, now_ms)
        else:
            out[k] = before
            if now_ms - before.since_ms >= limits.stall_ms:
                stalled.append(m)
    return out, stalled
