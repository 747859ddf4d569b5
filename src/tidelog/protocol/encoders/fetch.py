"""FetchResponse v4-17.

Layout by version: throttle_time; error_code and session_id from v7; topics (name, or topic_id
from v13) → partitions (partition_index, error_code, high_watermark, last_stable_offset;
log_start_offset from v5; aborted_transactions (nullable); preferred_read_replica from v11;
records (nullable bytes); tagged diverging_epoch / current_leader / snapshot_id from v12);
tagged node_endpoints from v16. Flexible from v12.

Two inputs, the same bytes: a kio ``FetchResponse`` (any version), or a ``FetchResult``, the light
form the broker's Fetch handler builds (plain tuples, no kio dataclasses). A ``FetchResult`` has no
tagged fields (no diverging epoch, current leader, snapshot id or node endpoints).

The records of each partition are not copied: they become their own part of the output, so a
response is a handful of small header buffers interleaved with the records. ``records`` may be any
object with a length, not only bytes: the broker passes file ranges that its response writer sends
with sendfile; this module only needs their length.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

from tidelog.protocol.encoders import _wire as w
from tidelog.protocol.encoders._wire import INT32, NO_TAGS, defaults, tag_section, tagged, uvarint

_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_EPOCH_END = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")
_SNAPSHOT = struct.Struct(">qi")
_SESSION = struct.Struct(">ihi")
FETCH = 1


class FetchPartitionResult(NamedTuple):
    """One partition of a ``FetchResult``."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None  # (producer id, first offset); None: null
    preferred_read_replica: int
    records: Any  # bytes, or anything with a length that the response writer can send (file ranges)


class FetchResult:
    """A FetchResponse without kio objects: ``topics`` holds (name, topic id, partitions)."""

    __api_key__ = FETCH
    __slots__ = ("__version__", "error_code", "session_id", "throttle_ms", "topics")

    def __init__(
        self, version: int, error_code: int, session_id: int,
        topics: list[tuple[str, uuid.UUID | None, list[FetchPartitionResult]]], throttle_ms: int = 0,
    ) -> None:
        self.__version__ = version
        self.error_code = error_code
        self.session_id = session_id
        self.topics = topics
        self.throttle_ms = throttle_ms


def encode_fetch_response(response: Any) -> list[bytes | memoryview]:
    version = response.__version__
    flexible = version >= 12
    light = type(response) is FetchResult
    if light:
        throttle, topics = response.throttle_ms, response.topics
    else:
        throttle = w.millis(response.throttle_time)
        topics = [(getattr(t, "topic", ""), getattr(t, "topic_id", None), t.partitions) for t in response.responses]
    parts: list[bytes | memoryview] = []
    if version >= 7:
        out = bytearray(_SESSION.pack(throttle, response.error_code, response.session_id))
    else:
        out = bytearray(w.INT32.pack(throttle))
    out += w.array_length(len(topics), flexible)
    for name, topic_id, partitions in topics:
        out += w.uuid_bytes(topic_id) if version >= 13 else w.string(name, flexible)
        out += w.array_length(len(partitions), flexible)
        for partition in partitions:
            out = _partition(parts, out, partition if light else _from_kio(partition, version), version, flexible)
            if flexible:
                out += NO_TAGS if light else _partition_tags(partition)
        if flexible:
            out += w.NO_TAGS
    if flexible:
        tags = []
        if not light and version >= 16 and response.node_endpoints != w.defaults(type(response))["node_endpoints"]:
            tags.append(w.tagged(0, w.node_endpoints(response.node_endpoints)))
        out += w.tag_section(tags)
    parts.append(bytes(out))
    return parts


def _from_kio(partition: Any, version: int) -> FetchPartitionResult:
    aborted = partition.aborted_transactions
    return FetchPartitionResult(
        partition.partition_index,
        partition.error_code,
        partition.high_watermark,
        partition.last_stable_offset,
        partition.log_start_offset if version >= 5 else -1,
        None if aborted is None else tuple((t.producer_id, t.first_offset) for t in aborted),
        partition.preferred_read_replica if version >= 11 else -1,
        partition.records,
    )


def _partition(
    parts: list[bytes | memoryview], out: bytearray, partition: FetchPartitionResult, version: int, flexible: bool
) -> bytearray:
    """Append one partition but its tagged fields; returns the buffer to keep writing into (a new one
    after records)."""
    if version >= 5:
        out += _PARTITION_V5.pack(
            partition.partition_index,
            partition.error_code,
            partition.high_watermark,
            partition.last_stable_offset,
            partition.log_start_offset,
        )
    else:
        out += _PARTITION_V4.pack(
            partition.partition_index,
            partition.error_code,
            partition.high_watermark,
            partition.last_stable_offset,
        )
    aborted = partition.aborted_transactions
    if aborted is None:
        out += b"\x00" if flexible else b"\xff\xff\xff\xff"
    else:
        out += uvarint(len(aborted) + 1) if flexible else INT32.pack(len(aborted))
        for producer_id, first_offset in aborted:
            out += _ABORTED.pack(producer_id, first_offset)
            if flexible:
                out += NO_TAGS
    if version >= 11:
        out += INT32.pack(partition.preferred_read_replica)
    records = partition.records
    if records is None:
        out += b"\x00" if flexible else b"\xff\xff\xff\xff"
    else:
        out += uvarint(len(records) + 1) if flexible else INT32.pack(len(records))
        if records:
            parts.append(bytes(out))
            parts.append(records)
            out = bytearray()
    return out


def _partition_tags(partition: Any) -> bytes:
    default = defaults(type(partition))
    diverging = partition.diverging_epoch
    leader = partition.current_leader
    snapshot = partition.snapshot_id
    # Identity first: handlers that leave a tag unset share the dataclass default object.
    plain_diverging = diverging is default["diverging_epoch"] or diverging == default["diverging_epoch"]
    plain_leader = leader is default["current_leader"] or leader == default["current_leader"]
    plain_snapshot = snapshot is default["snapshot_id"] or snapshot == default["snapshot_id"]
    if plain_diverging and plain_leader and plain_snapshot:
        return NO_TAGS
    tags = []
    if not plain_diverging:
        tags.append(tagged(0, _EPOCH_END.pack(diverging.epoch, diverging.end_offset) + NO_TAGS))
    if not plain_leader:
        tags.append(tagged(1, _LEADER.pack(leader.leader_id, leader.leader_epoch) + NO_TAGS))
    if not plain_snapshot:
        tags.append(tagged(2, _SNAPSHOT.pack(snapshot.end_offset, snapshot.epoch) + NO_TAGS))
    return tag_section(tags)
