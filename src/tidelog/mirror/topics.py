"""Destination topics follow the source: created with the same partition count, grown, configs synced.

``plan`` is pure: from what both clusters describe it decides which destination topics to create,
which to grow (partitions are only ever added, as on the source) and which config overrides to set
or delete. ``TopicSync`` runs it through two admin clients every ``metadata.refresh.ms``, so topics
created on the source later and partitions added to it are picked up without a restart.

Configs: only a topic's dynamic overrides (``DYNAMIC_TOPIC_CONFIG``) are copied, less
``config.exclude`` (replication throttles, min.insync.replicas and other settings of the source
cluster's own arrangement). A destination override of a copied key that the source no longer has is
deleted. A destination topic with fewer partitions is grown; one with more is reported and left
alone (partition n of the source always goes to partition n of the destination).
Several mirror processes of one link run this concurrently; every step is idempotent
(TOPIC_ALREADY_EXISTS and INVALID_PARTITIONS for an already-grown topic are not errors).

With ``offsets = "preserve"`` a created topic gets ``mirror.source=<link>``: the destination broker
then takes writes for it only from this link's MirrorProduce and refuses ordinary produce. The key is
never copied nor deleted by the config sync (it is in the built-in exclusions).

An existing destination topic without ``mirror.source`` (preserve mode) is **adopted** only if it is
empty: every partition's end offset is 0, so no offset the source will need is taken. The link then
sets ``mirror.source=<link>`` on it itself. A non-empty one is **refused**, as is one marked for
another link: a record already at offset n would make the source's record n look like a duplicate
(MirrorProduce acknowledges a batch below the log end without writing it), so copying into it would
lose records without a word. Refused topics are neither copied, grown nor re-configured. At the
process's start (``run(first=True)``) a refusal raises ``LinkError`` naming every refused topic and
what to do, before anything is created or marked; found later (a new source topic), it is logged
as an error once and the topic is left out. The emptiness check and the mark are two requests: a
producer writing to the topic between them is not seen (the mark then stops any further write).
A topic that a sibling process of the link adopted meanwhile (marked for this link when described
again) is accepted.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tidelog.clients.transactional import shared_settings
from tidelog.mirror.config import MirrorConfig

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0
MIRROR_SOURCE = "mirror.source"


@dataclass(frozen=True)
class TopicState:
    partitions: int
    configs: Mapping[str, str]


@dataclass
class Plan:
    create: dict[str, TopicState] = field(default_factory=dict)  # destination name -> state
    grow: dict[str, int] = field(default_factory=dict)
    alter: dict[str, tuple[dict[str, str], list[str]]] = field(default_factory=dict)  # name -> (set, delete)
    shrunk: list[str] = field(default_factory=list)  # destination has more partitions than the source
    adopt: dict[str, int] = field(default_factory=dict)  # preserve: existing, unmarked (name -> partitions)
    foreign: dict[str, str] = field(default_factory=dict)  # preserve: name -> the other link marked on it


def plan(config: MirrorConfig, source: Mapping[str, TopicState], dest: Mapping[str, TopicState]) -> Plan:
    out = Plan()
    for name, state in source.items():
        target = config.topics.destination(name)
        wanted = {k: v for k, v in state.configs.items() if k not in config.config_exclude}
        have = dest.get(target)
        if have is None:
            configs = dict(wanted) if config.sync_configs else {}
            if config.preserves_offsets:
                configs[MIRROR_SOURCE] = config.name  # only this link may write it (offsets=preserve)
            out.create[target] = TopicState(state.partitions, configs)
            continue
        if config.preserves_offsets and have.configs.get(MIRROR_SOURCE) != config.name:
            marked = have.configs.get(MIRROR_SOURCE)
            if marked:
                out.foreign[target] = marked
            else:
                out.adopt[target] = have.partitions
        if have.partitions < state.partitions:
            out.grow[target] = state.partitions
        elif have.partitions > state.partitions:
            out.shrunk.append(target)
        if config.sync_configs:
            sets = {k: v for k, v in wanted.items() if have.configs.get(k) != v}
            deletes = sorted(k for k in have.configs if k not in wanted and k not in config.config_exclude)
            if sets or deletes:
                out.alter[target] = (sets, deletes)
    return out


def _overrides(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    if not topics:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    out: dict[str, dict[str, str]] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=TIMEOUT_S).items():
        entries: dict[str, Any] = future.result(timeout=TIMEOUT_S)
        out[resource.name] = {k: str(e.value) for k, e in entries.items()
                              if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}
    return out


def _describe(admin: AdminClient, names: set[str] | None, with_configs: bool) -> dict[str, TopicState]:
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    counts = {name: len(t.partitions) for name, t in metadata.topics.items()
              if t.error is None and (names is None or name in names)}
    configs = _overrides(admin, sorted(counts)) if with_configs else {}
    return {name: TopicState(n, configs.get(name, {})) for name, n in counts.items()}


def _end_offsets(admin: AdminClient, topics: Mapping[str, int]) -> dict[str, dict[int, int]]:
    """Each partition's end offset (high watermark) of ``topics`` (name -> partition count)."""
    out: dict[str, dict[int, int]] = {name: {} for name in topics}
    if not topics:
        return out
    spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    wanted = {TopicPartition(name, p): spec for name, n in topics.items() for p in range(n)}
    for tp, future in admin.list_offsets(wanted, request_timeout=TIMEOUT_S).items():
        out[tp.topic][tp.partition] = int(future.result(timeout=TIMEOUT_S).offset)
    return out


class TopicSync:
    """Keeps the destination's topics in step with the source's (see the module docstring)."""

    def __init__(self, config: MirrorConfig, source: AdminClient, dest: AdminClient) -> None:
        self.config = config
        self.source = source
        self.dest = dest
        self.errors = 0
        self.refused: dict[str, str] = {}  # destination topic -> why the link does not write it

    def source_topics(self) -> dict[str, int]:
        """The mirrored source topics and their partition counts."""
        metadata = self.source.list_topics(timeout=TIMEOUT_S)
        return {name: len(t.partitions) for name, t in metadata.topics.items()
                if t.error is None and self.config.topics.selects(name)}

    def run(self, first: bool = False) -> dict[str, int]:
        """Bring the destination in step; the mirrored source topics (less those refused, see the
        module docstring) and their partition counts. ``first``: a refusal raises ``LinkError``
        before anything is changed."""
        counts = self.source_topics()
        source = _describe(self.source, set(counts), self.config.sync_configs)
        targets = {self.config.topics.destination(t) for t in counts}
        dest = _describe(self.dest, targets, self.config.sync_configs or self.config.preserves_offsets)
        steps = plan(self.config, source, dest)
        adopt, refused = self._check_adoptions(steps)
        if first and refused:
            raise LinkError("; ".join(refused[name] for name in sorted(refused)))
        for name in sorted(set(refused) - set(self.refused)):
            self.errors += 1
            log.error("%s", refused[name])
        self.refused = refused
        for name in refused:
            steps.grow.pop(name, None)
            steps.alter.pop(name, None)
        self._mark(adopt)
        self._create(steps.create)
        self._grow(steps.grow)
        self._alter(steps.alter)
        for name in steps.shrunk:
            log.error("destination topic %s has more partitions than its source; extra partitions stay empty", name)
        return {t: n for t, n in counts.items() if self.config.topics.destination(t) not in refused}

    def _check_adoptions(self, steps: Plan) -> tuple[list[str], dict[str, str]]:
        """(the existing unmarked topics that are empty, so may be marked; refused topic -> why)."""
        link = self.config.name
        refused = {name: (f"destination topic {name} is written by mirror link {other} (mirror.source={other}), "
                          f"not by link {link}: a topic takes one link's records at their source offsets")
                   for name, other in steps.foreign.items()}
        ends = _end_offsets(self.dest, steps.adopt)
        full = {name: sorted((p, end) for p, end in ends[name].items() if end != 0) for name in steps.adopt}
        full = {name: held for name, held in full.items() if held}
        if full:  # a sibling process of this link may have adopted (and begun copying into) them meanwhile
            again = _overrides(self.dest, sorted(full))
            full = {name: held for name, held in full.items() if again.get(name, {}).get(MIRROR_SOURCE) != link}
        for name, held in full.items():
            shown = ", ".join(f"partition {p} ends at {end}" for p, end in held[:3]) + (", ..." if len(held) > 3 else "")
            refused[name] = (
                f"destination topic {name} already exists, holds records ({shown}) and has no mirror.source: "
                f"link {link} (offsets = \"preserve\") cannot write the source's records at their offsets into "
                f"it. Delete it (the link creates it), mirror into another name (topics.rename), or, if it "
                f"already holds this source's records at their source offsets, set mirror.source={link} on it")
        return [name for name in steps.adopt if name not in refused], refused

    def _mark(self, names: list[str]) -> None:
        if not names:
            return
        entry = [ConfigEntry(MIRROR_SOURCE, self.config.name, incremental_operation=AlterConfigOpType.SET)]
        resources = [ConfigResource(ResourceType.TOPIC, name, incremental_configs=entry) for name in names]
        for resource, future in self.dest.incremental_alter_configs(resources, request_timeout=TIMEOUT_S).items():
            self._settle(future, f"existing empty topic {resource.name} marked mirror.source={self.config.name}", None)

    def _create(self, create: dict[str, TopicState]) -> None:
        if not create:
            return
        topics = [NewTopic(name, num_partitions=s.partitions, replication_factor=self.config.replication_factor,
                           config=dict(s.configs)) for name, s in create.items()]
        for name, future in self.dest.create_topics(topics, request_timeout=TIMEOUT_S).items():
            self._settle(future, f"create topic {name} ({create[name].partitions} partitions)",
                         KafkaError.TOPIC_ALREADY_EXISTS)

    def _grow(self, grow: dict[str, int]) -> None:
        if not grow:
            return
        news = [NewPartitions(name, count) for name, count in grow.items()]
        for name, future in self.dest.create_partitions(news, request_timeout=TIMEOUT_S).items():
            self._settle(future, f"grow topic {name} to {grow[name]} partitions", KafkaError.INVALID_PARTITIONS)

    def _alter(self, alter: dict[str, tuple[dict[str, str], list[str]]]) -> None:
        resources = []
        for name, (sets, deletes) in alter.items():
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
            entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
            resources.append(ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries))
        if resources:
            for resource, future in self.dest.incremental_alter_configs(resources, request_timeout=TIMEOUT_S).items():
                sets, deletes = alter[resource.name]
                self._settle(future, f"sync configs of {resource.name} (set {sets}, delete {deletes})", None)

    def _settle(self, future: Any, what: str, benign: int | None) -> None:
        try:
            future.result(timeout=TIMEOUT_S)
            log.info("%s: done", what)
        except KafkaException as exc:
            if benign is not None and exc.args[0].code() == benign:
                return
            self.errors += 1
            log.error("%s: %s", what, exc.args[0].str())


def ensure_link_topic(config: MirrorConfig, dest: AdminClient) -> MirrorConfig:
    """Create the link topic (compacted, one partition per shard); refuse one with another count, unless
    ``link.shards`` is not in the file: then the link keeps the count it has (a link created when the
    default was different). Returns ``config`` with the link's shard count."""
    topic = NewTopic(config.link_topic, num_partitions=config.shards, replication_factor=config.replication_factor,
                     config={"cleanup.policy": "compact"})
    try:
        dest.create_topics([topic], request_timeout=TIMEOUT_S)[config.link_topic].result(timeout=TIMEOUT_S)
        log.info("created the link topic %s (%d shards)", config.link_topic, config.shards)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise LinkError(f"cannot create the link topic {config.link_topic}: {exc.args[0].str()}") from None
    described = dest.list_topics(config.link_topic, timeout=TIMEOUT_S).topics[config.link_topic]
    if described.error is None and len(described.partitions) != config.shards:
        if config.shards_set:
            raise LinkError(f"link topic {config.link_topic} has {len(described.partitions)} partitions but "
                            f"link.shards is {config.shards}; shards are fixed for a link's life")
        log.info("link topic %s has %d partitions: the link keeps its %d shards (link.shards is not set)",
                 config.link_topic, len(described.partitions), len(described.partitions))
        return replace(config, shards=len(described.partitions))
    return config


def link_shards(config: MirrorConfig, dest: AdminClient) -> MirrorConfig:
    """``config`` with the link's shard count as its link topic has it, when the file does not set it."""
    if config.shards_set:
        return config
    described = dest.list_topics(config.link_topic, timeout=TIMEOUT_S).topics.get(config.link_topic)
    if described is None or described.error is not None or not described.partitions:
        return config
    return replace(config, shards=len(described.partitions))


def link_group_member(config: MirrorConfig) -> Consumer:
    """A member of the link group ``tidelog-mirror.<link>`` on the destination, not yet subscribed: its
    assignment of the link topic's partitions is the set of shards this process owns (cooperative-sticky,
    so a rebalance moves only the shards that must move)."""
    return Consumer({
        **shared_settings(config.destination), "group.id": config.group_id,
        "client.id": f"{socket.gethostname()}:{os.getpid()}", "enable.auto.commit": False,
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": config.session_timeout_ms,
        "heartbeat.interval.ms": max(100, config.session_timeout_ms // 5),
        "max.poll.interval.ms": max(config.session_timeout_ms, 60_000),
        "logger": logging.getLogger("tidelog.mirror.rdkafka")})


class LinkError(Exception):
    """The link cannot run (its topic, a fence, a cluster refusing the mirror's principal)."""
