"""Fetch: whole batches from the segment files, long-polled until ``min_bytes`` or ``max_wait_ms``.

The rules, Kafka's:

- Each partition returns at most ``partition_max_bytes`` and the response at most ``max_bytes``, except
  that the first partition with data always returns at least its first whole batch (KIP-74), so a
  batch larger than the limits never blocks a consumer.
- Reads stop at the high watermark (read_uncommitted) or the last stable offset (read_committed);
  read_committed responses list the aborted transactions overlapping the returned range.
- When fewer than ``min_bytes`` are available and no partition has an error, the fetch waits in the
  purgatory; an append to any of its partitions wakes it to read again. It answers when enough bytes
  are there or ``max_wait_ms`` has passed, never by polling.
- With a fetch session (KIP-227) an incremental response lists only partitions with news.
- Replication throttles (KIP-73, ``replication/quota.py``): while the leader's
  ``leader.replication.throttled.rate`` is exceeded, a follower outside the ISR gets no data for the
  partitions in ``leader.replication.throttled.replicas`` (the rest of its fetch is served); the bytes
  of listed partitions are recorded against the quota once the response is built.
- In a cluster only a partition's leader serves it (NOT_LEADER_OR_FOLLOWER elsewhere). A follower's
  fetch (``replica_id`` set) first reports the follower's log end offset (its fetch offset) to the
  replica manager, which may move the high watermark and the ISR; it then reads up to the log end,
  not the high watermark. A fetch from a broker that is not a replica, or with a stale or future
  leader epoch, is refused with Kafka's error and changes nothing.
- Nearest-replica reads (KIP-392), clusters only. A consumer's fetch of v11 or later may be served by
  a follower: it reads the follower's log up to the high watermark the follower last got from its
  leader (the last stable offset for read_committed), past the follower's log end it gets
  OFFSET_OUT_OF_RANGE (clients then go back to the leader), and a broker that neither leads nor
  follows the partition answers NOT_LEADER_OR_FOLLOWER, as do followers to fetches older than v11.
  The leader, when ``replica.selector.class`` is the rack-aware selector and the fetch carries a
  ``rack_id``, may answer with ``preferred_read_replica`` (an in-sync follower in that rack) and no
  records: the client fetches from there next. Such an answer never waits in the purgatory.

- Cold-read throttling (``broker/read_throttle.py``): a consumer's read of a partition whose cold
  reads are throttled (its log dir's disk is over its threshold and it is among the heaviest cold
  readers) gets no data when it is a cold read over the partition's rate, like a KIP-73 throttled
  partition; hot reads and other partitions are served. Every consumer read is counted cold or hot.
- Slow-request isolation (``broker/disk_pools.py``): a read that finds bytes runs on the loop only
  when it is hot (by the same estimate) and its log dir is not marked slow; otherwise the lookup and
  the ``pread`` of the bytes run on the dir's pool (a slow connection's on the slow fetch lane) and
  the response carries the bytes. Reads at the log end touch no file and never leave the loop.

Kafka sends the log slice up to the byte limit, whose last batch may be partial (clients drop it);
tidelog ends at the last whole batch, found from the offset index without walking the batches before
it (``storage.segment.LogSegment.read_range``): clients get no bytes they must throw away and fetch
them again.

Record bytes go out as they sit in the segment, with no per-record work: the response carries
their file ranges (``FileSlices``) and the response writer sends them with ``sendfile`` or one
``pread`` per range (``broker/response_writer.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.broker.authz import Op, authorize_cluster, denied_topics
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.disk_pools import DirState
from tidelog.broker.fetch_sessions import FetchContext, SessionPartition, TopicPartition
from tidelog.broker.handlers.common import check_leader_epoch, partition_log
from tidelog.broker.purgatory import wake
from tidelog.broker.quota_runtime import PAUSED_FETCH_THROTTLE_MS
from tidelog.broker.read_throttle import ReadEstimate
from tidelog.broker.response_writer import FileSlices
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.encoders.fetch import FetchPartitionResult, FetchResult
from tidelog.protocol.headers import RequestHeader
from tidelog.replication.throttle import LEADER
from tidelog.storage.log import FetchData, PartitionLog

log = logging.getLogger(__name__)

READ_COMMITTED = 1
# Errors found before reading the log; Kafka answers these with an empty aborted-transactions list
# (the message default), and read errors (e.g. OFFSET_OUT_OF_RANGE) with null.
LOOKUP_ERRORS = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
})


@dataclass(slots=True)
class PartitionRead:
    tp: TopicPartition
    state: SessionPartition
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    data: Any = None  # storage FetchData, or None
    size: int = 0
    aborted: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    by_follower: bool = False  # a consumer's read served from this broker's follower replica
    payload: bytes | None = None  # the records, when read off the loop (disk_pools.py); else sent from data's files
    pending: tuple[DirState, Callable[[], FetchData]] | None = None  # a read to run on a disk pool
    estimate: ReadEstimate | None = None  # a consumer's read against the page-cache estimate, made once


@dataclass(frozen=True, slots=True)
class ConsumerRead:
    """What a consumer's fetch says about where it may be served (KIP-392); None for followers' fetches."""

    follower_ok: bool  # Fetch v11+: a follower may serve it
    client_rack: str | None


def _requested_partitions(ctx: BrokerContext, request: Any, version: int) -> tuple[
    list[tuple[TopicPartition, SessionPartition]], list[TopicPartition], dict[TopicPartition, int]
]:
    """(tp, state) per requested partition, forgotten tps, and requested leader epochs."""
    image = ctx.image
    requested: list[tuple[TopicPartition, SessionPartition]] = []
    epochs: dict[TopicPartition, int] = {}
    for topic in request.topics:
        name, topic_id = _topic_name(image, topic, version)
        for p in topic.partitions:
            tp = (name, p.partition)
            requested.append((tp, SessionPartition(p.fetch_offset, p.partition_max_bytes, topic_id,
                                                   replica_log_start=getattr(p, "log_start_offset", -1))))
            epochs[tp] = getattr(p, "current_leader_epoch", -1)
    forgotten: list[TopicPartition] = []
    for topic in getattr(request, "forgotten_topics_data", ()):
        name, _ = _topic_name(image, topic, version)
        forgotten.extend((name, index) for index in topic.partitions)
    return requested, forgotten, epochs


def _topic_name(image: Any, topic: Any, version: int) -> tuple[str, Any]:
    if version >= 13:
        found = image.topic_by_id(topic.topic_id)
        # An unknown id maps to a name no topic can have, so lookups fail with UNKNOWN_TOPIC_ID below.
        return (found.name if found else f"\x00{topic.topic_id}"), topic.topic_id
    return topic.topic, None


def _consumer_log(ctx: BrokerContext, tp: TopicPartition, consumer: ConsumerRead, result: PartitionRead) -> PartitionLog:
    try:
        return partition_log(ctx, *tp)  # in a cluster: NOT_LEADER_OR_FOLLOWER unless led here
    except KafkaError as exc:
        if exc.code is not ErrorCode.NOT_LEADER_OR_FOLLOWER or ctx.replicas is None or not consumer.follower_ok:
            raise
        result.by_follower = True
        return ctx.replicas.follower_log(tp)


def _redirected(ctx: BrokerContext, result: PartitionRead, plog: PartitionLog, consumer: ConsumerRead) -> bool:
    """The leader sends the consumer to a replica in its rack: offsets, no records (Kafka's answer)."""
    if ctx.replicas is None or result.by_follower or not consumer.client_rack:
        return False
    preferred = ctx.replicas.preferred_read_replica(result.tp, consumer.client_rack, result.state.fetch_offset)
    if preferred < 0:
        return False
    result.preferred_read_replica = preferred
    result.high_watermark = plog.high_watermark
    result.last_stable_offset = plog.last_stable_offset
    result.log_start_offset = plog.log_start_offset
    return True


def _read_partition(
    ctx: BrokerContext, tp: TopicPartition, state: SessionPartition, leader_epoch: int,
    max_bytes: int, min_one_batch: bool, read_committed: bool, consumer: ConsumerRead | None = None,
    slow: bool = False, estimate: ReadEstimate | None = None,
) -> PartitionRead:
    result = PartitionRead(tp, state, estimate=estimate)
    topic, partition = tp
    replica = consumer is None
    try:
        if topic.startswith("\x00"):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
        plog = partition_log(ctx, topic, partition) if consumer is None else _consumer_log(ctx, tp, consumer, result)
        check_leader_epoch(ctx, topic, partition, leader_epoch)
        if consumer is not None and _redirected(ctx, result, plog, consumer):
            return result
        if replica:
            limit: int | None = None  # followers copy up to the log end
        else:
            limit = plog.last_stable_offset if read_committed else plog.high_watermark

        def read() -> FetchData:
            return plog.read(
                state.fetch_offset, max_bytes, max_offset=limit, min_one_batch=min_one_batch, isolation_committed=read_committed
            )

        disk = ctx.disk
        if disk is not None and state.fetch_offset < plog.log_end_offset:  # at the log end no file is touched
            on = disk.dir_of(plog)
            # The active segment was just written: hot whatever the estimate (which calls everything
            # below the log end cold on a partition taking nothing in). Older segments: the estimate's call.
            cold = (not replica and estimate is not None and estimate.cold
                    and state.fetch_offset < plog.active_segment.base_offset)
            if disk.offloaded(on, cold, slow) and on is not None:
                result.pending = (on, read)  # _read_all awaits it on the dir's pool
                return result
            data = disk.read_inline(on, read)
        else:
            data = read()
        _fill(result, data, read_committed)
    except Exception as exc:
        _failed(result, exc)
    return result


def _fill(result: PartitionRead, data: FetchData, read_committed: bool) -> None:
    result.data = data
    result.size = data.size
    result.high_watermark = data.high_watermark
    result.last_stable_offset = data.last_stable_offset
    result.log_start_offset = data.log_start_offset
    if read_committed:
        result.aborted = [(txn.producer_id, txn.first_offset) for txn in data.aborted]


def _failed(result: PartitionRead, exc: Exception) -> None:
    topic, partition = result.tp
    if isinstance(exc, KafkaError):
        result.error = exc.code
        if exc.code is ErrorCode.KAFKA_STORAGE_ERROR:
            log.error("fetch from %s-%d failed: %s", topic, partition, exc)
        return
    log.error("fetch from %s-%d failed", topic, partition, exc_info=exc)
    result.error = ErrorCode.UNKNOWN_SERVER_ERROR


async def _read_off_loop(ctx: BrokerContext, result: PartitionRead, read_committed: bool, slow: bool) -> None:
    """The pending read of ``result`` on its dir's pool (or the slow lane): the loop serves others meanwhile."""
    assert result.pending is not None and ctx.disk is not None
    on, read = result.pending
    result.pending = None
    try:
        pooled = await ctx.disk.read_pooled(on, read, slow)
    except Exception as exc:
        _failed(result, exc)
        return
    _fill(result, pooled.data, read_committed)
    result.payload = pooled.payload


async def _read_all(
    ctx: BrokerContext, fetch_ctx: FetchContext, epochs: dict[TopicPartition, int], max_bytes: int, read_committed: bool,
    denied: frozenset[str], refused: dict[TopicPartition, ErrorCode] | None, consumer: ConsumerRead,
    replica: int = -1, slow: bool = False,
) -> list[PartitionRead]:
    """``refused`` (follower fetches): partitions the replica manager refused, with their error;
    None for a consumer's fetch, described by ``consumer``. ``replica``: the fetching follower, whose
    throttled partitions get no data while the leader's replication quota is exceeded (their offsets
    and high watermark are still answered). ``slow``: the connection is marked slow (its reads go to
    the slow lane). A read that must not run on the loop is awaited here, in partition order, since
    the byte budget left for the next partition depends on its size."""
    results = []
    remaining = max_bytes
    cold_reads = ctx.quotas.cold_reads if ctx.quotas is not None and refused is None else None
    for tp, state in fetch_ctx.partitions:
        if denied and tp[0] in denied:
            results.append(PartitionRead(tp, state, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        if refused is not None and tp in refused:
            results.append(PartitionRead(tp, state, refused[tp]))
            continue
        first_with_data = remaining == max_bytes
        budget = max(0, min(state.max_bytes, remaining))
        estimate = None
        if cold_reads is not None:  # a consumer's read: placed against the page-cache estimate once
            pl = ctx.logs.get_log(*tp)
            estimate = None if pl is None else cold_reads.estimate(tp, state.fetch_offset, pl.log_end_offset)
            if pl is not None and cold_reads.held(tp, pl, state.fetch_offset, estimate):
                budget, first_with_data = 0, False
        if replica >= 0 and _leader_throttled(ctx, tp, replica):
            budget, first_with_data = 0, False
        result = _read_partition(
            ctx, tp, state, epochs.get(tp, -1), budget, first_with_data, read_committed,
            None if refused is not None else consumer, slow, estimate,
        )
        if result.pending is not None:
            await _read_off_loop(ctx, result, read_committed, slow)
        remaining -= result.size
        results.append(result)
    return results


async def fetch(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    requested, forgotten, epochs = _requested_partitions(ctx, request, version)
    fetch_ctx = ctx.fetch_sessions.new_context(
        getattr(request, "session_id", 0), getattr(request, "session_epoch", -1), requested, forgotten, ctx.now_ms()
    )
    if fetch_ctx.error is not ErrorCode.NONE:
        return FetchResult(version, fetch_ctx.error, 0, [])
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    max_bytes = max(0, getattr(request, "max_bytes", 2**31 - 1))
    max_wait_ms = max(0, int(request.max_wait.total_seconds() * 1000))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    tps = [tp for tp, _ in fetch_ctx.partitions]
    denied = _unreadable(ctx, conn, request, tps)
    refused = _follower_fetched(ctx, request, fetch_ctx, epochs, denied)
    if refused is not None:
        read_committed = False  # followers copy everything; isolation is for consumers
    consumer = ConsumerRead(version >= 11, getattr(request, "rack_id", None) or None)
    replica = _replica_id(request) if refused is not None else -1
    from_consumer = _replica_id(request) < 0
    if from_consumer and ctx.quotas is not None and ctx.quotas.paused(ctx.image, conn.principal, conn.client_id):
        conn.throttle_ms = PAUSED_FETCH_THROTTLE_MS  # the client's tier is paused: nothing, and come back later
        return FetchResult(version, ErrorCode.NONE, fetch_ctx.response_session_id, [], PAUSED_FETCH_THROTTLE_MS)
    quota_limit = ctx.quotas.fetch_limit(ctx.image, conn.principal, conn.client_id) if ctx.quotas and from_consumer else None
    if quota_limit is not None:
        max_bytes = min(max_bytes, quota_limit)  # Kafka: one response never exceeds what the quota window holds
    slow = from_consumer and conn.score.slow
    while True:
        results = await _read_all(ctx, fetch_ctx, epochs, max_bytes, read_committed, denied, refused, consumer, replica, slow)
        enough = sum(r.size for r in results) >= request.min_bytes
        errors = any(r.error is not ErrorCode.NONE or r.preferred_read_replica >= 0 for r in results)
        remaining = deadline - loop.time()
        if enough or errors or remaining <= 0 or not tps or ctx.purgatory.closed:
            break
        woken: asyncio.Future[None] = loop.create_future()
        ctx.purgatory.watch(tps, woken)
        timer = loop.call_later(remaining, wake, woken)  # max_wait_ms: the same wake-up, with nothing new
        waited_from = time.perf_counter()
        try:
            await woken
        finally:
            timer.cancel()
            ctx.purgatory.unwatch(tps, woken)
            if conn.request_timer is not None:
                conn.request_timer.add_remote(time.perf_counter() - waited_from)
    if replica >= 0 and ctx.throttles is not None:
        ctx.throttles.record(LEADER, sum(r.size for r in results if r.size and ctx.throttles.listed(LEADER, r.tp)))
    if ctx.quotas is not None and from_consumer:
        throttle = ctx.quotas.fetched(ctx.image, conn.principal, conn.client_id, sum(r.size for r in results))
        if throttle > 0:
            # Kafka's answer to a consumer over its quota: nothing now, and the time to wait. The session's
            # partitions are left as they were, so the next fetch reports them afresh.
            conn.throttle_ms = max(conn.throttle_ms, throttle)
            return FetchResult(version, ErrorCode.NONE, fetch_ctx.response_session_id, [], throttle)
    cold_reads = ctx.quotas.cold_reads if ctx.quotas is not None and from_consumer else None
    for r in results:
        if r.size and cold_reads is not None:
            cold_reads.served(r.tp, r.estimate, r.data)
        if r.size:
            ctx.metrics.fetched(r.tp[0], r.size)
        elif r.error is not ErrorCode.NONE:
            ctx.metrics.fetch_failed(r.tp[0])
        if refused is None and (r.size or r.preferred_read_replica >= 0):
            role = "redirected" if r.preferred_read_replica >= 0 else "follower" if r.by_follower else "leader"
            ctx.metrics.consumer_fetch(role)
    return _response(fetch_ctx, results, version)


def _replica_id(request: Any) -> int:
    replica_state = getattr(request, "replica_state", None)
    return int(replica_state.replica_id if replica_state is not None else getattr(request, "replica_id", -1))


def _follower_fetched(
    ctx: BrokerContext, request: Any, fetch_ctx: FetchContext, epochs: dict[TopicPartition, int], denied: frozenset[str],
) -> dict[TopicPartition, ErrorCode] | None:
    """A follower's fetch in a cluster: report each fetch offset as that follower's log end offset.

    None for consumers (and on a single node); else the partitions refused, with their error."""
    replica = _replica_id(request)
    if replica < 0 or ctx.replicas is None:
        return None
    refused: dict[TopicPartition, ErrorCode] = {}
    for tp, state in fetch_ctx.partitions:
        if tp[0] in denied:
            continue
        try:
            ctx.replicas.follower_fetched(tp, replica, state.fetch_offset, epochs.get(tp, -1), state.replica_log_start)
        except KafkaError as exc:
            refused[tp] = exc.code
    return refused


def _leader_throttled(ctx: BrokerContext, tp: TopicPartition, replica: int) -> bool:
    """KIP-73's leader side: a listed partition, a follower outside the ISR, the leader quota exceeded.

    The ISR here is the maximal one: a follower whose addition is being written already holds back the
    high watermark, so withholding its data would stall acks=all writes until the write lands."""
    throttles = ctx.throttles
    if throttles is None or ctx.replicas is None:
        return False
    state = ctx.replicas.leaders.get(tp)
    return throttles.throttled(LEADER, tp, in_sync=state is None or replica in state.maximal_isr)


def _unreadable(ctx: BrokerContext, conn: ConnectionInfo, request: Any, tps: list[TopicPartition]) -> frozenset[str]:
    """Topics this fetch may not read: READ per topic for consumers, CLUSTER_ACTION for followers."""
    if ctx.authorizer is None:
        return frozenset()
    replica_id = _replica_id(request)
    # Names starting with NUL stand for unknown topic ids: they answer UNKNOWN_TOPIC_ID, not an ACL error.
    names = {topic for topic, _ in tps if not topic.startswith("\x00")}
    if replica_id >= 0:
        return frozenset() if authorize_cluster(ctx, conn, Op.CLUSTER_ACTION) else frozenset(names)
    return denied_topics(ctx, conn, names, Op.READ)


def _response(fetch_ctx: FetchContext, results: list[PartitionRead], version: int) -> FetchResult:
    by_topic: dict[str, list[FetchPartitionResult]] = {}
    topic_ids: dict[str, Any] = {}
    for r in results:
        has_records = r.size > 0
        if not fetch_ctx.should_include(
            r.tp, r.state, has_records=has_records, error=r.error, high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
        ) and r.preferred_read_replica < 0:
            continue
        aborted: tuple[tuple[int, int], ...] | None = None
        if r.error in LOOKUP_ERRORS:
            aborted = ()  # Kafka's answer for a partition it could not even look up: an empty list
        elif r.aborted is not None:
            aborted = tuple(r.aborted)
        # The bytes stay in the segment files; the response writer sends them (sendfile or pread).
        records = (FileSlices(r.data.ranges, r.data) if r.payload is None else r.payload) if has_records else b""
        topic, partition = r.tp
        topic_ids[topic] = r.state.topic_id
        by_topic.setdefault(topic, []).append(FetchPartitionResult(
            partition, r.error, r.high_watermark, r.last_stable_offset, r.log_start_offset, aborted,
            r.preferred_read_replica, records,
        ))
    topics = [(topic, topic_ids[topic], partitions) for topic, partitions in by_topic.items()]
    return FetchResult(version, ErrorCode.NONE, fetch_ctx.response_session_id, topics)
