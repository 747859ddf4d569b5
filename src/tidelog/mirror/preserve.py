"""``offsets = "preserve"``: copy whole batches so every record keeps its source offset.

The destination must be tidelog: records are written with MirrorProduce (tidelog's API key 32001,
``protocol/mirror_produce.py``), which appends batches at the offsets they carry. ``start`` first
reaches a bootstrap broker of each side over the side's own protocol (wire.py: TLS, SASL PLAIN/SCRAM
from the ``[source]``/``[destination]`` settings), so a refused password or certificate stops the
link at once with the broker and the user named; then it refuses to run, naming the broker, when
the destination's ApiVersions lacks the key (Apache Kafka has no such write path). Nothing is
created on the destination before that check. Destination topics are created marked
``mirror.source=<link>`` (topics.py), so nothing but this link writes them; an existing empty one is
marked by the link, a non-empty unmarked one (or one of another link) is refused, at start with an
error that stops the process before anything is changed.

The loop, one asyncio task per round:

1. **Position = the destination's log end offset.** Each partition's position is asked of its
   destination leader (MirrorProduce with null records) at start, after any error on it, and after
   a leadership change; it is then carried forward from each MirrorProduce answer. Nothing is kept
   on the mirror's side and no checkpoint is written.
2. **Read raw batches.** One Fetch (v12, read_uncommitted, so up to the source's high watermark, control
   batches and aborted data included) per source leader for all the partitions it leads, from each
   partition's position. A round fetches a quarter of ``link.budget.bytes`` (``ROUND_COPIES``),
   shared fairly by the partitions with a backlog (budget.py ``fetch_plan``: a share per partition,
   each leader's request sized by its busy partitions, partitions asked least recently served
   first), so what a round holds stays within the budget whatever the partition count, and a hot
   partition cannot keep the others waiting.
3. **Write them at their offsets** with MirrorProduce, acks=-1, one request per destination leader
   (batches.py keeps the whole batches at or past the position, trimming one that straddles it).

Exactly once: a batch is sent only from the destination's confirmed log end, and the destination
acknowledges a batch wholly below its log end without writing it (storage/source_offsets.py). So a
mirror killed at any moment and restarted, a retried request, or two mirror processes copying the
same partition, never write a record twice, and since the position never moves ahead of the
destination's end (an acks=-1 answer means every in-sync replica has the batch), there is no gap
that the source does not have: offsets left out on the destination are exactly those compaction,
retention or the log start took away on the source.

Work split: as in the transactional mode, the processes of a link are members of the consumer group
``tidelog-mirror.<link>`` on the destination, subscribed to the link topic ``__tidelog_mirror.<link>``
(one partition per shard, ``link.shards``); the group's assignment is the set of shards a process
copies, a source partition belonging to shard ``crc32("topic|partition") mod shards``. A dead
process's shards move after ``link.session.timeout.ms``. Nothing is read from or written to the link
topic in this mode and no fencing is needed: a taken shard's positions are asked again of the
destination, and while a rebalance lets two processes copy one partition, the second write of a
batch lies below the destination's end and is acknowledged without being written.

Errors: a source partition whose log start passed the position (retention) continues from the
source's log start (the destination keeps a gap, as the source does). A destination that is ahead
of its source (the source was truncated or recreated) stops that partition with an error. Other
partition errors re-ask the position and retry after ``RETRY_S``; an unreachable broker is retried
after the same back-off with fresh metadata.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v5.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from tidelog.clients.security import SaslAuthenticationError
from tidelog.clients.transactional import shared_settings
from tidelog.mirror.batches import ready
from tidelog.mirror.budget import LeaderFetch, fetch_plan
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.metrics import MirrorMetrics
from tidelog.mirror.position import shard_of
from tidelog.mirror.topics import TIMEOUT_S, TopicSync, ensure_link_topic, link_group_member, link_shards
from tidelog.mirror.wire import Side, Wire, leader_of, require_mirror_produce
from tidelog.net.kafka_connection import BrokerUnreachable
from tidelog.protocol.mirror_produce import (
    MirrorPartitionData,
    MirrorProduceRequest,
    MirrorTopicData,
)

log = logging.getLogger(__name__)
Key = tuple[str, int]  # source topic, partition
Address = tuple[str, int]
Item = tuple["PartitionCopy", bytes | None, int]  # a partition, its batches (None: ask the log end), records
RETRY_S = 0.5
# A round's bytes exist up to this many times at once (the Fetch answer's frame and its decoded
# records, the batches joined for MirrorProduce, the request's encoding): a round fetches
# budget.bytes // ROUND_COPIES, so that what it holds stays within budget.bytes.
ROUND_COPIES = 4
AUTH_RETRY_S = 5.0
FETCH_WAIT = i32Timedelta.parse(datetime.timedelta(milliseconds=200))
PRODUCE_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))
NONE, OFFSET_OUT_OF_RANGE = 0, 1


@dataclass
class PartitionCopy:
    topic: str  # source
    partition: int
    target: str  # destination topic
    shard: int  # shard_of(topic, partition, link.shards): which process of the link copies it
    source_leader: Address | None = None
    dest_leader: Address | None = None
    position: int = -1  # the destination's log end offset; -1 until asked
    fetch_from: int = -1  # above ``position`` only after the source's log start moved past it
    source_end: int = -1
    source_start: int = -1  # the source's log start, from the last fetch
    stopped: str = ""  # why this partition is no longer copied
    caught_up_at: float = 0.0

    @property
    def partition_key(self) -> Key:
        return self.topic, self.partition


class PreservingMirror:
    """Runs one ``offsets = "preserve"`` link process until ``stop`` is set (see the module docstring)."""

    def __init__(self, config: MirrorConfig, metrics: MirrorMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or MirrorMetrics()
        self.source_admin = AdminClient(shared_settings(config.source))
        self.dest_admin = AdminClient(shared_settings(config.destination))
        self.sync = TopicSync(config, self.source_admin, self.dest_admin)
        self.joined = threading.Event()  # readiness: set once the link group gave this process its shards
        self.group: Consumer | None = None
        self.owned: set[int] = set()  # shards (link topic partitions) the group gives this process
        self._group_error = ""
        self.partitions: dict[Key, PartitionCopy] = {}
        self.wire = Wire(config, timeout_s=TIMEOUT_S)
        self._stale = True  # metadata must be read again
        self._turn = 0  # fetch rounds so far
        self._round_bytes = 0
        self._served: dict[Key, int] = {}  # the round in which a partition last brought batches (budget.py)

    # ---- start ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._check()
        self.config = link_shards(self.config, self.dest_admin)  # shard_of() below needs the link's count
        self._refresh(first=True)
        self.config = ensure_link_topic(self.config, self.dest_admin)
        self.group = link_group_member(self.config)
        self.group.subscribe([self.config.link_topic], on_assign=self._assigned, on_revoke=self._revoked,
                             on_lost=self._revoked)
        log.info("mirror link %s (offsets preserved): %d partitions of %d topics, %d shards, budget %d bytes",
                 self.config.name, len(self.partitions), len({k[0] for k in self.partitions}), self.config.shards,
                 self.config.budget_bytes)

    # ---- shards come and go (the link group on the destination) ---------------------------------

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)  # the link topic is only the group's subject here; nothing is read
        for tp in partitions:
            self.owned.add(tp.partition)
            mine = [c for c in self.partitions.values() if c.shard == tp.partition]
            for copy in mine:
                copy.position = -1  # another process may have moved the destination: ask it
            log.info("shard %d taken: %d partitions", tp.partition, len(mine))
        self.metrics.shards.set((), len(self.owned))
        self.joined.set()

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.owned.discard(tp.partition)
            log.info("shard %d released", tp.partition)
        consumer.incremental_unassign(partitions)
        self.metrics.shards.set((), len(self.owned))

    def _poll_group(self) -> None:
        assert self.group is not None
        try:
            message = self.group.poll(0)
            error = message.error() if message is not None else None
        except KafkaException as exc:
            error = exc.args[0]
        if error is not None:
            self.metrics.errors.inc(("group",))
            if error.str() != self._group_error:
                log.warning("link group %s: %s", self.config.group_id, error.str())
            self._group_error = error.str()
        else:
            self._group_error = ""

    def _check(self) -> None:
        """Each side reached over its own protocol (a refused password or certificate fails here,
        named), and the destination asked whether it serves MirrorProduce."""

        async def ask() -> Any:
            try:
                await self.wire.reach("source")
                return await self.wire.reach("destination")
            finally:
                await self.wire.close()

        require_mirror_produce(*asyncio.run(ask()))

    def _refresh(self, first: bool = False) -> None:
        """Topics brought in step (topics.py; ``first``: a refused destination topic stops the start with
        ``LinkError``), then both clusters' leaders read (blocking admin calls)."""
        counts = self.sync.run(first)
        source = self.source_admin.list_topics(timeout=TIMEOUT_S)
        dest = self.dest_admin.list_topics(timeout=TIMEOUT_S)
        for topic, count in counts.items():
            target = self.config.topics.destination(topic)
            for partition in range(count):
                key = (topic, partition)
                copy = self.partitions.get(key) or self.partitions.setdefault(
                    key, PartitionCopy(topic, partition, target, shard_of(topic, partition, self.config.shards)))
                copy.source_leader = leader_of(source, topic, partition)
                dest_leader = leader_of(dest, target, partition)
                if dest_leader != copy.dest_leader:
                    copy.position = -1  # a new leader: ask it where its log ends
                copy.dest_leader = dest_leader
        self._stale = False

    # ---- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        try:
            asyncio.run(self._main(stop))
        finally:
            self.close()

    async def _main(self, stop: threading.Event) -> None:
        loop = asyncio.get_running_loop()
        refresh_at = time.monotonic() + self.config.metadata_refresh_ms / 1000
        try:
            while not stop.is_set():
                if self._stale or time.monotonic() >= refresh_at:
                    try:
                        await loop.run_in_executor(None, self._refresh)
                    except Exception as exc:  # an admin call failed: the clusters are asked again next round
                        self.metrics.errors.inc(("metadata",))
                        log.warning("metadata refresh failed: %s", exc)
                        await asyncio.sleep(RETRY_S)
                    refresh_at = time.monotonic() + self.config.metadata_refresh_ms / 1000
                self._poll_group()
                await self._ask_positions()
                await self._round()
                self._observe()
        finally:
            await self.wire.close()

    def _live(self) -> list[PartitionCopy]:
        """The partitions of this process's shards that can be copied now."""
        return [p for p in self.partitions.values()
                if not p.stopped and p.source_leader and p.dest_leader and p.shard in self.owned]

    async def _ask_positions(self) -> None:
        unknown = [p for p in self._live() if p.position < 0]
        by_leader: dict[Address, list[PartitionCopy]] = defaultdict(list)
        for copy in unknown:
            assert copy.dest_leader is not None
            by_leader[copy.dest_leader].append(copy)
        await asyncio.gather(*(self._write(leader, [(c, None, 0) for c in copies]) for leader, copies in by_leader.items()))

    async def _round(self) -> None:
        by_source: dict[Address, list[Key]] = defaultdict(list)
        busy: set[Key] = set()
        for copy in self._live():
            if copy.position >= 0:
                assert copy.source_leader is not None
                by_source[copy.source_leader].append(copy.partition_key)
                if copy.source_end < 0 or max(copy.position, copy.fetch_from) < copy.source_end:
                    busy.add(copy.partition_key)
        if not by_source:
            await asyncio.sleep(RETRY_S)
            return
        self._turn += 1
        plan = fetch_plan(self.config.budget_bytes // ROUND_COPIES, by_source, busy, self._served)
        self._round_bytes = 0
        await asyncio.gather(*(self._copy_from(leader, fetch) for leader, fetch in plan.items()))
        self.metrics.budget.set((), self._round_bytes)  # what this round held: fetched, then written

    async def _copy_from(self, leader: Address, fetch: LeaderFetch) -> None:
        # Exactly the plan's order (least recently served first), which the broker fills in: a topic
        # comes once per run of its partitions in that order, so it may come more than once.
        runs: list[tuple[str, list[PartitionCopy]]] = []
        for key in fetch.order:
            if not runs or runs[-1][0] != key[0]:
                runs.append((key[0], []))
            runs[-1][1].append(self.partitions[key])
        request = FetchRequest(
            max_wait=FETCH_WAIT, min_bytes=i32(1), max_bytes=i32(fetch.max_bytes), isolation_level=i8(0),
            session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
            topics=tuple(FetchTopic(topic=TopicName(topic), partitions=tuple(
                FetchPartition(partition=i32(c.partition), fetch_offset=i64(max(c.position, c.fetch_from)),
                               partition_max_bytes=i32(fetch.partition_max_bytes)) for c in run))
                for topic, run in runs))
        answer = await self._call("source", leader, request)
        if answer is None:
            return
        writes: dict[Address, list[Item]] = defaultdict(list)
        out_of_range: list[PartitionCopy] = []
        for topic in answer.responses:
            for data in topic.partitions:
                found = self.partitions.get((topic.topic, data.partition_index))
                if found is None or found.dest_leader is None:
                    continue
                copy, dest = found, found.dest_leader
                if int(data.error_code) == OFFSET_OUT_OF_RANGE:
                    out_of_range.append(copy)
                    continue
                if int(data.error_code) != NONE:
                    self.metrics.errors.inc(("source",))
                    log.warning("%s-%d: source fetch error %d; metadata is read again", copy.topic, copy.partition,
                                int(data.error_code))
                    self._stale = True
                    continue
                copy.source_end, copy.source_start = data.high_watermark, data.log_start_offset
                batches = ready(data.records, copy.position)
                if batches.batches:
                    self._served[copy.partition_key] = self._turn
                    self._round_bytes += len(batches.records)
                    writes[dest].append((copy, batches.records, batches.record_count))
                    if batches.trimmed:
                        log.info("%s-%d: %d batch(es) rebuilt from offset %d (the source was compacted since)",
                                 copy.topic, copy.partition, batches.trimmed, copy.position)
        del answer  # its records are copied into ``writes``: not held through the writes
        await asyncio.gather(*(self._write(dest, items) for dest, items in writes.items()))
        if out_of_range:
            await self._out_of_range(leader, out_of_range)

    async def _out_of_range(self, leader: Address, copies: list[PartitionCopy]) -> None:
        """The source's log start passed the position (go on from there, leaving the gap the source
        has) or the destination is ahead of the source's end (stop the partition, with an error)."""
        earliest = await self._list_offsets(leader, copies, -2)
        latest = await self._list_offsets(leader, copies, -1)
        for copy in copies:
            start, end = earliest.get(copy.partition_key), latest.get(copy.partition_key)
            if start is not None and copy.position < start:
                log.warning("%s-%d: the source starts at %d, past the mirrored end %d (retention or DeleteRecords):"
                            " continuing from there", copy.topic, copy.partition, start, copy.position)
                copy.fetch_from = start
            elif end is not None and copy.position > end:
                copy.stopped = (f"the destination {copy.target}-{copy.partition} ends at {copy.position}, past its "
                                f"source's end {end}: the source was truncated or recreated")
                self.metrics.errors.inc(("source",))
                log.error("%s-%d not mirrored any more: %s", copy.topic, copy.partition, copy.stopped)

    async def _list_offsets(self, leader: Address, copies: list[PartitionCopy], when: int) -> dict[Key, int]:
        by_topic: dict[str, list[PartitionCopy]] = defaultdict(list)
        for copy in copies:
            by_topic[copy.topic].append(copy)
        request = ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
            ListOffsetsTopic(name=TopicName(topic), partitions=tuple(
                ListOffsetsPartition(partition_index=i32(c.partition), timestamp=i64(when)) for c in group))
            for topic, group in by_topic.items()))
        answer = await self._call("source", leader, request)
        if answer is None:
            return {}
        return {(t.name, p.partition_index): int(p.offset) for t in answer.topics for p in t.partitions
                if int(p.error_code) == NONE}

    async def _write(self, leader: Address, items: list[Item]) -> None:
        """MirrorProduce ``items`` (null records: only ask the log end) and carry each answer's log end."""
        by_topic: dict[str, list[tuple[PartitionCopy, bytes | None]]] = defaultdict(list)
        for copy, records, _ in items:
            by_topic[copy.target].append((copy, records))
        starts = {(c.target, c.partition): c.source_start for c, _, _ in items}
        request = MirrorProduceRequest(
            link=self.config.name, acks=i16(-1), timeout=PRODUCE_TIMEOUT,
            topics=tuple(MirrorTopicData(name=target, partitions=tuple(
                MirrorPartitionData(index=i32(c.partition), log_start_offset=i64(starts[(target, c.partition)]),
                                    records=None if r is None else Records(r))
                for c, r in group))
                for target, group in by_topic.items()))
        answer = await self._call("destination", leader, request, PRODUCE_TIMEOUT.total_seconds() + TIMEOUT_S)
        if answer is None:
            for copy, _, _ in items:
                copy.position = -1
            return
        sent = {(copy.target, copy.partition): (copy, records, count) for copy, records, count in items}
        for topic in answer.topics:
            for result in topic.partitions:
                copy, records, count = sent[(topic.name, result.index)]
                if result.error_code == NONE:
                    if records is not None and result.duplicate_batches == 0:
                        self.metrics.copied(copy.topic, copy.partition, count, len(records))
                    copy.position = result.log_end_offset
                    copy.fetch_from = -1 if copy.fetch_from <= copy.position else copy.fetch_from
                    continue
                self.metrics.errors.inc(("destination",))
                log.warning("%s-%d -> %s: MirrorProduce error %d: %s", copy.topic, copy.partition, copy.target,
                            result.error_code, result.error_message or "")
                copy.position = -1  # ask again, after the back-off
                self._stale = True
        if any(copy.position < 0 for copy, _, _ in items):
            await asyncio.sleep(RETRY_S)

    async def _call(self, side: Side, address: Address, request: Any, timeout_s: float | None = None) -> Any:
        """One request on this process's connection to ``address`` (None, after a back-off, if it failed)."""
        try:
            return await self.wire.call(side, address, request, timeout_s)
        except BrokerUnreachable as exc:
            self.metrics.errors.inc((side,))
            log.warning("%s broker %s:%d: %s", side, address[0], address[1], exc)
            self._stale = True
            await asyncio.sleep(RETRY_S)
        except SaslAuthenticationError as exc:  # credentials changed under a running link: retried, slowly
            self.metrics.errors.inc((side,))
            log.error("%s broker %s:%d: %s", side, address[0], address[1], exc)
            self._stale = True
            await asyncio.sleep(AUTH_RETRY_S)
        return None

    def _observe(self) -> None:
        now = time.monotonic()
        for copy in self.partitions.values():
            labels = (copy.topic, str(copy.partition))
            if copy.shard not in self.owned:  # reported by the process that owns it
                self.metrics.lag_records.remove(labels)
                self.metrics.lag_seconds.remove(labels)
                copy.caught_up_at = 0.0
                continue
            lag = max(0, copy.source_end - copy.position) if copy.source_end >= 0 and copy.position >= 0 else 0
            if lag == 0 or copy.caught_up_at == 0.0:
                copy.caught_up_at = now
            self.metrics.lag_records.set(labels, lag)
            self.metrics.lag_seconds.set(labels, 0.0 if lag == 0 else now - copy.caught_up_at)

    def close(self) -> None:
        """Leave the link group (its shards move at once). Nothing to commit: the destination holds the position."""
        if self.group is not None:
            self.group.close()
            self.group = None

