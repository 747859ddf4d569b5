"""The governor's only way into a cluster: Kafka's Admin APIs.

confluent-kafka's AdminClient serves Metadata (replicas, ISR, leaders), DescribeCluster (racks, the
controller), ElectLeaders and IncrementalAlterConfigs. librdkafka 2.16 has no AlterPartitionReassignments,
ListPartitionReassignments or DescribeLogDirs, so those three go through the project's codec (kio
entities over ``tidelog.net.KafkaConnection``, secured as the client settings say: TLS and SASL
PLAIN/SCRAM through ``tidelog.clients.security``, never a plaintext fallback): AlterPartitionReassignments and
ListPartitionReassignments to the controller DescribeCluster names (a KRaft broker forwards them to
the active controller), DescribeLogDirs to each broker at the highest version both sides know (v4+
carries each dir's total and usable bytes; before that capacity comes from the governor's settings).

ApiVersions tells whether a cluster serves reassignments at all (``supports_reassignment``): tidelog
before issue 17 answers UNSUPPORTED_VERSION, and the governor then plans but refuses to execute.

Every call raises ``ClusterError`` with the Kafka error name on failure (SASL_AUTHENTICATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED... with the mechanism and user named when the cluster refuses the
governor's credentials).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import ElectionType, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest as DescribeLogDirsV1
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest as DescribeLogDirsV4
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from tidelog.clients.security import ClientSecurity, SaslAuthenticationError
from tidelog.common.errors import ConfigError
from tidelog.governor.execution import FOLLOWER_RATE, LEADER_RATE, Throttles
from tidelog.net.kafka_connection import BrokerUnreachable

T = TypeVar("T")
TopicPartitionKey = tuple[str, int]
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, DESCRIBE_LOG_DIRS = 45, 46, 35
KAFKA_STORAGE_ERROR = 56
# the cluster refuses the governor itself (credentials, ACLs): reported, never taken for a broker's failure
_REFUSALS = frozenset({"SASL_AUTHENTICATION_FAILED", "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE",
                       "CLUSTER_AUTHORIZATION_FAILED"})


class ClusterError(Exception):
    """A cluster call failed; the message names the call and Kafka's error (``error``: its name)."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class PartitionState:
    replicas: tuple[int, ...]
    isr: frozenset[int]
    leader: int


@dataclass(frozen=True)
class LogDir:
    path: str
    error: int
    total_bytes: int       # -1 when the broker does not say (DescribeLogDirs before v4)
    usable_bytes: int
    sizes: dict[TopicPartitionKey, int] = field(default_factory=dict)

    @property
    def offline(self) -> bool:
        return self.error == KAFKA_STORAGE_ERROR


@dataclass(frozen=True)
class Reassignment:
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class Snapshot:
    brokers: dict[int, Broker]
    controller: int
    partitions: dict[TopicPartitionKey, PartitionState]
    log_dirs: dict[int, list[LogDir]]
    reassigning: dict[TopicPartitionKey, Reassignment]


async def _wait(future: Future[T], what: str) -> T:
    try:
        return await asyncio.wrap_future(future)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        name = error.name() if hasattr(error, "name") else str(error)
        raise ClusterError(f"{what}: {name} ({getattr(error, 'str', lambda: error)()})", str(name)) from None


class Cluster:
    def __init__(self, config: Mapping[str, Any], *, timeout_s: float = 15.0) -> None:
        self.config = dict(config)
        self.timeout_s = timeout_s
        try:
            self.security = ClientSecurity.from_config(self.config)
        except ConfigError as exc:
            raise ClusterError(str(exc), "INVALID_CONFIG") from None
        self.admin = AdminClient(self.config)
        self._brokers: dict[int, Broker] = {}
        self._controller = -1
        self._versions: dict[int, dict[int, tuple[int, int]]] = {}

    # -- librdkafka ---------------------------------------------------------------------------

    async def _topic_names(self) -> ClusterMetadata:
        """Metadata of every topic. librdkafka asks one broker of its choosing; when that broker hangs
        (SIGSTOP, a stuck disk) the call times out: a new client asks again, likely another broker,
        and a second failure is the round's ClusterError, never an exception that ends the round."""
        for attempt in (1, 2):
            try:
                return await asyncio.to_thread(self.admin.list_topics, timeout=self.timeout_s / 2)
            except KafkaException as exc:
                if attempt == 2:
                    raise ClusterError(f"Metadata: {exc}", "METADATA") from None
                self.admin = AdminClient(self.config)
        raise AssertionError("unreachable")

    async def describe(self) -> tuple[dict[int, Broker], int, dict[TopicPartitionKey, PartitionState]]:
        try:
            described = await _wait(self.admin.describe_cluster(request_timeout=self.timeout_s), "DescribeCluster")
        except ClusterError:
            # librdkafka keeps waiting for the controller its cached metadata names, also once that
            # broker is dead and another controls the cluster: a new client asks afresh
            self.admin = AdminClient(self.config)
            described = await _wait(self.admin.describe_cluster(request_timeout=self.timeout_s), "DescribeCluster")
        brokers = {n.id: Broker(n.id, n.host, n.port, n.rack or None) for n in described.nodes}
        controller = described.controller.id if described.controller is not None else min(brokers, default=-1)
        # topic names from Metadata, then DescribeTopics for replicas/ISR/leader: librdkafka answers
        # list_topics() from a cache that can keep a finished reassignment's ISR for a long while
        metadata = await self._topic_names()
        names = [name for name, topic in metadata.topics.items() if topic.error is None]
        partitions = {}
        if names:
            futures = self.admin.describe_topics(TopicCollection(names), request_timeout=self.timeout_s)
            for name, future in futures.items():
                try:
                    described_topic = await _wait(future, f"DescribeTopics {name}")
                except ClusterError:
                    continue  # deleted meanwhile
                for p in described_topic.partitions:
                    partitions[(name, p.id)] = PartitionState(tuple(r.id for r in p.replicas),
                                                              frozenset(r.id for r in p.isr),
                                                              p.leader.id if p.leader is not None else -1)
        self._brokers, self._controller = brokers, controller
        return brokers, controller, partitions

    async def elect_preferred(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, str]:
        """Preferred-leader elections; the error name per partition ("" when elected or already leader)."""
        wanted = [TopicPartition(t, p) for t, p in partitions]
        if not wanted:
            return {}
        # (librdkafka 2.16's binding rejects request_timeout here: the client's default applies)
        result = await _wait(self.admin.elect_leaders(ElectionType.PREFERRED, wanted), "ElectLeaders")
        out = {}
        for tp, error in result.items():
            name = "" if error is None or error.name() == "ELECTION_NOT_NEEDED" else error.name()
            out[(tp.topic, tp.partition)] = name
        return out

    async def apply_throttles(self, rate: int, wanted: Throttles, previous: Throttles) -> list[str]:
        """Set the replica lists of ``wanted`` and ``rate`` on its brokers; remove what only ``previous`` had.

        A resource the cluster refuses with INVALID_CONFIG (a cluster that does not know the throttle
        keys: tidelog before replication throttles answers "Unknown config name") is skipped and its
        error returned, the others are still applied; any other failure raises ``ClusterError``."""
        resources = []
        for topic, configs in wanted.topics.items():
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
            resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries))
        for topic in set(previous.topics) - set(wanted.topics):
            entries = [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                       for k in previous.topics[topic]]
            resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries))
        for broker in wanted.brokers - previous.brokers if rate > 0 else ():
            entries = [ConfigEntry(k, str(rate), incremental_operation=AlterConfigOpType.SET)
                       for k in (LEADER_RATE, FOLLOWER_RATE)]
            resources.append(ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=entries))
        for broker in previous.brokers - wanted.brokers:
            entries = [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                       for k in (LEADER_RATE, FOLLOWER_RATE)]
            resources.append(ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=entries))
        # librdkafka sends a broker's resource to that broker: one BROKER resource per call, and only to
        # registered brokers (a dead one would time out; it holds no throttle worth removing)
        topics = [r for r in resources if r.restype == ResourceType.TOPIC]
        batches = ([topics] if topics else []) + [[r] for r in resources if r.restype == ResourceType.BROKER
                                                  and int(r.name) in self._brokers]
        refused = []
        for batch in batches:
            futures = self.admin.incremental_alter_configs(batch, request_timeout=self.timeout_s)
            for resource, future in futures.items():
                try:
                    await _wait(future, f"IncrementalAlterConfigs {resource.name}")
                except ClusterError as exc:
                    if exc.error != "INVALID_CONFIG":
                        raise
                    refused.append(str(exc))
        return refused

    async def describe_configs(self, resource: ConfigResource) -> dict[str, str]:
        futures = self.admin.describe_configs([resource], request_timeout=self.timeout_s)
        entries = await _wait(next(iter(futures.values())), "DescribeConfigs")
        return {k: v.value for k, v in entries.items() if v.value is not None}

    # -- the codec, for what librdkafka lacks ---------------------------------------------------

    async def _call(self, broker: int, request: Any) -> Any:
        if broker not in self._brokers:
            await self.describe()
        node = self._brokers.get(broker)
        if node is None:
            raise ClusterError(f"broker {broker} is not registered")
        connection = self.security.connection(node.host, node.port, "tidelog-governor", timeout_s=self.timeout_s)
        try:
            return await connection.call(request)
        except BrokerUnreachable as exc:
            raise ClusterError(str(exc)) from None
        except SaslAuthenticationError as exc:
            raise ClusterError(str(exc), exc.error) from None
        finally:
            await connection.aclose()

    async def check_access(self) -> None:
        """With a secured protocol: connect to the bootstrap servers in turn over the governor's own
        connection (TLS, SASL) until one answers ApiVersions. A refused credential raises at once, with
        the mechanism, the user and Kafka's error name; librdkafka would only retry and then report a
        transport failure. PLAINTEXT checks nothing (librdkafka's errors say enough there)."""
        if self.security.protocol == "PLAINTEXT":
            return
        failures = []
        for address in str(self.config.get("bootstrap.servers", "")).split(","):
            host, _, port = address.strip().split("://")[-1].rpartition(":")
            if not host or not port.isdigit():
                raise ClusterError(f"bootstrap.servers: {address.strip()!r} is not HOST:PORT", "INVALID_CONFIG")
            connection = self.security.connection(host.strip("[]"), int(port), "tidelog-governor",
                                                  timeout_s=self.timeout_s)
            try:
                await connection.call(ApiVersionsRequest())
                return
            except SaslAuthenticationError as exc:
                raise ClusterError(str(exc), exc.error) from None
            except BrokerUnreachable as exc:
                failures.append(str(exc))
            finally:
                await connection.aclose()
        raise ClusterError(f"no bootstrap server answered over {self.security.protocol}: {'; '.join(failures)}"
                           + self.security.hint())

    async def api_versions(self, broker: int) -> dict[int, tuple[int, int]]:
        if broker not in self._versions:
            answer = await self._call(broker, ApiVersionsRequest())
            self._versions[broker] = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        return self._versions[broker]

    async def supports_reassignment(self) -> bool:
        if self._controller < 0:
            await self.describe()
        versions = await self.api_versions(self._controller)
        return ALTER_PARTITION_REASSIGNMENTS in versions and LIST_PARTITION_REASSIGNMENTS in versions

    async def list_reassignments(self) -> dict[TopicPartitionKey, Reassignment]:
        if self._controller < 0:
            await self.describe()
        answer = await self._call(self._controller, ListPartitionReassignmentsRequest(topics=None))
        _check(answer, "ListPartitionReassignments")
        return {(t.name, int(p.partition_index)): Reassignment(tuple(map(int, p.replicas)), tuple(map(int, p.adding_replicas)),
                                                               tuple(map(int, p.removing_replicas)))
                for t in answer.topics for p in t.partitions}

    async def alter_reassignments(self, targets: Mapping[TopicPartitionKey, tuple[int, ...] | None]
                                  ) -> dict[TopicPartitionKey, str]:
        """Start (replica list) or cancel (None) reassignments; the error name per partition ("" when accepted)."""
        if not targets:
            return {}
        if self._controller < 0:
            await self.describe()
        by_topic: dict[str, list[ReassignablePartition]] = {}
        for (topic, partition), replicas in sorted(targets.items()):
            by_topic.setdefault(topic, []).append(ReassignablePartition(
                partition_index=i32(partition),
                replicas=None if replicas is None else tuple(BrokerId(b) for b in replicas)))
        request = AlterPartitionReassignmentsRequest(
            topics=tuple(ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()))
        answer = await self._call(self._controller, request)
        _check(answer, "AlterPartitionReassignments")
        return {(t.name, int(p.partition_index)): "" if int(p.error_code) == 0 else _name(p.error_code, p.error_message)
                for t in answer.responses for p in t.partitions}

    async def log_dirs(self, broker: int) -> list[LogDir]:
        versions = await self.api_versions(broker)
        top = versions.get(DESCRIBE_LOG_DIRS, (0, -1))[1]
        if top < 1:
            return []
        request = DescribeLogDirsV4(topics=None) if top >= 4 else DescribeLogDirsV1(topics=None)
        answer = await self._call(broker, request)
        if int(getattr(answer, "error_code", 0)) != 0:  # v3+: CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster
            _check(answer, f"DescribeLogDirs on broker {broker}")
        dirs = []
        for result in answer.results:
            sizes = {(t.name, int(p.partition_index)): int(p.partition_size) for t in result.topics for p in t.partitions
                     if not p.is_future_key}
            dirs.append(LogDir(result.log_dir, int(result.error_code), int(getattr(result, "total_bytes", -1)),
                               int(getattr(result, "usable_bytes", -1)), sizes))
        return dirs

    async def snapshot(self) -> Snapshot:
        brokers, controller, partitions = await self.describe()
        dirs = {}
        for b in brokers:
            try:
                dirs[b] = await self.log_dirs(b)
            except ClusterError as exc:
                if exc.error in _REFUSALS:  # every broker would say the same: not a broker's trouble
                    raise
                dirs[b] = []
        reassigning = await self.list_reassignments() if await self.supports_reassignment() else {}
        return Snapshot(brokers, controller, partitions, dirs, reassigning)


def _name(code: Any, message: str | None = None) -> str:
    name = str(getattr(code, "name", code)).upper()
    return f"{name}: {message}" if message else str(name)


def _check(answer: Any, what: str) -> None:
    if int(answer.error_code) != 0:
        raise ClusterError(f"{what}: {_name(answer.error_code, getattr(answer, 'error_message', None))}",
                           _name(answer.error_code))
