"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidelog.broker.authz import Op, authorize_cluster, denied_topics
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.handlers.common import check_leader_epoch, partition_log
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.headers import RequestHeader

log = logging.getLogger(__name__)

LIST_OFFSETS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 2, 21, 23

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6


def _per_partition(
    topics: Any, topic_attr: str, part_attr: str, handle: Callable[[str, Any], Any], make_topic: Callable[[str, tuple[Any, ...]], Any]
) -> tuple[Any, ...]:
    out = []
    for topic in topics:
        name = getattr(topic, topic_attr)
        out.append(make_topic(name, tuple(handle(name, p) for p in getattr(topic, part_attr))))
    return tuple(out)


def _guarded(fn: Callable[[], Any], on_error: Callable[[ErrorCode], Any], what: str) -> Any:
    try:
        return fn()
    except KafkaError as exc:
        return on_error(exc.code)
    except Exception:
        log.exception("%s failed", what)
        return on_error(ErrorCode.UNKNOWN_SERVER_ERROR)


async def list_offsets(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(LIST_OFFSETS, header.api_version)
    read_committed = getattr(request, "isolation_level", 0) == 1
    denied = denied_topics(ctx, conn, (t.name for t in request.topics), Op.DESCRIBE)

    def one(topic: str, p: Any) -> Any:
        def answer(error: ErrorCode, timestamp: int = -1, offset: int = -1, epoch: int = -1) -> Any:
            return b.make(
                "ListOffsetsPartitionResponse",
                partition_index=p.partition_index,
                error_code=error,
                timestamp=timestamp,
                offset=offset,
                leader_epoch=epoch,
            )

        def lookup() -> Any:
            if topic in denied:
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            plog = partition_log(ctx, topic, p.partition_index)
            check_leader_epoch(ctx, topic, p.partition_index, getattr(p, "current_leader_epoch", -1))
            epoch = ctx.image.topics[topic].partitions[p.partition_index].leader_epoch
            ts = p.timestamp
            if ts == LATEST:
                end = plog.last_stable_offset if read_committed else plog.high_watermark
                return answer(ErrorCode.NONE, -1, end, epoch)
            if ts in (EARLIEST, EARLIEST_LOCAL):
                return answer(ErrorCode.NONE, -1, plog.log_start_offset, epoch)
            if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
                return answer(ErrorCode.NONE, -1, -1, -1)
            found = plog.max_timestamp_offset() if ts == MAX_TIMESTAMP else plog.offset_for_timestamp(ts)
            if found is None:
                return answer(ErrorCode.NONE)
            offset, timestamp, found_epoch = found
            limit = plog.last_stable_offset if read_committed else plog.high_watermark
            if offset >= limit:
                return answer(ErrorCode.NONE)
            return answer(ErrorCode.NONE, timestamp, offset, found_epoch)

        return _guarded(lookup, answer, f"ListOffsets {topic}-{p.partition_index}")

    topics = _per_partition(
        request.topics, "name", "partitions", one,
        lambda name, parts: b.make("ListOffsetsTopicResponse", name=name, partitions=parts),
    )
    return b.make("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=topics)


async def offset_for_leader_epoch(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(OFFSET_FOR_LEADER_EPOCH, header.api_version)
    if getattr(request, "replica_id", -1) >= 0:
        cluster_denied = not authorize_cluster(ctx, conn, Op.CLUSTER_ACTION)
        denied = frozenset(t.topic for t in request.topics) if cluster_denied else frozenset()
        refusal = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    else:
        denied = denied_topics(ctx, conn, (t.topic for t in request.topics), Op.DESCRIBE)
        refusal = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def one(topic: str, p: Any) -> Any:
        def answer(error: ErrorCode, epoch: int = -1, end_offset: int = -1) -> Any:
            return b.make("EpochEndOffset", error_code=error, partition=p.partition, leader_epoch=epoch, end_offset=end_offset)

        def lookup() -> Any:
            if topic in denied:
                raise KafkaError(refusal)
            plog = partition_log(ctx, topic, p.partition)
            check_leader_epoch(ctx, topic, p.partition, getattr(p, "current_leader_epoch", -1))
            epoch, end_offset = plog.end_offset_for_epoch(p.leader_epoch)
            return answer(ErrorCode.NONE, epoch, end_offset)

        return _guarded(lookup, answer, f"OffsetForLeaderEpoch {topic}-{p.partition}")

    topics = _per_partition(
        request.topics, "topic", "partitions", one,
        lambda name, parts: b.make("OffsetForLeaderTopicResult", topic=name, partitions=parts),
    )
    return b.make("OffsetForLeaderEpochResponse", throttle_time=NO_THROTTLE, topics=topics)


async def delete_records(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DELETE_RECORDS, header.api_version)
    denied = denied_topics(ctx, conn, (t.name for t in request.topics), Op.DELETE)

    def one(topic: str, p: Any) -> Any:
        def answer(error: ErrorCode, low_watermark: int = -1) -> Any:
            return b.make(
                "DeleteRecordsPartitionResult", partition_index=p.partition_index, low_watermark=low_watermark, error_code=error
            )

        def delete() -> Any:
            if topic in denied:
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            plog = partition_log(ctx, topic, p.partition_index)
            policy = ctx.topics.resolved_config(ctx.image.topics[topic]).get("cleanup.policy")
            if not isinstance(policy, list) or "delete" not in policy:
                raise KafkaError(ErrorCode.POLICY_VIOLATION)
            offset = plog.high_watermark if p.offset == -1 else p.offset
            if offset < 0 or offset > plog.high_watermark:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
            return answer(ErrorCode.NONE, plog.delete_records_before(offset))

        return _guarded(delete, answer, f"DeleteRecords {topic}-{p.partition_index}")

    topics = _per_partition(
        request.topics, "name", "partitions", one,
        lambda name, parts: b.make("DeleteRecordsTopicResult", name=name, partitions=parts),
    )
    return b.make("DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=topics)
