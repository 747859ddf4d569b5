"""The records of ``__transaction_state``, in Kafka's formats.

One record per transactional id and change; the newest record of an id is its whole state, so the
topic is compacted and a tombstone (null value) forgets the id. Both key and value start with a
big-endian ``int16`` version. Strings are ``int16 length`` + UTF-8, arrays ``int32 count`` +
elements; the *flexible* value version uses Kafka's compact forms instead (unsigned varint
``length + 1``) and ends each structure with tagged fields (uvarint count, then uvarint tag, uvarint
size, data).

Key (TransactionLogKey, version 0)::

    transactionalId string

Value (TransactionLogValue; written as version 0, versions 0 and 1 read)::

    v0  producerId int64, producerEpoch int16, transactionTimeoutMs int32, transactionStatus int8,
        transactionPartitions nullable array of (topic string, partitionIds array of int32),
        transactionLastUpdateTimestampMs int64, transactionStartTimestampMs int64
    v1  v0 flexible, with tagged fields previousProducerId int64 (tag 0, default -1),
        nextProducerId int64 (tag 1, default -1), clientTransactionVersion int16 (tag 2, default 0)

``transactionStatus``: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort, 4 CompleteCommit,
5 CompleteAbort, 6 Dead, 7 PrepareEpochFence. Partitions are written only while a transaction is
Ongoing or preparing; a record in another state carries an empty (or null) array.

Transactional id → partition: ``abs(String.hashCode(id)) % partitions``, the rule of
``__consumer_offsets`` (``records.partition_for``).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from tidelog.coordinator.wire import ByteReader

KEY_VERSION = 0
VALUE_VERSION = 0
MAX_VALUE_VERSION = 1
TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID, TAG_CLIENT_TXN_VERSION = 0, 1, 2

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class InvalidTxnRecord(ValueError):
    """A key or value in ``__transaction_state`` that does not follow the formats above."""


class TxnState(enum.IntEnum):
    """A transaction's status, with the numbers Kafka writes."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name Kafka's DescribeTransactions and ListTransactions use."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_display(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.display == name:
                return state
        return None


@dataclass(frozen=True, slots=True)
class TxnValue:
    """One transactional id's state as written to the log."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A change of ``transactional_id``; ``value`` None is a tombstone."""

    transactional_id: str
    value: TxnValue | None = field(default=None)


# ------------------------------------------------------------------------------------------ encoding


def encode_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _I16.pack(KEY_VERSION) + _I16.pack(len(data)) + data


def encode_value(value: TxnValue | None) -> bytes | None:
    """Version 0 of TransactionLogValue; None for a tombstone."""
    if value is None:
        return None
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I64.pack(value.producer_id) + _I16.pack(value.producer_epoch) + _I32.pack(value.timeout_ms)
    out += _I8.pack(int(value.state))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        data = topic.encode()
        out += _I16.pack(len(data)) + data + _I32.pack(len(partitions))
        for partition in partitions:
            out += _I32.pack(partition)
    out += _I64.pack(value.last_update_ms) + _I64.pack(value.start_ms)
    return bytes(out)


# ------------------------------------------------------------------------------------------ decoding


class _Reader(ByteReader):
    __slots__ = ("flexible",)
    error = InvalidTxnRecord

    def __init__(self, buf: bytes) -> None:
        super().__init__(buf)
        self.flexible = False

    def length(self, wide: bool) -> int | None:
        if self.flexible:
            n = self.uvarint()
            return None if n == 0 else n - 1
        n = self.fixed(_I32 if wide else _I16)
        return None if n < 0 else n

    def string(self) -> str:
        n = self.length(wide=False)
        if n is None:
            raise InvalidTxnRecord(f"null string at {self.pos}")
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as exc:
            raise InvalidTxnRecord(f"string is not UTF-8: {exc}") from None

    def tags(self) -> dict[int, bytes]:
        if not self.flexible:
            return {}
        found = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            found[tag] = self.take(self.uvarint())
        return found

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise InvalidTxnRecord(f"{len(self.buf) - self.pos} bytes after the end of the record")


def decode(key: bytes, value: bytes | None) -> TxnRecord:
    r = _Reader(key)
    version = r.fixed(_I16)
    if version != KEY_VERSION:
        raise InvalidTxnRecord(f"unknown key version {version}")
    transactional_id = r.string()
    r.done()
    return TxnRecord(transactional_id, None if value is None else decode_value(value))


def decode_value(value: bytes) -> TxnValue:
    r = _Reader(value)
    version = r.fixed(_I16)
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise InvalidTxnRecord(f"unknown value version {version}")
    r.flexible = version >= 1
    producer_id, epoch, timeout = r.fixed(_I64), r.fixed(_I16), r.fixed(_I32)
    status = r.fixed(_I8)
    try:
        state = TxnState(status)
    except ValueError:
        raise InvalidTxnRecord(f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    for _ in range(r.length(wide=True) or 0):
        topic = r.string()
        partitions.update((topic, r.fixed(_I32)) for _ in range(r.length(wide=True) or 0))
        r.tags()
    last_update, start = r.fixed(_I64), r.fixed(_I64)
    tags = r.tags()
    r.done()
    previous = _I64.unpack(tags[TAG_PREVIOUS_PRODUCER_ID])[0] if TAG_PREVIOUS_PRODUCER_ID in tags else -1
    following = _I64.unpack(tags[TAG_NEXT_PRODUCER_ID])[0] if TAG_NEXT_PRODUCER_ID in tags else -1
    return TxnValue(producer_id, epoch, timeout, state, frozenset(partitions), last_update, start, previous, following)
