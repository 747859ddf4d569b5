"""KIP-848 consumer-group records of ``__consumer_offsets``, in Kafka's formats.

A consumer group (``group.protocol=consumer``) is written as several kinds of records, so that a
heartbeat only rewrites what it changed. Keys are not flexible: ``int16 key type`` then the fields,
strings as ``int16 length`` + UTF-8. Values are all version 0 and flexible: ``int16 version (0)``,
then compact fields (strings and arrays as unsigned varint ``length + 1``, uuids as 16 bytes) and a
tagged-field section at the end of every structure, which a reader skips unless it knows the tag::

    key 3  ConsumerGroupMetadataKey             group
           value: epoch int32; tag 0 = metadataHash int64 (the subscribed topics' shape)
    key 4  ConsumerGroupPartitionMetadataKey    group   (Kafka before 4.1; read and ignored)
    key 5  ConsumerGroupMemberMetadataKey       group, memberId
           value: instanceId ?string, rackId ?string, clientId string, clientHost string,
                  subscribedTopicNames [string], subscribedTopicRegex ?string,
                  rebalanceTimeoutMs int32, serverAssignor ?string
    key 6  ConsumerGroupTargetAssignmentMetadataKey  group
           value: assignmentEpoch int32
    key 7  ConsumerGroupTargetAssignmentMemberKey    group, memberId
           value: topicPartitions [topicId uuid, partitions [int32]]
    key 8  ConsumerGroupCurrentMemberAssignmentKey   group, memberId
           value: memberEpoch int32, previousMemberEpoch int32, state int8,
                  assignedPartitions [topicId uuid, partitions [int32]],
                  partitionsPendingRevocation [topicId uuid, partitions [int32]]

A null value is a tombstone. A group is deleted by tombstoning its member records, then its target
assignment records, then its metadata (Kafka's order), so a reader never sees members of a group
that is gone.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.coordinator.wire import ByteReader

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# A topic id and the partitions of that topic, sorted (how assignments are written and compared).
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


class InvalidConsumerGroupRecord(ValueError):
    """A KIP-848 key or value that does not follow the formats above."""


# -------------------------------------------------------------------------------------- the records


@dataclass(frozen=True, slots=True)
class GroupKey:
    """Keys 3 (group metadata) and 6 (target assignment metadata): one per group."""

    kind: int
    group: str


@dataclass(frozen=True, slots=True)
class MemberKey:
    """Keys 5 (member metadata), 7 (target assignment of a member), 8 (current assignment)."""

    kind: int
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadata:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMember:
    partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class CurrentMemberAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


ConsumerGroupValue = GroupMetadata | MemberMetadata | TargetAssignmentMetadata | TargetAssignmentMember | CurrentMemberAssignment

_KIND_OF_VALUE: dict[type, int] = {
    GroupMetadata: CONSUMER_GROUP_METADATA,
    MemberMetadata: CONSUMER_GROUP_MEMBER_METADATA,
    TargetAssignmentMetadata: CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    TargetAssignmentMember: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CurrentMemberAssignment: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
}


@dataclass(frozen=True, slots=True)
class ConsumerGroupRecord:
    key: GroupKey | MemberKey
    value: ConsumerGroupValue | None

    def __post_init__(self) -> None:
        if self.value is not None and _KIND_OF_VALUE[type(self.value)] != self.key.kind:
            raise InvalidConsumerGroupRecord(f"a {type(self.value).__name__} under key type {self.key.kind}")


# ---------------------------------------------------------------------------------- constructors


def group_metadata(group: str, value: GroupMetadata | None) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(GroupKey(CONSUMER_GROUP_METADATA, group), value)


def member_metadata(group: str, member_id: str, value: MemberMetadata | None) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(MemberKey(CONSUMER_GROUP_MEMBER_METADATA, group, member_id), value)


def target_metadata(group: str, value: TargetAssignmentMetadata | None) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(GroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group), value)


def target_member(group: str, member_id: str, value: TargetAssignmentMember | None) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(MemberKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group, member_id), value)


def current_assignment(group: str, member_id: str, value: CurrentMemberAssignment | None) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(MemberKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group, member_id), value)


# ------------------------------------------------------------------------------------------ writing


class _Out:
    __slots__ = ("b",)

    def __init__(self) -> None:
        self.b = bytearray()

    def uvarint(self, value: int) -> None:
        while value > 0x7F:
            self.b.append((value & 0x7F) | 0x80)
            value >>= 7
        self.b.append(value)

    def key_string(self, value: str) -> None:
        data = value.encode()
        self.b += _I16.pack(len(data)) + data

    def string(self, value: str | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        data = value.encode()
        self.uvarint(len(data) + 1)
        self.b += data

    def i32(self, value: int) -> None:
        self.b += _I32.pack(value)

    def topic_partitions(self, value: TopicPartitions) -> None:
        self.uvarint(len(value) + 1)
        for topic_id, partitions in value:
            self.b += topic_id.bytes
            self.uvarint(len(partitions) + 1)
            for p in partitions:
                self.i32(p)
            self.uvarint(0)


def encode_key(key: GroupKey | MemberKey) -> bytes:
    out = _Out()
    out.b += _I16.pack(key.kind)
    out.key_string(key.group)
    if isinstance(key, MemberKey):
        out.key_string(key.member_id)
    return bytes(out.b)


def encode_value(value: ConsumerGroupValue) -> bytes:
    out = _Out()
    out.b += _I16.pack(0)
    if isinstance(value, GroupMetadata):
        out.i32(value.epoch)
        if value.metadata_hash:
            out.uvarint(1)  # one tagged field: tag 0, 8 bytes
            out.uvarint(0)
            out.uvarint(8)
            out.b += _I64.pack(value.metadata_hash)
            return bytes(out.b)
    elif isinstance(value, MemberMetadata):
        out.string(value.instance_id)
        out.string(value.rack_id)
        out.string(value.client_id)
        out.string(value.client_host)
        out.uvarint(len(value.subscribed_topic_names) + 1)
        for name in value.subscribed_topic_names:
            out.string(name)
        out.string(value.subscribed_topic_regex)
        out.i32(value.rebalance_timeout_ms)
        out.string(value.server_assignor)
    elif isinstance(value, TargetAssignmentMetadata):
        out.i32(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMember):
        out.topic_partitions(value.partitions)
    else:
        out.i32(value.member_epoch)
        out.i32(value.previous_member_epoch)
        out.b.append(value.state & 0xFF)
        out.topic_partitions(value.assigned)
        out.topic_partitions(value.pending_revocation)
    out.uvarint(0)
    return bytes(out.b)


# ------------------------------------------------------------------------------------------ reading


class _In(ByteReader):
    __slots__ = ()
    error = InvalidConsumerGroupRecord

    def _text(self, size: int) -> str:
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as exc:
            raise InvalidConsumerGroupRecord(f"string is not UTF-8: {exc}") from None

    def key_string(self) -> str:
        size = self.i16()
        if size < 0:
            raise InvalidConsumerGroupRecord("null string in a key")
        return self._text(size)

    def nullable_string(self) -> str | None:
        size = self.uvarint()
        return None if size == 0 else self._text(size - 1)

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise InvalidConsumerGroupRecord(f"null string at {self.pos}")
        return value

    def count(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise InvalidConsumerGroupRecord(f"null array at {self.pos}")
        return n - 1

    def tags(self) -> dict[int, bytes]:
        found = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            found[tag] = self.take(self.uvarint())
        return found

    def topic_partitions(self) -> TopicPartitions:
        topics = []
        for _ in range(self.count()):
            topic_id = uuid.UUID(bytes=self.take(16))
            partitions = tuple(self.i32() for _ in range(self.count()))
            self.tags()
            topics.append((topic_id, partitions))
        return tuple(topics)

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise InvalidConsumerGroupRecord(f"{len(self.buf) - self.pos} bytes after the end of the record")


def decode(key: bytes, value: bytes | None) -> ConsumerGroupRecord | None:
    """Decode a record of key type 3-8; None for kinds not kept (4, and types above 8)."""
    r = _In(key)
    kind = r.i16()
    if kind == CONSUMER_GROUP_PARTITION_METADATA or kind not in _VALUE_READERS:
        return None
    group = r.key_string()
    record_key: GroupKey | MemberKey
    if kind in (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA):
        record_key = GroupKey(kind, group)
    else:
        record_key = MemberKey(kind, group, r.key_string())
    r.done()
    if value is None:
        return ConsumerGroupRecord(record_key, None)
    v = _In(value)
    version = v.i16()
    if version != 0:
        raise InvalidConsumerGroupRecord(f"unknown value version {version} for key type {kind}")
    decoded = _VALUE_READERS[kind](v)
    v.done()
    return ConsumerGroupRecord(record_key, decoded)


def _read_group_metadata(r: _In) -> GroupMetadata:
    epoch = r.i32()
    tags = r.tags()
    raw_hash = tags.get(0)
    metadata_hash = _I64.unpack(raw_hash)[0] if raw_hash is not None and len(raw_hash) == 8 else 0
    return GroupMetadata(epoch, metadata_hash)


def _read_member_metadata(r: _In) -> MemberMetadata:
    instance_id = r.nullable_string()
    rack_id = r.nullable_string()
    client_id = r.string()
    client_host = r.string()
    names = tuple(r.string() for _ in range(r.count()))
    regex = r.nullable_string()
    rebalance_timeout = r.i32()
    assignor = r.nullable_string()
    r.tags()
    return MemberMetadata(instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout, assignor)


def _read_target_metadata(r: _In) -> TargetAssignmentMetadata:
    epoch = r.i32()
    r.tags()
    return TargetAssignmentMetadata(epoch)


def _read_target_member(r: _In) -> TargetAssignmentMember:
    partitions = r.topic_partitions()
    r.tags()
    return TargetAssignmentMember(partitions)


def _read_current_assignment(r: _In) -> CurrentMemberAssignment:
    epoch = r.i32()
    previous = r.i32()
    state = r.take(1)[0]
    assigned = r.topic_partitions()
    pending = r.topic_partitions()
    r.tags()
    return CurrentMemberAssignment(epoch, previous, state, assigned, pending)


_VALUE_READERS: dict[int, Callable[[_In], ConsumerGroupValue]] = {
    CONSUMER_GROUP_METADATA: _read_group_metadata,
    CONSUMER_GROUP_MEMBER_METADATA: _read_member_metadata,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: _read_target_metadata,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: _read_target_member,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: _read_current_assignment,
}
