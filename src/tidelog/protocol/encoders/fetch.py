"""FetchResponse v4-17.

Layout by version: throttle_time; error_code and session_id from v7; topics (name, or topic_id
from v13) → partitions (partition_index, error_code, high_watermark, last_stable_offset;
log_start_offset from v5; aborted_transactions (nullable); preferred_read_replica from v11;
records (nullable bytes); tagged diverging_epoch / current_leader / snapshot_id from v12);
tagged node_endpoints from v16. Flexible from v12.

The records of each partition are not copied: they become their own part of the output, so a
response is a handful of small header buffers interleaved with the records. ``records`` may be any
object with a length, not only bytes: the broker passes file ranges that its response writer sends
with sendfile; this module only needs their length.
"""

from __future__ import annotations

import struct
from typing import Any

from tidelog.protocol.encoders import _wire as w
from tidelog.protocol.encoders._wire import INT32, NO_TAGS, defaults, tag_section, tagged, uvarint

_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_EPOCH_END = struct.Struct(">iq")
_LEADER = struct.Struct(">ii")
_SNAPSHOT = struct.Struct(">qi")
_SESSION = struct.Struct(">ihi")


def encode_fetch_response(response: Any) -> list[bytes | memoryview]:
    version = response.__version__
    flexible = version >= 12
    parts: list[bytes | memoryview] = []
    throttle = w.millis(response.throttle_time)
    if version >= 7:
        out = bytearray(_SESSION.pack(throttle, response.error_code, response.session_id))
    else:
        out = bytearray(w.INT32.pack(throttle))
    out += w.array_length(len(response.responses), flexible)
    for topic in response.responses:
        out += w.uuid_bytes(topic.topic_id) if version >= 13 else w.string(topic.topic, flexible)
        out += w.array_length(len(topic.partitions), flexible)
        for partition in topic.partitions:
            out = _partition(parts, out, partition, version, flexible)
        if flexible:
            out += w.NO_TAGS
    if flexible:
        tags = []
        if version >= 16 and response.node_endpoints != w.defaults(type(response))["node_endpoints"]:
            tags.append(w.tagged(0, w.node_endpoints(response.node_endpoints)))
        out += w.tag_section(tags)
    parts.append(bytes(out))
    return parts


def _partition(
    parts: list[bytes | memoryview], out: bytearray, partition: Any, version: int, flexible: bool
) -> bytearray:
    """Append one partition; returns the buffer to keep writing into (a new one after records)."""
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
        for transaction in aborted:
            out += _ABORTED.pack(transaction.producer_id, transaction.first_offset)
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
    if flexible:
        out += _partition_tags(partition)
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
