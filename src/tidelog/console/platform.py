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
- **Offset-preserving links** (``offsets = "preserve"``) write no checkpoint: their position *is* the
  destination's log end. Such a link is found by what it leaves on the destination, the topics whose
  ``mirror.source`` override names it (one DescribeConfigs of every topic, at most once per metadata
  refresh and in the background once answered, so a new mark shows a view or two later); each of
  their partitions is a row with the destination's log start and end (ListOffsets).
  A link whose file is given in ``console.mirror.config`` also gets its source side, read through
  the Kafka protocol with the link's own ``[source]`` settings: the source topic (the link's
  ``rename`` undone), log start and end, lag = source end - max(destination end, source start) as
  ``tidelog mirror status`` counts it, and the shard (``shard_of`` on the *source* name, which the
  destination alone cannot give when the link renames) with its owner in the link group. Without
  the file those columns are empty rather than guessed. A source that cannot be read (its metadata
  or a partition's ListOffsets fails) is reported in ``source_errors`` and the destination side is
  still shown.
- **Gateway** (``console.gateway.state.topic``, default ``__tidelog_gateway_state``): one row per
  (data topic, source id) with its last seqno, the data partition it writes to and its shard (the
  state partition).

A part whose topic does not exist is reported as not used on this cluster (``present`` false): the
page says so instead of showing an empty table.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tidelog.clients.transactional import shared_settings
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
from tidelog.console.kafka import ClusterInfo, GroupInfo, KafkaFailure, KafkaView
from tidelog.console.scrape import parse_exposition
from tidelog.console.tails import StateTail
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.position import Checkpoint, shard_of

MIRROR_PREFIX = "__tidelog_mirror."
MIRROR_SOURCE = "mirror.source"  # the topic config an offset-preserving link's destination topics carry
SOURCE_TIMEOUT_MS = 3000  # how long a page view waits for a preserving link's source cluster
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
    offsets: str = "translated"  # or "preserved": an offset-preserving link (no checkpoints)


@dataclass(frozen=True)
class PreservedRow:
    """One destination partition of an offset-preserving link. Source-side fields are None (and
    ``source_topic`` empty) when no ``console.mirror.config`` file names the link."""

    link: str
    topic: str                  # on the destination (this cluster)
    partition: int
    dest_start: int | None
    dest_end: int | None        # the link's position: the next source offset it copies
    source_topic: str
    shard: int | None
    owner: str
    source_start: int | None
    source_end: int | None
    lag_seconds: float | None   # from the mirror process' metrics (console.mirror.url)

    @property
    def lag_records(self) -> int | None:
        if self.source_end is None or self.dest_end is None:
            return None
        return max(0, self.source_end - max(self.dest_end, self.source_start or 0))


@dataclass(frozen=True)
class MirrorState:
    present: bool
    links: tuple[LinkSummary, ...] = ()
    rows: tuple[CheckpointRow, ...] = ()
    metrics_error: str = ""
    skipped: int = 0
    preserved: tuple[PreservedRow, ...] = ()
    source_errors: tuple[str, ...] = ()


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


def source_topic(link: MirrorConfig, destination: str) -> str:
    """The source topic the link writes to ``destination`` (its ``rename`` undone), or "" when none."""
    first, second, *rest = (re.escape(part) for part in link.topics.rename.split("{topic}"))
    found = re.fullmatch(first + "(?P<t>.+)" + second + "".join("(?P=t)" + part for part in rest), destination)
    return found["t"] if found and link.topics.destination(found["t"]) == destination else ""


def _link_shards(info: ClusterInfo, name: str, config: MirrorConfig | None) -> int:
    """A link's shard count: its link topic's partitions (the truth, fixed for the link's life), else the
    file's ``link.shards``; 0 when neither is known."""
    link_topic = info.topics.get(MIRROR_PREFIX + name)
    if link_topic is not None and link_topic.partitions:
        return len(link_topic.partitions)
    return config.shards if config else 0


def shard_owners(group: GroupInfo | None, link_topic: str) -> dict[int, str]:
    """Shard -> the link group member assigned that partition of the link topic."""
    if group is None:
        return {}
    return {p: f"{m.client_id}@{m.host}".strip("@") for m in group.members for t, p in m.assignment if t == link_topic}


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
        self._marks: tuple[float, dict[str, str]] | None = None  # (metadata fetched_at, topic -> link)
        self._marking = False  # a background DescribeConfigs is under way
        self._links = {link.name: link for link in config.mirror_links}
        self._sources: dict[str, KafkaView] = {}

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
            self._sources.clear()

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

    def _marked(self, info: ClusterInfo) -> dict[str, str]:
        """Destination topic -> the offset-preserving link its ``mirror.source`` names. Asked once per
        metadata refresh (at most once per ``console.metadata.max.age.ms``), and like the metadata in the
        background once there is an answer: DescribeConfigs of every topic takes a loaded broker a few
        hundred ms at 100 topics, which no page view should wait for. Only the first view waits."""
        with self._lock:
            marks = self._marks
            refresh = marks is not None and marks[0] != info.fetched_at and not self._marking
            self._marking = self._marking or refresh
        if marks is None:
            found = self.view.topic_overrides([t for t in info.topics if not t.startswith("__")], MIRROR_SOURCE)
            with self._lock:
                self._marks = (info.fetched_at, found)
            return found
        if refresh:
            threading.Thread(target=self._mark, args=(info,), name="console-mirror-marks", daemon=True).start()
        return marks[1]

    def _mark(self, info: ClusterInfo) -> None:
        try:
            found = self.view.topic_overrides([t for t in info.topics if not t.startswith("__")], MIRROR_SOURCE)
            with self._lock:
                self._marks = (info.fetched_at, found)
        finally:
            with self._lock:
                self._marking = False

    def _source(self, link: MirrorConfig) -> KafkaView:
        with self._lock:
            view = self._sources.get(link.name)
            if view is None:
                settings = shared_settings(link.source)
                view = KafkaView(ConsoleConfig(bootstrap_servers=str(settings.pop("bootstrap.servers", "")),
                                               kafka={k: str(v) for k, v in settings.items()},
                                               request_timeout_ms=min(SOURCE_TIMEOUT_MS,
                                                                      self.config.request_timeout_ms)))
                self._sources[link.name] = view
            return view

    def mirror(self, lag_text: str | None = None, metrics_error: str = "") -> MirrorState:
        """``lag_text``: the mirror process' /metrics (``console.mirror.url``) when it was read."""
        info = self.view.cluster()
        marked = self._marked(info)
        preserving = set(marked.values()) | {name for name, link in self._links.items()
                                             if link.preserves_offsets and MIRROR_PREFIX + name in info.topics}
        topics = sorted(t for t in info.topics if t.startswith(MIRROR_PREFIX) and len(t) > len(MIRROR_PREFIX)
                        and t.removeprefix(MIRROR_PREFIX) not in preserving)
        if not topics and not preserving:
            return MirrorState(False, metrics_error=metrics_error)
        lag = mirror_lag(lag_text) if lag_text is not None else {}
        names = [t.removeprefix(MIRROR_PREFIX) for t in topics] + sorted(preserving)
        groups = self.view.describe_groups([f"tidelog-mirror.{n}" for n in names])
        links, rows, skipped = [], [], 0
        unknown: tuple[float | None, float | None] = (None, None)
        for topic in topics:
            link = topic.removeprefix(MIRROR_PREFIX)
            by_shard, bad = self._read(info, topic, lambda _k, v: Checkpoint.decode(v))
            skipped += bad
            owners = shard_owners(groups.get(f"tidelog-mirror.{link}"), topic)
            found = [CheckpointRow(link, shard, owners.get(shard, ""), c,
                                   *lag.get((c.topic, c.partition), unknown))
                     for shard, values in sorted(by_shard.items()) for c in values.values()]
            found.sort(key=lambda r: (r.checkpoint.topic, r.checkpoint.partition))
            rows += found
            lags = [r.lag_records for r in found if r.lag_records is not None]
            links.append(LinkSummary(link, topic, len(info.topics[topic].partitions), len(owners), len(found),
                                     max((r.checkpoint.at for r in found), default=0), sum(lags) if lags else None))
        preserved, errors = self._preserved(info, marked, sorted(preserving), groups, lag)
        for name in sorted(preserving):
            mine = [r for r in preserved if r.link == name]
            link_topic = MIRROR_PREFIX + name
            config = self._links.get(name)
            shards = _link_shards(info, name, config)
            lags = [r.lag_records for r in mine if r.lag_records is not None]
            links.append(LinkSummary(name, link_topic, shards,
                                     len(shard_owners(groups.get(f"tidelog-mirror.{name}"), link_topic)), len(mine),
                                     -1, float(sum(lags)) if lags else None, "preserved"))
        links.sort(key=lambda s: s.name)
        return MirrorState(True, tuple(links), tuple(rows), metrics_error, skipped, tuple(preserved), tuple(errors))

    def _preserved(self, info: ClusterInfo, marked: dict[str, str], links: list[str], groups: dict[str, GroupInfo],
                   lag: dict[tuple[str, int], tuple[float, float]]) -> tuple[list[PreservedRow], list[str]]:
        partitions = [(t, p.partition) for t in sorted(marked) if t in info.topics for p in info.topics[t].partitions]
        starts, ends = self.view.offsets(partitions, "earliest"), self.view.offsets(partitions, "latest")
        rows, errors = [], []
        for name in links:
            config = self._links.get(name)
            mine = [(t, p) for t, p in partitions if marked[t] == name]
            owners = shard_owners(groups.get(f"tidelog-mirror.{name}"), MIRROR_PREFIX + name)
            shards = _link_shards(info, name, config)
            sources = {t: source_topic(config, t) if config else "" for t, _ in mine}
            wanted = [(sources[t], p) for t, p in mine if sources[t]]
            source_starts: dict[tuple[str, int], int] = {}
            source_ends: dict[tuple[str, int], int] = {}
            if config and wanted:
                try:
                    source = self._source(config)
                    there = source.cluster().topics  # cached there as here; a source that is down fails here
                    wanted = [(t, p) for t, p in wanted if t in there and p < len(there[t].partitions)]
                    source_starts, source_ends = source.offsets(wanted, "earliest"), source.offsets(wanted, "latest")
                    missing = sum(tp not in source_ends for tp in wanted)
                    if missing and not source_ends:
                        source.cluster(fresh=True)  # none answered: the cluster's own error says why, if it is one
                    if missing:
                        errors.append(f"link {name}: the source {config.source.get('bootstrap.servers', '')} gave "
                                      f"no log end for {missing} of {len(wanted)} partitions")
                except KafkaFailure as exc:
                    errors.append(f"link {name}: the source {config.source.get('bootstrap.servers', '')} "
                                  f"does not answer: {exc}")
            for t, p in mine:
                src = sources[t]
                shard = shard_of(src, p, shards) if shards and src else None
                rows.append(PreservedRow(name, t, p, starts.get((t, p)), ends.get((t, p)), src, shard,
                                         owners.get(shard, "") if shard is not None else "",
                                         source_starts.get((src, p)), source_ends.get((src, p)),
                                         lag.get((src, p), (None, None))[1] if src else None))
        return rows, errors
