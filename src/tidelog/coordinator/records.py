"""The records of ``__consumer_offsets``, in Kafka's formats, and the group → partition rule.

Every record has a key and a value (a null value is a tombstone: compaction drops the key). Both
start with a big-endian ``int16``: in the key it says which kind of record this is, in the value
which version of that kind's value schema follows. Strings are ``int16 length`` + UTF-8 (``-1`` for
null), bytes are ``int32 length`` + data, arrays ``int32 count`` + elements. Value versions marked
*flexible* use Kafka's compact forms instead (unsigned varint ``length + 1``, ``0`` for null) and end
each structure with tagged fields (uvarint count, then uvarint tag, uvarint size, data), which a
reader skips.

Keys::

    key version 0 or 1: OffsetCommitKey     group string, topic string, partition int32
    key version 2:      GroupMetadataKey    group string
    key version 3-8:    KIP-848 consumer-group records (``consumer_group_records``; 4 is skipped)
    key version 9+:     other kinds of records (not read by this coordinator; skipped)

OffsetCommitValue (written as version 3, or 1 when the commit carries an expire timestamp)::

    v0  offset int64, metadata string, commitTimestamp int64
    v1  offset int64, metadata string, commitTimestamp int64, expireTimestamp int64
    v2  offset int64, metadata string, commitTimestamp int64
    v3  offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
    v4  v3 flexible

GroupMetadataValue (written as version 3)::

    protocolType string, generation int32, protocol nullable string, leader nullable string,
    currentStateTimestamp int64 (v2+),
    members array of:
        memberId string, groupInstanceId nullable string (v3+), clientId string, clientHost string,
        rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes, assignment bytes
    v4 is v3 flexible.

``subscription`` is the member's metadata for the group's selected protocol; ``assignment`` what the
leader gave it. A group becoming empty is written with no members and a null protocol.

Group → partition: ``abs(hashCode(group_id)) % partitions`` with Java's ``String.hashCode`` (over
UTF-16 code units, 32-bit wrap-around) and Kafka's ``Utils.abs`` (which maps ``Integer.MIN_VALUE``
to 0), so a group lands on the partition a Kafka broker would pick.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidelog.coordinator import consumer_group_records
from tidelog.coordinator.consumer_group_records import ConsumerGroupRecord
from tidelog.coordinator.wire import ByteReader

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
MAX_VALUE_VERSION = 4  # both value kinds: version 4 is the flexible form of version 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_INT32_MIN = -(2**31)


class InvalidRecord(ValueError):
    """A key or value in ``__consumer_offsets`` that does not follow the formats above."""


# ------------------------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    key: OffsetCommitKey
    value: OffsetCommitValue | None


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    key: GroupMetadataKey
    value: GroupMetadataValue | None


CoordinatorRecord = OffsetCommitRecord | GroupMetadataRecord | ConsumerGroupRecord


# ----------------------------------------------------------------------------------------- encoding


class _Writer:
    __slots__ = ("flexible", "out")

    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def i16(self, value: int) -> None:
        self.out += _I16.pack(value)

    def i32(self, value: int) -> None:
        self.out += _I32.pack(value)

    def i64(self, value: int) -> None:
        self.out += _I64.pack(value)

    def uvarint(self, value: int) -> None:
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def length(self, value: int | None, wide: bool) -> None:
        if self.flexible:
            self.uvarint(0 if value is None else value + 1)
        elif wide:
            self.i32(-1 if value is None else value)
        else:
            self.i16(-1 if value is None else value)

    def string(self, value: str | None) -> None:
        if value is None:
            self.length(None, wide=False)
            return
        data = value.encode()
        self.length(len(data), wide=False)
        self.out += data

    def bytes_(self, value: bytes) -> None:
        self.length(len(value), wide=True)
        self.out += value

    def no_tags(self) -> None:
        if self.flexible:
            self.out.append(0)


def encode_key(record: CoordinatorRecord) -> bytes:
    if isinstance(record, ConsumerGroupRecord):
        return consumer_group_records.encode_key(record.key)
    w = _Writer()
    if isinstance(record, OffsetCommitRecord):
        w.i16(OFFSET_COMMIT_KEY_VERSION)
        w.string(record.key.group)
        w.string(record.key.topic)
        w.i32(record.key.partition)
    else:
        w.i16(GROUP_METADATA_KEY_VERSION)
        w.string(record.key.group)
    return bytes(w.out)


def encode_value(record: CoordinatorRecord, version: int | None = None) -> bytes | None:
    """The value bytes (None for a tombstone); ``version`` defaults to what Kafka writes."""
    if record.value is None:
        return None
    if isinstance(record, ConsumerGroupRecord):
        return consumer_group_records.encode_value(record.value)
    if isinstance(record.value, OffsetCommitValue):
        return _encode_offset_value(record.value, version)
    return _encode_group_value(record.value, version)


def _encode_offset_value(value: OffsetCommitValue, version: int | None) -> bytes:
    if version is None:
        version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.i64(value.offset)
    if version >= 3:
        w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp)
    if version == 1:
        w.i64(value.expire_timestamp)
    w.no_tags()
    return bytes(w.out)


def _encode_group_value(value: GroupMetadataValue, version: int | None) -> bytes:
    if version is None:
        version = GROUP_METADATA_VALUE_VERSION
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    w.length(len(value.members), wide=True)
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.no_tags()
    w.no_tags()
    return bytes(w.out)


# ----------------------------------------------------------------------------------------- decoding


class _Reader(ByteReader):
    __slots__ = ("flexible",)
    error = InvalidRecord

    def __init__(self, buf: bytes, flexible: bool = False) -> None:
        super().__init__(buf)
        self.flexible = flexible

    def length(self, wide: bool) -> int | None:
        if self.flexible:
            n = self.uvarint()
            return None if n == 0 else n - 1
        n = self.i32() if wide else self.i16()
        return None if n < 0 else n

    def nullable_string(self) -> str | None:
        n = self.length(wide=False)
        if n is None:
            return None
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as exc:
            raise InvalidRecord(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise InvalidRecord(f"null string at {self.pos}")
        return value

    def bytes_(self) -> bytes:
        n = self.length(wide=True)
        return b"" if n is None else self.take(n)

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise InvalidRecord(f"{len(self.buf) - self.pos} bytes after the end of the record")


def decode(key: bytes, value: bytes | None) -> CoordinatorRecord | None:
    """Decode one record; None for the record kinds this coordinator does not keep."""
    r = _Reader(key)
    kind = r.i16()
    if kind in (0, 1):
        offset_key = OffsetCommitKey(r.string(), r.string(), r.i32())
        r.done()
        return OffsetCommitRecord(offset_key, None if value is None else _decode_offset_value(value))
    if kind == GROUP_METADATA_KEY_VERSION:
        group_key = GroupMetadataKey(r.string())
        r.done()
        return GroupMetadataRecord(group_key, None if value is None else _decode_group_value(value))
    if kind < 0:
        raise InvalidRecord(f"negative key version {kind}")
    try:
        return consumer_group_records.decode(key, value)
    except consumer_group_records.InvalidConsumerGroupRecord as exc:
        raise InvalidRecord(str(exc)) from None


def _value_reader(value: bytes) -> tuple[_Reader, int]:
    r = _Reader(value)
    version = r.i16()
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise InvalidRecord(f"unknown value version {version}")
    r.flexible = version >= 4
    return r, version


def _decode_offset_value(value: bytes) -> OffsetCommitValue:
    r, version = _value_reader(value)
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else -1
    r.skip_tags()
    r.done()
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


def _decode_group_value(value: bytes) -> GroupMetadataValue:
    r, version = _value_reader(value)
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.i64() if version >= 2 else -1
    count = r.length(wide=True) or 0
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tags()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout  # v0 predates rebalance timeouts: Kafka used the session's
        members.append(
            MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout,
                           subscription, assignment)
        )
    r.skip_tags()
    r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


# ------------------------------------------------------------------------------------- partitioning


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 units, as int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition holding ``group_id`` (Kafka's rule)."""
    h = java_string_hashcode(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % partitions
