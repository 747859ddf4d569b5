"""ProduceResponse v3-13.

Layout by version: topics (name, or topic_id from v13) → partitions (index, error_code,
base_offset, log_append_time; log_start_offset from v5; record_errors and error_message from v8;
tagged current_leader from v10) → throttle_time; tagged node_endpoints from v10. Flexible from v9.

Two inputs, the same bytes: a kio ``ProduceResponse`` (any version), or a ``ProduceResult``, the
light form the broker's Produce handler builds (plain tuples, no kio dataclasses: building three of
those per request cost more than encoding them). A ``ProduceResult`` has no tagged fields (no
current leader, no node endpoints: a single node never redirects a producer).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from tidelog.protocol.encoders import _wire as w

_PARTITION_HEAD = struct.Struct(">ihqq")
_PARTITION_HEAD_V5 = struct.Struct(">ihqqq")
_LEADER = struct.Struct(">ii")
PRODUCE = 0


class ProducePartitionResult(NamedTuple):
    """One partition of a ``ProduceResult``."""

    partition: int  # kio calls it index (a NamedTuple field may not: tuple.index)
    error_code: int
    base_offset: int
    log_append_time: int  # epoch milliseconds; -1: the topic uses CreateTime
    log_start_offset: int
    record_errors: tuple[tuple[int, str | None], ...] = ()  # (batch index, message), KIP-467
    error_message: str | None = None


class ProduceResult:
    """A ProduceResponse without kio objects: ``topics`` holds (name, topic id, partitions)."""

    __api_key__ = PRODUCE
    __slots__ = ("__version__", "throttle_ms", "topics")

    def __init__(
        self, version: int, topics: list[tuple[str, uuid.UUID | None, list[ProducePartitionResult]]],
        throttle_ms: int = 0,
    ) -> None:
        self.__version__ = version
        self.topics = topics
        self.throttle_ms = throttle_ms


def encode_produce_response(response: Any) -> list[bytes | memoryview]:
    version = response.__version__
    flexible = version >= 9
    if type(response) is ProduceResult:
        out = bytearray(w.array_length(len(response.topics), flexible))
        for name, topic_id, partitions in response.topics:
            _topic_head(out, name, topic_id, len(partitions), version, flexible)
            for partition in partitions:
                _partition(out, partition, version, flexible)
                if flexible:
                    out += w.NO_TAGS
            if flexible:
                out += w.NO_TAGS
        out += w.INT32.pack(response.throttle_ms)
        if flexible:
            out += w.NO_TAGS
        return [bytes(out)]
    out = bytearray(w.array_length(len(response.responses), flexible))
    for topic in response.responses:
        _topic_head(out, getattr(topic, "name", ""), getattr(topic, "topic_id", None),
                    len(topic.partition_responses), version, flexible)
        for partition in topic.partition_responses:
            _partition(out, _from_kio(partition, version), version, flexible)
            if flexible:
                out += _leader_tags(partition)
        if flexible:
            out += w.NO_TAGS
    out += w.INT32.pack(w.millis(response.throttle_time))
    if flexible:
        tags = []
        if version >= 10 and response.node_endpoints != w.defaults(type(response))["node_endpoints"]:
            tags.append(w.tagged(0, w.node_endpoints(response.node_endpoints)))
        out += w.tag_section(tags)
    return [bytes(out)]


def _topic_head(out: bytearray, name: str, topic_id: uuid.UUID | None, count: int, version: int, flexible: bool) -> None:
    out += w.uuid_bytes(topic_id) if version >= 13 else w.string(name, flexible)
    out += w.array_length(count, flexible)


def _from_kio(partition: Any, version: int) -> ProducePartitionResult:
    errors: Sequence[Any] = partition.record_errors if version >= 8 else ()
    return ProducePartitionResult(
        partition.index,
        partition.error_code,
        partition.base_offset,
        w.epoch_millis(partition.log_append_time),
        partition.log_start_offset if version >= 5 else -1,
        tuple((e.batch_index, e.batch_index_error_message) for e in errors),
        partition.error_message if version >= 8 else None,
    )


def _partition(out: bytearray, partition: ProducePartitionResult, version: int, flexible: bool) -> None:
    """One partition, without its tagged fields."""
    if version >= 5:
        out += _PARTITION_HEAD_V5.pack(
            partition.partition,
            partition.error_code,
            partition.base_offset,
            partition.log_append_time,
            partition.log_start_offset,
        )
    else:
        out += _PARTITION_HEAD.pack(partition.partition, partition.error_code, partition.base_offset,
                                    partition.log_append_time)
    if version >= 8:
        out += w.array_length(len(partition.record_errors), flexible)
        for batch_index, message in partition.record_errors:
            out += w.INT32.pack(batch_index)
            out += w.string(message, flexible)
            if flexible:
                out += w.NO_TAGS
        out += w.string(partition.error_message, flexible)


def _leader_tags(partition: Any) -> bytes:
    """A kio partition's tagged fields: current_leader (v10+) when it is not the default."""
    tags = []
    leader = getattr(partition, "current_leader", None)
    default = w.defaults(type(partition)).get("current_leader")
    if leader is not None and leader is not default and leader != default:
        tags.append(w.tagged(0, _LEADER.pack(leader.leader_id, leader.leader_epoch) + w.NO_TAGS))
    return w.tag_section(tags)
