"""Reassignment plans for ``tidelog partitions reassign`` and ``tidelog brokers drain``. Pure.

JSON formats are kafka-reassign-partitions.sh's, so files move freely between the two tools::

    topics to move   {"version": 1, "topics": [{"topic": "orders"}, ...]}
    reassignment     {"version": 1, "partitions": [{"topic": "orders", "partition": 0,
                                                    "replicas": [1, 2, 3], "log_dirs": ["any", "any", "any"]}]}

``log_dirs`` is optional: ``"any"`` lets the broker choose; an absolute path asks that broker to keep the
replica in that log dir (an AlterReplicaLogDirs after the move starts, as Kafka's tool sends).

Throttles (``throttle_plan``), as kafka-reassign-partitions' ``--throttle`` computes them: every partition
moving (this plan's and the moves already in progress) has *sources*, the replicas it has now (for a move
in progress: its replicas less the adding ones), and *destinations*, the target replicas not among the
sources. ``leader.replication.throttled.replicas`` of a topic lists ``partition:source`` and
``follower.replication.throttled.replicas`` lists ``partition:destination``; the brokers involved (sources
and destinations) get the two rates. A move that only reorders replicas copies nothing and is left out
(Kafka lists its sources too; the list would throttle nothing).

Drain (``drain_plan``): every partition with a replica on the drained broker gets that replica replaced,
in the same position (so the count of preferred leaderships per broker stays as even as it was), by
the broker that (1) holds no replica of the partition, (2) is not drained, (3) is on a rack none of the
partition's other replicas is on when such a broker exists, and (4) holds the fewest replicas so far
(ties: lowest id). A partition with no such broker is reported, never moved half-way.

Progress (``Progress``): bytes on the adding replicas against the leader's size per adding replica
(DescribeLogDirs sizes), the rate between two samples, and the time left at that rate.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.controller.placement import assign_replicas

TopicPartition = tuple[str, int]
Assignment = dict[TopicPartition, list[int]]
ReplicaDirs = dict[tuple[str, int, int], str]  # (topic, partition, broker) → absolute log dir
Ongoing = Mapping[TopicPartition, tuple[list[int], list[int], list[int]]]  # replicas, adding, removing

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"


class PlanError(ValueError):
    """A plan file or request that cannot be used; the message says why."""


def _load(text: str, what: str) -> Mapping[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{what} must be a JSON object")
    if doc.get("version", 1) != 1:
        raise PlanError(f"{what}: version {doc.get('version')!r} is not supported (1 is)")
    return doc


def parse_topics_to_move(text: str) -> list[str]:
    doc = _load(text, "the topics-to-move JSON")
    topics = doc.get("topics")
    if not isinstance(topics, list) or not topics:
        raise PlanError('the topics-to-move JSON needs "topics": [{"topic": "name"}, ...]')
    names = []
    for item in topics:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) or not item["topic"]:
            raise PlanError(f"each topic to move is {{\"topic\": \"name\"}}, got {item!r}")
        names.append(item["topic"])
    return list(dict.fromkeys(names))


def parse_reassignment(text: str) -> Assignment:
    return parse_reassignment_with_dirs(text)[0]


def parse_reassignment_with_dirs(text: str) -> tuple[Assignment, ReplicaDirs]:
    """The replicas of each partition, and the log dir asked for each replica that names one."""
    doc = _load(text, "the reassignment JSON")
    partitions = doc.get("partitions")
    if not isinstance(partitions, list) or not partitions:
        raise PlanError('the reassignment JSON needs "partitions": [{"topic", "partition", "replicas"}, ...]')
    plan: Assignment = {}
    dirs: ReplicaDirs = {}
    for item in partitions:
        if not isinstance(item, dict):
            raise PlanError(f"each partition is an object, got {item!r}")
        topic, index, replicas = item.get("topic"), item.get("partition"), item.get("replicas")
        if not isinstance(topic, str) or not topic or not isinstance(index, int) or isinstance(index, bool):
            raise PlanError(f"each partition needs a topic and an integer partition, got {item!r}")
        if not isinstance(replicas, list) or not replicas or not all(_is_int(r) for r in replicas):
            raise PlanError(f"{topic}-{index}: replicas must be a non-empty list of broker ids")
        if len(set(replicas)) != len(replicas):
            raise PlanError(f"{topic}-{index}: replicas {replicas} name a broker twice")
        log_dirs = item.get("log_dirs", ["any"] * len(replicas))
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise PlanError(f"{topic}-{index}: log_dirs must list one directory per replica")
        for broker, log_dir in zip(replicas, log_dirs, strict=True):
            if not isinstance(log_dir, str) or not (log_dir == "any" or log_dir.startswith("/")):
                raise PlanError(f"{topic}-{index}: log dir {log_dir!r} is neither \"any\" nor an absolute path")
            if log_dir != "any":
                dirs[(topic, index, broker)] = log_dir
        if (topic, index) in plan:
            raise PlanError(f"{topic}-{index} is listed twice")
        plan[(topic, index)] = list(replicas)
    return plan, dirs


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def reassignment_json(plan: Mapping[TopicPartition, list[int]]) -> dict[str, Any]:
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())
    ]}


def dumps(plan: Mapping[TopicPartition, list[int]]) -> str:
    """One line, as Kafka's tool prints it."""
    return json.dumps(reassignment_json(plan), separators=(",", ":"))


def generate(current: Mapping[TopicPartition, list[int]], topics: Collection[str],
             brokers: Mapping[int, str | None], rng: random.Random | None = None) -> Assignment:
    """A new assignment of ``topics`` over ``brokers`` (Kafka's rack-aware placement), each topic
    keeping its replication factor. PlanError for a topic that does not exist or needs more brokers."""
    proposed: Assignment = {}
    for topic in topics:
        indexes = sorted(p for t, p in current if t == topic)
        if not indexes:
            raise PlanError(f"topic {topic} does not exist")
        rf = len(current[(topic, indexes[0])])
        if rf > len(brokers):
            raise PlanError(f"topic {topic} has replication factor {rf} but only {len(brokers)} brokers are listed")
        placed = assign_replicas(brokers, len(indexes), rf, rng=rng)
        proposed.update({(topic, p): list(r) for p, r in zip(indexes, placed, strict=True)})
    return proposed


@dataclass(frozen=True, slots=True)
class ThrottlePlan:
    topics: dict[str, dict[str, str]]  # topic → {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3"}
    brokers: list[int]                  # every source and destination, sorted


def throttle_plan(current: Mapping[TopicPartition, list[int]], ongoing: Ongoing,
                  plan: Mapping[TopicPartition, list[int]]) -> ThrottlePlan:
    """The throttled-replica lists and brokers for ``plan`` started beside the ``ongoing`` moves."""
    moves: dict[TopicPartition, tuple[list[int], list[int]]] = {}
    for tp, (replicas, adding, _) in ongoing.items():
        moves[tp] = ([r for r in replicas if r not in adding], list(adding))
    for tp, target in plan.items():
        sources = moves[tp][0] if tp in moves else list(current.get(tp, []))
        moves[tp] = (sources, [r for r in target if r not in sources])
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (topic, index), (sources, destinations) in sorted(moves.items()):
        if not destinations:
            continue
        leaders.setdefault(topic, []).extend(f"{index}:{b}" for b in sources)
        followers.setdefault(topic, []).extend(f"{index}:{b}" for b in destinations)
        brokers.update(sources, destinations)
    topics = {t: {LEADER_REPLICAS: ",".join(leaders[t]), FOLLOWER_REPLICAS: ",".join(followers[t])} for t in leaders}
    return ThrottlePlan(topics, sorted(brokers))


@dataclass(frozen=True, slots=True)
class DrainPlan:
    moves: Assignment
    stuck: list[TopicPartition]  # no broker can take the replica (too few brokers or racks)


def drain_plan(current: Mapping[TopicPartition, list[int]], brokers: Mapping[int, str | None],
               drained: Collection[int]) -> DrainPlan:
    """Moves that take every replica off the ``drained`` brokers (see the module docstring)."""
    load = {b: 0 for b in brokers}
    for replicas in current.values():
        for r in replicas:
            if r in load:
                load[r] += 1
    moves: Assignment = {}
    stuck: list[TopicPartition] = []
    for tp in sorted(current):
        replicas = current[tp]
        if not any(r in drained for r in replicas):
            continue
        target = list(replicas)
        for position, replica in enumerate(replicas):
            if replica not in drained:
                continue
            taken = set(target)
            racks = {brokers.get(r) for r in target if r != replica and r not in drained}
            choices = [b for b in brokers if b not in taken and b not in drained]
            if not choices:
                break
            choices.sort(key=lambda b: (brokers[b] is not None and brokers[b] in racks, load[b], b))
            target[position] = choices[0]
            load[choices[0]] += 1
        if any(r in drained for r in target):
            stuck.append(tp)
        else:
            moves[tp] = target
    return DrainPlan(moves, stuck)


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    copied: int  # bytes on the adding replicas
    total: int   # bytes they will hold (leader's size per adding replica)


def progress_line(done: int, total_partitions: int, previous: Sample | None, now: Sample) -> str:
    """``3/10 partitions done, 12.0 MiB of 40.0 MiB copied, 5.1 MiB/s, 5 s left`` (rate once known)."""
    parts = [f"{done}/{total_partitions} partitions done"]
    if now.total > 0:
        parts.append(f"{_mib(min(now.copied, now.total))} of {_mib(now.total)} copied")
        if previous is not None and now.at_s > previous.at_s:
            rate = max(0.0, (now.copied - previous.copied) / (now.at_s - previous.at_s))
            parts.append(f"{_mib(rate)}/s")
            if rate > 0:
                parts.append(f"{max(0.0, (now.total - now.copied) / rate):.0f} s left")
    return ", ".join(parts)


def _mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"
