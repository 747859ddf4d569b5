"""What the platform processes left on the cluster: the governor's plan and control, the mirror links'
checkpoints, the gateway's sources. Read from their state topics through the Kafka protocol
(``tails.StateTail``), never by asking the processes, so the panels show the truth of the cluster
even when a process is down, and work against Apache Kafka too.

- **Governor** (``console.governor.state.topic``, default ``__tidelog_governor``): control (paused, by
  whom, drained brokers), the plan being executed and the summary of the last one, the throttles it
  set. Each move's state is derived as the governor derives it, from the replica lists in Metadata:
  *done* when the replicas are the target (as a set; for a leader-only move, in order), *moving*
  when the replicas hold the target and more (Kafka lists the union while a reassignment copies),
  *cancelled* when the plan says so, *gone* when the partition no longer exists, else *pending*.
- **Mirror**: every topic named ``__tidelog_mirror.<link>`` is a link's topic on this cluster (its
  destination), one partition per shard, one checkpoint per mirrored source partition (decoded by the
  mirror's own ``Checkpoint``). A shard's owner is the member of the link group
  (``tidelog-mirror.<link>``) assigned that partition. Lag in records and seconds comes from the
  mirror process' metrics when ``console.mirror.url`` is set (the source cluster is not the console's).
- **Gateway** (``console.gateway.state.topic``, default ``__tidelog_gateway_state``): one row per
  (data topic, source id) with its last seqno, the data partition it writes to and its shard (the
  state partition).

A part whose topic does not exist is reported as not used on this cluster (``present`` false): the
page says so instead of showing an empty table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tidelog.common.platform_records import (
    GatewaySource,
    GovernorControl,
    GovernorLast,
    GovernorMove,
    GovernorPlan,
    GovernorRecord,
    GovernorThrottles,
    decode_gateway_state,
    decode_governor,
)
from tidelog.console.config import ConsoleConfig
from tidelog.console.kafka import ClusterInfo, KafkaView
from tidelog.console.scrape import parse_exposition
from tidelog.console.tails import StateTail
from tidelog.mirror.position import Checkpoint

MIRROR_PREFIX = "__tidelog_mirror."
MOVE_STATES = ("pending", "moving", "done", "cancelled", "gone")
V = TypeVar("V")


@dataclass(frozen=True)
class MoveRow:
    move: GovernorMove
    replicas: tuple[int, ...] | None  # now, from Metadata; None when the partition is gone
    state: str


@dataclass(frozen=True)
class GovernorState:
    topic: str
    present: bool
    control: GovernorControl | None = None
    plan: GovernorPlan | None = None
    last: GovernorLast | None = None
    throttles: GovernorThrottles | None = None
    moves: tuple[MoveRow, ...] = ()
    skipped: int = 0

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(m.state == s for m in self.moves) for s in MOVE_STATES}


@dataclass(frozen=True)
class CheckpointRow:
    link: str
    shard: int
    owner: str
    checkpoint: Checkpoint
    lag_records: float | None
    lag_seconds: float | None


@dataclass(frozen=True)
class LinkSummary:
    name: str
    topic: str
    shards: int
    owned: int
    checkpoints: int
    last_commit_ms: int
    lag_records: float | None


@dataclass(frozen=True)
class MirrorState:
    present: bool
    links: tuple[LinkSummary, ...] = ()
    rows: tuple[CheckpointRow, ...] = ()
    metrics_error: str = ""
    skipped: int = 0


@dataclass(frozen=True)
class GatewayRow:
    source: GatewaySource
    shard: int


@dataclass(frozen=True)
class GatewayState:
    topic: str
    present: bool
    shards: int = 0
    rows: tuple[GatewayRow, ...] = ()
    skipped: int = 0


def move_state(move: GovernorMove, replicas: Sequence[int] | None, cancelled: bool) -> str:
    if cancelled:
        return "cancelled"
    if replicas is None:
        return "gone"
    now, target = tuple(replicas), set(move.after)
    if now == move.after or (set(move.before) != target and set(now) == target):
        return "done"
    if target < set(now):
        return "moving"
    return "pending"


def governor_state(topic: str, info: ClusterInfo, records: dict[bytes, GovernorRecord], skipped: int
                   ) -> GovernorState:
    by_key = {k.decode(errors="replace"): v for k, v in records.items()}
    plan = _typed(by_key.get("plan"), GovernorPlan)
    rows: list[MoveRow] = []
    cancelled = plan.cancelled if plan else frozenset()
    for m in plan.moves if plan else ():
        t = info.topics.get(m.topic)
        p = next((p for p in t.partitions if p.partition == m.partition), None) if t else None
        replicas = p.replicas if p else None
        rows.append(MoveRow(m, replicas, move_state(m, replicas, (m.topic, m.partition) in cancelled)))
    return GovernorState(topic, True, _typed(by_key.get("control"), GovernorControl), plan,
                         _typed(by_key.get("last"), GovernorLast), _typed(by_key.get("throttles"), GovernorThrottles),
                         tuple(rows), skipped)


def _typed(value: object, kind: type[V]) -> V | None:
    return value if isinstance(value, kind) else None


def mirror_lag(metrics_text: str) -> dict[tuple[str, int], tuple[float, float]]:
    """(records, seconds) behind per source partition, from a mirror process' /metrics."""
    families = parse_exposition(metrics_text)
    seconds = {(lb.get("topic", ""), lb.get("partition", "")): v
               for lb, v in families.get("tidelog_mirror_lag_seconds", [])}
    out = {}
    for labels, records in families.get("tidelog_mirror_lag_records", []):
        key = (labels.get("topic", ""), labels.get("partition", ""))
        if key[1].isdigit():
            out[(key[0], int(key[1]))] = (records, seconds.get(key, 0.0))
    return out


class PlatformView:
    """The three parts' state, each read incrementally from its topic at every call (thread-safe)."""

    def __init__(self, config: ConsoleConfig, view: KafkaView) -> None:
        self.config = config
        self.view = view
        self._tails: dict[str, StateTail[Any]] = {}
        self._lock = threading.Lock()

    def _tail(self, topic: str, decode: Callable[[bytes, bytes], Any]) -> StateTail[Any]:
        with self._lock:
            tail = self._tails.get(topic)
            if tail is None:
                tail = StateTail(self.config.kafka_config(), topic, decode, self.view.timeout)
                self._tails[topic] = tail
            return tail

    def _read(self, info: ClusterInfo, topic: str, decode: Callable[[bytes, bytes], Any]
              ) -> tuple[dict[int, dict[bytes, Any]], int]:
        partitions = [p.partition for p in info.topics[topic].partitions]
        ends = self.view.offsets([(topic, p) for p in partitions])
        tail = self._tail(topic, decode)
        return tail.refresh({p: ends.get((topic, p), 0) for p in partitions}), tail.skipped

    def close(self) -> None:
        with self._lock:
            for tail in self._tails.values():
                tail.close()
            self._tails.clear()

    def governor(self) -> GovernorState:
        topic = self.config.governor_state_topic
        info = self.view.cluster()
        if topic not in info.topics:
            return GovernorState(topic, False)
        by_partition, skipped = self._read(info, topic, lambda k, v: decode_governor(k.decode(errors="replace"), v))
        records = {k: v for values in by_partition.values() for k, v in values.items()}
        return governor_state(topic, info, records, skipped)

    def gateway(self) -> GatewayState:
        topic = self.config.gateway_state_topic
        info = self.view.cluster()
        if topic not in info.topics:
            return GatewayState(topic, False)
        by_partition, skipped = self._read(info, topic, decode_gateway_state)
        rows = [GatewayRow(source, shard) for shard, values in sorted(by_partition.items())
                for source in values.values()]
        rows.sort(key=lambda r: (r.source.topic, r.source.source_id))
        return GatewayState(topic, True, len(info.topics[topic].partitions), tuple(rows), skipped)

    def mirror(self, lag_text: str | None = None, metrics_error: str = "") -> MirrorState:
        """``lag_text``: the mirror process' /metrics (``console.mirror.url``) when it was read."""
        info = self.view.cluster()
        topics = sorted(t for t in info.topics if t.startswith(MIRROR_PREFIX) and len(t) > len(MIRROR_PREFIX))
        if not topics:
            return MirrorState(False, metrics_error=metrics_error)
        lag = mirror_lag(lag_text) if lag_text is not None else {}
        groups = self.view.describe_groups([f"tidelog-mirror.{t.removeprefix(MIRROR_PREFIX)}" for t in topics])
        links, rows, skipped = [], [], 0
        unknown: tuple[float | None, float | None] = (None, None)
        for topic in topics:
            link = topic.removeprefix(MIRROR_PREFIX)
            by_shard, bad = self._read(info, topic, lambda _k, v: Checkpoint.decode(v))
            skipped += bad
            group = groups.get(f"tidelog-mirror.{link}")
            owners = {p: f"{m.client_id}@{m.host}".strip("@") for m in group.members
                      for t, p in m.assignment if t == topic} if group else {}
            found = [CheckpointRow(link, shard, owners.get(shard, ""), c,
                                   *lag.get((c.topic, c.partition), unknown))
                     for shard, values in sorted(by_shard.items()) for c in values.values()]
            found.sort(key=lambda r: (r.checkpoint.topic, r.checkpoint.partition))
            rows += found
            lags = [r.lag_records for r in found if r.lag_records is not None]
            links.append(LinkSummary(link, topic, len(info.topics[topic].partitions), len(owners), len(found),
                                     max((r.checkpoint.at for r in found), default=0), sum(lags) if lags else None))
        return MirrorState(True, tuple(links), tuple(rows), metrics_error, skipped)

