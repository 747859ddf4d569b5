"""The replica manager: this broker's part in replication, driven by the cluster image.

Only in a cluster (``metadata.store=etcd://...``); a single node has none and keeps its high watermark
at the log end. On every image the store publishes (``apply``), each partition this broker holds a
replica of becomes one of:

- **led**: the log gets the new leader epoch's start offset (``begin_leader_epoch``), and a
  :class:`~tidelog.replication.leader_state.LeaderState` tracks the followers' fetches, the ISR and the
  high watermark. ISR changes it proposes are written to the store with compare-and-set
  (``alter_partition``) and take effect when the store confirms them;
- **followed**: the partition is handed to the follower fetcher of its leader (one per leader broker);
- **offline** (no leader): neither; the log stays as it is.

A partition whose topic left the image, or that no longer lists this broker, has its log deleted.

Nearest-replica reads (KIP-392): with ``replica.selector.class`` set to Kafka's rack-aware selector,
``preferred_read_replica`` names an in-sync follower in a consumer's rack
(``replication.read_replica``); a follower serves such consumers from its own log up to the high
watermark its fetcher last got from the leader (``follower_log``).

A partition led here in which the scrubber found damage (storage/damage.py) is handed over: an in-sync
follower becomes leader and this broker leaves the ISR (``controller.elections.hand_over``, written by
compare-and-set like an ISR change), then repairs its copy as a follower. With no other in-sync replica
it stays leader and the damaged range keeps answering CORRUPT_MESSAGE; the check repeats with the lag
check, so a follower that catches up later still takes over. A follower with a damaged copy first leaves
the ISR the same way (``may_repair``), then its fetcher truncates and refetches: the repair goes below the
high watermark, and no ISR member may lack a committed record.

Producers waiting for acks=all wait here until the high watermark passes their batch. The waiter is
registered in the same turn of the event loop as the append (``watch_high_watermark``), and every
leadership change fails the waiters it finds: the produce path awaits between its append and its
answer (rolls, flushes, a turn for woken fetches), and a waiter registered after leadership had moved
would wait for a high watermark this broker no longer moves until the request timed out (30 s of
librdkafka's request.timeout.ms); now the client hears NOT_LEADER_OR_FOLLOWER at once and retries at
the new leader, whose producer state knows the batch. A broker whose metadata lease is in doubt (``store.lease_valid()`` false: no renewal for
``broker.session.timeout.ms`` minus two heartbeats) refuses writes as leader, so it stops acting as
leader before the controller can elect another (the timing argument: docs/dev/cluster-design.md).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from tidelog.common.config import RACK_AWARE_SELECTOR, BrokerConfig
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.controller.elections import hand_over
from tidelog.metadata.image import BrokerRegistration, ClusterImage, PartitionImage
from tidelog.replication.fetcher import FetcherSettings, FollowerFetcher
from tidelog.replication.leader_state import IsrProposal, LeaderState
from tidelog.replication.read_replica import LEADER, ReplicaView, select_read_replica
from tidelog.replication.throttle import ReplicationThrottles
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager
from tidelog.storage.partition_metadata import encode_topic_id, read_topic_id, write_topic_id

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicationStore(Protocol):
    """What the replica manager needs of the metadata store (metadata/etcd_store.py)."""

    image: ClusterImage

    def lease_valid(self) -> bool: ...

    async def alter_partition(self, topic: str, index: int, expected: PartitionImage, new: PartitionImage) -> bool: ...


@dataclass(slots=True)
class Waiter:
    required_offset: int
    future: asyncio.Future[ErrorCode]


def fetcher_settings(config: BrokerConfig) -> FetcherSettings:
    return FetcherSettings(
        max_bytes=config.get_int("replica.fetch.response.max.bytes"),
        partition_max_bytes=config.get_int("replica.fetch.max.bytes"),
        max_wait_ms=config.get_int("replica.fetch.wait.max.ms"),
        min_bytes=config.get_int("replica.fetch.min.bytes"),
        backoff_ms=config.get_int("replica.fetch.backoff.ms"),
    )


class ReplicaManager:
    def __init__(
        self, node_id: int, config: BrokerConfig, store: ReplicationStore, logs: LogManager,
        log_config: Callable[[str], LogConfig], min_insync: Callable[[str], int],
        wake_fetches: Callable[[TopicPartition], object], now_ms: Callable[[], int],
        throttles: ReplicationThrottles | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.store = store
        self.logs = logs
        self.log_config = log_config
        self.min_insync = min_insync
        self.wake_fetches = wake_fetches
        self.now_ms = now_ms
        self.throttles = throttles
        # Set by the node to its disk pools': followers' rolls made on the log dir's pool, not the loop.
        self.roll_ahead: Callable[[PartitionLog, bytes], Awaitable[None]] | None = None
        self.lag_time_max_ms = config.get_int("replica.lag.time.max.ms")
        self.listener = self.inter_broker_listener(config)
        self.settings = fetcher_settings(config)
        self.rack_aware_reads = config.get("replica.selector.class") == RACK_AWARE_SELECTOR
        self.leaders: dict[TopicPartition, LeaderState] = {}
        self.followed: dict[TopicPartition, int] = {}
        self.fetchers: dict[int, FollowerFetcher] = {}
        self.waiters: dict[TopicPartition, list[Waiter]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._lag_task: asyncio.Task[None] | None = None
        self._fenced = False
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}  # partition.metadata already checked
        self._handing_over: set[TopicPartition] = set()  # a hand-over write in flight
        self._no_healthy_replica: set[TopicPartition] = set()  # damaged, led here, already logged as stuck

    @staticmethod
    def inter_broker_listener(config: BrokerConfig) -> str:
        named = config.get("inter.broker.listener.name")
        if named:
            return str(named).upper()
        listeners = config.get("listeners")
        assert isinstance(listeners, list) and listeners
        return listeners[0].split("://", 1)[0].upper()

    # -- life cycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._lag_task = asyncio.get_running_loop().create_task(self._watch_lag(), name="isr-lag-check")
        self.apply(self.store.image)

    def begin_shutdown(self) -> None:
        """Controlled shutdown: the registration is about to go; stop checking lag and fencing."""
        if self._lag_task is not None:
            self._lag_task.cancel()

    async def stop(self) -> None:
        self.begin_shutdown()
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
        for task in list(self._tasks):
            task.cancel()
        for tp in list(self.waiters):
            self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # -- applying the image -----------------------------------------------------------------------

    def on_image(self, _old: ClusterImage, new: ClusterImage) -> None:
        self.apply(new)

    def apply(self, image: ClusterImage) -> None:
        held: set[TopicPartition] = set()
        for topic in image.topics.values():
            for partition in topic.partitions:
                if self.node_id not in partition.replicas:
                    continue
                tp = (topic.name, partition.index)
                held.add(tp)
                try:
                    plog = self._log_of(tp, topic.topic_id)
                except Exception:
                    log.exception("cannot open the log of %s-%d", *tp)
                    continue
                if partition.leader == self.node_id:
                    self._lead(tp, partition, plog)
                elif partition.leader >= 0:
                    self._follow(tp, partition)
                else:
                    self._release(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for tp in set(self.leaders) | set(self.followed):
            if tp not in held:
                self._release(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for topic_name, index in self.logs.all_partitions():
            if (topic_name, index) not in held:
                known = image.topics.get(topic_name)
                reason = "its topic is gone" if known is None else "this broker is no longer a replica"
                log.info("deleting the log of %s-%d: %s", topic_name, index, reason)
                self.logs.delete_log(topic_name, index)
                self._topic_ids.pop((topic_name, index), None)
                self.wake_fetches((topic_name, index))

    def _log_of(self, tp: TopicPartition, topic_id: uuid.UUID) -> PartitionLog:
        """The partition's local log, created if missing. A log left by an older topic of the same name
        (``partition.metadata`` names another id) is deleted first: its data is not this topic's."""
        plog = self.logs.get_log(*tp)
        if plog is not None and self._topic_ids.get(tp) == topic_id:
            return plog
        recorded = None
        if plog is not None:
            recorded = read_topic_id(plog.dir)
            if recorded is not None and recorded != topic_id:
                log.warning("deleting the log of %s-%d: it belongs to an older topic of that name (id %s, now %s)",
                            *tp, encode_topic_id(recorded), encode_topic_id(topic_id))
                self._release(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                self.logs.delete_log(*tp)
                plog = recorded = None
        if plog is None:
            plog = self.logs.create_log(tp[0], tp[1], self.log_config(tp[0]))
        if recorded != topic_id:  # an fsync per partition: only when the file does not say so already
            write_topic_id(plog.dir, topic_id)
        self._topic_ids[tp] = topic_id
        return plog

    def open_logs(self, image: ClusterImage) -> None:
        """Open (or create) the log of every partition ``image`` places on this broker: the disk work
        of the first ``apply``. Run in a thread before the broker registers: on the event loop it
        would hold up the lease's keep-alives (two fsyncs per new partition, hundreds of partitions)."""
        for topic in image.topics.values():
            for partition in topic.partitions:
                if self.node_id in partition.replicas:
                    try:
                        self._log_of((topic.name, partition.index), topic.topic_id)
                    except Exception:
                        log.exception("cannot open the log of %s-%d", topic.name, partition.index)

    def _lead(self, tp: TopicPartition, partition: PartitionImage, plog: PartitionLog) -> None:
        current = self.leaders.get(tp)
        if current is not None and current.leader_epoch == partition.leader_epoch:
            if partition.partition_epoch > current.partition_epoch:
                self._set_high_watermark(tp, plog, current.isr_committed(partition.isr, partition.partition_epoch, plog.log_end_offset))
            current.replicas = partition.replicas
            return
        self._unfollow(tp)
        plog.begin_leader_epoch(partition.leader_epoch)
        self.leaders[tp] = LeaderState.become_leader(
            self.node_id, partition.leader_epoch, partition.partition_epoch, partition.replicas, partition.isr,
            plog.log_end_offset, plog.high_watermark, self.now_ms(), self.lag_time_max_ms,
        )
        log.info("leading %s-%d at epoch %d (ISR %s, log end %d, high watermark %d)", *tp, partition.leader_epoch,
                 list(partition.isr), plog.log_end_offset, plog.high_watermark)
        self._set_high_watermark(tp, plog, self.leaders[tp].on_append(plog.log_end_offset))

    def _follow(self, tp: TopicPartition, partition: PartitionImage) -> None:
        if tp in self.leaders:
            del self.leaders[tp]
            self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.wake_fetches(tp)
        previous = self.followed.get(tp)
        if previous is not None and previous != partition.leader:
            self._unfollow(tp)
        if previous != partition.leader:
            log.info("following %s-%d from leader %d at epoch %d", *tp, partition.leader, partition.leader_epoch)
        self.followed[tp] = partition.leader
        self._fetcher(partition.leader).follow(tp, partition.leader_epoch)

    def _unfollow(self, tp: TopicPartition) -> None:
        leader = self.followed.pop(tp, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].unfollow(tp)

    def _release(self, tp: TopicPartition, error: ErrorCode) -> None:
        self._unfollow(tp)
        if self.leaders.pop(tp, None) is not None:
            self._fail_waiters(tp, error)
            self.wake_fetches(tp)

    def _fetcher(self, leader: int) -> FollowerFetcher:
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = FollowerFetcher(self.node_id, leader, lambda: self.address_of(leader), self.logs, self.settings,
                                      on_high_watermark=self.wake_fetches, may_repair=self.may_repair,
                                      throttles=self.throttles, roll_ahead=self.roll_ahead)
            self.fetchers[leader] = fetcher
            fetcher.start()
        return fetcher

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where broker ``node_id`` takes inter-broker requests (its inter-broker listener, else its first)."""
        broker: BrokerRegistration | None = self.store.image.brokers.get(node_id)
        if broker is None:
            return None
        for endpoint in broker.endpoints:
            if endpoint.name.upper() == self.listener:
                return endpoint.host, endpoint.port
        return (broker.endpoints[0].host, broker.endpoints[0].port) if broker.endpoints else None

    # -- the leader's side --------------------------------------------------------------------------

    @property
    def fenced(self) -> bool:
        """This broker's metadata session is in doubt: it must not act as leader."""
        return not self.store.lease_valid()

    def leader_state(self, tp: TopicPartition) -> LeaderState:
        """The partition's leader state; NOT_LEADER_OR_FOLLOWER unless this broker leads it now."""
        state = self.leaders.get(tp)
        if state is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return state

    def follower_log(self, tp: TopicPartition) -> PartitionLog:
        """The log of a partition this broker follows, for a consumer's read (KIP-392);
        NOT_LEADER_OR_FOLLOWER if it neither leads nor follows it."""
        plog = self.logs.get_log(*tp) if tp in self.followed else None
        if plog is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return plog

    def preferred_read_replica(self, tp: TopicPartition, client_rack: str | None, fetch_offset: int) -> int:
        """The follower a consumer in ``client_rack`` should read ``tp`` from, or -1 (read here)."""
        state = self.leaders.get(tp)
        plog = self.logs.get_log(*tp)
        if not self.rack_aware_reads or not client_rack or state is None or plog is None:
            return LEADER
        brokers = self.store.image.brokers

        def rack(node_id: int) -> str | None:
            registration = brokers.get(node_id)
            return registration.rack if registration is not None else None

        leader = ReplicaView(self.node_id, rack(self.node_id), plog.log_end_offset, 0)
        followers = [ReplicaView(b, rack(b), leo, since, start)
                     for b, leo, since, start in state.in_sync_followers(self.now_ms())
                     if b in brokers]  # a broker whose session ended cannot be reached
        return select_read_replica(client_rack, leader, followers, fetch_offset)

    def check_writable(self, tp: TopicPartition, acks: int, min_insync: int) -> LeaderState:
        state = self.leader_state(tp)
        if not self.store.lease_valid():
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "this broker's metadata session is in doubt")
        if acks == -1 and state.in_sync_count() < min_insync:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {list(state.isr)} is insufficient to satisfy the min.isr "
                f"requirement of {min_insync} for partition {tp[0]}-{tp[1]}",
            )
        return state

    def appended(self, tp: TopicPartition, plog: PartitionLog) -> None:
        state = self.leaders.get(tp)
        if state is not None:
            self._set_high_watermark(tp, plog, state.on_append(plog.log_end_offset))

    def follower_fetched(self, tp: TopicPartition, replica: int, fetch_offset: int, leader_epoch: int,
                         log_start_offset: int = -1) -> None:
        """Record a follower's fetch (``log_start_offset``: the follower's own, -1 if its request has none);
        raises KafkaError for a fetch the leader must refuse."""
        state = self.leader_state(tp)
        if leader_epoch >= 0 and leader_epoch < state.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if leader_epoch > state.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if replica == self.node_id or replica not in state.replicas:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {replica} is not a replica of {tp[0]}-{tp[1]}")
        plog = self.logs.get_log(*tp)
        if plog is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if fetch_offset > plog.log_end_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
        new_hw, proposal = state.on_follower_fetch(replica, fetch_offset, plog.log_end_offset, self.now_ms(),
                                                   log_start_offset)
        self._set_high_watermark(tp, plog, new_hw)
        if proposal is not None:
            self._propose(tp, state, proposal)

    def _set_high_watermark(self, tp: TopicPartition, plog: PartitionLog, new_hw: int | None) -> None:
        if new_hw is None:
            return
        hw = plog.update_high_watermark(new_hw)
        self.wake_fetches(tp)
        waiters = self.waiters.get(tp)
        if not waiters:
            return
        state = self.leaders.get(tp)
        min_insync = self.min_insync(tp[0])
        keep = []
        for waiter in waiters:
            if waiter.future.done():
                continue
            if waiter.required_offset <= hw:
                short = state is not None and len(state.maximal_isr) < min_insync
                waiter.future.set_result(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if short else ErrorCode.NONE)
            else:
                keep.append(waiter)
        if keep:
            self.waiters[tp] = keep
        else:
            del self.waiters[tp]

    def watch_high_watermark(self, tp: TopicPartition, required_offset: int) -> asyncio.Future[ErrorCode]:
        """acks=all: a future the high watermark's passing ``required_offset`` (the batch's end) resolves
        with NONE, and a leadership change with NOT_LEADER_OR_FOLLOWER. Call it in the turn of the event
        loop that appended the batch: registered later, it could miss the leadership change it must hear
        of (resolved at once when this broker no longer leads the partition)."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        plog = self.logs.get_log(*tp)
        if tp not in self.leaders:
            future.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif plog is not None and plog.high_watermark >= required_offset:
            future.set_result(ErrorCode.NONE)
        else:
            self.waiters.setdefault(tp, []).append(Waiter(required_offset, future))
        return future

    @staticmethod
    async def await_high_watermark(watched: asyncio.Future[ErrorCode], timeout_ms: int) -> ErrorCode:
        """The outcome of :meth:`watch_high_watermark`'s future; REQUEST_TIMED_OUT after ``timeout_ms``."""
        try:
            return await asyncio.wait_for(watched, timeout_ms / 1000)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    def wait_for_high_watermark(self, tp: TopicPartition, required_offset: int, timeout_ms: int) -> Awaitable[ErrorCode]:
        """Both at once, for a caller that appended in this same turn of the event loop (the waiter is
        registered by this call, before any await)."""
        return self.await_high_watermark(self.watch_high_watermark(tp, required_offset), timeout_ms)

    def _fail_waiters(self, tp: TopicPartition, error: ErrorCode) -> None:
        for waiter in self.waiters.pop(tp, []):
            if not waiter.future.done():
                waiter.future.set_result(error)

    # -- ISR changes ---------------------------------------------------------------------------------

    def _propose(self, tp: TopicPartition, state: LeaderState, proposal: IsrProposal) -> None:
        task = asyncio.get_running_loop().create_task(self._write_isr(tp, state, proposal))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_isr(self, tp: TopicPartition, state: LeaderState, proposal: IsrProposal) -> None:
        topic = self.store.image.topics.get(tp[0])
        current = topic.partitions[tp[1]] if topic is not None and tp[1] < len(topic.partitions) else None
        if current is None or current.partition_epoch != proposal.partition_epoch or current.leader != self.node_id:
            state.proposal_failed()
            return
        joining = set(proposal.isr) - set(current.isr)
        if any(broker not in self.store.image.brokers for broker in joining):
            # A broker that deregistered (controlled shutdown) or whose session ended does not rejoin
            # the ISR, even if it fetched moments ago (Kafka's KIP-841 rule).
            state.proposal_failed()
            return
        new = replace(current, isr=proposal.isr, partition_epoch=current.partition_epoch + 1)
        try:
            written = await self.store.alter_partition(tp[0], tp[1], current, new)
        except Exception as exc:
            log.warning("ISR change of %s-%d to %s not written: %s", *tp, list(proposal.isr), exc)
            written = False
        if self.leaders.get(tp) is not state:
            return
        plog = self.logs.get_log(*tp)
        if not written or plog is None:
            state.proposal_failed()
            return
        log.info("ISR of %s-%d: %s -> %s", *tp, list(current.isr), list(new.isr))
        self._set_high_watermark(tp, plog, state.isr_committed(new.isr, new.partition_epoch, plog.log_end_offset))

    async def _watch_lag(self) -> None:
        interval = max(0.05, self.lag_time_max_ms / 2000)
        while True:
            await asyncio.sleep(min(interval, 0.5))
            now = self.now_ms()
            fenced = not self.store.lease_valid()
            if fenced and not self._fenced:
                log.warning("metadata session in doubt: refusing writes as leader until it is renewed")
                for tp in list(self.waiters):
                    self._fail_waiters(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self._fenced = fenced
            if fenced:
                continue
            for tp, state in list(self.leaders.items()):
                proposal = state.check_lagging(now)
                if proposal is not None:
                    self._propose(tp, state, proposal)
                self._check_damage(tp, state, now)

    # -- damaged copies: a follower leaves the ISR before its repair, a leader hands over --------------

    def may_repair(self, tp: TopicPartition) -> bool:
        """Whether this follower may truncate its damaged copy of ``tp`` (below the high watermark) now:
        only once it is out of the ISR, so that no election can pick a replica lacking committed
        records. Until then it asks to leave (compare-and-set, like the leader's ISR changes)."""
        topic = self.store.image.topics.get(tp[0])
        current = topic.partitions[tp[1]] if topic is not None and tp[1] < len(topic.partitions) else None
        if current is None or self.node_id not in current.isr:
            return True
        if tp not in self._handing_over and current.leader not in (self.node_id, -1):
            self._handing_over.add(tp)
            task = asyncio.get_running_loop().create_task(self._leave_isr(tp, current))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return False

    async def _leave_isr(self, tp: TopicPartition, current: PartitionImage) -> None:
        new = replace(current, isr=tuple(r for r in current.isr if r != self.node_id),
                      partition_epoch=current.partition_epoch + 1)
        try:
            if await self.store.alter_partition(tp[0], tp[1], current, new):
                log.warning("%s-%d: this follower's copy is damaged: it left the ISR (%s -> %s) to truncate and "
                            "fetch the range again; the leader adds it back once it caught up",
                            *tp, list(current.isr), list(new.isr))
        except Exception as exc:
            log.warning("%s-%d: leaving the ISR for a repair not written (tried again shortly): %s", *tp, exc)
        finally:
            self._handing_over.discard(tp)

    def _check_damage(self, tp: TopicPartition, state: LeaderState, now_ms: int) -> None:
        """The scrubber found damage in a partition led here: give leadership to an in-sync follower."""
        plog = self.logs.get_log(*tp)
        if plog is None or not plog.damaged_ranges:
            self._no_healthy_replica.discard(tp)
            return
        if tp in self._handing_over:
            return
        self._handing_over.add(tp)
        task = asyncio.get_running_loop().create_task(self._hand_over(tp, state, plog, now_ms))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _hand_over(self, tp: TopicPartition, state: LeaderState, plog: PartitionLog, now_ms: int) -> None:
        """Write the hand-over (compare-and-set on the partition's state, as ISR changes are): an ISR
        follower heard from in this leadership leads, this broker leaves the ISR (its copy lacks
        committed records until repaired) and then follows, and its fetcher repairs the range."""
        try:
            topic = self.store.image.topics.get(tp[0])
            current = topic.partitions[tp[1]] if topic is not None and tp[1] < len(topic.partitions) else None
            if current is None or current.leader != self.node_id or current.leader_epoch != state.leader_epoch:
                return
            brokers = self.store.image.brokers
            eligible = {b for b, _leo, _since, _start in state.in_sync_followers(now_ms) if b in brokers}
            new = hand_over(current, self.node_id, eligible)
            damaged = plog.damaged_ranges[0].describe() if plog.damaged_ranges else "range"
            if new is None:
                if tp not in self._no_healthy_replica:
                    self._no_healthy_replica.add(tp)
                    log.error("%s-%d is damaged (%s) and no other in-sync replica can lead it: staying leader, "
                              "fetches of the range get CORRUPT_MESSAGE until an in-sync follower can take over",
                              *tp, damaged)
                return
            if await self.store.alter_partition(tp[0], tp[1], current, new):
                self._no_healthy_replica.discard(tp)
                log.warning("%s-%d is damaged (%s): broker %d (in sync) leads it now at epoch %d; this broker leaves "
                            "the ISR and repairs its copy from the new leader", *tp, damaged, new.leader, new.leader_epoch)
        except Exception as exc:
            log.warning("hand-over of damaged %s-%d not written (tried again shortly): %s", *tp, exc)
        finally:
            self._handing_over.discard(tp)
