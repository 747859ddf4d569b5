"""ProduceResponse v3-13.

Layout by version: topics (name, or topic_id from v13) → partitions (index, error_code,
base_offset, log_append_time; log_start_offset from v5; record_errors and error_message from v8;
tagged current_leader from v10) → throttle_time; tagged node_endpoints from v10. Flexible from v9.
"""

from __future__ import annotations

import struct
from typing import Any

from tidelog.protocol.encoders import _wire as w

_PARTITION_HEAD = struct.Struct(">ihqq")
_PARTITION_HEAD_V5 = struct.Struct(">ihqqq")
_LEADER = struct.Struct(">ii")


def encode_produce_response(response: Any) -> list[bytes | memoryview]:
    version = response.__version__
    flexible = version >= 9
    out = bytearray(w.array_length(len(response.responses), flexible))
    for topic in response.responses:
        out += w.uuid_bytes(topic.topic_id) if version >= 13 else w.string(topic.name, flexible)
        out += w.array_length(len(topic.partition_responses), flexible)
        for partition in topic.partition_responses:
            _partition(out, partition, version, flexible)
        if flexible:
            out += w.NO_TAGS
    out += w.INT32.pack(w.millis(response.throttle_time))
    if flexible:
        tags = []
        if version >= 10 and response.node_endpoints != w.defaults(type(response))["node_endpoints"]:
            tags.append(w.tagged(0, w.node_endpoints(response.node_endpoints)))
        out += w.tag_section(tags)
    return [bytes(out)]


def _partition(out: bytearray, partition: Any, version: int, flexible: bool) -> None:
    append_time = w.epoch_millis(partition.log_append_time)
    if version >= 5:
        out += _PARTITION_HEAD_V5.pack(
            partition.index,
            partition.error_code,
            partition.base_offset,
            append_time,
            partition.log_start_offset,
        )
    else:
        out += _PARTITION_HEAD.pack(partition.index, partition.error_code, partition.base_offset, append_time)
    if version >= 8:
        out += w.array_length(len(partition.record_errors), flexible)
        for record_error in partition.record_errors:
            out += w.INT32.pack(record_error.batch_index)
            out += w.string(record_error.batch_index_error_message, flexible)
            if flexible:
                out += w.NO_TAGS
        out += w.string(partition.error_message, flexible)
    if flexible:
        tags = []
        leader = getattr(partition, "current_leader", None)
        default = w.defaults(type(partition)).get("current_leader")
        if leader is not None and leader is not default and leader != default:
            tags.append(w.tagged(0, _LEADER.pack(leader.leader_id, leader.leader_epoch) + w.NO_TAGS))
        out += w.tag_section(tags)
