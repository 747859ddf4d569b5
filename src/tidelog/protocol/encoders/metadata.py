"""MetadataResponse v4-13.

Layout by version: throttle_time; brokers (node_id, host, port, rack); cluster_id; controller_id;
topics (error_code, name (nullable from v12), topic_id from v10, is_internal, partitions
(error_code, partition_index, leader_id, leader_epoch from v7, replica_nodes, isr_nodes,
offline_replicas from v5), topic_authorized_operations from v8); cluster_authorized_operations
in v8-10 only; top-level error_code from v13. Flexible from v9. No tagged fields in any version.
"""

from __future__ import annotations

import struct
from typing import Any

from tidelog.protocol.encoders import _wire as w

_PARTITION_V4 = struct.Struct(">hii")
_PARTITION_V7 = struct.Struct(">hiii")


def encode_metadata_response(response: Any) -> list[bytes | memoryview]:
    version = response.__version__
    flexible = version >= 9
    out = bytearray(w.INT32.pack(w.millis(response.throttle_time)))
    out += w.array_length(len(response.brokers), flexible)
    for broker in response.brokers:
        out += w.INT32.pack(broker.node_id) + w.string(broker.host, flexible) + w.INT32.pack(broker.port)
        out += w.string(broker.rack, flexible)
        if flexible:
            out += w.NO_TAGS
    out += w.string(response.cluster_id, flexible) + w.INT32.pack(response.controller_id)
    out += w.array_length(len(response.topics), flexible)
    for topic in response.topics:
        _topic(out, topic, version, flexible)
    if 8 <= version <= 10:
        out += w.INT32.pack(response.cluster_authorized_operations)
    if version >= 13:
        out += w.INT16.pack(response.error_code)
    if flexible:
        out += w.NO_TAGS
    return [bytes(out)]


def _topic(out: bytearray, topic: Any, version: int, flexible: bool) -> None:
    out += w.INT16.pack(topic.error_code) + w.string(topic.name, flexible)
    if version >= 10:
        out += w.uuid_bytes(topic.topic_id)
    out += b"\x01" if topic.is_internal else b"\x00"
    out += w.array_length(len(topic.partitions), flexible)
    for partition in topic.partitions:
        if version >= 7:
            out += _PARTITION_V7.pack(
                partition.error_code, partition.partition_index, partition.leader_id, partition.leader_epoch
            )
        else:
            out += _PARTITION_V4.pack(partition.error_code, partition.partition_index, partition.leader_id)
        out += w.int32_array(partition.replica_nodes, flexible)
        out += w.int32_array(partition.isr_nodes, flexible)
        if version >= 5:
            out += w.int32_array(partition.offline_replicas, flexible)
        if flexible:
            out += w.NO_TAGS
    if version >= 8:
        out += w.INT32.pack(topic.topic_authorized_operations)
    if flexible:
        out += w.NO_TAGS
