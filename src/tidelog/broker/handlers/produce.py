"""Produce and InitProducerId.

Produce appends each partition's batches as received (validated, offsets assigned in place by the
storage engine), rolls a full segment on its log dir's pool before appending (the partition's appends
wait for its roll, nobody else does), flushes off the event loop when ``flush.messages``/``flush.ms``
ask for it, wakes the fetches waiting on the partition, and answers one error code per partition: a
bad partition never fails its neighbours. On a single node acks=all is satisfied as soon as the leader has appended
(the in-sync replica set is the leader alone); acks=0 gets no response at all.

In a cluster (``ctx.replicas`` set) a partition is written only by its current leader
(NOT_LEADER_OR_FOLLOWER otherwise, and while the broker's metadata session is in doubt), acks=all is
refused with NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than
``min.insync.replicas``, and its answer waits until the high watermark passes the batch: every ISR
member holds it (REQUEST_TIMED_OUT after the request's ``timeout_ms``;
NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum meanwhile).

A topic whose ``mirror.source`` is set is written only by that mirror link's MirrorProduce
(handlers/mirror_produce.py): Produce to it is refused with INVALID_REQUEST and a message saying so.
"""

from __future__ import annotations

import asyncio
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
from tidelog.broker.handlers import inflation, transactions
from tidelog.broker.handlers.common import partition_log
from tidelog.broker.handlers.mirror_produce import MIRROR_SOURCE, mirror_link_of
from tidelog.broker.quota_runtime import PAUSED_FETCH_THROTTLE_MS
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode, KafkaError, RecordValidationError
from tidelog.protocol.encoders.produce import ProducePartitionResult, ProduceResult
from tidelog.protocol.headers import RequestHeader
from tidelog.protocol.records import HEADER_SIZE, BatchHeader
from tidelog.storage.log import PartitionLog, PreparedAppend

log = logging.getLogger(__name__)

INIT_PRODUCER_ID = 22
VALID_ACKS = (-1, 0, 1)
MAGIC_OFFSET, MAGIC_V2 = 16, 2
# Errors Kafka answers without the partition's log start offset (-1): those raised before the log is
# consulted or by its framing checks (ReplicaManager's "unknown log append info" cases).
NO_LOG_START = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUIRED_ACKS,
})

SEQUENCE_ERRORS = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH,
                             ErrorCode.UNKNOWN_PRODUCER_ID})


def _append_one(
    ctx: BrokerContext, conn: ConnectionInfo, topic: str, pdata: Any, acks: int, denied: ErrorCode | KafkaError | None,
    to_flush: list[PartitionLog], woken: list[bool], replicated: list[tuple[int, asyncio.Future[ErrorCode]]],
    prepared: PreparedAppend | KafkaError | None = None,
) -> ProducePartitionResult:
    """Append one partition's batches; every failure becomes that partition's error code alone.

    In a cluster with acks=all, ``replicated`` gets (partition, the watch of its high watermark),
    registered here, in the append's turn of the event loop (replica_manager.py says why)."""
    plog: PartitionLog | None = None
    message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()
    try:
        if denied is not None:
            raise denied if isinstance(denied, KafkaError) else KafkaError(denied)
        if acks not in VALID_ACKS:
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
        records = pdata.records
        if records is not None and len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] != MAGIC_V2:
            # Kafka refuses old message formats for the whole partition before any log work.
            ctx.metrics.produce_failed(topic)
            return ProducePartitionResult(
                pdata.index, ErrorCode.INVALID_RECORD, -1, -1, -1, (),
                f"Produce requests with version >= 3 may only contain record batches with magic 2, not {records[MAGIC_OFFSET]}",
            )
        plog = partition_log(ctx, topic, pdata.index)
        if records is None:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "records are null")
        replicas = ctx.replicas
        if replicas is None:
            leader_epoch = ctx.image.topics[topic].partitions[pdata.index].leader_epoch
        else:
            min_insync = 1
            if acks == -1:  # resolving the topic's settings costs a dict per partition: only when it matters
                value = ctx.topics.resolved_config(ctx.image.topics[topic]).get("min.insync.replicas")
                min_insync = value if isinstance(value, int) else 1
            state = replicas.check_writable((topic, pdata.index), acks, min_insync)
            leader_epoch = state.leader_epoch
        if isinstance(prepared, KafkaError):
            raise prepared
        info = plog.append_as_leader(prepared or records, leader_epoch=leader_epoch, now_ms=ctx.now_ms())
        if replicas is not None:
            replicas.appended((topic, pdata.index), plog)
            if acks == -1:
                replicated.append((pdata.index, replicas.watch_high_watermark((topic, pdata.index),
                                                                              info.last_offset + 1)))
        if info.needs_flush:
            to_flush.append(plog)
        if not info.duplicate:
            if ctx.purgatory.notify((topic, pdata.index)):
                woken[0] = True
            ctx.metrics.produced(topic, len(pdata.records), info.record_count)
        # A retried batch is answered with its original timestamp, as Kafka does.
        append_time = info.max_timestamp if info.duplicate else info.log_append_time
        return ProducePartitionResult(pdata.index, ErrorCode.NONE, info.first_offset, append_time, info.log_start_offset)
    except KafkaError as exc:
        error, message = exc.code, exc.message or None
        if isinstance(exc, RecordValidationError):
            # KIP-467: every failing record by its index in the batch; batch-level errors name none
            record_errors = tuple(exc.record_errors)
        if exc.code is ErrorCode.KAFKA_STORAGE_ERROR:
            log.error("produce to %s-%d failed: %s", topic, pdata.index, exc)
        elif exc.code in SEQUENCE_ERRORS and plog is not None:
            # rare, and what an idempotent producer answers with an epoch bump (or a fatal error):
            # kept in the log with where the partition stood, to tell a client's gap from ours
            log.warning("produce to %s-%d from %s refused: %s: %s (log end %d, high watermark %d)", topic,
                        pdata.index, conn.peer, exc.code.name, exc.message, plog.log_end_offset, plog.high_watermark)
    except Exception:
        log.exception("produce to %s-%d from %s failed", topic, pdata.index, conn.peer)
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    ctx.metrics.produce_failed(topic)
    log_start = -1
    if plog is not None and error not in NO_LOG_START:
        log_start = plog.log_start_offset
    return ProducePartitionResult(pdata.index, error, -1, -1, log_start, record_errors, message)


async def _roll_first(
    ctx: BrokerContext, topic: str, pdata: Any, prepared: PreparedAppend | KafkaError | None,
) -> PreparedAppend | KafkaError | None:
    """Roll the partition on its log dir's pool when this append would roll it, or wait for its roll
    in flight (disk_pools.py): the append that follows, with no await in between, then finds a fresh
    segment and makes no file on the loop. The roll's error becomes the append's."""
    if isinstance(prepared, KafkaError) or pdata.records is None or ctx.disk is None:
        return prepared
    try:
        plog = partition_log(ctx, topic, pdata.index)
    except KafkaError:
        return prepared  # the append answers the lookup's error
    try:
        await ctx.disk.roll_before_append(plog, prepared or pdata.records, ctx.now_ms())
    except KafkaError as exc:
        return exc
    except Exception:  # a fault of the roll's own: the append rolls inline, as before
        log.exception("rolling %s-%d ahead of an append failed", topic, pdata.index)
    return prepared


def _unverified_txn(ctx: BrokerContext, transactional_id: str, topic: str, pdata: Any) -> ErrorCode | None:
    """A transactional batch must come from the id's current producer epoch, to a partition added to
    its ongoing transaction (Kafka 4's verification): the error otherwise, None when it may go on."""
    records = pdata.records
    runtime = ctx.transactions
    if runtime is None or records is None or len(records) < HEADER_SIZE:
        return None
    batch = BatchHeader.parse(records)
    if not batch.is_transactional:
        return None
    error = runtime.verify_produce(transactional_id, batch.producer_id, batch.producer_epoch, topic, pdata.index)
    return None if error is ErrorCode.NONE else error


def _topic_name(ctx: BrokerContext, topic_data: Any) -> str | None:
    """The topic's name: given up to v12, looked up by topic id from v13 (None when unknown)."""
    name: str | None = getattr(topic_data, "name", None)
    if name is not None:
        return name
    found = ctx.image.topic_by_id(topic_data.topic_id)
    return found.name if found is not None else None


async def produce(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    acks = request.acks
    quotas = ctx.quotas
    paused = quotas is not None and quotas.paused(ctx.image, conn.principal, conn.client_id)
    if paused and quotas is not None and not await quotas.hold_while_paused(lambda: ctx.image, conn.principal, conn.client_id):
        return _paused_answer(conn, header, request)
    to_flush: list[PartitionLog] = []
    woken = [False]  # set when an append woke a waiting fetch
    topics: list[tuple[str, Any, list[ProducePartitionResult]]] = []
    waits: list[tuple[str, list[ProducePartitionResult], list[tuple[int, asyncio.Future[ErrorCode]]]]] = []
    transactional_id = getattr(request, "transactional_id", None)
    txn_denied = transactional_id is not None and not authorize(ctx, conn, Op.WRITE, TRANSACTIONAL_ID, transactional_id)
    for topic_data in request.topic_data:
        name = _topic_name(ctx, topic_data)
        denied: ErrorCode | KafkaError | None = None
        if txn_denied:
            denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif name is None:
            denied = ErrorCode.UNKNOWN_TOPIC_ID
        elif not authorize(ctx, conn, Op.WRITE, TOPIC, name):
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif (link := mirror_link_of(ctx, name)) is not None:
            denied = KafkaError(ErrorCode.INVALID_REQUEST,
                                f"topic {name} is a mirror destination written only by mirror link {link} "
                                f"({MIRROR_SOURCE}); remove {MIRROR_SOURCE} to produce to it")
        partitions = []
        replicated: list[tuple[int, asyncio.Future[ErrorCode]]] = []
        for pdata in topic_data.partition_data:
            refused: ErrorCode | KafkaError | None = denied
            if transactional_id is not None and refused is None:
                refused = _unverified_txn(ctx, transactional_id, name or "", pdata)
            # Batches that must be inflated are validated on a worker thread first (inflation.py).
            prepared = (await inflation.prepare(ctx, name, pdata)
                        if refused is None and name and acks in VALID_ACKS else None)
            if ctx.disk is not None and refused is None and name and acks in VALID_ACKS:
                prepared = await _roll_first(ctx, name, pdata, prepared)
            partitions.append(_append_one(ctx, conn, name or "", pdata, acks, refused, to_flush, woken, replicated, prepared))
        topics.append((name or "", getattr(topic_data, "topic_id", None), partitions))
        if replicated:
            waits.append((name or "", partitions, replicated))
    loop = asyncio.get_running_loop()
    for plog in to_flush:
        # fsync runs on a worker thread: the event loop keeps serving other connections meanwhile. With
        # disk pools, on the partition's log dir's own threads (a slow connection's on the slow lane).
        if ctx.disk is not None:
            await ctx.disk.flush(plog, conn.score.slow)
        else:
            await loop.run_in_executor(None, plog.flush)
    if woken[0]:
        # Let the woken fetches answer their consumers before this producer hears back: end-to-end
        # latency is the consumer's, and the producer's ack loses only one turn of the event loop.
        await asyncio.sleep(0)
    if waits:
        await _wait_for_replication(ctx, waits, request.timeout.total_seconds() * 1000)
    _record_quota(ctx, conn)
    if acks == 0:
        return None
    return ProduceResult(header.api_version, topics, conn.throttle_ms)


def _paused_answer(conn: ConnectionInfo, header: RequestHeader, request: Any) -> ProduceResult | None:
    """The client's tier stayed paused for quota.tier.pause.hold.ms: nothing appended, every partition
    REQUEST_TIMED_OUT (retriable: the client sends the same batches again), a second's throttle."""
    conn.throttle_ms = max(conn.throttle_ms, PAUSED_FETCH_THROTTLE_MS)
    if request.acks == 0:
        return None
    topics = [
        (getattr(t, "name", "") or "", getattr(t, "topic_id", None),
         [ProducePartitionResult(p.index, ErrorCode.REQUEST_TIMED_OUT, -1, -1, -1) for p in t.partition_data])
        for t in request.topic_data
    ]
    return ProduceResult(header.api_version, topics, conn.throttle_ms)


def _record_quota(ctx: BrokerContext, conn: ConnectionInfo) -> None:
    """The request's size against the client's producer_byte_rate (Kafka counts the whole request)."""
    if ctx.quotas is None or conn.request_timer is None:
        return
    throttle = ctx.quotas.produced(ctx.image, conn.principal, conn.client_id, conn.request_timer.request_bytes)
    conn.throttle_ms = max(conn.throttle_ms, throttle)


async def _wait_for_replication(
    ctx: BrokerContext, waits: list[tuple[str, list[ProducePartitionResult], list[tuple[int, asyncio.Future[ErrorCode]]]]],
    timeout_ms: float,
) -> None:
    """acks=all in a cluster: each appended partition's answer waits for its high watermark."""
    replicas = ctx.replicas
    assert replicas is not None
    pending = [
        (results, index, replicas.await_high_watermark(watched, int(timeout_ms)))
        for _, results, replicated in waits for index, watched in replicated
    ]
    outcomes = await asyncio.gather(*(wait for _, _, wait in pending))
    for (results, index, _), error in zip(pending, outcomes, strict=True):
        if error is ErrorCode.NONE:
            continue
        for i, result in enumerate(results):
            if result.partition == index and result.error_code == ErrorCode.NONE:
                results[i] = result._replace(error_code=error, base_offset=-1, log_append_time=-1, log_start_offset=-1)


async def init_producer_id(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(INIT_PRODUCER_ID, header.api_version)
    if request.transactional_id is not None:
        return await transactions.init_producer_id(ctx, conn, header, request)  # the transaction coordinator
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
    producer_id = await ctx.producer_ids.allocate()
    return b.make(
        "InitProducerIdResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.NONE,
        producer_id=producer_id,
        producer_epoch=0,
    )
