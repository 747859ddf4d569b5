"""The mirror link's TOML configuration, read and checked before anything starts.

::

    [link]
    name = "dc1-to-dc2"            # names the link topic, the group and the transactional ids
    shards = 4                     # units of ownership and of fencing; fixed for the link's life (unset:
                                   # an existing link topic's count, else 4)
    budget.bytes = 67108864        # one byte budget for everything the link holds in memory
    transaction.interval.ms = 500  # a transaction is committed at least this often while records come
    metadata.refresh.ms = 10000    # how often new topics, added partitions and configs are looked for
    session.timeout.ms = 10000     # the link group's session: how soon a dead process's shards move
    offset.header = "tidelog.mirror.offset"   # header carrying each record's source offset ("" = none)
    replication.factor = -1        # of created destination topics (-1: the destination's default)
    sync.configs = true            # copy topic config overrides from source to destination
    config.exclude = ["min.insync.replicas"]  # topic configs never copied (added to the built-in list)
    start = "earliest"             # where a partition with no checkpoint starts: earliest or latest
    metrics.listen = "127.0.0.1:9750"  # /metrics and /healthz ("" = no HTTP listener)
    offsets = "translate"          # or "preserve": records keep their source offsets (tidelog destination)

    [topics]
    include = ["orders", "dc1\\..*"]   # regular expressions, matched against the whole name
    exclude = []
    rename = "{topic}"                 # destination name; "dc1.{topic}" prefixes every topic

    [source]                       # librdkafka settings of the source cluster (TLS, SASL/SCRAM...)
    "bootstrap.servers" = "dc1-kafka:9092"

    [destination]                  # the same for the destination cluster
    "bootstrap.servers" = "dc2-kafka:9092"
    "security.protocol" = "SASL_SSL"
    "sasl.mechanism" = "SCRAM-SHA-512"

The source and destination tables are handed to librdkafka as they are, minus the keys the mirror
sets itself (transactional.id, isolation.level, group.id, enable.idempotence, enable.auto.commit):
those are refused with a message. Internal topics (names starting ``__``) are never mirrored.

``offsets = "preserve"`` (preserve.py) reads and writes with tidelog's own Kafka-protocol connections
(wire.py), which take their TLS and SASL settings from the same tables through
``tidelog.clients.security``: what those connections cannot do (GSSAPI, an unreadable CA file, a
SASL protocol without credentials) is refused here, with the side and the key named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.clients.security import ClientSecurity
from tidelog.common.errors import ConfigError
from tidelog.common.toml_settings import client_settings, flatten, integer, load_toml, strings, text

_LINK_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
_RESERVED_CLIENT = ("transactional.id", "isolation.level", "group.id", "enable.idempotence", "enable.auto.commit",
                    "group.instance.id")
# Topic configs that describe the source cluster's own arrangements, not the data: never copied.
BUILTIN_CONFIG_EXCLUDE = frozenset({
    "leader.replication.throttled.replicas", "follower.replication.throttled.replicas", "min.insync.replicas",
    "unclean.leader.election.enable", "confluent.placement.constraints", "remote.storage.enable",
    "mirror.source",
})
OFFSET_MODES = ("translate", "preserve")
DEFAULT_SHARDS = 4  # each shard owned is a librdkafka producer with state for every partition (docs/mirror.md)
_INTS = {"shards": (DEFAULT_SHARDS, 1), "budget.bytes": (64 << 20, 1 << 20), "transaction.interval.ms": (500, 10),
         "metadata.refresh.ms": (10_000, 100), "session.timeout.ms": (10_000, 500),
         "transaction.timeout.ms": (60_000, 1000)}


@dataclass(frozen=True)
class TopicRule:
    """Which source topics are mirrored and under which destination name."""

    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...] = ()
    rename: str = "{topic}"

    def selects(self, topic: str) -> bool:
        if topic.startswith("__"):
            return False
        return (any(p.fullmatch(topic) for p in self.include)
                and not any(p.fullmatch(topic) for p in self.exclude))

    def destination(self, topic: str) -> str:
        return self.rename.replace("{topic}", topic)


@dataclass(frozen=True)
class MirrorConfig:
    name: str
    topics: TopicRule
    source: Mapping[str, Any]
    destination: Mapping[str, Any]
    shards: int = DEFAULT_SHARDS
    budget_bytes: int = 64 << 20
    transaction_interval_ms: int = 500
    metadata_refresh_ms: int = 10_000
    session_timeout_ms: int = 10_000
    transaction_timeout_ms: int = 60_000
    offset_header: str = "tidelog.mirror.offset"
    replication_factor: int = -1
    sync_configs: bool = True
    config_exclude: frozenset[str] = BUILTIN_CONFIG_EXCLUDE
    start: str = "earliest"
    metrics_listen: str = ""
    offsets: str = "translate"
    shards_set: bool = True  # False: link.shards not in the file; an existing link keeps its count (topics.py)

    @property
    def preserves_offsets(self) -> bool:
        return self.offsets == "preserve"

    @property
    def link_topic(self) -> str:
        """On the destination: one partition per shard; the group's assignment and the checkpoints."""
        return f"__tidelog_mirror.{self.name}"

    @property
    def group_id(self) -> str:
        return f"tidelog-mirror.{self.name}"

    def transactional_id(self, shard: int) -> str:
        return f"tidelog-mirror.{self.name}.{shard}"

    def with_overrides(self, source: str | None = None, destination: str | None = None) -> MirrorConfig:
        import dataclasses
        return dataclasses.replace(
            self, source={**self.source, **({"bootstrap.servers": source} if source else {})},
            destination={**self.destination, **({"bootstrap.servers": destination} if destination else {})})


def _patterns(key: str, values: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    out = []
    for value in values:
        try:
            out.append(re.compile(value))
        except re.error as exc:
            raise ConfigError(f"topics.{key}: {value!r} is not a regular expression: {exc}") from None
    return tuple(out)


def _cluster(name: str, table: object) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"{name}: expected a table [{name}] of librdkafka settings")
    settings = client_settings(table)
    if "bootstrap.servers" not in settings:
        raise ConfigError(f"{name}.bootstrap.servers: required")
    for key in _RESERVED_CLIENT:
        if key in settings:
            raise ConfigError(f"{name}.{key}: set by the mirror itself")
    return settings


def _topics(table: object) -> TopicRule:
    if not isinstance(table, dict):
        raise ConfigError("topics: expected a table [topics] with include")
    flat = flatten(table)
    unknown = set(flat) - {"include", "exclude", "rename"}
    if unknown:
        raise ConfigError(f"topics.{sorted(unknown)[0]}: unknown setting")
    if "include" not in flat:
        raise ConfigError("topics.include: required (regular expressions of the topics to mirror)")
    rename = text("topics.", "rename", flat.get("rename", "{topic}"))
    if "{topic}" not in rename:
        raise ConfigError(f"topics.rename: must contain {{topic}}, got {rename!r}")
    return TopicRule(_patterns("include", strings("topics.", "include", flat["include"])),
                     _patterns("exclude", strings("topics.", "exclude", flat.get("exclude", [])))
                     if flat.get("exclude") else (), rename)


def parse_config(document: Mapping[str, Any]) -> MirrorConfig:
    unknown = set(document) - {"link", "topics", "source", "destination"}
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown section (expected link, topics, source, destination)")
    link = flatten(document.get("link", {}))
    allowed = {"name", "offset.header", "replication.factor", "sync.configs", "config.exclude", "start",
               "metrics.listen", "offsets", *_INTS}
    if set(link) - allowed:
        raise ConfigError(f"link.{sorted(set(link) - allowed)[0]}: unknown setting")
    name = text("link.", "name", link.get("name"))
    if not _LINK_NAME.fullmatch(name):
        raise ConfigError(f"link.name: letters, digits, '.', '_' and '-' only, got {name!r}")
    ints = {key.replace(".", "_"): integer("link.", key, link.get(key, default), low)
            for key, (default, low) in _INTS.items()}
    header = link.get("offset.header", "tidelog.mirror.offset")
    if not isinstance(header, str):
        raise ConfigError(f"link.offset.header: expected a string, got {header!r}")
    rf = link.get("replication.factor", -1)
    if not isinstance(rf, int) or isinstance(rf, bool) or (rf < 1 and rf != -1):
        raise ConfigError(f"link.replication.factor: expected -1 or an integer >= 1, got {rf!r}")
    sync = link.get("sync.configs", True)
    if not isinstance(sync, bool):
        raise ConfigError(f"link.sync.configs: expected true or false, got {sync!r}")
    start = link.get("start", "earliest")
    if start not in ("earliest", "latest"):
        raise ConfigError(f"link.start: expected earliest or latest, got {start!r}")
    listen = link.get("metrics.listen", "")
    if not isinstance(listen, str) or (listen and not re.fullmatch(r"\[?[^\]]*\]?:\d{1,5}", listen)):
        raise ConfigError(f"link.metrics.listen: expected HOST:PORT or \"\", got {listen!r}")
    exclude = strings("link.", "config.exclude", link["config.exclude"]) if link.get("config.exclude") else ()
    offsets = link.get("offsets", "translate")
    if offsets not in OFFSET_MODES:
        raise ConfigError(f"link.offsets: expected translate or preserve, got {offsets!r}")
    source = _cluster("source", document.get("source"))
    destination = _cluster("destination", document.get("destination"))
    if offsets == "preserve":  # its own connections read the security keys too: checked now, key named
        for side, settings in (("source", source), ("destination", destination)):
            try:
                ClientSecurity.from_config(settings)
            except ConfigError as exc:
                raise ConfigError(f"{side}.{exc}") from None
    return MirrorConfig(
        name=name, topics=_topics(document.get("topics")),
        source=source, destination=destination, offsets=offsets,
        offset_header=header, replication_factor=rf, sync_configs=sync,
        config_exclude=BUILTIN_CONFIG_EXCLUDE | frozenset(exclude), start=start, metrics_listen=listen,
        shards_set="shards" in link, **ints)


def load_config(path: Path) -> MirrorConfig:
    return parse_config(load_toml(path))
