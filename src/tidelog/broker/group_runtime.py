"""The asyncio shell around the group coordinator: storage, timers, parked requests.

The coordinator (``tidelog.coordinator``) decides; this module does what it asks, in its order:

- writes: each queued :class:`~tidelog.coordinator.state.Write` is encoded as one record batch and
  appended to its ``__consumer_offsets`` partition on the event loop (an append only copies into the
  page cache), its records are replayed at once, then its ``on_done`` runs. Appending and replaying
  without an ``await`` in between keeps the coordinator's state in log order;
- durability: on a single node a write is done once appended, as in Kafka, whose coordinators leave
  the fsync to the OS; where the partition's flush policy (``flush.messages``, ``flush.ms``) asks
  for an fsync, the partitions written are fsynced off the loop before any answer that depends on
  them (one fsync serves every write queued before it started); ``offsets.commit.timeout.ms``
  bounds that wait (COORDINATOR_NOT_AVAILABLE after it);
- parked requests: JoinGroup and SyncGroup get a future keyed by a waiter id; the coordinator's
  completions resolve them;
- timers: one task sleeps until the coordinator's next deadline (or until a request changes it) and
  calls ``tick``;
- loading: at start every partition of an existing ``__consumer_offsets`` is read in chunks of
  ``offsets.load.buffer.size`` bytes off the loop and replayed on it; meanwhile that partition's
  groups answer COORDINATOR_LOAD_IN_PROGRESS;
- the topic itself is created (compacted, ``offsets.topic.num.partitions`` partitions) the first
  time a client looks for a group coordinator.

In a cluster the coordinator follows leadership (``on_image``): a partition of ``__consumer_offsets``
is loaded when this broker becomes its leader and unloaded (its groups and offsets forgotten, parked
requests answered NOT_COORDINATOR) when it stops being the leader; FindCoordinator names the leader of
the group's partition. A write counts as done when the high watermark passes it (every in-sync replica
holds it), as Kafka's coordinator waits for acks=all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pathlib
import uuid
from collections.abc import Callable
from typing import Any

from tidelog.broker.coordinator_host import CoordinatorHost
from tidelog.broker.group_configs import GroupConfigs
from tidelog.common.config import BrokerConfig
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
)
from tidelog.coordinator.coordinator import GroupCoordinator
from tidelog.coordinator.messages import (
    DescribedGroup,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    ListedGroup,
    OffsetCommit,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionErrors,
    SyncGroup,
    SyncGroupResult,
)
from tidelog.coordinator.persistence import encode_batch, read_records
from tidelog.coordinator.records import partition_for
from tidelog.coordinator.state import CoordinatorConfig, Write, append_error_to_response_error
from tidelog.metadata.image import ClusterImage
from tidelog.protocol.compression import Compression
from tidelog.storage.log import PartitionLog

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_COMPRESSION = {0: Compression.NONE, 1: Compression.GZIP, 2: Compression.SNAPPY, 3: Compression.LZ4, 4: Compression.ZSTD}


def coordinator_config(config: BrokerConfig) -> CoordinatorConfig:
    return CoordinatorConfig(
        min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
        max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
        max_group_size=config.get_int("group.max.size"),
        initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
        offset_metadata_max_bytes=config.get_int("offset.metadata.max.bytes"),
        offsets_retention_ms=config.get_int("offsets.retention.minutes") * 60_000,
        offsets_retention_check_interval_ms=config.get_int("offsets.retention.check.interval.ms"),
    )


def consumer_group_config(config: BrokerConfig) -> ConsumerGroupConfig:
    """The ``group.consumer.*`` settings (the min/max bounds only limit per-group overrides, not served)."""
    names = config.get("group.consumer.assignors")
    return ConsumerGroupConfig(
        session_timeout_ms=config.get_int("group.consumer.session.timeout.ms"),
        min_session_timeout_ms=config.get_int("group.consumer.min.session.timeout.ms"),
        max_session_timeout_ms=config.get_int("group.consumer.max.session.timeout.ms"),
        heartbeat_interval_ms=config.get_int("group.consumer.heartbeat.interval.ms"),
        max_size=config.get_int("group.consumer.max.size"),
        assignors=tuple(str(n).strip() for n in names) if isinstance(names, list) and names else ("uniform", "range"),
    )


class PartitionLogPort:
    """``tidelog.coordinator.persistence.OffsetsLog`` over this broker's ``__consumer_offsets`` logs."""

    def __init__(self, ctx: CoordinatorHost) -> None:
        self.ctx = ctx

    def _log(self, partition: int) -> PartitionLog:
        plog: PartitionLog | None = self.ctx.logs.get_log(OFFSETS_TOPIC, partition)
        if plog is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{OFFSETS_TOPIC}-{partition} is not here")
        return plog

    def append(self, partition: int, batch: bytes) -> int:
        plog = self._log(partition)
        topic = self.ctx.image.topics.get(OFFSETS_TOPIC)
        if topic is None or partition >= len(topic.partitions):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        replicas = self.ctx.replicas
        if replicas is None:
            epoch = topic.partitions[partition].leader_epoch
        else:
            epoch = replicas.check_writable((OFFSETS_TOPIC, partition), 1, 1).leader_epoch
        plog.append_as_leader(batch, leader_epoch=epoch, now_ms=self.ctx.now_ms(), from_client=False)
        if replicas is not None:
            replicas.appended((OFFSETS_TOPIC, partition), plog)
        self.ctx.purgatory.notify((OFFSETS_TOPIC, partition))
        return plog.log_end_offset

    def flush(self, partition: int) -> None:
        self._log(partition).flush()

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        data = self._log(partition).read(offset, max_bytes)
        return (data.read_bytes() if data.ranges else b""), data.end_offset

    def start_offset(self, partition: int) -> int:
        return self._log(partition).log_start_offset

    def end_offset(self, partition: int) -> int:
        return self._log(partition).log_end_offset

    def durable_offset(self, partition: int) -> int:
        return self._log(partition).recovery_point

    def flush_owed(self, partition: int, now_ms: int) -> bool:
        return self._log(partition).flush_owed(now_ms)


class GroupRuntime:
    def __init__(self, ctx: CoordinatorHost) -> None:
        self.ctx = ctx
        config = ctx.config
        self.core = GroupCoordinator(coordinator_config(config), partition_exists=self._partition_exists,
                                     consumer_config=consumer_group_config(config), topics=self._topics)
        self.port = PartitionLogPort(ctx)
        log_dirs = config.get("log.dirs")
        first_dir = pathlib.Path(log_dirs[0] if isinstance(log_dirs, list) and log_dirs else ".").resolve()
        self.configs = GroupConfigs(first_dir, config)  # GROUP resource configs (type 32)
        self.configs.apply_all(self.core.consumer)
        self.compression = _COMPRESSION[config.get_int("offsets.topic.compression.codec")]
        self.commit_timeout_s = config.get_int("offsets.commit.timeout.ms") / 1000
        self.load_buffer = config.get_int("offsets.load.buffer.size")
        self._waiters: dict[int, asyncio.Future[JoinGroupResult | SyncGroupResult]] = {}
        self._next_waiter = 0
        self._flushing: dict[int, asyncio.Future[None]] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._running = False
        self.clustered = bool(config.get("metadata.store"))

    # ------------------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Start the timer task and, if ``__consumer_offsets`` exists, load it in the background."""
        self._running = True
        self._tasks.append(asyncio.create_task(self._timer_loop(), name="group-coordinator-timers"))
        topic = self.ctx.image.topics.get(OFFSETS_TOPIC)
        if topic is not None and not self.clustered:
            self._start_loading(len(topic.partitions))

    def on_image(self, _old: ClusterImage, image: ClusterImage) -> None:
        """Clusters: load the partitions this broker now leads, unload those it no longer leads."""
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is None or not self._running:
            return
        count = len(topic.partitions)
        led = {p.index for p in topic.partitions if p.leader == self.ctx.node_id}
        served = self.core.state.active | self.core.state.loading
        gained = sorted(led - served)
        if gained or not self.core.num_partitions:
            self.core.begin_loading(gained, count)
        if gained:
            self._tasks.append(asyncio.create_task(self._load(gained), name="group-coordinator-load"))
        for partition in sorted(served - led):
            dropped = self.core.unload(partition)
            log.info("%s-%d moved to another broker: %d group(s) unloaded", OFFSETS_TOPIC, partition, dropped)
        if served - led:
            self._deliver(self.core.take_completions(), ErrorCode.NONE)

    def coordinator_node(self, group_id: str) -> int:
        """Clusters: the broker leading the group's partition (-1: none, or no such topic yet)."""
        topic = self.ctx.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return -1
        return topic.partitions[partition_for(group_id, len(topic.partitions))].leader

    async def stop(self) -> None:
        """Answer parked requests with NOT_COORDINATOR, stop timers and loading."""
        if not self._running:
            return
        self._running = False
        self.core.shutdown()
        self._deliver(self.core.take_completions(), ErrorCode.NONE)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    @property
    def running(self) -> bool:
        return self._running

    async def ensure_topic(self) -> ErrorCode:
        """Create ``__consumer_offsets`` on first use; COORDINATOR_NOT_AVAILABLE if that fails.

        A topic someone else created meanwhile (CreateTopics) is loaded like one found at start.
        """
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.core.num_partitions:
            return ErrorCode.NONE
        existing = self.ctx.image.topics.get(OFFSETS_TOPIC)
        if existing is not None:
            if self.clustered:
                self.on_image(self.ctx.image, self.ctx.image)
            else:
                self._start_loading(len(existing.partitions))
            return ErrorCode.NONE
        config = self.ctx.config
        outcome = await self.ctx.topics.create_topic(
            OFFSETS_TOPIC, config.get_int("offsets.topic.num.partitions"), self._replication_factor(),
            configs=[("cleanup.policy", "compact"),
                     ("segment.bytes", str(config.get_int("offsets.topic.segment.bytes"))),
                     ("compression.type", "producer")],
        )
        if outcome.error is ErrorCode.TOPIC_ALREADY_EXISTS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE  # another broker created it first; retried, it is found
        if not outcome.ok or outcome.topic is None:
            log.error("cannot create %s: %s %s", OFFSETS_TOPIC, outcome.error.name, outcome.message)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        count = len(outcome.topic.partitions)
        if self.clustered:
            log.info("created %s with %d partitions", OFFSETS_TOPIC, count)
            return ErrorCode.NONE  # each leader loads its partitions when the image reaches it
        self.core.begin_loading(range(count), count)
        now = self.ctx.now_ms()
        for partition in range(count):
            self.core.complete_loading(partition, now)  # new and empty: nothing to replay
        log.info("created %s with %d partitions", OFFSETS_TOPIC, count)
        self._wake.set()
        return ErrorCode.NONE

    def _replication_factor(self) -> int:
        """offsets.topic.replication.factor, capped to the live brokers (this one on a single node)."""
        live = max(1, len(self.ctx.image.brokers))
        return min(self.ctx.config.get_int("offsets.topic.replication.factor"), live)

    def _start_loading(self, count: int) -> None:
        partitions = list(range(count))
        self.core.begin_loading(partitions, count)
        self._tasks.append(asyncio.create_task(self._load(partitions), name="group-coordinator-load"))

    def _topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {name: (t.topic_id, len(t.partitions)) for name, t in self.ctx.image.topics.items()}

    def _partition_exists(self, topic: str, partition: int) -> bool:
        known = self.ctx.image.topics.get(topic)
        return known is not None and 0 <= partition < len(known.partitions)

    async def _load(self, partitions: list[int]) -> None:
        loop = asyncio.get_running_loop()
        for partition in partitions:
            try:
                offset, end = self.port.start_offset(partition), self.port.end_offset(partition)
                count = 0
                while offset < end:
                    records, next_offset = await loop.run_in_executor(
                        None, read_records, self.port, partition, offset, self.load_buffer)
                    if next_offset <= offset:
                        break
                    for record in records:
                        self.core.replay(record)
                    count += len(records)
                    offset = next_offset
            except KafkaError as exc:
                log.error("loading %s-%d failed (%s): its groups stay unavailable", OFFSETS_TOPIC, partition, exc)
                continue
            self.core.complete_loading(partition, self.ctx.now_ms())
            if count:
                log.info("loaded %s-%d: %d records", OFFSETS_TOPIC, partition, count)
            self._wake.set()
        await self.drain()

    # ------------------------------------------------------------------------------- timers

    async def _timer_loop(self) -> None:
        while True:
            deadline = self.core.next_deadline()
            delay = None if deadline is None else max(0.0, (deadline - self.ctx.now_ms()) / 1000)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass
            try:
                self.core.tick(self.ctx.now_ms())
                await self.drain()
            except Exception:
                log.exception("group coordinator timer failed")

    # ----------------------------------------------------------------------- writes and answers

    async def drain(self) -> ErrorCode:
        """Carry out every queued write and deliver every answer; the worst durability error, if any."""
        outcome = ErrorCode.NONE
        while self.core.has_output():
            written: dict[int, int] = {}
            for write in self.core.take_writes():
                self._append(write, written)
            completions = self.core.take_completions()
            error = await self._durable(written)
            if error is not ErrorCode.NONE:
                outcome = error
            self._deliver(completions, error)
        self._wake.set()
        return outcome

    def _append(self, write: Write, written: dict[int, int]) -> None:
        error = ErrorCode.NONE
        try:
            end = self.port.append(write.partition, encode_batch(write.records, self.ctx.now_ms(), self.compression))
            written[write.partition] = max(end, written.get(write.partition, 0))
        except KafkaError as exc:
            error = exc.code
            log.warning("append to %s-%d failed: %s", OFFSETS_TOPIC, write.partition, exc)
        except Exception:
            error = ErrorCode.UNKNOWN_SERVER_ERROR
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, write.partition)
        if error is ErrorCode.NONE:
            for record in write.records:
                self.core.replay(record)
        if write.on_done is not None:
            write.on_done(error)

    async def _durable(self, written: dict[int, int]) -> ErrorCode:
        if not written:
            return ErrorCode.NONE
        if self.ctx.replicas is not None:
            return await self._replicated(written)
        # A single node: the append, and an fsync where the log's flush policy asks for one (Kafka's rule).
        now_ms = self.ctx.now_ms()
        waits = [self._flushed(partition, upto) for partition, upto in written.items()
                 if self.port.flush_owed(partition, now_ms)]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), self.commit_timeout_s)
        except TimeoutError:
            log.warning("flushing %s took longer than offsets.commit.timeout.ms", OFFSETS_TOPIC)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        except KafkaError as exc:
            log.error("flushing %s failed: %s", OFFSETS_TOPIC, exc)
            return append_error_to_response_error(exc.code)
        return ErrorCode.NONE

    async def _replicated(self, written: dict[int, int]) -> ErrorCode:
        replicas = self.ctx.replicas
        assert replicas is not None
        timeout_ms = int(self.commit_timeout_s * 1000)
        errors = await asyncio.gather(*(
            replicas.wait_for_high_watermark((OFFSETS_TOPIC, partition), upto, timeout_ms)
            for partition, upto in written.items()
        ))
        worst = next((e for e in errors if e is not ErrorCode.NONE), ErrorCode.NONE)
        if worst is not ErrorCode.NONE:
            log.warning("a write to %s was not replicated: %s", OFFSETS_TOPIC, worst.name)
        return append_error_to_response_error(worst)

    async def _flushed(self, partition: int, upto: int) -> None:
        """Wait until ``partition`` is fsynced up to ``upto``, sharing a flush already running.

        A flush covers what was appended before it started; a write that came in later waits for the
        next one (started here once the running one is done).
        """
        loop = asyncio.get_running_loop()
        while self.port.durable_offset(partition) < upto:
            running = self._flushing.get(partition)
            if running is None or running.done():
                running = loop.run_in_executor(None, self.port.flush, partition)
                self._flushing[partition] = running
            await asyncio.shield(running)

    def _deliver(self, completions: list[tuple[int, JoinGroupResult | SyncGroupResult]], error: ErrorCode) -> None:
        for waiter, result in completions:
            future = self._waiters.pop(waiter, None)
            if future is None or future.done():
                continue
            if error is not ErrorCode.NONE and result.error is ErrorCode.NONE:
                result = dataclasses.replace(result, error=error)
            future.set_result(result)

    async def _call(self, fn: Callable[[], Any]) -> tuple[Any, ErrorCode]:
        """Run one coordinator call, then its writes; (its result, the durability error)."""
        result = fn()
        self._wake.set()
        return result, await self.drain()

    async def _parked(self, start: Callable[[int], None]) -> JoinGroupResult | SyncGroupResult:
        self._next_waiter += 1
        waiter = self._next_waiter
        future: asyncio.Future[JoinGroupResult | SyncGroupResult] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = future
        try:
            start(waiter)
            self._wake.set()
            await self.drain()
            return await future
        finally:
            self._waiters.pop(waiter, None)

    # ----------------------------------------------------------------------------------- APIs

    def _now(self) -> int:
        return self.ctx.now_ms()

    async def join_group(self, req: JoinGroup) -> JoinGroupResult:
        if not self._running:
            return JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        result = await self._parked(lambda w: self.core.join_group(req, w, self._now()))
        assert isinstance(result, JoinGroupResult)
        return result

    async def sync_group(self, req: SyncGroup) -> SyncGroupResult:
        if not self._running:
            return SyncGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        result = await self._parked(lambda w: self.core.sync_group(req, w, self._now()))
        assert isinstance(result, SyncGroupResult)
        return result

    async def heartbeat(self, req: Heartbeat) -> ErrorCode:
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        result, _ = await self._call(lambda: self.core.heartbeat(req, self._now()))
        assert isinstance(result, ErrorCode)
        return result

    async def leave_group(self, group_id: str, members: tuple[LeavingMember, ...]) -> LeaveGroupResult:
        if not self._running:
            return LeaveGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        result, _ = await self._call(lambda: self.core.leave_group(group_id, members, self._now()))
        assert isinstance(result, LeaveGroupResult)
        return result

    async def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResult:
        if not self._running:
            return ConsumerGroupHeartbeatResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        result, error = await self._call(lambda: self.core.consumer_group_heartbeat(req, self._now()))
        assert isinstance(result, ConsumerGroupHeartbeatResult)
        if error is not ErrorCode.NONE and result.error is ErrorCode.NONE:
            return ConsumerGroupHeartbeatResult(error, "The group's records could not be written.")
        return result

    def consumer_group_describe(self, group_ids: list[str]) -> list[tuple[str, ErrorCode, ConsumerGroup | None]]:
        if not self._running:
            return [(g, ErrorCode.COORDINATOR_NOT_AVAILABLE, None) for g in group_ids]
        return self.core.consumer_group_describe(group_ids, self._now())

    async def commit_offsets(self, req: OffsetCommit) -> PartitionErrors:
        if not self._running:
            return PartitionErrors(tuple((t, tuple((p.partition, ErrorCode.COORDINATOR_NOT_AVAILABLE) for p in ps))
                                         for t, ps in req.topics))
        reply, error = await self._call(lambda: self.core.commit_offsets(req, self._now()))
        value: PartitionErrors = reply.value
        return value if error is ErrorCode.NONE else value.with_error(error)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> OffsetFetchResult:
        if not self._running:
            return OffsetFetchResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self.core.fetch_offsets(group_id, topics, self._now())

    async def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]) -> OffsetDeleteResult:
        if not self._running:
            return OffsetDeleteResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        reply, error = await self._call(lambda: self.core.delete_offsets(group_id, topics, self._now()))
        value: OffsetDeleteResult = reply.value
        return value if error is ErrorCode.NONE else OffsetDeleteResult(error)

    def describe_groups(self, group_ids: list[str], *, unknown_is_error: bool) -> list[DescribedGroup]:
        if not self._running:
            return [DescribedGroup(g, ErrorCode.COORDINATOR_NOT_AVAILABLE, "") for g in group_ids]
        return self.core.describe_groups(group_ids, self._now(), unknown_is_error=unknown_is_error)

    def list_groups(self, states: list[str], types: list[str]) -> tuple[ErrorCode, list[ListedGroup]]:
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        return self.core.list_groups(states, types, self._now())

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, ErrorCode]]:
        if not self._running:
            return [(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in group_ids]
        reply, error = await self._call(lambda: self.core.delete_groups(group_ids, self._now()))
        value: list[tuple[str, ErrorCode]] = reply.value
        if error is ErrorCode.NONE:
            return value
        return [(g, error if e is ErrorCode.NONE else e) for g, e in value]

