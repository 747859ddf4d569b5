"""Produce and InitProducerId.

Produce appends each partition's batches as received (validated, offsets assigned in place by the
storage engine), flushes off the event loop when ``flush.messages``/``flush.ms`` ask for it, wakes the
fetches waiting on the partition, and answers one error code per partition: a bad partition never
fails its neighbours. On this single node acks=all is satisfied as soon as the leader has appended
(the in-sync replica set is the leader alone); acks=0 gets no response at all.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from tidelog.broker.authz import (
    CLUSTER,
    CLUSTER_NAME,
    TOPIC,
    TRANSACTIONAL_ID,
    Action,
    Op,
    authorize,
    authorize_any_of,
)
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.handlers.common import partition_log
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.headers import RequestHeader

log = logging.getLogger(__name__)

PRODUCE, INIT_PRODUCER_ID = 0, 22
VALID_ACKS = (-1, 0, 1)


def _timestamp(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms // 1000, datetime.UTC) + datetime.timedelta(milliseconds=ms % 1000)


async def produce(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(PRODUCE, header.api_version)
    acks = request.acks
    loop = asyncio.get_running_loop()
    to_flush = []
    topics = []
    transactional_id = getattr(request, "transactional_id", None)
    txn_denied = transactional_id is not None and not authorize(ctx, conn, Op.WRITE, TRANSACTIONAL_ID, transactional_id)
    for topic_data in request.topic_data:
        partitions = []
        denied = txn_denied or not authorize(ctx, conn, Op.WRITE, TOPIC, topic_data.name)
        for pdata in topic_data.partition_data:
            error, base_offset, append_time, start_offset, message = ErrorCode.NONE, -1, -1, -1, None
            try:
                if denied:
                    raise KafkaError(
                        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    )
                if acks not in VALID_ACKS:
                    raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
                plog = partition_log(ctx, topic_data.name, pdata.index)
                if pdata.records is None:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "records are null")
                leader_epoch = ctx.image.topics[topic_data.name].partitions[pdata.index].leader_epoch
                info = plog.append_as_leader(pdata.records, leader_epoch=leader_epoch, now_ms=ctx.now_ms())
                base_offset, append_time, start_offset = info.first_offset, info.log_append_time, info.log_start_offset
                if info.needs_flush:
                    to_flush.append(plog)
                if not info.duplicate:
                    ctx.purgatory.notify((topic_data.name, pdata.index))
                    ctx.metrics.produced(topic_data.name, len(pdata.records), info.record_count)
            except KafkaError as exc:
                ctx.metrics.produce_failed(topic_data.name)
                error, message = exc.code, exc.message or None
                if error is ErrorCode.KAFKA_STORAGE_ERROR:
                    log.error("produce to %s-%d failed: %s", topic_data.name, pdata.index, exc)
            except Exception:
                ctx.metrics.produce_failed(topic_data.name)
                log.exception("produce to %s-%d from %s failed", topic_data.name, pdata.index, conn.peer)
                error = ErrorCode.UNKNOWN_SERVER_ERROR
            partitions.append(
                b.make(
                    "PartitionProduceResponse",
                    index=pdata.index,
                    error_code=error,
                    base_offset=base_offset,
                    log_append_time=_timestamp(append_time),
                    log_start_offset=start_offset,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(b.make("TopicProduceResponse", name=topic_data.name, partition_responses=tuple(partitions)))
    for plog in to_flush:
        # fsync runs on a worker thread: the event loop keeps serving other connections meanwhile.
        await loop.run_in_executor(None, plog.flush)
    if acks == 0:
        return None
    return b.make("ProduceResponse", responses=tuple(topics), throttle_time=NO_THROTTLE)


async def init_producer_id(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(INIT_PRODUCER_ID, header.api_version)
    if request.transactional_id is not None:
        # Transactions are a separate piece of work (see docs/status.md); answer like a broker whose
        # transaction coordinator cannot serve this id rather than pretend.
        return b.make(
            "InitProducerIdResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    # Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic.
    if not authorize_any_of(ctx, conn, Action(Op.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME), Action(Op.WRITE, TOPIC, None)):
        return b.make(
            "InitProducerIdResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    assert ctx.producer_ids is not None
    producer_id = ctx.producer_ids.allocate()
    return b.make(
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.NONE,
        producer_id=producer_id,
        producer_epoch=0,
    )
