"""Transaction markers: written here as a partition's leader, or sent to the leader that must write them.

Two halves, both used by the transaction coordinator (``broker/txn_runtime.py``) and the first also by
the WriteTxnMarkers handler (``handlers/txn_markers.py``):

:class:`MarkerWriter` writes one transaction's COMMIT or ABORT control batch into partitions this
broker leads, as Kafka's ``ReplicaManager.appendRecords`` does for WriteTxnMarkers:

- each partition must be led here now (NOT_LEADER_OR_FOLLOWER otherwise; in a cluster
  ``ReplicaManager.check_writable`` with acks=all, so NOT_ENOUGH_REPLICAS below
  ``min.insync.replicas``); a marker whose coordinator epoch is below the one the partition last saw
  from this producer's coordinator is refused with TRANSACTION_COORDINATOR_FENCED (a coordinator that
  lost its ``__transaction_state`` partition cannot end a transaction the new one owns);
- a ``__consumer_offsets`` partition first hands the transaction's offsets to the group coordinator
  (COMMIT: written as plain commits, ABORT: dropped), and only then takes the marker: while the marker
  is missing the producer's transactional offset batch stays open in that log, which is what lets a
  group coordinator that took over after a crash read the offsets back (``recover_offsets``);
- the answer waits until every marker is durable: replicated to the ISR (high watermark) in a
  cluster, fsynced on a single node.

:class:`MarkerChannel` makes sure every partition of a transaction gets its marker, after Kafka's
``TransactionMarkerChannelManager``: partitions are grouped by their current leader (cluster image);
this broker's own go straight to the writer (no network hop, so a single node behaves as before);
the others go over the Kafka protocol as WriteTxnMarkers v1, one request per destination broker
carrying every transaction queued for it. Partitions answered with a retriable error
(``coordinator/txn_markers.py``) are asked again after ``RETRY_BACKOFF_S``, from the metadata as it
is then, until all are done, the coordinator is fenced, or it no longer owns the transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as wtm
from kio.static.primitive import i16, i32

from tidelog.broker.coordinator_host import CoordinatorHost
from tidelog.broker.group_runtime import GroupRuntime
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.coordinator.records import InvalidRecord, OffsetCommitRecord
from tidelog.coordinator.records import decode as decode_offset_record
from tidelog.coordinator.txn_markers import NO_LEADER, Outcome, PendingMarkers, TopicPartition
from tidelog.net.kafka_connection import BrokerUnreachable, KafkaConnection
from tidelog.protocol.records import (
    LOG_OVERHEAD,
    ControlType,
    build_control_batch,
    decode_records,
    iter_batches,
)
from tidelog.storage.log import PartitionLog


class TxnHost(CoordinatorHost, Protocol):
    """The transaction coordinator's needs: the host's, and the group coordinator for offsets."""

    groups: GroupRuntime | None

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
APPEND_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms, its bound on the coordinator's replicated appends
RETRY_BACKOFF_S = 0.1
READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Marker:
    """One transaction's end, for some of its partitions."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]

    def only(self, partitions: list[TopicPartition]) -> Marker:
        return Marker(self.producer_id, self.producer_epoch, self.commit, self.coordinator_epoch, tuple(partitions))


def transactional_offsets(data: bytes, producer_id: int) -> list[OffsetCommitRecord]:
    """The offset commits in the transactional (non-control) batches of ``producer_id`` in ``data``."""
    out: list[OffsetCommitRecord] = []
    for header, pos in iter_batches(data, validate=True):
        if header.is_control or not header.is_transactional or header.producer_id != producer_id:
            continue
        for record in decode_records(memoryview(data)[pos : pos + header.batch_length + LOG_OVERHEAD]):
            if record.key is None:
                continue
            try:
                decoded = decode_offset_record(bytes(record.key), None if record.value is None else bytes(record.value))
            except InvalidRecord as exc:
                log.warning("transactional offset record at %d does not decode: %s", record.offset, exc)
                continue
            if isinstance(decoded, OffsetCommitRecord):
                out.append(decoded)
    return out


async def durable(ctx: TxnHost, appended: dict[TopicPartition, tuple[PartitionLog, int]]) -> dict[TopicPartition, ErrorCode]:
    """Wait until each log holds its append durably: the high watermark passes ``end`` in a cluster
    (REQUEST_TIMED_OUT after ``APPEND_TIMEOUT_MS``); on a single node the append itself, plus an
    fsync where the log's flush policy asks for one (``flush.messages``, ``flush.ms``), as for any
    other write and as Kafka does (its coordinators never fsync per write either)."""
    if not appended:
        return {}
    replicas = ctx.replicas
    if replicas is not None:
        errors = await asyncio.gather(*(
            replicas.wait_for_high_watermark(tp, end, APPEND_TIMEOUT_MS) for tp, (_, end) in appended.items()
        ))
        return dict(zip(appended, errors, strict=True))
    loop = asyncio.get_running_loop()
    results: dict[TopicPartition, ErrorCode] = {}
    now_ms = ctx.now_ms()
    for tp, (plog, _) in appended.items():
        try:
            if plog.flush_owed(now_ms):
                await loop.run_in_executor(None, plog.flush)
            results[tp] = ErrorCode.NONE
        except KafkaError as exc:
            log.error("flushing %s-%d failed: %s", *tp, exc)
            results[tp] = exc.code
    return results


# ------------------------------------------------------------------------------------ the writer


class MarkerWriter:
    def __init__(self, ctx: TxnHost) -> None:
        self.ctx = ctx

    async def write(self, marker: Marker) -> dict[TopicPartition, ErrorCode]:
        """Write ``marker`` into each of its partitions led here; one error code per partition."""
        results: dict[TopicPartition, ErrorCode] = {}
        offsets = [p for t, p in marker.partitions if t == OFFSETS_TOPIC]
        if offsets:
            results.update(await self._complete_offsets(marker, offsets))
        appended: dict[TopicPartition, tuple[PartitionLog, int]] = {}
        for tp in marker.partitions:
            if tp in results:
                continue
            try:
                appended[tp] = self._append(tp, marker)
            except KafkaError as exc:
                results[tp] = exc.code
            except Exception:
                log.exception("marker for producer %d to %s-%d failed", marker.producer_id, *tp)
                results[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
        results.update(await durable(self.ctx, appended))
        return results

    def _append(self, tp: TopicPartition, marker: Marker) -> tuple[PartitionLog, int]:
        topic, index = tp
        known = self.ctx.image.topics.get(topic)
        if known is None or not 0 <= index < len(known.partitions):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        replicas = self.ctx.replicas
        plog = self.ctx.logs.get_log(topic, index)
        if plog is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER if replicas is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if replicas is None:
            leader_epoch = known.partitions[index].leader_epoch
        else:
            leader_epoch = replicas.check_writable(tp, -1, self.min_insync(topic)).leader_epoch
        entry = plog.producers.producers.get(marker.producer_id)
        if entry is not None and entry.coordinator_epoch > marker.coordinator_epoch:
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"coordinator epoch {marker.coordinator_epoch} < {entry.coordinator_epoch}")
        now = self.ctx.now_ms()
        kind = ControlType.COMMIT if marker.commit else ControlType.ABORT
        batch = build_control_batch(kind, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, now)
        plog.append_as_leader(batch, leader_epoch=leader_epoch, now_ms=now, from_client=False)
        if replicas is not None:
            replicas.appended(tp, plog)
        self.ctx.purgatory.notify(tp)
        return plog, plog.log_end_offset

    def min_insync(self, topic: str) -> int:
        known = self.ctx.image.topics.get(topic)
        value = self.ctx.topics.resolved_config(known).get("min.insync.replicas") if known is not None else 1
        return value if isinstance(value, int) else 1

    # -- __consumer_offsets ------------------------------------------------------------------

    async def _complete_offsets(self, marker: Marker, partitions: list[int]) -> dict[TopicPartition, ErrorCode]:
        """COMMIT: the offsets the producer sent with TxnOffsetCommit become plain commits; ABORT: dropped.

        Only for partitions whose groups are served here (loaded); the others get the error that makes
        the coordinator ask again (COORDINATOR_LOAD_IN_PROGRESS while loading) or ask the new leader."""
        groups = self.ctx.groups
        if groups is None or not groups.running:
            return {(OFFSETS_TOPIC, p): ErrorCode.COORDINATOR_NOT_AVAILABLE for p in partitions}
        state = groups.core.state
        errors: dict[TopicPartition, ErrorCode] = {}
        ready = []
        for p in partitions:
            if p in state.active:
                ready.append(p)
            else:
                errors[(OFFSETS_TOPIC, p)] = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if p in state.loading
                                              else ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if not ready:
            return errors
        manager = groups.core.offset_manager
        if marker.commit and marker.producer_id not in manager.pending_txn:
            self.recover_offsets(marker.producer_id, ready)
        manager.complete_txn(marker.producer_id, marker.commit, self.ctx.now_ms())
        error = await groups.drain()  # the commits queued above, durable before the marker goes in
        if error is not ErrorCode.NONE:
            errors.update({(OFFSETS_TOPIC, p): error for p in ready})
        return errors

    def recover_offsets(self, producer_id: int, partitions: list[int]) -> None:
        """The offsets of an unfinished transaction this broker did not receive itself (a restart, or
        another group coordinator before a failover), read back from the producer's open
        transactional batch in ``__consumer_offsets``."""
        groups = self.ctx.groups
        assert groups is not None
        held = groups.core.offset_manager.pending_txn.setdefault(producer_id, {})
        for partition in partitions:
            plog = self.ctx.logs.get_log(OFFSETS_TOPIC, partition)
            entry = None if plog is None else plog.producers.producers.get(producer_id)
            if plog is None or entry is None or entry.txn_first_offset < 0:
                continue
            offset = entry.txn_first_offset
            while offset < plog.log_end_offset:
                data = plog.read(offset, READ_CHUNK)
                if not data.ranges or data.end_offset <= offset:
                    break
                for record in transactional_offsets(data.read_bytes(), producer_id):
                    if record.value is not None:
                        held[record.key] = record.value
                offset = data.end_offset
        if held:
            log.info("recovered %d transactional offsets of producer %d", len(held), producer_id)


# ----------------------------------------------------------------------------------- the channel


class _Sender:
    """WriteTxnMarkers to one broker: whatever is queued when a request leaves goes in it."""

    def __init__(self, ctx: TxnHost, node: int) -> None:
        self.ctx = ctx
        self.node = node
        self.queue: list[tuple[Marker, asyncio.Future[dict[TopicPartition, ErrorCode]]]] = []
        self.wake = asyncio.Event()
        self.connection: KafkaConnection | None = None
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"txn-markers-to-{node}")

    async def send(self, marker: Marker) -> dict[TopicPartition, ErrorCode]:
        future: asyncio.Future[dict[TopicPartition, ErrorCode]] = asyncio.get_running_loop().create_future()
        self.queue.append((marker, future))
        self.wake.set()
        return await future

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        for _, future in self.queue:
            future.cancel()
        if self.connection is not None:
            self.connection.close()

    def _address(self) -> tuple[str, int] | None:
        replicas = self.ctx.replicas
        return replicas.address_of(self.node) if replicas is not None else None

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch, self.queue = self.queue, []
            if not batch:
                continue
            try:
                answers = await self._call([m for m, _ in batch])
            except BrokerUnreachable as exc:
                log.info("transaction markers to broker %d: %s", self.node, exc)
                answers = {}
            except Exception:
                log.exception("transaction markers to broker %d failed", self.node)
                answers = {}
            for marker, future in batch:
                if not future.done():
                    future.set_result({tp: answers.get((marker.producer_id, *tp), ErrorCode.NETWORK_EXCEPTION)
                                       for tp in marker.partitions})

    async def _call(self, markers: list[Marker]) -> dict[tuple[int, str, int], ErrorCode]:
        address = self._address()
        if address is None:
            raise BrokerUnreachable(f"broker {self.node} is not registered")
        if self.connection is None or (self.connection.host, self.connection.port) != address:
            if self.connection is not None:
                self.connection.close()
            self.connection = KafkaConnection(*address, f"tidelog-txn-markers-{self.ctx.node_id}",
                                              timeout_s=APPEND_TIMEOUT_MS / 1000 + 5)
        response: Any = await self.connection.call(request_for(markers))
        return {
            (int(result.producer_id), str(topic.name), int(p.partition_index)): ErrorCode.from_wire(p.error_code)
            for result in response.markers for topic in result.topics for p in topic.partitions
        }


def request_for(markers: list[Marker]) -> wtm.WriteTxnMarkersRequest:
    entries = []
    for marker in markers:
        by_topic: dict[str, list[int]] = {}
        for topic, index in marker.partitions:
            by_topic.setdefault(topic, []).append(index)
        entries.append(wtm.WritableTxnMarker(
            producer_id=ProducerId(marker.producer_id), producer_epoch=i16(marker.producer_epoch),
            transaction_result=marker.commit, coordinator_epoch=i32(marker.coordinator_epoch),
            topics=tuple(wtm.WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                         for t, ps in by_topic.items()),
        ))
    return wtm.WriteTxnMarkersRequest(markers=tuple(entries))


class MarkerChannel:
    def __init__(self, ctx: TxnHost, writer: MarkerWriter) -> None:
        self.ctx = ctx
        self.writer = writer
        self.senders: dict[int, _Sender] = {}

    async def stop(self) -> None:
        for sender in self.senders.values():
            await sender.stop()
        self.senders.clear()

    def _leader_of(self, tp: TopicPartition) -> int | None:
        known = self.ctx.image.topics.get(tp[0])
        if known is None or not 0 <= tp[1] < len(known.partitions):
            return None
        if self.ctx.replicas is None:
            return self.ctx.node_id  # a single node leads everything
        leader = known.partitions[tp[1]].leader
        return leader if leader >= 0 else NO_LEADER

    async def _to(self, node: int, marker: Marker) -> dict[TopicPartition, ErrorCode]:
        if node == self.ctx.node_id:
            return await self.writer.write(marker)
        sender = self.senders.get(node)
        if sender is None:
            sender = self.senders[node] = _Sender(self.ctx, node)
        return await sender.send(marker)

    async def deliver(self, marker: Marker, owned: Callable[[], bool]) -> bool:
        """Write ``marker`` into all its partitions; False if this coordinator was fenced or stopped
        owning the transaction (``owned()`` false) before that."""
        pending = PendingMarkers(marker.partitions)
        rounds = 0
        while not pending.finished:
            if not owned():
                return False
            destinations = pending.destinations(self._leader_of)
            answers = await asyncio.gather(*(self._to(node, marker.only(tps)) for node, tps in destinations.items()))
            for answer in answers:
                for tp, error in answer.items():
                    if pending.record(tp, error) is Outcome.RETRY and rounds % 50 == 0:
                        log.info("marker for producer %d in %s-%d: %s; retrying", marker.producer_id, *tp, error.name)
            if not pending.finished:
                rounds += 1
                await asyncio.sleep(RETRY_BACKOFF_S)
        if pending.fenced:
            log.warning("markers for producer %d: this coordinator is fenced; the new one ends the transaction",
                        marker.producer_id)
        return not pending.fenced
