"""What the console knows of a cluster, asked through the Kafka protocol (confluent-kafka) only.

``KafkaView`` wraps one ``AdminClient`` and answers with plain frozen dataclasses, so that pages,
JSON endpoints and the lag sampler never touch confluent-kafka types. Every method blocks (admin
futures); the web layer calls them in a worker thread (``asyncio.to_thread``).

Cluster metadata (Metadata request: brokers, topics, partitions, leaders, ISR) is cached for
``console.metadata.max.age.ms`` (2 s by default) and refreshed in the background once older: a
10,000-partition cluster costs one Metadata round trip per interval, and no page view waits for it.
Writes (create, delete, add partitions) drop the cache so the next page shows them.

A failure from the cluster is raised as ``KafkaFailure`` with Kafka's error name
(``TOPIC_AUTHORIZATION_FAILED``, ``TOPIC_ALREADY_EXISTS``...) and librdkafka's text; pages show both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)

from tidelog.console.config import ConsoleConfig

T = TypeVar("T")
TP = tuple[str, int]


class KafkaFailure(Exception):
    """The cluster refused or failed a request: ``code`` is Kafka's error name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def failure_of(exc: BaseException) -> KafkaFailure:
    if isinstance(exc, KafkaFailure):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error: KafkaError = exc.args[0]
        return KafkaFailure(error.name(), error.str())
    if isinstance(exc, TimeoutError):
        return KafkaFailure("REQUEST_TIMED_OUT", "no answer from the cluster in time")
    return KafkaFailure("UNKNOWN", str(exc) or type(exc).__name__)


@dataclass(frozen=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str
    is_controller: bool
    leaders: int
    replicas: int


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    internal: bool

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)


@dataclass(frozen=True)
class ClusterInfo:
    cluster_id: str
    controller: int
    brokers: tuple[Broker, ...]
    topics: dict[str, TopicInfo]
    fetched_at: float

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    @property
    def under_replicated(self) -> list[tuple[str, PartitionInfo]]:
        return [(t.name, p) for t in self.topics.values() for p in t.partitions if p.under_replicated]

    @property
    def offline(self) -> list[tuple[str, PartitionInfo]]:
        return [(t.name, p) for t in self.topics.values() for p in t.partitions if p.offline]


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TP, ...]


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str
    protocol: str
    coordinator: int
    members: tuple[Member, ...]

    def owner_of(self, tp: TP) -> Member | None:
        return next((m for m in self.members if tp in m.assignment), None)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    type: str


@dataclass(frozen=True)
class Acl:
    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str


def _name(value: Any) -> str:
    """An enum's Kafka name (``ConfigSource.DYNAMIC_TOPIC_CONFIG`` -> ``DYNAMIC_TOPIC_CONFIG``)."""
    return str(getattr(value, "name", value))


def _source(value: Any) -> str:
    """A config entry's source by Kafka's name; librdkafka may hand over the bare number."""
    if isinstance(value, int) and not isinstance(value, ConfigSource):
        try:
            return ConfigSource(value).name
        except ValueError:
            return str(value)
    return _name(value)


class KafkaView:
    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self.timeout = config.request_timeout_ms / 1000
        self.admin = AdminClient(config.kafka_config(**{"client.id": "tidelog-console"}))
        self._cache: ClusterInfo | None = None
        self._lock = threading.Lock()           # one Metadata fetch at a time
        self._refresh_lock = threading.Lock()   # guards _refreshing
        self._refreshing = False

    def _wait(self, future: Future[T]) -> T:
        try:
            return future.result(timeout=self.timeout)
        except BaseException as exc:
            raise failure_of(exc) from None

    # -- cluster and topics ---------------------------------------------------------------------

    def cluster(self, *, fresh: bool = False) -> ClusterInfo:
        """Cached metadata. Past its age the cached copy is still answered while one background thread
        fetches the next (a 10,000-partition Metadata answer takes a loaded broker a second or two, which
        no page view should wait for); without a cache, after ``invalidate`` or with ``fresh``, the
        caller waits for the fetch."""
        cached = self._cache
        if not fresh and cached is not None:
            if time.monotonic() - cached.fetched_at >= self.config.metadata_max_age_ms / 1000:
                self._refresh_in_background()
            return cached
        with self._lock:
            if not fresh and self._cache is not None and self._cache is not cached:
                return self._cache  # another caller fetched it while this one waited
            info = self._fetch_cluster()
            self._cache = info
            return info

    def _refresh_in_background(self) -> None:
        with self._refresh_lock:
            if self._refreshing:
                return
            self._refreshing = True

        def refresh() -> None:
            try:
                with self._lock:
                    self._cache = self._fetch_cluster()
            except KafkaFailure:
                pass  # the next page view tries again; pages keep the last answer meanwhile
            finally:
                with self._refresh_lock:
                    self._refreshing = False

        threading.Thread(target=refresh, name="console-metadata", daemon=True).start()

    def invalidate(self) -> None:
        with self._lock:
            self._cache = None

    def _fetch_cluster(self) -> ClusterInfo:
        described = self._wait(self.admin.describe_cluster(request_timeout=self.timeout))
        try:
            metadata = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise failure_of(exc) from None
        topics: dict[str, TopicInfo] = {}
        leaders: dict[int, int] = {}
        replicas: dict[int, int] = {}
        for name, topic in metadata.topics.items():
            parts = []
            for pid, p in sorted(topic.partitions.items()):
                parts.append(PartitionInfo(pid, p.leader, tuple(p.replicas), tuple(p.isrs),
                                           p.error.name() if p.error else ""))
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
                for r in p.replicas:
                    replicas[r] = replicas.get(r, 0) + 1
            topics[name] = TopicInfo(name, tuple(parts), name.startswith("__"))
        controller = described.controller.id if described.controller is not None else -1
        brokers = tuple(Broker(n.id, n.host, n.port, n.rack or "", n.id == controller, leaders.get(n.id, 0),
                               replicas.get(n.id, 0)) for n in sorted(described.nodes, key=lambda n: n.id))
        return ClusterInfo(described.cluster_id or "", controller, brokers, dict(sorted(topics.items())),
                           time.monotonic())

    def offsets(self, partitions: Sequence[TP], spec: str = "latest") -> dict[TP, int]:
        """Log end (``latest``) or log start (``earliest``) offsets; partitions that fail are left out."""
        if not partitions:
            return {}
        offset_spec = (OffsetSpec.latest() if spec == "latest"  # type: ignore[no-untyped-call]
                       else OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        futures = self.admin.list_offsets({TopicPartition(t, p): offset_spec for t, p in partitions},
                                          request_timeout=self.timeout)
        found = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = int(future.result(timeout=self.timeout).offset)
            except BaseException:  # a deleted topic or a partition without a leader: shown as unknown
                continue
        return found

    def offsets_for_time(self, partitions: Sequence[TP], timestamp_ms: int) -> dict[TP, int]:
        futures = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(timestamp_ms)
                                           for t, p in partitions}, request_timeout=self.timeout)
        return {(tp.topic, tp.partition): int(self._wait(f).offset) for tp, f in futures.items()}

    def topic_configs(self, topic: str) -> list[ConfigValue]:
        futures = self.admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)],
                                              request_timeout=self.timeout)
        entries = self._wait(next(iter(futures.values())))
        return [ConfigValue(e.name, None if e.is_sensitive else e.value, _source(e.source), bool(e.is_read_only),
                            bool(e.is_sensitive)) for e in sorted(entries.values(), key=lambda e: e.name)]

    def topic_overrides(self, topics: Sequence[str], name: str) -> dict[str, str]:
        """The topics among ``topics`` that set ``name`` as their own override (``DYNAMIC_TOPIC_CONFIG``),
        with its value: one DescribeConfigs for them all. A topic that cannot be described (deleted
        meanwhile, not authorized) is left out."""
        if not topics:
            return {}
        futures = self.admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics],
                                              request_timeout=self.timeout)
        found = {}
        for resource, future in futures.items():
            try:
                entry = future.result(timeout=self.timeout).get(name)
            except BaseException:
                continue
            if entry is not None and entry.value and _source(entry.source) == "DYNAMIC_TOPIC_CONFIG":
                found[str(resource.name)] = str(entry.value)
        return found

    def broker_configs(self, broker: int) -> dict[str, str | None]:
        """One broker's settings by name (what DescribeConfigs shows of them)."""
        futures = self.admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker))],
                                              request_timeout=self.timeout)
        entries = self._wait(next(iter(futures.values())))
        return {e.name: None if e.is_sensitive else e.value for e in entries.values()}

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        futures = self.admin.create_topics([NewTopic(name, partitions, replication_factor, config=configs)],
                                           request_timeout=self.timeout)
        self._wait(futures[name])
        self.invalidate()

    def add_partitions(self, topic: str, total: int) -> None:
        futures = self.admin.create_partitions([NewPartitions(topic, total)], request_timeout=self.timeout)
        self._wait(futures[topic])
        self.invalidate()

    def alter_topic_configs(self, topic: str, set_values: dict[str, str], delete: Sequence[str] = ()) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_values.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        futures = self.admin.incremental_alter_configs([resource], request_timeout=self.timeout)
        self._wait(next(iter(futures.values())))

    def delete_topic(self, topic: str) -> None:
        futures = self.admin.delete_topics([topic], request_timeout=self.timeout)
        self._wait(futures[topic])
        self.invalidate()

    # -- groups ---------------------------------------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        listed = self._wait(self.admin.list_consumer_groups(request_timeout=self.timeout))
        return sorted((GroupListing(g.group_id, _name(g.state), _name(getattr(g, "type", "")))
                       for g in listed.valid), key=lambda g: g.group_id)

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupInfo]:
        if not group_ids:
            return {}
        futures = self.admin.describe_consumer_groups(list(group_ids), request_timeout=self.timeout)
        found = {}
        for group_id, future in futures.items():
            try:
                d = future.result(timeout=self.timeout)
            except BaseException:
                continue
            members = tuple(Member(m.member_id, m.client_id, m.host,
                                   tuple((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])))
                            for m in d.members)
            found[group_id] = GroupInfo(group_id, _name(d.state), d.partition_assignor or "",
                                        d.coordinator.id if d.coordinator else -1, members)
        return found

    def committed(self, group_id: str) -> dict[TP, int]:
        """The group's committed offsets (partitions without one are left out)."""
        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                         request_timeout=self.timeout)
        listed = self._wait(futures[group_id])
        return {(tp.topic, tp.partition): int(tp.offset) for tp in listed.topic_partitions or []
                if tp.offset >= 0 and not tp.error}

    def committed_many(self, group_ids: Sequence[str]) -> tuple[dict[str, dict[TP, int]], set[str]]:
        """Committed offsets of many groups, their requests in flight together (one group per request,
        as the admin API takes them), and the groups whose offsets could not be read this time."""
        futures = {}
        for group_id in group_ids:
            futures.update(self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                                  request_timeout=self.timeout))
        found: dict[str, dict[TP, int]] = {}
        failed: set[str] = set()
        for group_id, future in futures.items():
            try:
                listed = future.result(timeout=self.timeout)
            except BaseException:
                failed.add(group_id)
                continue
            found[group_id] = {(tp.topic, tp.partition): int(tp.offset) for tp in listed.topic_partitions or []
                               if tp.offset >= 0 and not tp.error}
        return found, failed

    def commit_offsets(self, group_id: str, offsets: dict[TP, int]) -> None:
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        futures = self.admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, tps)],
                                                          request_timeout=self.timeout)
        answered = self._wait(futures[group_id])
        for tp in answered.topic_partitions or []:
            if tp.error:
                raise failure_of(KafkaException(tp.error))

    # -- security -------------------------------------------------------------------------------

    def acls(self) -> list[Acl]:
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,  # type: ignore[arg-type]
                                      None, None, AclOperation.ANY, AclPermissionType.ANY)  # type: ignore[arg-type]
        bindings = self._wait(self.admin.describe_acls(everything, request_timeout=self.timeout))
        return sorted((Acl(b.principal, b.host, _name(b.operation), _name(b.permission_type), _name(b.restype),
                           b.name, _name(b.resource_pattern_type)) for b in bindings),
                      key=lambda a: (a.principal, a.resource_type, a.resource_name, a.operation))

    def scram_users(self) -> dict[str, list[tuple[str, int]]]:
        future = self.admin.describe_user_scram_credentials(request_timeout=self.timeout)
        assert not isinstance(future, dict)  # one future when no names are given
        described = self._wait(future)
        return {name: sorted((_name(i.mechanism), int(i.iterations)) for i in d.scram_credential_infos)
                for name, d in sorted(described.items())}
