"""The cluster image as etcd keys: decoding keys into an image, and the keys a commit must write.

Pure (no I/O, no asyncio): ``EtcdMetadataStore`` feeds it what etcd returns and sends what it plans.

Keys, relative to ``/<prefix>/`` (values are ``codec``'s JSON forms, UTF-8)::

    cluster_id                    "<22-char id>"                    create-if-absent, never changed
    brokers/<node.id>             broker registration               under the broker's lease
    controller                    {"node_id", "epoch"}              under the controller's lease
    controller_epoch              int                               CAS by each new controller
    topics/<name>                 {"topic_id", "configs", "replicas": [[1, 2, 3], ...]}
    partitions/<name>/<index>     {"leader", "leader_epoch", "isr", "partition_epoch", "replicas",
                                   "adding_replicas"?, "removing_replicas"?}
    broker_configs                {"key": value, ...}               dynamic broker configs
    acls                          [acl, ...]
    scram                         [credential, ...]
    client_quotas                 [quota, ...]
    producer_id_block_end         int                               ids below are handed out

Invariants of :class:`KeyTable` (the decoded mirror of the prefix):
- every key seen keeps its latest ``mod_revision`` and ``create_revision``, even when its value could not
  be decoded, so a writer's compare-and-set can overwrite (repair) a corrupt value;
- a key whose new value is corrupt keeps its previous good value (if any) in the image; the problem is
  returned to the caller, which reports it with the key;
- a topic's partitions come from ``topics/<name>`` (how many, and their replicas) plus one
  ``partitions/<name>/<i>`` each; the partition key's own ``replicas`` win over the topic key's (a
  reassignment rewrites only the partition key, so one move is one compare-and-set on one key; a
  partition key written before issue 17 has none and takes the topic's); a partition whose state key was
  never written is in its *initial state* (led by its first replica, every replica in sync, epochs 0:
  what creation places), so creating a topic or adding partitions writes the topic key alone and stays
  one operation however many partitions (etcd refuses transactions of more than 128 operations by
  default); a state key that exists but never decoded shows as offline (leader -1, empty ISR);
  partition keys without their topic key are ignored.

A commit writes the keys whose JSON differs between the image the writer started from (``base``) and
the image it wants; ``cluster_id``, ``brokers/*``, ``controller`` and ``controller_epoch`` are never
written by a commit (their owners are the registration and the election).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType
from typing import Any

from tidelog.metadata import codec
from tidelog.metadata.codec import CorruptValueError
from tidelog.metadata.image import ClusterImage, PartitionImage, TopicImage

CLUSTER_ID = "cluster_id"
CONTROLLER = "controller"
CONTROLLER_EPOCH = "controller_epoch"
BROKER_CONFIGS = "broker_configs"
ACLS = "acls"
SCRAM = "scram"
CLIENT_QUOTAS = "client_quotas"
PRODUCER_ID_BLOCK_END = "producer_id_block_end"
BROKERS = "brokers/"
TOPICS = "topics/"
PARTITIONS = "partitions/"


def broker_key(node_id: int) -> str:
    return f"{BROKERS}{node_id}"


def topic_key(name: str) -> str:
    return f"{TOPICS}{name}"


def partition_key(topic: str, index: int) -> str:
    return f"{PARTITIONS}{topic}/{index}"


def partitions_prefix(topic: str) -> str:
    return f"{PARTITIONS}{topic}/"


def _decode_value(key: str, data: bytes) -> Any:
    """The decoded value of one key; raises CorruptValueError (or KeyError for an unknown key)."""
    doc = codec.decode(data)
    if key == CLUSTER_ID:
        value = codec.expect_str(doc, "cluster_id")
        if not value:
            raise CorruptValueError("empty cluster id")
        return value
    if key in (CONTROLLER_EPOCH, PRODUCER_ID_BLOCK_END):
        return codec.expect_int(doc, key)
    if key == CONTROLLER:
        return codec.controller_from_json(doc)
    if key == BROKER_CONFIGS:
        return codec.configs_from_json(doc)
    if key == ACLS:
        return tuple(dict.fromkeys(codec.acl_from_json(a) for a in codec.expect_list(doc, "acls")))
    if key == SCRAM:
        return MappingProxyType(dict(codec.scram_from_json(c) for c in codec.expect_list(doc, "scram")))
    if key == CLIENT_QUOTAS:
        return codec.quotas_from_json(doc)
    if key.startswith(BROKERS):
        registration = codec.broker_from_json(doc)
        if str(registration.node_id) != key[len(BROKERS):]:
            raise CorruptValueError(f"node_id {registration.node_id} does not match the key")
        return registration
    if key.startswith(TOPICS):
        return codec.topic_from_json(doc)
    if key.startswith(PARTITIONS):
        _, sep, index = key[len(PARTITIONS):].rpartition("/")
        if not sep or not index.isdigit():
            raise CorruptValueError("partition key without an index")
        return codec.partition_state_from_json(doc, int(index), ())
    raise KeyError(key)


@dataclass(slots=True)
class Entry:
    mod_revision: int
    create_revision: int
    value: Any = None  # the latest good value, None when the key never had one
    lease: int = 0


def _topic_of(key: str) -> str | None:
    if key.startswith(TOPICS):
        return key[len(TOPICS):]
    if key.startswith(PARTITIONS):
        return key[len(PARTITIONS):].rpartition("/")[0]
    return None


class KeyTable:
    """The keys under the prefix as last seen, and the image they make."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._dirty_topics: set[str] = set()

    def put(self, key: str, data: bytes, mod_revision: int, create_revision: int, lease: int = 0) -> str | None:
        """Record a key's new value; returns what is wrong with it (None when it decoded)."""
        previous = self.entries.get(key)
        entry = Entry(mod_revision, create_revision, None, lease)
        if previous is not None and previous.create_revision == create_revision:
            entry.value = previous.value  # same life of the key: keep the last good value
        self.entries[key] = entry
        self._touch(key)
        try:
            entry.value = _decode_value(key, data)
        except KeyError:
            return "unexpected key"
        except CorruptValueError as exc:
            return str(exc)
        return None

    def delete(self, key: str) -> None:
        if self.entries.pop(key, None) is not None:
            self._touch(key)

    def reset(self) -> None:
        """Forget everything (before loading a fresh snapshot)."""
        self._dirty_topics.update(t for t in map(_topic_of, self.entries) if t is not None)
        self.entries.clear()

    def _touch(self, key: str) -> None:
        topic = _topic_of(key)
        if topic is not None:
            self._dirty_topics.add(topic)

    def value(self, key: str) -> Any:
        entry = self.entries.get(key)
        return None if entry is None else entry.value

    def mod_revision(self, key: str) -> int:
        entry = self.entries.get(key)
        return 0 if entry is None else entry.mod_revision

    def image(self, previous: ClusterImage, revision: int) -> ClusterImage:
        """A new image from ``previous``: topics rebuilt where their keys changed, the rest re-read."""
        topics = dict(previous.topics)
        for name in self._dirty_topics:
            topic = self._topic(name, previous.topics.get(name))
            if topic is None:
                topics.pop(name, None)
            else:
                topics[name] = topic
        self._dirty_topics.clear()
        controller = self.value(CONTROLLER)
        return ClusterImage(
            cluster_id=self.value(CLUSTER_ID) or previous.cluster_id,
            topics=MappingProxyType(topics),
            broker_configs=self.value(BROKER_CONFIGS) or MappingProxyType({}),
            producer_id_block_end=self.value(PRODUCER_ID_BLOCK_END) or 0,
            acls=self.value(ACLS) or (),
            scram_credentials=self.value(SCRAM) or MappingProxyType({}),
            client_quotas=self.value(CLIENT_QUOTAS) or MappingProxyType({}),
            brokers=MappingProxyType({
                e.value.node_id: e.value
                for k, e in self.entries.items() if k.startswith(BROKERS) and e.value is not None
            }),
            controller_id=-1 if controller is None else controller[0],
            controller_epoch=self.value(CONTROLLER_EPOCH) or 0,
            revision=revision,
        )

    def _topic(self, name: str, previous: TopicImage | None) -> TopicImage | None:
        decoded = self.value(topic_key(name))
        if decoded is None:
            return None
        topic_id, configs, replicas = decoded
        if previous is not None and previous.topic_id != topic_id:
            previous = None
        partitions = []
        for index, assigned in enumerate(replicas):
            key = partition_key(name, index)
            state: PartitionImage | None = self.value(key)
            if state is None and key not in self.entries:
                state = initial_state(index, assigned)
            elif state is None:
                state = PartitionImage(index, -1, 0, (), ())  # offline until a good state is written
            partitions.append(state if state.replicas else replace(state, replicas=assigned))
        return TopicImage(name, topic_id, tuple(partitions), configs)


def initial_state(index: int, replicas: tuple[int, ...]) -> PartitionImage:
    """A partition's state until its key is first written: what topic creation places."""
    return PartitionImage(index, replicas[0] if replicas else -1, 0, replicas, replicas)


# -- what a commit writes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitPlan:
    """Keys to put (key → JSON bytes), keys to delete, and the guards a commit compares.

    ``deleted_topics``: their topic key and every ``partitions/<name>/`` key go.
    ``parents``: topic keys that must exist (partitions of them are written, the topic key is not).
    """

    puts: Mapping[str, bytes]
    deletes: tuple[str, ...]
    deleted_topics: tuple[str, ...]
    parents: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.puts or self.deletes or self.deleted_topics)


def _changed(base: object, new: object) -> bool:
    return base != new


def plan_commit(base: ClusterImage, new: ClusterImage) -> CommitPlan:
    puts: dict[str, bytes] = {}
    deletes: list[str] = []
    parents: list[str] = []
    for name, topic in new.topics.items():
        old = base.topics.get(name)
        stored_partitions = 0 if old is None else len(old.partitions)
        replaced = old is not None and old.topic_id != topic.topic_id
        if replaced:
            old = None  # deleted and created again: every key is new
        topic_doc = codec.topic_to_json(topic)
        if old is None or _changed(codec.topic_to_json(old), topic_doc):
            puts[topic_key(name)] = codec.encode(topic_doc)
        old_parts = () if old is None else old.partitions
        for p in topic.partitions:
            doc = codec.partition_state_to_json(p)
            if p.index >= len(old_parts):
                if p != initial_state(p.index, p.replicas):  # a new partition in its initial state needs no key
                    puts[partition_key(name, p.index)] = codec.encode(doc)
            elif _changed(codec.partition_state_to_json(old_parts[p.index]), doc):
                puts[partition_key(name, p.index)] = codec.encode(doc)
        deletes.extend(partition_key(name, i) for i in range(len(topic.partitions), stored_partitions))
        if replaced:  # the old topic's states must not stand for the new topic's initial ones
            deletes.extend(k for k in map(partial(partition_key, name), range(min(len(topic.partitions), stored_partitions)))
                           if k not in puts)
        if topic_key(name) not in puts and any(k.startswith(partitions_prefix(name)) for k in (*puts, *deletes)):
            parents.append(topic_key(name))
    deleted_topics = tuple(name for name in base.topics if name not in new.topics)
    scalars: Iterable[tuple[str, object, object]] = (
        (BROKER_CONFIGS, codec.configs_to_json(base.broker_configs), codec.configs_to_json(new.broker_configs)),
        (ACLS, [codec.acl_to_json(a) for a in base.acls], [codec.acl_to_json(a) for a in new.acls]),
        (SCRAM, codec.scram_list_to_json(base.scram_credentials), codec.scram_list_to_json(new.scram_credentials)),
        (CLIENT_QUOTAS, codec.quotas_to_json(base.client_quotas), codec.quotas_to_json(new.client_quotas)),
        (PRODUCER_ID_BLOCK_END, base.producer_id_block_end, new.producer_id_block_end),
    )
    for key, before, after in scalars:
        if _changed(before, after):
            puts[key] = codec.encode(after)
    return CommitPlan(MappingProxyType(puts), tuple(deletes), deleted_topics, tuple(parents))
