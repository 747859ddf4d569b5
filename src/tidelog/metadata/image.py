"""The cluster image: brokers, topics, partitions, configs, ACLs, SCRAM credentials and client quotas as frozen data.

The image is replaced, never mutated: every change (a topic created, a config altered, partitions
added) produces a new image from the old one plus a change, and the store persists the new image
before anyone sees it. Readers (request handlers) take the current image once per request and get a
consistent view for the whole request.

Cluster fields (issue 16) default to "single node": no registered brokers, no controller
(``controller_id == -1``), ``partition_epoch == 0``, ``revision == 0``. In a cluster on etcd,
``brokers`` holds the live registrations (a registration disappears with its broker's lease),
``controller_id``/``controller_epoch`` come from the election keys, and ``revision`` is the etcd
revision the image reflects: an image derived from it with ``replace`` or the ``with_*`` helpers
keeps that revision, which is how ``EtcdMetadataStore.commit`` knows what the writer read.

Client quotas (issue 22) map a quota entity to its values: the entity is a tuple of
``(entity type, name)`` pairs sorted by type (``name`` None: the default entity), as
``tidelog.quotas.entity`` defines it; an entity without values is not kept.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from tidelog.common.config import Value
from tidelog.protocol.sasl import ScramCredential

# ((entity type, name or None for the default), ...), sorted by type: ((client-id, None), (user, alice))
QuotaEntity = tuple[tuple[str, str | None], ...]

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, slots=True)
class PartitionImage:
    index: int
    leader: int  # -1: offline (no leader)
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    # Bumped on every change of leader, ISR or replicas (Kafka's partition epoch); CAS-guarded in etcd.
    partition_epoch: int = 0
    # A reassignment in progress (KIP-455): ``replicas`` is the target followed by the replicas
    # leaving, ``adding_replicas`` = target - original, ``removing_replicas`` = original - target.
    # Both empty: no move. The target is ``replicas - removing``, the original ``replicas - adding``.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str  # the listener name, e.g. PLAINTEXT
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker as it registered itself: present in the image while its lease lives."""

    node_id: int
    rack: str | None
    endpoints: tuple[BrokerEndpoint, ...]
    # Unique per process start, so a restarted broker is told apart from its previous life.
    incarnation: str
    # Placement inputs (docs/cluster.md): broker.weight and broker.rack.group. Registrations written
    # before these existed read as weight 1.0 and no group.
    weight: float = 1.0
    rack_group: str | None = None

    @property
    def failure_group(self) -> str | None:
        """The failure group placement spreads replicas over: the rack group if set, else the rack."""
        return self.rack_group if self.rack_group is not None else self.rack

    def endpoint(self, name: str) -> BrokerEndpoint | None:
        for endpoint in self.endpoints:
            if endpoint.name == name:
                return endpoint
        return None


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionImage, ...]
    configs: Mapping[str, Value] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def with_configs(self, configs: Mapping[str, Value]) -> TopicImage:
        return replace(self, configs=MappingProxyType(dict(configs)))


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL as Kafka's metadata stores it (AccessControlEntryRecord): wire codes and strings.

    The codes are ``tidelog.common.acl``'s enums (resource type 2 = TOPIC, pattern 3 = LITERAL,
    4 = PREFIXED, operation 3 = READ, permission 2 = DENY, 3 = ALLOW, ...).
    """

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class ClusterImage:
    cluster_id: str
    topics: Mapping[str, TopicImage] = field(default_factory=lambda: MappingProxyType({}))
    broker_configs: Mapping[str, Value] = field(default_factory=lambda: MappingProxyType({}))
    # Producer ids below this are handed out (or reserved by a broker's current block).
    producer_id_block_end: int = 0
    # Replaced as a whole on every change, so a reader can tell "changed" by identity.
    acls: tuple[AclEntry, ...] = ()
    # (user, mechanism) → salted credential; never a password.
    scram_credentials: Mapping[tuple[str, str], ScramCredential] = field(default_factory=lambda: MappingProxyType({}))
    # quota entity → {key: value}; replaced as a whole on every change.
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=lambda: MappingProxyType({}))
    # node id → registration of every broker whose lease is alive (empty on a single node).
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: MappingProxyType({}))
    controller_id: int = -1  # -1: no controller elected
    controller_epoch: int = 0
    # The metadata store's version of this image (etcd: its revision; the local file: 0).
    revision: int = 0

    def live_brokers(self) -> tuple[BrokerRegistration, ...]:
        """The registered brokers in node id order."""
        return tuple(self.brokers[node_id] for node_id in sorted(self.brokers))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def with_topic(self, topic: TopicImage) -> ClusterImage:
        topics = dict(self.topics)
        topics[topic.name] = topic
        return replace(self, topics=MappingProxyType(topics))

    def with_partition(self, topic: str, partition: PartitionImage) -> ClusterImage:
        """This image with one partition of ``topic`` replaced (same index); KeyError/IndexError if absent."""
        current = self.topics[topic]
        partitions = list(current.partitions)
        if not 0 <= partition.index < len(partitions):
            raise IndexError(f"{topic} has no partition {partition.index}")
        partitions[partition.index] = partition
        return self.with_topic(replace(current, partitions=tuple(partitions)))

    def with_brokers(self, brokers: Mapping[int, BrokerRegistration]) -> ClusterImage:
        return replace(self, brokers=MappingProxyType(dict(brokers)))

    def without_topic(self, name: str) -> ClusterImage:
        topics = dict(self.topics)
        del topics[name]
        return replace(self, topics=MappingProxyType(topics))

    def with_producer_id_block_end(self, end: int) -> ClusterImage:
        return replace(self, producer_id_block_end=end)

    def with_broker_configs(self, configs: Mapping[str, Value]) -> ClusterImage:
        return replace(self, broker_configs=MappingProxyType(dict(configs)))

    def with_acls(self, acls: tuple[AclEntry, ...]) -> ClusterImage:
        return replace(self, acls=tuple(dict.fromkeys(acls)))

    def with_scram_credentials(self, credentials: Mapping[tuple[str, str], ScramCredential]) -> ClusterImage:
        return replace(self, scram_credentials=MappingProxyType(dict(credentials)))

    def with_client_quotas(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> ClusterImage:
        kept = {e: MappingProxyType(dict(v)) for e, v in quotas.items() if v}
        return replace(self, client_quotas=MappingProxyType(kept))


def new_topic(name: str, partitions: int, node_id: int, configs: Mapping[str, Value]) -> TopicImage:
    """A topic whose every partition lives on this single node, led by it at epoch 0."""
    return TopicImage(
        name=name,
        topic_id=uuid.uuid4(),
        partitions=tuple(PartitionImage(i, node_id, 0, (node_id,), (node_id,)) for i in range(partitions)),
        configs=MappingProxyType(dict(configs)),
    )


def add_partitions(topic: TopicImage, total: int, node_id: int) -> TopicImage:
    extra = tuple(
        PartitionImage(i, node_id, 0, (node_id,), (node_id,)) for i in range(len(topic.partitions), total)
    )
    return replace(topic, partitions=topic.partitions + extra)
