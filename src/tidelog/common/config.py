"""The configuration catalogue: every setting tidelog understands, with Kafka's name.

Each :class:`Setting` has its Kafka key, a type, a default, a one-line doc, an optional validator,
whether it is a broker or a topic setting, and whether Kafka lets it change at run time (dynamic).
Topic settings that have a broker-wide default name it in ``broker_synonym`` (``retention.ms`` is
defaulted by ``log.retention.ms``), which is how DescribeConfigs reports ``config source``.

``docs/configuration.md`` is generated from this module (``python -m tidelog.common.config``), so
the docs never drift from the code.
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar, overload

from tidelog.common.errors import ConfigError
from tidelog.common.kafka_broker_keys import NO_EFFECT_DOC, kafka_dynamic, kafka_only_keys, kafka_password

_D = TypeVar("_D")


class Type(enum.Enum):
    """Kafka's ConfigDef types, as DescribeConfigs v3+ reports them."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Scope(enum.Enum):
    BROKER = "broker"
    TOPIC = "topic"


Value = bool | str | int | float | list[str] | None


@dataclass(frozen=True)
class Setting:
    name: str
    type: Type
    default: Value
    doc: str
    scope: Scope
    dynamic: bool = False
    validator: Callable[[Value], str | None] | None = None
    broker_synonym: str | None = None
    sensitive: bool = False

    def parse(self, raw: object) -> Value:
        """Turn a raw value (string from a file or the wire, or a Python value) into this type.

        Raises ConfigError naming the key when the value does not parse or fails validation.
        """
        try:
            value = _parse(self.type, raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: {exc}") from None
        if self.validator is not None:
            problem = self.validator(value)
            if problem:
                raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}: {problem}")
        return value

    def render(self, value: Value) -> str | None:
        """The string form Kafka shows in DescribeConfigs."""
        if value is None:
            return None
        if self.type is Type.BOOLEAN:
            return "true" if value else "false"
        if self.type is Type.LIST:
            assert isinstance(value, list)
            return ",".join(value)
        return str(value)


def _parse(kind: Type, raw: object) -> Value:
    if raw is None:
        return None
    if kind is Type.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ValueError("expected true or false")
        return text == "true"
    if kind in (Type.INT, Type.SHORT, Type.LONG):
        if isinstance(raw, bool):
            raise TypeError("expected a number")
        value = int(str(raw).strip()) if not isinstance(raw, int) else raw
        limit = {Type.INT: 2**31, Type.SHORT: 2**15, Type.LONG: 2**63}[kind]
        if not -limit <= value < limit:
            raise ValueError("out of range")
        return value
    if kind is Type.DOUBLE:
        return float(str(raw).strip()) if not isinstance(raw, float) else raw
    if kind is Type.LIST:
        if isinstance(raw, list):
            return [str(item) for item in raw]
        return [item.strip() for item in str(raw).split(",") if item.strip()]
    return str(raw)


# -- validators ---------------------------------------------------------------------------------


def at_least(low: float) -> Callable[[Value], str | None]:
    def check(value: Value) -> str | None:
        assert isinstance(value, int | float)
        return None if value >= low else f"must be at least {low}"

    return check


def between(low: float, high: float) -> Callable[[Value], str | None]:
    def check(value: Value) -> str | None:
        assert isinstance(value, int | float)
        return None if low <= value <= high else f"must be between {low} and {high}"

    return check


def _store_url(value: Value) -> str | None:
    if not value or str(value).startswith("etcd://"):
        return None
    return "expected etcd://host:port[,host:port...][/prefix], or empty for the local file"


def _budget(value: Value) -> str | None:
    assert isinstance(value, int)
    return None if value == -1 or value > 0 else "must be -1 (no limit) or a positive number of bytes"


def _overrides(value: Value) -> str | None:
    for item in str(value or "").split(","):
        host, sep, count = item.strip().rpartition(":")
        if item.strip() and (not sep or not host or not count.strip().isdigit()):
            return f"expected host:count[,host:count...], not {item.strip()!r}"
    return None


def _broker_ids(value: Value) -> str | None:
    if isinstance(value, list) and not all(item.strip().isdigit() for item in value):
        return "expected a comma-separated list of broker ids"
    return None


def _replica_list(value: Value) -> str | None:
    """Kafka's rule for a throttled-replicas list: ``*`` alone, or ``partition:broker`` entries."""
    assert isinstance(value, list)
    if [e.strip() for e in value] == ["*"]:
        return None
    for entry in value:
        partition, sep, node = entry.strip().partition(":")
        if not sep or not partition.isdigit() or not node.isdigit():
            return "must be the literal '*' or a list of replicas in the format [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    return None


def one_of(*choices: str) -> Callable[[Value], str | None]:
    def check(value: Value) -> str | None:
        items = value if isinstance(value, list) else [value]
        bad = [item for item in items if item not in choices]
        return f"must be one of {', '.join(choices)}" if bad or not items else None

    return check


# controller/placement_policy.py's policies (named here so the catalogue can validate them).
PLACEMENT_POLICIES = ("rack-aware", "consistent-hash")
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(value: Value) -> str | None:
    if value in (None, "", RACK_AWARE_SELECTOR):
        return None
    return f"tidelog knows {RACK_AWARE_SELECTOR} (nearest-replica reads) or empty (the leader serves every read)"


def _link_name(value: Value) -> str | None:
    if value is None or (isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,100}", value)):
        return None
    return "expected a mirror link name: letters, digits, '.', '_' and '-'"


def _dir_delays(value: Value) -> str | None:
    for item in value if isinstance(value, list) else []:
        path, _, ms = str(item).strip().rpartition(":")
        if not path or not ms.strip().isdigit():
            return f"expected <log dir>:<milliseconds>, got {item!r}"
    return None


def _positive(value: Value) -> str | None:
    assert isinstance(value, int | float)
    return None if value > 0 else "must be larger than 0"


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_B, _T = Scope.BROKER, Scope.TOPIC
_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS

# Topic settings: (name, type, default, doc, broker synonym, validator). Defaults are Kafka 4's.
_TOPIC: list[Setting] = [
    Setting("cleanup.policy", Type.LIST, ["delete"], "delete, compact, or both: what happens to old segments.", _T, True, one_of("delete", "compact"), "log.cleanup.policy"),
    Setting("compression.type", Type.STRING, "producer", "Final compression of the topic's batches; 'producer' keeps what the producer sent.", _T, True, one_of(*COMPRESSION_TYPES), "compression.type"),
    Setting("delete.retention.ms", Type.LONG, _DAY_MS, "How long tombstones survive on a compacted topic.", _T, True, at_least(0), "log.cleaner.delete.retention.ms"),
    Setting("file.delete.delay.ms", Type.LONG, 60_000, "Delay between removing a segment from the log and deleting its files.", _T, True, at_least(0), "log.segment.delete.delay.ms"),
    Setting("flush.messages", Type.LONG, 2**63 - 1, "fsync after this many messages.", _T, True, at_least(1), "log.flush.interval.messages"),
    Setting("flush.ms", Type.LONG, 2**63 - 1, "fsync at least this often (ms).", _T, True, at_least(0), "log.flush.interval.ms"),
    Setting("index.interval.bytes", Type.INT, 4096, "Bytes of log between two offset-index entries.", _T, True, at_least(0), "log.index.interval.bytes"),
    Setting("max.compaction.lag.ms", Type.LONG, 2**63 - 1, "Longest time a record may stay uncompacted.", _T, True, at_least(1), "log.cleaner.max.compaction.lag.ms"),
    Setting("max.message.bytes", Type.INT, 1048588, "Largest record batch the topic accepts.", _T, True, at_least(0), "message.max.bytes"),
    Setting("message.timestamp.type", Type.STRING, "CreateTime", "CreateTime keeps the producer's timestamp; LogAppendTime stamps the broker's.", _T, True, one_of("CreateTime", "LogAppendTime"), "log.message.timestamp.type"),
    Setting("message.timestamp.before.max.ms", Type.LONG, 2**63 - 1, "How far in the past a CreateTime timestamp may be.", _T, True, at_least(0), "log.message.timestamp.before.max.ms"),
    Setting("message.timestamp.after.max.ms", Type.LONG, _HOUR_MS, "How far in the future a CreateTime timestamp may be.", _T, True, at_least(0), "log.message.timestamp.after.max.ms"),
    Setting("min.cleanable.dirty.ratio", Type.DOUBLE, 0.5, "Dirty share of a log above which the cleaner compacts it.", _T, True, between(0, 1), "log.cleaner.min.cleanable.ratio"),
    Setting("min.compaction.lag.ms", Type.LONG, 0, "Youngest a record may be and still be compacted.", _T, True, at_least(0), "log.cleaner.min.compaction.lag.ms"),
    Setting("min.insync.replicas", Type.INT, 1, "Replicas that must hold a batch before acks=all succeeds.", _T, True, at_least(1), "min.insync.replicas"),
    Setting("preallocate", Type.BOOLEAN, False, "Preallocate segment files (accepted, no effect).", _T, True, None, "log.preallocate"),
    Setting("retention.bytes", Type.LONG, -1, "Largest size of a partition before old segments go (-1: no limit).", _T, True, None, "log.retention.bytes"),
    Setting("retention.ms", Type.LONG, 7 * _DAY_MS, "Age after which segments go (-1: forever).", _T, True, at_least(-1), "log.retention.ms"),
    Setting("segment.bytes", Type.INT, 1073741824, "Size of a segment file before a new one is rolled.", _T, True, at_least(14), "log.segment.bytes"),
    Setting("segment.index.bytes", Type.INT, 10485760, "Size of a segment's offset index.", _T, True, at_least(8), "log.index.size.max.bytes"),
    Setting("segment.jitter.ms", Type.LONG, 0, "Up to this much, drawn per segment, is taken off segment.ms (segments created together roll apart).", _T, True, at_least(0), "log.roll.jitter.ms"),
    Setting("segment.ms", Type.LONG, 7 * _DAY_MS, "Age of the active segment after which a new one is rolled.", _T, True, at_least(1), "log.roll.ms"),
    Setting("unclean.leader.election.enable", Type.BOOLEAN, False, "Allow an out-of-sync replica to become leader.", _T, True, None, "unclean.leader.election.enable"),
    Setting("compression.gzip.level", Type.INT, -1, "gzip level when the broker compresses a batch (compression.type=gzip).", _T, True, between(-1, 9), "compression.gzip.level"),
    Setting("compression.lz4.level", Type.INT, 9, "lz4 level when the broker compresses a batch (compression.type=lz4).", _T, True, between(1, 17), "compression.lz4.level"),
    Setting("compression.zstd.level", Type.INT, 3, "zstd level when the broker compresses a batch (compression.type=zstd).", _T, True, between(-131072, 22), "compression.zstd.level"),
    Setting("leader.replication.throttled.replicas", Type.LIST, [], "Replicas whose leader side is throttled to leader.replication.throttled.rate: partition:broker entries naming the leading broker, or * for all.", _T, True, _replica_list),
    Setting("follower.replication.throttled.replicas", Type.LIST, [], "Replicas whose fetcher is throttled to follower.replication.throttled.rate: partition:broker entries naming the following broker, or * for all.", _T, True, _replica_list),
    # Accepted and reported like Kafka's; tidelog does not act on them yet (docs/status.md).
    Setting("remote.storage.enable", Type.BOOLEAN, False, "Tiered storage for the topic (not available; accepted when false).", _T, True),
    Setting("local.retention.ms", Type.LONG, -2, "Local retention with tiered storage (-2: retention.ms).", _T, True, at_least(-2), "log.local.retention.ms"),
    Setting("local.retention.bytes", Type.LONG, -2, "Local retention with tiered storage (-2: retention.bytes).", _T, True, at_least(-2), "log.local.retention.bytes"),
    Setting("remote.log.copy.disable", Type.BOOLEAN, False, "Stop copying to the remote tier (accepted, not applied).", _T, True),
    Setting("remote.log.delete.on.disable", Type.BOOLEAN, False, "Delete remote data when tiering is disabled (accepted, not applied).", _T, True),
    # tidelog's own (docs/cluster.md#placement-policies): how new partitions of the topic are placed.
    Setting("placement.policy", Type.STRING, "rack-aware", "tidelog: how the topic's new partitions are placed in a cluster: rack-aware (Kafka's round robin over racks) or consistent-hash (a ring weighted by broker.weight, stable as brokers come and go). Changing it affects partitions added later.", _T, True, one_of(*PLACEMENT_POLICIES), "placement.policy"),
    # tidelog's own (docs/mirror.md#offset-preserving-mode): the mirror link that alone writes the topic.
    Setting("mirror.source", Type.STRING, None, "tidelog: the mirror link (offsets=preserve) that writes this topic at its source offsets. While set, only that link's MirrorProduce requests append to the topic and ordinary produce is refused with INVALID_REQUEST; remove it to make the topic writable again (for example when writers move here).", _T, True, _link_name),
]

_BROKER: list[Setting] = [
    Setting("node.id", Type.INT, 1, "This broker's id.", _B, False, at_least(0)),
    Setting("broker.rack", Type.STRING, None, "Rack of this broker, for rack-aware placement and nearest-replica reads (client.rack).", _B),
    Setting("broker.rack.group", Type.STRING, None, "tidelog: failure group (virtual rack) of this broker for placement; unset: broker.rack. Brokers sharing a group get at most one replica of a partition while groups last.", _B),
    Setting("broker.weight", Type.DOUBLE, 1.0, "tidelog: this broker's share of the consistent-hash ring (placement.policy=consistent-hash): a broker of weight 2 gets about twice the partitions of one of weight 1.", _B, False, _positive),
    Setting("replica.selector.class", Type.STRING, None, f"Nearest-replica reads (KIP-392): {RACK_AWARE_SELECTOR} sends a consumer whose client.rack matches an in-sync follower's broker.rack to that follower; unset: consumers read from the leader.", _B, False, _replica_selector),
    Setting("listeners", Type.LIST, ["PLAINTEXT://127.0.0.1:9092"], "Addresses to listen on, NAME://host:port, comma separated.", _B),
    Setting("advertised.listeners", Type.LIST, None, "Addresses clients are told to use (defaults to listeners).", _B, True),
    Setting("listener.security.protocol.map", Type.STRING, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", "Listener name to security protocol.", _B),
    Setting("log.dirs", Type.LIST, ["./data"], "Directories holding partition logs, comma separated.", _B),
    Setting("log.dir", Type.STRING, None, "A single log directory (used when log.dirs is unset).", _B),
    Setting("num.partitions", Type.INT, 1, "Partitions of an auto-created topic.", _B, False, at_least(1)),
    Setting("default.replication.factor", Type.INT, 1, "Replication factor of an auto-created topic.", _B, False, at_least(1)),
    Setting("auto.create.topics.enable", Type.BOOLEAN, True, "Create a topic when a client asks for one that does not exist.", _B),
    Setting("delete.topic.enable", Type.BOOLEAN, True, "Allow DeleteTopics.", _B),
    Setting("message.max.bytes", Type.INT, 1048588, "Largest record batch accepted (topic default).", _B, True, at_least(0)),
    Setting("socket.request.max.bytes", Type.INT, 104857600, "Largest request frame accepted; larger frames close the connection.", _B, False, at_least(1)),
    Setting("socket.send.buffer.bytes", Type.INT, 102400, "SO_SNDBUF of accepted sockets (-1: OS default).", _B),
    Setting("socket.receive.buffer.bytes", Type.INT, 102400, "SO_RCVBUF of accepted sockets (-1: OS default).", _B),
    Setting("connections.max.idle.ms", Type.LONG, 600_000, "Idle connections are closed after this long.", _B),
    Setting("log.retention.hours", Type.INT, 168, "Retention in hours (used when log.retention.ms and .minutes are unset).", _B),
    Setting("log.retention.minutes", Type.INT, None, "Retention in minutes (used when log.retention.ms is unset).", _B),
    Setting("log.retention.check.interval.ms", Type.LONG, 300_000, "How often retention runs.", _B, False, at_least(1)),
    Setting("log.roll.hours", Type.INT, 168, "segment.ms default in hours (used when log.roll.ms is unset).", _B),
    Setting("log.flush.scheduler.interval.ms", Type.LONG, 2**63 - 1, "How often the flusher checks flush.ms.", _B),
    Setting("log.flush.offset.checkpoint.interval.ms", Type.INT, 60_000, "How often the recovery point is checkpointed.", _B),
    Setting("log.flush.start.offset.checkpoint.interval.ms", Type.INT, 60_000, "How often the log start offset is checkpointed.", _B),
    Setting("log.cleaner.enable", Type.BOOLEAN, True, "Run the cleaner for compacted topics.", _B),
    Setting("log.cleaner.backoff.ms", Type.LONG, 15_000, "Sleep of the cleaner when nothing is cleanable.", _B, True),
    Setting("log.scrubber.enable", Type.BOOLEAN, True, "tidelog: Re-verify the CRCs of closed segments in the background and mark damaged ranges (docs/storage.md).", _B),
    Setting("log.scrubber.bytes.per.second", Type.LONG, 10 * 1024 * 1024, "tidelog: Read rate of the scrubber, all log dirs together.", _B, False, at_least(1)),
    Setting("log.scrubber.interval.ms", Type.LONG, 7 * _DAY_MS, "tidelog: Time from the start of one scrubber pass over a partition to the next.", _B, False, at_least(1)),
    Setting("num.recovery.threads.per.data.dir", Type.INT, 2, "Threads opening logs at start per log dir.", _B, True, at_least(1)),
    Setting("producer.id.expiration.ms", Type.INT, _DAY_MS, "Producer state is dropped after this long without a write.", _B, True, at_least(1)),
    Setting("group.initial.rebalance.delay.ms", Type.INT, 3000, "Delay of a new group's first rebalance.", _B),
    Setting("offsets.topic.num.partitions", Type.INT, 50, "Partitions of __consumer_offsets.", _B, False, at_least(1)),
    Setting("offsets.topic.replication.factor", Type.SHORT, 3, "Replication factor of __consumer_offsets (capped to live brokers).", _B, False, at_least(1)),
    Setting("offsets.topic.segment.bytes", Type.INT, 104857600, "segment.bytes of __consumer_offsets (kept small for faster compaction and loading).", _B, False, at_least(1)),
    Setting("offsets.topic.compression.codec", Type.INT, 0, "Compression of the coordinator's batches in __consumer_offsets: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.", _B, False, between(0, 4)),
    Setting("offsets.retention.minutes", Type.INT, 10080, "Committed offsets of a group that has been empty this long are deleted (standalone consumers: this long after the commit).", _B, False, at_least(1)),
    Setting("offsets.retention.check.interval.ms", Type.LONG, 600_000, "How often the coordinator looks for expired offsets and empty groups.", _B, False, at_least(1)),
    Setting("offsets.commit.timeout.ms", Type.INT, 5000, "Longest wait for a write to __consumer_offsets before the request fails.", _B, False, at_least(1)),
    Setting("offsets.load.buffer.size", Type.INT, 5242880, "Bytes read at a time when loading __consumer_offsets at start-up.", _B, False, at_least(1)),
    Setting("offset.metadata.max.bytes", Type.INT, 4096, "Largest metadata string a commit may attach to an offset.", _B, False, at_least(0)),
    Setting("group.min.session.timeout.ms", Type.INT, 6000, "Smallest session timeout a consumer may ask for.", _B, False, at_least(0)),
    Setting("group.max.session.timeout.ms", Type.INT, 1_800_000, "Largest session timeout a consumer may ask for.", _B, False, at_least(0)),
    Setting("group.max.size", Type.INT, 2**31 - 1, "Most members a classic group may have.", _B, False, at_least(1)),
    Setting("group.consumer.session.timeout.ms", Type.INT, 45_000, "KIP-848 consumer groups: a member silent this long is removed.", _B, False, at_least(1)),
    Setting("group.consumer.min.session.timeout.ms", Type.INT, 45_000, "KIP-848 consumer groups: smallest session timeout a group may be given.", _B, False, at_least(1)),
    Setting("group.consumer.max.session.timeout.ms", Type.INT, 60_000, "KIP-848 consumer groups: largest session timeout a group may be given.", _B, False, at_least(1)),
    Setting("group.consumer.heartbeat.interval.ms", Type.INT, 5_000, "KIP-848 consumer groups: how often members are told to heartbeat.", _B, False, at_least(1)),
    Setting("group.consumer.min.heartbeat.interval.ms", Type.INT, 5_000, "KIP-848 consumer groups: smallest heartbeat interval a group may be given.", _B, False, at_least(1)),
    Setting("group.consumer.max.heartbeat.interval.ms", Type.INT, 15_000, "KIP-848 consumer groups: largest heartbeat interval a group may be given.", _B, False, at_least(1)),
    Setting("group.consumer.max.size", Type.INT, 2**31 - 1, "Most members a KIP-848 consumer group may have (GROUP_MAX_SIZE_REACHED beyond).", _B, False, at_least(1)),
    Setting("group.consumer.assignors", Type.LIST, ["uniform", "range"], "Server-side assignors of KIP-848 consumer groups; the first is the default.", _B, False, one_of("uniform", "range")),
    Setting("transaction.state.log.num.partitions", Type.INT, 50, "Partitions of __transaction_state.", _B, False, at_least(1)),
    Setting("transaction.state.log.segment.bytes", Type.INT, 104857600, "segment.bytes of __transaction_state.", _B, False, at_least(1)),
    Setting("transaction.state.log.replication.factor", Type.SHORT, 3, "Replication factor of __transaction_state (capped to live brokers).", _B, False, at_least(1)),
    Setting("transaction.state.log.min.isr", Type.INT, 2, "min.insync.replicas of __transaction_state (capped to live brokers).", _B, False, at_least(1)),
    Setting("transaction.max.timeout.ms", Type.INT, 900_000, "Longest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above it).", _B, False, at_least(1)),
    Setting("transactional.id.expiration.ms", Type.INT, 604_800_000, "A transactional id with no transaction for this long is forgotten.", _B, False, at_least(1)),
    Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", Type.INT, 10_000, "How often open transactions past their timeout are looked for and aborted.", _B, False, at_least(1)),
    Setting("transaction.remove.expired.transaction.cleanup.interval.ms", Type.INT, 3_600_000, "How often expired transactional ids are removed.", _B, False, at_least(1)),
    Setting("metrics.port", Type.INT, None, "Port of the HTTP metrics/health endpoint (unset: off).", _B),
    Setting("metrics.host", Type.STRING, "0.0.0.0", "Address the HTTP metrics/health endpoint binds (0.0.0.0: all interfaces).", _B),
    Setting("log.format", Type.STRING, "text", "Broker log lines: text (human) or json (one JSON object per line).", _B, False, one_of("text", "json")),
    Setting("cluster.id", Type.STRING, None, "Cluster id; generated and stored in meta.properties on first start when unset.", _B),
    Setting("controlled.shutdown.enable", Type.BOOLEAN, True, "Clusters: on SIGTERM, leadership moves to other ISR members before the broker stops.", _B),
    # Clusters (docs/cluster.md): where the metadata lives, and the broker's session with it.
    Setting("placement.excluded.brokers", Type.LIST, [], "tidelog: ids of drained brokers (tidelog brokers drain): new topics and partitions place no replica on them; cluster-wide.", _B, True, _broker_ids),
    Setting("metadata.store", Type.STRING, "", "tidelog: cluster metadata store, etcd://host:port[,host:port...][/prefix] (prefix default tidelog); empty: a single node with a local file.", _B, False, _store_url),
    Setting("broker.session.timeout.ms", Type.INT, 9000, "A broker whose etcd lease is not renewed for this long is dead to the cluster; it fences itself 2 heartbeats earlier.", _B, False, at_least(1000)),
    Setting("broker.heartbeat.interval.ms", Type.INT, 2000, "How often a broker renews its etcd lease.", _B, False, at_least(10)),
    # Replication (clusters; docs/cluster.md).
    Setting("replica.lag.time.max.ms", Type.LONG, 30_000, "A follower not caught up with the leader for this long leaves the ISR.", _B, False, at_least(1)),
    Setting("replica.fetch.max.bytes", Type.INT, 1_048_576, "Bytes a follower asks for per partition in one fetch.", _B, False, at_least(0)),
    Setting("replica.fetch.response.max.bytes", Type.INT, 10_485_760, "Bytes a follower asks for in one fetch, all partitions together.", _B, False, at_least(0)),
    Setting("replica.fetch.wait.max.ms", Type.INT, 500, "How long a follower's fetch may wait at the leader for new data.", _B, False, at_least(0)),
    Setting("replica.fetch.min.bytes", Type.INT, 1, "Bytes a follower's fetch waits for at the leader.", _B, False, at_least(1)),
    Setting("replica.fetch.backoff.ms", Type.INT, 1000, "Pause of a follower after a failed fetch.", _B, False, at_least(0)),
    Setting("inter.broker.listener.name", Type.STRING, None, "Listener brokers use to reach each other (default: the first of listeners; PLAINTEXT only for now).", _B),
    Setting("auto.leader.rebalance.enable", Type.BOOLEAN, True, "The controller hands leadership back to each partition's preferred replica (the first) when a broker's imbalance passes leader.imbalance.per.broker.percentage.", _B),
    Setting("leader.imbalance.check.interval.seconds", Type.LONG, 300, "How often the controller checks the leader imbalance.", _B, False, at_least(1)),
    # Replication throttles (KIP-73; replication/quota.py). The rates are Kafka's dynamic-only broker keys.
    Setting("leader.replication.throttled.rate", Type.LONG, 2**63 - 1, "Bytes/s this broker serves to followers of the replicas in leader.replication.throttled.replicas (followers outside the ISR), all together.", _B, True, at_least(0)),
    Setting("follower.replication.throttled.rate", Type.LONG, 2**63 - 1, "Bytes/s this broker's fetchers copy for the replicas in follower.replication.throttled.replicas that are behind, all together.", _B, True, at_least(0)),
    Setting("replica.alter.log.dirs.io.max.bytes.per.second", Type.LONG, 2**63 - 1, "Bytes/s copied by moves of replicas between this broker's log dirs (AlterReplicaLogDirs), all together.", _B, True, at_least(0)),
    Setting("replication.quota.window.num", Type.INT, 11, "Windows the replication throttles measure their rate over.", _B, False, at_least(1)),
    Setting("replication.quota.window.size.seconds", Type.INT, 1, "Length of one replication throttle window.", _B, False, at_least(1)),
    Setting("leader.imbalance.per.broker.percentage", Type.INT, 10, "Share of a broker's preferred partitions led elsewhere before leadership moves back.", _B, False, at_least(0)),
    # Security (docs/security.md). "Per listener": also settable as listener.name.<listener>.<key>.
    Setting("ssl.keystore.type", Type.STRING, "PEM", "Format of ssl.keystore.location; tidelog reads PEM only. Per listener.", _B, False, one_of("PEM")),
    Setting("ssl.keystore.location", Type.STRING, None, "PEM file with the listener's certificate (chain) and private key. Per listener.", _B),
    Setting("ssl.key.password", Type.PASSWORD, None, "Password of the private key in ssl.keystore.location, if encrypted. Per listener.", _B, sensitive=True),
    Setting("ssl.truststore.type", Type.STRING, "PEM", "Format of ssl.truststore.location; tidelog reads PEM only. Per listener.", _B, False, one_of("PEM")),
    Setting("ssl.truststore.location", Type.STRING, None, "PEM bundle of the CAs that sign client certificates. Per listener.", _B),
    Setting("ssl.truststore.certificates", Type.STRING, None, "The trusted CAs as inline PEM text (instead of a file). Per listener.", _B),
    Setting("ssl.client.auth", Type.STRING, "none", "Client certificates: none, requested (verified if sent) or required (mutual TLS). Per listener.", _B, False, one_of("none", "requested", "required")),
    Setting("ssl.enabled.protocols", Type.LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted. Per listener.", _B, False, one_of("TLSv1.2", "TLSv1.3")),
    Setting("ssl.principal.mapping.rules", Type.STRING, "DEFAULT", "Rules from a client certificate's subject to a principal name: RULE:regex/replacement/[LU] or DEFAULT, comma separated. Per listener.", _B),
    Setting("sasl.enabled.mechanisms", Type.LIST, ["SCRAM-SHA-256", "SCRAM-SHA-512"], "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512. Per listener.", _B, False, one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    Setting("sasl.plain.users.file", Type.STRING, None, "tidelog: SASL/PLAIN users, one 'name = password' (or pbkdf2_sha256 hash) per line; re-read when it changes. Per listener.", _B),
    Setting("sasl.server.max.receive.size", Type.INT, 524288, "Largest request accepted from a SASL client before it has authenticated.", _B, False, at_least(1)),
    Setting("connection.failed.authentication.delay.ms", Type.INT, 100, "Delay before answering a failed authentication and closing the connection.", _B, False, at_least(0)),
    Setting("connections.max.reauth.ms", Type.LONG, 0, "SASL sessions last this long (0: for ever); clients re-authenticate before the end (KIP-368), other connections are closed.", _B, False, at_least(0)),
    Setting("authorizer.class.name", Type.STRING, "", "Empty: no authorizer (everything allowed). org.apache.kafka.metadata.authorizer.StandardAuthorizer (or kafka.security.authorizer.AclAuthorizer): enforce ACLs.", _B, False, one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer")),
    Setting("super.users", Type.STRING, None, "Principals allowed everything, separated by ';' (User:admin;User:ops).", _B),
    Setting("allow.everyone.if.no.acl.found", Type.BOOLEAN, False, "Allow a request on a resource no ACL mentions.", _B),
    Setting("authorizer.mode", Type.STRING, "enforce", "tidelog: enforce ACLs, or audit: allow every request and record those enforcement would deny (the path from an open cluster to a locked one). Per listener.", _B, True, one_of("enforce", "audit")),
    Setting("authorizer.audit.flush.interval.ms", Type.LONG, 10_000, "tidelog: how often the audit record is written to __acl_audit.json in the first log dir.", _B, False, at_least(1)),
    Setting("authorizer.audit.max.entries", Type.INT, 10_000, "tidelog: most distinct (principal, client, host, resource, operation) rows the audit keeps; more are counted as dropped.", _B, False, at_least(1)),
    # Hostile and broken clients (issue 25; docs/security.md's limits table).
    Setting("queued.max.request.bytes", Type.LONG, 104857600, "Bytes of requests being received, queued or served at once, broker-wide (-1: no limit). Past it a connection holding requests stops reading until they are served, and a request larger than 64 KiB waits, its connection's reading paused, until it fits; one request up to socket.request.max.bytes may go beyond it at a time.", _B, False, _budget),
    Setting("socket.request.read.timeout.ms", Type.LONG, 30_000, "tidelog: a connection whose request takes longer than this to arrive (from its first byte to its last, time the broker itself paused reading excepted) is closed (0: no deadline).", _B, False, at_least(0)),
    Setting("max.connections", Type.INT, 2**31 - 1, "Open connections on the broker (the inter-broker listener exempt); past it a new connection is closed at once. Per listener.", _B, True, at_least(0)),
    Setting("max.connections.per.ip", Type.INT, 2**31 - 1, "Open connections from one address; past it a new connection is closed at once.", _B, True, at_least(0)),
    Setting("max.connections.per.ip.overrides", Type.STRING, "", "Per-address (or host name) limits, 'host:count,host:count', overriding max.connections.per.ip.", _B, True, _overrides),
    Setting("max.connection.creation.rate", Type.INT, 2**31 - 1, "New connections per second on the broker (the inter-broker listener exempt); past it a new connection is closed at once. Per listener.", _B, True, at_least(0)),
    Setting("connection.failed.authentication.backoff.max.ms", Type.LONG, 10_000, "tidelog: cap of the exponential back-off after failed authentications per address and per user (doubling from connection.failed.authentication.delay.ms); 0 turns the back-off off.", _B, True, at_least(0)),
    # -- client quotas (issue 22; docs/quotas.md)
    Setting("quota.window.num", Type.INT, 11, "Number of samples kept to measure a client's rate against its quota.", _B, False, at_least(2)),
    Setting("quota.window.size.seconds", Type.INT, 1, "Length of each sample of a client's rate against its quota.", _B, False, at_least(1)),
    Setting("controller.quota.window.num", Type.INT, 11, "Number of samples whose length, times controller.quota.window.size.seconds, bounds the burst of a controller_mutation_rate token bucket (KIP-599).", _B, False, at_least(1)),
    Setting("controller.quota.window.size.seconds", Type.INT, 1, "Length of each sample of a controller_mutation_rate quota; the bucket holds window.num x window.size.seconds of the quota.", _B, False, at_least(1)),
    # priority tiers (tidelog): a client's tier is its quota entity's tidelog.tier (0 high, 1 medium, 2 low)
    Setting("quota.tier.default", Type.STRING, "medium", "tidelog: tier of a client whose quota entities name none (high, medium, low).", _B, True, one_of("high", "medium", "low")),
    Setting("quota.tier.medium.byte.rate", Type.LONG, 0, "tidelog: bytes/s the medium tier's clients may produce (and, separately, fetch) together on each broker; 0: no tier throttle. Set by `tidelog quotas tier throttle medium`.", _B, True, at_least(0)),
    Setting("quota.tier.low.byte.rate", Type.LONG, 0, "tidelog: bytes/s the low tier's clients may produce (and, separately, fetch) together on each broker; 0: no tier throttle. Set by `tidelog quotas tier throttle low`.", _B, True, at_least(0)),
    Setting("quota.tier.medium.paused", Type.BOOLEAN, False, "tidelog: the medium tier is paused: its produce requests are held and its fetches answered empty. Set by `tidelog quotas tier pause medium`.", _B, True),
    Setting("quota.tier.low.paused", Type.BOOLEAN, False, "tidelog: the low tier is paused: its produce requests are held and its fetches answered empty. Set by `tidelog quotas tier pause low`.", _B, True),
    Setting("quota.tier.pause.hold.ms", Type.LONG, 20_000, "tidelog: longest a paused tier's produce request is held; then it is answered REQUEST_TIMED_OUT (nothing appended; clients retry). Keep it below the clients' request.timeout.ms.", _B, True, at_least(0)),
    Setting("quota.tier.auto.enable", Type.BOOLEAN, False, "tidelog: throttle tiers automatically when the broker is saturated (low first, then medium, then pause low), lifted as load falls.", _B, True),
    Setting("quota.tier.auto.network.bytes.per.sec", Type.LONG, 0, "tidelog: the broker's network capacity (bytes/s in plus out) that network utilisation is measured against; 0: network not considered.", _B, True, at_least(0)),
    Setting("quota.tier.auto.disk.enable", Type.BOOLEAN, True, "tidelog: count the busiest log dir disk's utilisation (/proc/diskstats time busy) in saturation.", _B, True),
    Setting("quota.tier.auto.high.utilisation", Type.DOUBLE, 0.9, "tidelog: utilisation (0-1) above which tier throttling escalates one step per interval.", _B, True, between(0.0, 1.0)),
    Setting("quota.tier.auto.low.utilisation", Type.DOUBLE, 0.7, "tidelog: utilisation (0-1) below which tier throttling steps back one level per interval.", _B, True, between(0.0, 1.0)),
    Setting("quota.tier.auto.byte.rate", Type.LONG, 1_048_576, "tidelog: bytes/s a tier throttled for saturation may produce (and fetch) together on the broker.", _B, True, at_least(1)),
    Setting("quota.tier.auto.interval.ms", Type.LONG, 1000, "tidelog: how often utilisation is measured and the saturation level stepped.", _B, False, at_least(10)),
    # partition-level cold-read throttling from a page-cache estimate (issue 22; docs/quotas.md)
    Setting("tidelog.read.throttle.enable", Type.BOOLEAN, False, "tidelog: throttle cold reads (older than LEO - MessageInRate x T, T = MemAvailable / disk read+write rate) per partition on a log dir whose disk is over its threshold.", _B, True),
    Setting("tidelog.read.throttle.interval.ms", Type.LONG, 1000, "tidelog: how often each log dir's disk, memory and partition rates are measured and its throttles stepped.", _B, False, at_least(10)),
    Setting("tidelog.read.throttle.utilisation.threshold", Type.DOUBLE, 0.9, "tidelog: disk utilisation (0-1, share of time busy in /proc/diskstats) above which a log dir throttles cold reads.", _B, True, between(0.0, 1.0)),
    Setting("tidelog.read.throttle.latency.threshold.ms", Type.DOUBLE, 0.0, "tidelog: mean disk I/O latency above which a log dir throttles cold reads; 0: latency not considered.", _B, True, at_least(0)),
    Setting("tidelog.read.throttle.recovery.ratio", Type.DOUBLE, 0.8, "tidelog: a log dir's throttles are lifted once utilisation and latency stay below this fraction of their thresholds (for tidelog.read.throttle.recovery.intervals).", _B, True, between(0.0, 1.0)),
    Setting("tidelog.read.throttle.recovery.intervals", Type.INT, 3, "tidelog: consecutive intervals below the recovery thresholds before a log dir's throttles are lifted.", _B, True, at_least(1)),
    Setting("tidelog.read.throttle.partitions.per.step", Type.INT, 1, "tidelog: partitions (heaviest cold readers first) added to a busy log dir's throttled set per interval.", _B, True, at_least(1)),
    Setting("tidelog.read.throttle.partition.bytes.per.sec", Type.LONG, 1_048_576, "tidelog: cold-read bytes/s a throttled partition may still serve; 0: its cold reads are held entirely while throttled.", _B, True, at_least(0)),
    Setting("tidelog.read.throttle.residency.check.enable", Type.BOOLEAN, False, "tidelog: check each consumer read's page-cache residency with mincore(2) and count it against the estimate (Linux).", _B, True),
    Setting("tidelog.read.throttle.procfs.path", Type.STRING, "/proc", "tidelog: where meminfo and diskstats are read from.", _B, False),
    # slow-request isolation (issue 22; docs/isolation.md, broker/disk_pools.py, broker/slow_connections.py)
    Setting("tidelog.log.dir.io.threads", Type.INT, 2, "tidelog: threads per log dir for the disk work that may block (cold reads, reads of a dir marked slow, produce fsyncs); 0: no pools, all of it on the event loop as before.", _B, False, at_least(0)),
    Setting("tidelog.log.dir.slow.read.ms", Type.LONG, 50, "tidelog: a log dir is marked slow (every read of it then runs on its pool) when one of its reads takes longer than this; unmarked when its pooled reads average under half of it.", _B, True, at_least(1)),
    Setting("tidelog.connection.slow.request.ms", Type.LONG, 200, "tidelog: a connection is marked slow (its disk work then runs on the slow lanes) when the moving average of its Produce/Fetch service times, long-poll waits excluded, passes this; unmarked under half of it; 0: never.", _B, True, at_least(0)),
    Setting("tidelog.slow.fetch.threads", Type.INT, 2, "tidelog: threads of the slow fetch lane, which serves the disk reads of connections marked slow.", _B, False, at_least(1)),
    Setting("tidelog.slow.produce.threads", Type.INT, 1, "tidelog: threads of the slow produce lane, which serves the fsyncs of connections marked slow.", _B, False, at_least(1)),
    Setting("tidelog.test.log.dir.read.delay", Type.LIST, [], "tidelog, TESTS ONLY: <log dir>:<ms> entries; every read of that dir that returns bytes, and every produce fsync of it, sleeps that long first (an injected slow disk).", _B, True, _dir_delays),
    # -- admin APIs answered as a single node (issue 24)
    Setting("max.request.partition.size.limit", Type.INT, 2000, "Most partitions one DescribeTopicPartitions response holds; the rest comes through its cursor.", _B, False, at_least(1)),
]

# Keys that may also be set for one listener as listener.name.<listener>.<key> (listener in lower case).
LISTENER_PREFIX = "listener.name."
LISTENER_SCOPED = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.principal.mapping.rules", "sasl.enabled.mechanisms", "sasl.plain.users.file", "authorizer.mode",
    "max.connections", "max.connection.creation.rate",
})


def listener_key_base(key: str) -> str | None:
    """``listener.name.<listener>.<key>`` → ``<key>`` when that key may be set per listener."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    listener, sep, base = key[len(LISTENER_PREFIX):].partition(".")
    return base if sep and listener and base in LISTENER_SCOPED else None

# Broker keys that only provide defaults for topic settings and are not otherwise listed.
# Broker keys whose Kafka default is unset because it is derived from a coarser unit (or another key).
_DERIVED_BROKER_KEYS = frozenset({"log.retention.ms", "log.roll.ms", "log.flush.interval.ms"})

_BROKER_DEFAULTS: list[Setting] = [
    Setting(
        t.broker_synonym,
        t.type,
        None if t.broker_synonym in _DERIVED_BROKER_KEYS else t.default,
        f"Default of the topic setting {t.name}. {t.doc}",
        _B,
        t.dynamic,
        t.validator,
    )
    for t in _TOPIC
    if t.broker_synonym and t.broker_synonym not in {b.name for b in _BROKER}
]

TOPIC_SETTINGS: dict[str, Setting] = {s.name: s for s in _TOPIC}


class _BrokerCatalogue(dict[str, Setting]):
    """Broker settings by key; a per-listener key resolves to its base setting under its own name."""

    def __missing__(self, key: str) -> Setting:
        base = listener_key_base(key)
        if base is None:
            raise KeyError(key)
        return replace(dict.__getitem__(self, base), name=key)

    @overload
    def get(self, key: str, default: None = None, /) -> Setting | None: ...
    @overload
    def get(self, key: str, default: Setting, /) -> Setting: ...
    @overload
    def get(self, key: str, default: _D, /) -> Setting | _D: ...
    def get(self, key: str, default: object = None, /) -> object:
        try:
            return self[key]
        except KeyError:
            return default


# -- Kafka's broker keys tidelog has no setting of its own for: accepted, stored, no effect (issue 24);
# read-only where Kafka's are (kafka_broker_keys.py).
def _kafka_catalogue(own: list[Setting]) -> list[Setting]:
    known = {s.name for s in own}
    # A key Kafka will not change at run time is read-only here too; one tidelog cannot apply at run
    # time stays read-only even where Kafka's is dynamic (docs/compat.md lists them).
    aligned = [replace(s, dynamic=False) if s.dynamic and kafka_dynamic(s.name) is False else s for s in own]
    # and a key Kafka keeps as a password is one here (sensitive: DescribeConfigs shows no value)
    aligned = [replace(s, type=Type.PASSWORD, sensitive=True) if kafka_password(s.name) and s.type is Type.STRING
               else s for s in aligned]
    extra = []
    for name, kind, default, dynamic, password in kafka_only_keys(known):
        setting = Setting(name, Type[kind], None, NO_EFFECT_DOC, _B, dynamic, None, None, password)
        extra.append(replace(setting, default=setting.parse(default)) if default is not None else setting)
    return aligned + extra


BROKER_SETTINGS: dict[str, Setting] = _BrokerCatalogue({s.name: s for s in _kafka_catalogue(_BROKER + _BROKER_DEFAULTS)})
# Kafka's "static defaults": the broker keys whose default is set (DescribeConfigs' DEFAULT_CONFIG).
_STATIC_DEFAULTS: dict[str, Value] = {k: s.default for k, s in BROKER_SETTINGS.items() if s.default is not None}


# Broker keys that stand for the same setting in other units (Kafka's brokerConfigSynonyms), most
# specific first: log.retention.ms wins over .minutes, which wins over .hours.
UNIT_SYNONYMS: dict[str, list[str]] = {}
for _chain in (
    ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
    ["log.roll.ms", "log.roll.hours"],
    ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
):
    for _key in _chain:
        UNIT_SYNONYMS[_key] = _chain


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` values (Kafka's DescribeConfigsResponse)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


@dataclass
class BrokerConfig:
    """Effective broker settings: defaults, then the properties file, then overrides.

    ``static`` holds values from the file and command line (STATIC_BROKER_CONFIG); ``dynamic``
    holds values set at run time through AlterConfigs on the cluster default resource (empty name:
    DYNAMIC_DEFAULT_BROKER_CONFIG), ``per_broker`` those set on this broker's own resource
    (DYNAMIC_BROKER_CONFIG), which win over both.
    """

    static: dict[str, Value] = field(default_factory=dict)
    dynamic: dict[str, Value] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    per_broker: dict[str, Value] = field(default_factory=dict)

    def load_dynamic(self, stored: Mapping[str, Value], node_id: int) -> None:
        """Take the dynamic layers from the metadata's one map (see :func:`split_dynamic`)."""
        self.dynamic, self.per_broker = split_dynamic(stored, node_id)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        config = cls()
        for key, raw in props.items():
            setting = BROKER_SETTINGS.get(key)
            if setting is None:
                config.unknown.append(key)
                continue
            config.static[key] = setting.parse(raw)
        return config

    def get(self, key: str) -> Value:
        if key in self.per_broker:
            return self.per_broker[key]
        if key in self.dynamic:
            return self.dynamic[key]
        if key in self.static:
            return self.static[key]
        return self._derived_default(key)

    def get_for_listener(self, listener: str, key: str) -> Value:
        """``listener.name.<listener>.<key>`` if set (listener in lower case, or as spelled), else ``key``."""
        for name in (listener.lower(), listener):
            prefixed = f"{LISTENER_PREFIX}{name}.{key}"
            if self.has(prefixed):
                return self.get(prefixed)
        return self.get(key)

    def _derived_default(self, key: str) -> Value:
        base = listener_key_base(key)
        if base is not None:
            return self.get(base)
        # Kafka's fallbacks between unit variants of the same setting.
        if key == "log.retention.ms":
            if self.has("log.retention.minutes"):
                return int(self.get_int("log.retention.minutes")) * 60_000
            return int(self.get_int("log.retention.hours")) * _HOUR_MS
        if key == "log.roll.ms":
            return int(self.get_int("log.roll.hours")) * _HOUR_MS
        if key == "log.flush.interval.ms":
            return self.get_int("log.flush.scheduler.interval.ms")
        if key == "log.dirs" and self.has("log.dir"):
            return [str(self.get("log.dir"))]
        return BROKER_SETTINGS[key].default

    def has(self, key: str) -> bool:
        return key in self.per_broker or key in self.dynamic or key in self.static

    def get_int(self, key: str) -> int:
        value = self.get(key)
        assert isinstance(value, int), key
        return value

    def source(self, key: str) -> ConfigSource:
        if key in self.per_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if key in self.dynamic:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if key in self.static:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def synonyms(self, key: str) -> list[tuple[str, Value, ConfigSource]]:
        """Every level holding a value for broker ``key`` or its unit synonyms, as Kafka lists them:
        by source (dynamic default, static, default), each in synonym order, starting at ``key``."""
        chain = UNIT_SYNONYMS.get(key, [key])
        found: list[tuple[str, Value, ConfigSource]] = []
        for values, source in (
            (self.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
            (_STATIC_DEFAULTS, ConfigSource.DEFAULT_CONFIG),
        ):
            found.extend((name, values[name], source) for name in chain if name in values)
        while found and found[0][0] != key:
            found.pop(0)
        return found

    def topic_default(self, topic_key: str) -> tuple[Value, ConfigSource, str | None]:
        """The broker-level value of a topic setting, its source, and the broker key it came from."""
        setting = TOPIC_SETTINGS[topic_key]
        synonym = setting.broker_synonym
        if synonym is None or synonym not in BROKER_SETTINGS:
            return setting.default, ConfigSource.DEFAULT_CONFIG, None
        value = self.get(synonym)
        synonyms = self.synonyms(synonym)
        # Kafka reports the source of the first synonym holding a value, else DEFAULT_CONFIG.
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        return (setting.default if value is None else value), source, synonym


# Dynamic broker configs live in the metadata as one map: a cluster default under its key, a value
# set on one broker's resource under "<node.id>/<key>" (no Kafka key contains "/").
PER_BROKER_SEP = "/"


def per_broker_key(node_id: int, key: str) -> str:
    return f"{node_id}{PER_BROKER_SEP}{key}"


def split_dynamic(stored: Mapping[str, Value], node_id: int) -> tuple[dict[str, Value], dict[str, Value]]:
    """(cluster defaults, this broker's own values) from the stored map; other brokers' values skipped."""
    defaults: dict[str, Value] = {}
    own: dict[str, Value] = {}
    mine = f"{node_id}{PER_BROKER_SEP}"
    for key, value in stored.items():
        if PER_BROKER_SEP not in key:
            defaults[key] = value
        elif key.startswith(mine):
            own[key[len(mine):]] = value
    return defaults, own


def with_dynamic(stored: Mapping[str, Value], node_id: int | None, values: Mapping[str, Value]) -> dict[str, Value]:
    """The stored map with one scope's values replaced: the cluster defaults (``node_id`` None) or one broker's."""
    if node_id is None:
        kept = {k: v for k, v in stored.items() if PER_BROKER_SEP in k}
        return {**kept, **values}
    mine = f"{node_id}{PER_BROKER_SEP}"
    kept = {k: v for k, v in stored.items() if not k.startswith(mine)}
    return {**kept, **{per_broker_key(node_id, k): v for k, v in values.items()}}


# Kafka's dynamic-only broker keys: DescribeConfigs lists them only once they are set (Kafka's
# KafkaConfig does not define them, its DynamicConfig does).
DYNAMIC_ONLY_BROKER_KEYS = frozenset({
    "leader.replication.throttled.rate", "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second",
})


def resolve_topic_config(broker: BrokerConfig, overrides: Mapping[str, Value]) -> dict[str, Value]:
    """Effective topic settings: the topic's own overrides, else the broker defaults."""
    return {
        key: overrides[key] if key in overrides else broker.topic_default(key)[0]
        for key in TOPIC_SETTINGS
    }


def parse_topic_configs(raw: Iterable[tuple[str, str | None]]) -> dict[str, Value]:
    """Validate topic overrides from the wire (CreateTopics, AlterConfigs); raises ConfigError."""
    parsed: dict[str, Value] = {}
    for key, value in raw:
        setting = TOPIC_SETTINGS.get(key)
        if setting is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        parsed[key] = setting.parse(value)
    return parsed


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java-style .properties file (``key=value`` or ``key: value``, ``#``/``!`` comments)."""
    props: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, char in enumerate(line):
            if char in "=:":
                props[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            props[line] = ""
    return props


def render_markdown() -> str:
    """docs/configuration.md, generated from the catalogue."""
    out = [
        "# Configuration reference",
        "",
        "Generated from `src/tidelog/common/config.py` by `python -m tidelog.common.config`; do not edit.",
        "",
        "Broker settings go in the properties file given to `tidelog serve`, on the command line as",
        "`--override key=value`, or in the environment as `TIDELOG_` + the key upper-cased with dots as",
        "underscores (`TIDELOG_LOG_DIRS=/var/lib/tidelog`). Topic settings are set per topic with",
        "CreateTopics and AlterConfigs from any Kafka admin client; their broker-wide",
        "default is the broker key named in the last column. Broker keys whose description says",
        "\"Per listener\" may also be set for one listener as `listener.name.<listener>.<key>` (listener",
        "name in lower case), which wins over the plain key.",
        "",
    ]
    own = {k: v for k, v in BROKER_SETTINGS.items() if v.doc != NO_EFFECT_DOC}
    for title, settings in (("Broker settings", own), ("Topic settings", TOPIC_SETTINGS)):
        out += [f"## {title}", "", "| key | type | default | dynamic | description | broker default key |", "|---|---|---|---|---|---|"]
        for key in sorted(settings):
            s = settings[key]
            default = s.render(s.default)
            out.append(
                f"| `{key}` | {s.type.name.lower()} | {'' if default is None else '`' + default + '`'} | "
                f"{'yes' if s.dynamic else 'no'} | {s.doc} | {('`' + s.broker_synonym + '`') if s.broker_synonym else ''} |"
            )
        out.append("")
    out += [
        "## Apache Kafka broker keys with no effect in tidelog",
        "",
        "Every other key of Kafka's broker catalogue (generated from Kafka's jars by",
        "`tests/compat/kafka/broker_catalogue.sh`) is accepted in the properties file and by AlterConfigs /",
        "IncrementalAlterConfigs when Kafka lets it change at run time (dynamic: yes), stored and reported",
        "by DescribeConfigs with Kafka's default, and has no effect: these features (ZooKeeper-era and",
        "KRaft internals, Kerberos, remote-storage plug-ins, metric reporters, thread pools tidelog does",
        "not have) are not part of tidelog. Altering a key with dynamic: no is refused with Kafka's",
        "INVALID_REQUEST \"Cannot update these configs dynamically\".",
        "",
        "| key | type | default | dynamic |",
        "|---|---|---|---|",
    ]
    for key in sorted(k for k, v in BROKER_SETTINGS.items() if v.doc == NO_EFFECT_DOC):
        s = BROKER_SETTINGS[key]
        default = s.render(s.default)
        out.append(f"| `{key}` | {s.type.name.lower()} | {'' if default is None else '`' + default + '`'} | "
                   f"{'yes' if s.dynamic else 'no'} |")
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render_markdown())
