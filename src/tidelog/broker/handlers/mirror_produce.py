"""MirrorProduce (tidelog's key 32001): a mirror link appends batches at their source offsets.

The write path of ``tidelog mirror`` with ``offsets = "preserve"`` (docs/mirror.md). The request and
its wire format are in ``protocol/mirror_produce.py``; which batches are written, acknowledged as
duplicates or refused is decided by ``storage/source_offsets.py`` under the log's lock, so two
requests never race between the decision and the write.

Who may write, checked per partition in this order (the first failure is the partition's answer):

1. acks is 1 or -1 (INVALID_REQUIRED_ACKS otherwise: the mirror needs the log end in the answer);
2. the topic exists (UNKNOWN_TOPIC_OR_PARTITION);
3. the principal holds **Alter on the topic** (TOPIC_AUTHORIZATION_FAILED). Alter, not Write: an
   ordinary producer's Write does not let it rewrite offsets, and a mirror needs Alter on its
   destination topics anyway to keep their configs in step. Not ClusterAction, which would hand the
   mirror every inter-broker right (markers, replica fetches);
4. the topic's ``mirror.source`` names this request's link (INVALID_REQUEST otherwise, with a
   message): a topic is written at source offsets only when its owner marked it so, and by one link
   only. Ordinary Produce to a topic with ``mirror.source`` is refused in handlers/produce.py, so
   nothing else can take an offset the source will need;
5. this broker leads the partition in its current epoch (NOT_LEADER_OR_FOLLOWER), and with acks=-1
   the ISR meets ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS), exactly as for Produce.

The append is a follower's (``PartitionLog.append_at_source_offsets``): no sequence checks, producer
state, transaction index and last stable offset kept from every batch, control batches included,
and each batch stamped with this leader's epoch. With acks=-1 the answer waits for the high watermark
to pass the request's last batch, duplicates included (a retry must not be acknowledged before the
first attempt's copy is replicated). Null records only ask for the partition's offsets. The
destination's log start follows the source's (``log_start_offset`` in the request), as a follower's
follows its leader's: DeleteRecords up to it, never past the high watermark.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from kio.static.primitive import i32Timedelta

from tidelog.broker.authz import TOPIC, Op, authorize
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.handlers.common import partition_log
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.headers import RequestHeader
from tidelog.protocol.mirror_produce import (
    MirrorPartitionResponse,
    MirrorProduceResponse,
    MirrorTopicResponse,
    partition_response,
)
from tidelog.storage.log import PartitionLog

log = logging.getLogger(__name__)
MIRROR_SOURCE = "mirror.source"


@dataclass
class _Outcome:
    index: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    plog: PartitionLog | None = None
    required: int = -1  # acks=-1: the high watermark this partition's answer waits for
    watched: asyncio.Future[ErrorCode] | None = None  # its watch, registered in the append's turn
    duplicates: int = 0


@dataclass
class _Request:
    link: str
    acks: int
    to_flush: list[PartitionLog] = field(default_factory=list)


def mirror_link_of(ctx: BrokerContext, topic: str) -> str | None:
    """The link named by the topic's ``mirror.source`` override (None: an ordinary topic)."""
    image = ctx.image.topics.get(topic)
    value = image.configs.get(MIRROR_SOURCE) if image is not None else None
    return value if isinstance(value, str) and value else None


def _check_topic(ctx: BrokerContext, conn: ConnectionInfo, topic: str, link: str) -> None:
    if topic not in ctx.image.topics:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not authorize(ctx, conn, Op.ALTER, TOPIC, topic):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                         f"MirrorProduce needs Alter on topic {topic}")
    owner = mirror_link_of(ctx, topic)
    if owner is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"topic {topic} is not a mirror destination: set {MIRROR_SOURCE}={link} on it first")
    if owner != link:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"topic {topic} is written by mirror link {owner}, not {link}")


def _append(ctx: BrokerContext, conn: ConnectionInfo, req: _Request, topic: str, pdata: Any) -> _Outcome:
    out = _Outcome(pdata.index)
    try:
        if req.acks not in (1, -1):
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, "MirrorProduce takes acks 1 or -1")
        _check_topic(ctx, conn, topic, req.link)
        plog = partition_log(ctx, topic, pdata.index)
        replicas = ctx.replicas
        if replicas is None:
            leader_epoch = ctx.image.topics[topic].partitions[pdata.index].leader_epoch
        else:
            min_insync = 1
            if req.acks == -1:
                value = ctx.topics.resolved_config(ctx.image.topics[topic]).get("min.insync.replicas")
                min_insync = value if isinstance(value, int) else 1
            leader_epoch = replicas.check_writable((topic, pdata.index), req.acks, min_insync).leader_epoch
        out.plog = plog
        if pdata.records is None:
            return out
        source_start = pdata.log_start_offset
        info, out.duplicates = plog.append_at_source_offsets(pdata.records, leader_epoch=leader_epoch,
                                                             now_ms=ctx.now_ms(), source_log_start=source_start)
        if not info.duplicate:
            if replicas is not None:
                replicas.appended((topic, pdata.index), plog)
            if info.needs_flush:
                req.to_flush.append(plog)
            ctx.purgatory.notify((topic, pdata.index))
            ctx.metrics.produced(topic, len(pdata.records), info.record_count)
        if req.acks == -1 and replicas is not None:
            out.required = min(info.last_offset + 1, plog.log_end_offset)
            out.watched = replicas.watch_high_watermark((topic, pdata.index), out.required)
        if plog.log_start_offset < source_start:
            # the source's retention or DeleteRecords moved its start: follow it, up to what is replicated
            plog.delete_records_before(min(source_start, plog.high_watermark))
    except KafkaError as exc:
        out.error, out.message = exc.code, exc.message or None
        if exc.code is ErrorCode.KAFKA_STORAGE_ERROR:
            log.error("mirror produce to %s-%d failed: %s", topic, pdata.index, exc)
    except Exception:
        log.exception("mirror produce to %s-%d from %s failed", topic, pdata.index, conn.peer)
        out.error = ErrorCode.UNKNOWN_SERVER_ERROR
    return out


def _answer(out: _Outcome) -> MirrorPartitionResponse:
    plog = out.plog
    if out.error is not ErrorCode.NONE and out.error not in (ErrorCode.INVALID_RECORD, ErrorCode.REQUEST_TIMED_OUT,
                                                             ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        plog = None  # refused before the log was reached: no offsets to report
    if plog is None:
        return partition_response(out.index, out.error, error_message=out.message)
    return partition_response(out.index, out.error, error_message=out.message, log_end_offset=plog.log_end_offset,
                              log_start_offset=plog.log_start_offset, high_watermark=plog.high_watermark,
                              duplicate_batches=out.duplicates)


async def mirror_produce(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    req = _Request(request.link, request.acks)
    outcomes = [(t.name, [_append(ctx, conn, req, t.name, p) for p in t.partitions]) for t in request.topics]
    loop = asyncio.get_running_loop()
    for plog in req.to_flush:
        await loop.run_in_executor(None, plog.flush)
    waits = [(topic, out) for topic, outs in outcomes for out in outs if out.watched is not None]
    if waits:
        assert ctx.replicas is not None
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        errors = await asyncio.gather(*(ctx.replicas.await_high_watermark(out.watched, timeout_ms)
                                        for _, out in waits if out.watched is not None))
        for (_, out), error in zip(waits, errors, strict=True):
            if error is not ErrorCode.NONE:
                out.error, out.message = error, f"high watermark did not reach {out.required} in time"
    topics = tuple(MirrorTopicResponse(name=topic, partitions=tuple(_answer(o) for o in outs))
                   for topic, outs in outcomes)
    return MirrorProduceResponse(throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=conn.throttle_ms)), topics=topics)
