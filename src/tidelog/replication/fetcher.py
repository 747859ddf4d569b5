"""The follower side of replication: one fetcher task per leader broker.

A broker that follows partitions led by broker L runs one ``FollowerFetcher`` for L. Its loop:

1. Partitions that just became followed are reconciled first: OffsetForLeaderEpoch (replica id set)
   asks the leader where the follower's latest epoch ends in the leader's history, and the local log
   is truncated to the lower of that end and the follower's own end for that epoch, so no divergent
   history survives (Kafka's KIP-101/KIP-279 rule). An answer with no epoch truncates to the high
   watermark, which the leader is known to hold.
2. One Fetch v12 (``replica_id`` = this broker, the partition's leader epoch, read uncommitted,
   long-polled: ``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``) for every followed
   partition at its log end offset. The fetch offset *is* the report of the follower's LEO: the leader
   moves the high watermark from it.
3. Each partition's batches are appended as the leader wrote them (``append_as_follower``: offsets,
   epochs and producer state from the batches themselves); the follower's high watermark becomes
   min(leader's high watermark, own log end): the bound of what consumers may read here (KIP-392),
   whose waiting fetches ``on_high_watermark`` wakes. With ``roll_ahead`` (the broker's disk pools)
   an append that would roll its segment first has the roll made off the event loop, awaited, and
   is then appended with no await in between (storage/roll_plan.py).

Repair: a followed partition in which the scrubber found a damaged range (storage/scrubber.py) is
truncated to the range's first offset before the next fetch, which then copies that range and
everything after it from the leader again (the whole suffix: Kafka's truncate-and-refetch rule, simple
and correct, at the cost of refetching the good batches after the range). The truncation goes below the
high watermark, so it waits for ``may_repair`` (the replica manager: true once this replica is out of the
ISR; it asks to leave meanwhile), and the partition is left out of fetches until then: an ISR member
never lacks a committed record, and the leader re-adds the replica only once the refetch caught up.

Replication throttles (KIP-73, ``quota.py``): a partition in this broker's
``follower.replication.throttled.replicas`` that the last fetch left behind the leader's high
watermark is left out of the request while ``follower.replication.throttled.rate`` is exceeded; the
bytes appended for listed partitions are recorded against it. When every partition is held back the
loop sleeps until the quota has room (at most ``replica.fetch.backoff.ms``).

Errors per partition: OFFSET_OUT_OF_RANGE below the leader's log start restarts the log at the
leader's start; above the leader's end the partition is reconciled again (the leader changed under
it). NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / UNKNOWN_TOPIC_OR_PARTITION:
the leader has not applied the same metadata yet, or the metadata is about to move the partition; the
partition rests ``replica.fetch.backoff.ms`` and is tried again (a new epoch from ``follow`` resets
it at once). A connection failure backs off the same time and reconnects.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.net.kafka_connection import BrokerUnreachable, KafkaConnection
from tidelog.replication.throttle import FOLLOWER, ReplicationThrottles
from tidelog.storage.log import PartitionLog
from tidelog.storage.manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
STALE_LEADER = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
})


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    max_bytes: int = 10 * 1024 * 1024        # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024   # replica.fetch.max.bytes
    max_wait_ms: int = 500                   # replica.fetch.wait.max.ms
    min_bytes: int = 1                       # replica.fetch.min.bytes
    backoff_ms: int = 1000                   # replica.fetch.backoff.ms


@dataclass(slots=True)
class Followed:
    leader_epoch: int
    reconciled: bool = False
    resting_until: float = 0.0  # loop time: the leader refused the partition; try again after this
    # The last fetch left the log at the leader's high watermark (Kafka's isReplicaInSync: spared by
    # the follower throttle). True until a fetch says otherwise, as Kafka's lag starts unknown.
    caught_up: bool = True


class FollowerFetcher:
    def __init__(
        self, node_id: int, leader_id: int, address: Callable[[], tuple[str, int] | None], logs: LogManager,
        settings: FetcherSettings, *, on_appended: Callable[[TopicPartition], None] | None = None,
        on_high_watermark: Callable[[TopicPartition], object] | None = None,
        may_repair: Callable[[TopicPartition], bool] | None = None,
        throttles: ReplicationThrottles | None = None,
        roll_ahead: Callable[[PartitionLog, bytes], Awaitable[None]] | None = None,
    ) -> None:
        self.node_id, self.leader_id = node_id, leader_id
        # Rolls a log before an append would (the broker's disk pools): the append then makes no file here.
        self.roll_ahead = roll_ahead
        self.address = address
        self.logs = logs
        self.settings = settings
        self.on_appended = on_appended
        # Consumers reading from this follower (KIP-392) wait for its high watermark to move.
        self.on_high_watermark = on_high_watermark
        self.may_repair = may_repair
        self.throttles = throttles
        self.partitions: dict[TopicPartition, Followed] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: KafkaConnection | None = None
        self._stopping = False
        self._unreachable = False

    # -- control ----------------------------------------------------------------------------------

    def follow(self, tp: TopicPartition, leader_epoch: int) -> None:
        current = self.partitions.get(tp)
        if current is None or current.leader_epoch != leader_epoch:
            self.partitions[tp] = Followed(leader_epoch)
            self._changed.set()

    def unfollow(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self._changed.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        self._stopping = True  # ends the loop if Python 3.11's wait_for swallows the cancellation
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            now = loop.time()
            active = {tp: f for tp, f in self.partitions.items() if f.resting_until <= now}
            if not active:
                self._changed.clear()
                wake = min((f.resting_until for f in self.partitions.values()), default=None)
                try:
                    await asyncio.wait_for(self._changed.wait(), None if wake is None else max(0.0, wake - now))
                except TimeoutError:
                    pass
                continue
            try:
                connection = await self._connect()
                pending = {tp: f for tp, f in active.items() if not f.reconciled}
                if pending:
                    await self._reconcile(connection, pending)
                    continue
                await self._fetch_once(connection, active)
            except BrokerUnreachable as exc:
                # Once per outage at INFO; the retries every backoff stay at DEBUG.
                (log.debug if self._unreachable else log.info)(
                    "replica fetcher for leader %d: %s; retrying every %d ms", self.leader_id, exc, self.settings.backoff_ms)
                self._unreachable = True
                self._connection = None
                await asyncio.sleep(self.settings.backoff_ms / 1000)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for leader %d failed; retrying", self.leader_id)
                await asyncio.sleep(self.settings.backoff_ms / 1000)

    async def _connect(self) -> KafkaConnection:
        if self._connection is not None and self._connection.connected:
            return self._connection
        address = self.address()
        if address is None:
            raise BrokerUnreachable(f"broker {self.leader_id} is not registered")
        self._connection = KafkaConnection(address[0], address[1], f"tidelog-replica-fetcher-{self.node_id}")
        await self._connection.connect()
        if self._unreachable:
            log.info("replica fetcher for leader %d: connected again", self.leader_id)
            self._unreachable = False
        return self._connection

    def _log(self, tp: TopicPartition) -> PartitionLog | None:
        return self.logs.get_log(*tp)

    async def _reconcile(self, connection: KafkaConnection, pending: dict[TopicPartition, Followed]) -> None:
        by_topic: dict[str, list[epoch_request.OffsetForLeaderPartition]] = {}
        for (topic, index), followed in pending.items():
            plog = self._log((topic, index))
            if plog is None:
                continue
            by_topic.setdefault(topic, []).append(epoch_request.OffsetForLeaderPartition(
                partition=i32(index), current_leader_epoch=i32(followed.leader_epoch),
                leader_epoch=i32(plog.epoch_cache.latest_epoch),
            ))
        request = epoch_request.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.node_id),
            topics=tuple(epoch_request.OffsetForLeaderTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        response = await connection.call(request)
        for topic in response.topics:
            for p in topic.partitions:
                tp = (str(topic.topic), int(p.partition))
                pending_one = pending.get(tp)
                plog = self._log(tp)
                if pending_one is None or plog is None or self.partitions.get(tp) is not pending_one:
                    continue
                followed = pending_one
                error = ErrorCode.from_wire(p.error_code)
                if error is not ErrorCode.NONE:
                    self._rest(tp, followed, error, "OffsetForLeaderEpoch")
                    continue
                self._truncate_to_leader(plog, int(p.leader_epoch), int(p.end_offset))
                followed.reconciled = True

    def _truncate_to_leader(self, plog: PartitionLog, epoch: int, leader_end: int) -> None:
        leo = plog.log_end_offset
        if epoch < 0:
            target = plog.high_watermark
        else:
            _own_epoch, own_end = plog.end_offset_for_epoch(epoch)
            target = min(leader_end, own_end if own_end >= 0 else leo)
        if target < leo:
            log.warning("truncating %s-%d from %d to %d to match leader %d (epoch %d)",
                        plog.topic, plog.partition, leo, target, self.leader_id, epoch)
            plog.truncate_to(target)

    def _repair(self, plog: PartitionLog) -> None:
        damaged = plog.damaged_ranges[0]
        log.warning("repairing %s-%d from leader %d: truncating from %d to %d, the start of damaged %s, to fetch it again",
                    plog.topic, plog.partition, self.leader_id, plog.log_end_offset, damaged.start_offset,
                    damaged.describe())
        plog.truncate_to(damaged.start_offset)

    def _rest(self, tp: TopicPartition, followed: Followed, error: ErrorCode, what: str) -> None:
        followed.resting_until = asyncio.get_running_loop().time() + self.settings.backoff_ms / 1000
        (log.debug if error in STALE_LEADER else log.warning)(
            "%s of %s-%d from leader %d: %s; trying again in %d ms", what, *tp, self.leader_id, error.name,
            self.settings.backoff_ms,
        )

    async def _fetch_once(self, connection: KafkaConnection, active: dict[TopicPartition, Followed]) -> None:
        s = self.settings
        by_topic: dict[str, list[fetch_request.FetchPartition]] = {}
        held_back = False
        for (topic, index), followed in active.items():
            plog = self._log((topic, index))
            if plog is None:
                continue
            if plog.damaged_ranges:
                if self.may_repair is not None and not self.may_repair((topic, index)):
                    continue  # not fetched until this replica is out of the ISR (see Repair above)
                self._repair(plog)
            if self.throttles is not None and self.throttles.throttled(FOLLOWER, (topic, index), followed.caught_up):
                held_back = True
                continue
            by_topic.setdefault(topic, []).append(fetch_request.FetchPartition(
                partition=i32(index), current_leader_epoch=i32(followed.leader_epoch),
                fetch_offset=i64(plog.log_end_offset), log_start_offset=i64(plog.log_start_offset),
                partition_max_bytes=i32(s.partition_max_bytes),
            ))
        if not by_topic:
            # Every partition held back by the follower quota: wait until it has room again (or a change).
            wait = min(self.throttles.delay(FOLLOWER), s.backoff_ms / 1000) if held_back and self.throttles else s.backoff_ms / 1000
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.01, wait))
            except TimeoutError:
                pass
            return
        request = fetch_request.FetchRequest(
            replica_id=BrokerId(self.node_id), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=s.max_wait_ms)),
            min_bytes=i32(s.min_bytes), max_bytes=i32(s.max_bytes), isolation_level=i8(0),
            session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(),
            topics=tuple(fetch_request.FetchTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        response = await connection.call(request, timeout_s=s.max_wait_ms / 1000 + 30)
        for topic in response.responses:
            for p in topic.partitions:
                tp = (str(topic.topic), int(p.partition_index))
                if self.roll_ahead is not None:
                    await self._roll_ahead(self.roll_ahead, tp, p, active)
                self._apply(tp, p, active)

    async def _roll_ahead(
        self, roll: Callable[[PartitionLog, bytes], Awaitable[None]], tp: TopicPartition, p: object,
        active: dict[TopicPartition, Followed],
    ) -> None:
        """Roll the partition's log on its dir's pool if appending ``p``'s records would roll it (the
        append follows with no await in between). A failure is the append's to report."""
        records = getattr(p, "records", None)
        plog = self._log(tp)
        if not records or plog is None or active.get(tp) is None or getattr(p, "error_code", 0) != 0:
            return
        try:
            await roll(plog, records)
        except KafkaError as exc:
            log.warning("rolling %s-%d ahead of its append failed: %s", *tp, exc)

    def _apply(self, tp: TopicPartition, p: object, active: dict[TopicPartition, Followed]) -> None:
        followed = active.get(tp)
        plog = self._log(tp)
        if followed is None or plog is None or self.partitions.get(tp) is not followed:
            return  # unfollowed (or re-followed at a new epoch) while the fetch was out
        error = ErrorCode.from_wire(p.error_code)  # type: ignore[attr-defined]
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = int(p.log_start_offset)  # type: ignore[attr-defined]
            if plog.log_end_offset < leader_start:
                log.warning("%s-%d is behind leader %d's log start %d: restarting the log there", *tp, self.leader_id, leader_start)
                plog.truncate_fully_and_start_at(leader_start)
            else:
                followed.reconciled = False
            return
        if error is not ErrorCode.NONE:
            self._rest(tp, followed, error, "replica fetch")
            return
        records = p.records  # type: ignore[attr-defined]
        if records:
            try:
                plog.append_as_follower(records)
            except KafkaError as exc:
                log.error("appending %s-%d from leader %d failed: %s", *tp, self.leader_id, exc)
                followed.reconciled = False
                return
            if self.on_appended is not None:
                self.on_appended(tp)
            if self.throttles is not None and self.throttles.listed(FOLLOWER, tp):
                self.throttles.record(FOLLOWER, len(records))
        high_watermark = int(p.high_watermark)  # type: ignore[attr-defined]
        before = plog.high_watermark
        followed.caught_up = plog.log_end_offset >= high_watermark
        plog.update_high_watermark(min(high_watermark, plog.log_end_offset))
        if plog.high_watermark != before and self.on_high_watermark is not None:
            self.on_high_watermark(tp)
        leader_start = int(p.log_start_offset)  # type: ignore[attr-defined]
        if plog.log_start_offset < leader_start <= plog.high_watermark:
            # DeleteRecords and retention on the leader move its log start: followers follow (Kafka's rule).
            plog.delete_records_before(leader_start)
