"""The asyncio shell around the transaction coordinator: the log, the markers, the sweeper.

The coordinator (``tidelog.coordinator.txn_coordinator``) decides; this module carries out:

- writes: the records of a decision go to their ``__transaction_state`` partition as one batch, are
  replayed at once (no ``await`` between append and replay, so state follows log order), and the
  partition is fsynced off the loop before the answer leaves;
- markers: when a decision starts PrepareCommit or PrepareAbort, a COMMIT or ABORT control batch
  (producer id and epoch of the transaction) is appended to every partition of the transaction,
  those partitions are fsynced, the group coordinator is told to materialise (COMMIT) or drop
  (ABORT) the offsets the producer sent with TxnOffsetCommit, and the Complete record is written.
  EndTxn is answered after all of it, so a read_committed consumer sees a committed transaction as
  soon as its producer does;
- one lock serialises every change: a transaction's steps never interleave with another request's;
- the sweeper: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` transactions
  open longer than their timeout are aborted (their producer fenced by an epoch bump); every
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle for longer than
  ``transactional.id.expiration.ms`` get a tombstone;
- loading: at start an existing ``__transaction_state`` is replayed before any request is served
  (COORDINATOR_LOAD_IN_PROGRESS meanwhile), then transactions found preparing get their markers;
- the topic is created (compacted, ``transaction.state.log.num.partitions`` partitions) the first
  time a client looks for a transaction coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.coordinator.messages import OffsetCommit, PartitionErrors
from tidelog.coordinator.records import InvalidRecord, OffsetCommitKey, OffsetCommitRecord
from tidelog.coordinator.records import decode as decode_offset_record
from tidelog.coordinator.records import encode_key as encode_offset_key
from tidelog.coordinator.records import encode_value as encode_offset_value
from tidelog.coordinator.txn_coordinator import (
    OFFSETS_TOPIC,
    Decision,
    DescribedTxn,
    TxnConfig,
    TxnCoordinator,
)
from tidelog.coordinator.txn_records import (
    InvalidTxnRecord,
    TxnRecord,
    TxnState,
    TxnValue,
    decode,
    encode_key,
    encode_value,
)
from tidelog.protocol.records import (
    LOG_OVERHEAD,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
)
from tidelog.storage.log import PartitionLog

if TYPE_CHECKING:
    from tidelog.broker.context import BrokerContext

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
COORDINATOR_EPOCH = 0  # a single node never hands its coordinator to another broker
LOAD_CHUNK = 1 << 20


def decode_txn_batches(data: bytes) -> list[TxnRecord]:
    """The records of whole ``__transaction_state`` batches; undecodable ones are logged and skipped."""
    out: list[TxnRecord] = []
    for header, pos in iter_batches(data, validate=True):
        if header.is_control:
            continue
        for record in decode_records(memoryview(data)[pos : pos + header.batch_length + LOG_OVERHEAD]):
            if record.key is None:
                continue
            try:
                out.append(decode(bytes(record.key), None if record.value is None else bytes(record.value)))
            except InvalidTxnRecord as exc:
                log.warning("%s record at offset %d does not decode (%s): skipped", TXN_TOPIC, record.offset, exc)
    return out


def _transactional_offsets(data: bytes, producer_id: int) -> list[OffsetCommitRecord]:
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


class TxnRuntime:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        config = ctx.config
        self.core = TxnCoordinator(TxnConfig(
            max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
            id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
        ))
        self.abort_interval_s = config.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        self.remove_interval_ms = config.get_int("transaction.remove.expired.transaction.cleanup.interval.ms")
        self.lock = asyncio.Lock()
        self.loaded = False
        self._running = False
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        self._running = True
        topic = self.ctx.image.topics.get(TXN_TOPIC)
        if topic is None:
            self.loaded = True
        else:
            self._tasks.append(asyncio.create_task(self._load(len(topic.partitions)), name="txn-coordinator-load"))
        self._tasks.append(asyncio.create_task(self._sweeper(), name="txn-coordinator-sweeper"))

    def coordinator_node(self, _transactional_id: str) -> int:
        """Clusters: no broker coordinates transactions yet (WriteTxnMarkers between brokers and
        loading ``__transaction_state`` by leadership are not built); -1 answers COORDINATOR_NOT_AVAILABLE."""
        return -1

    async def stop(self) -> None:
        self._running = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def status(self) -> ErrorCode:
        """NONE when requests can be served, else the error to answer."""
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return await self.ensure_topic()

    async def ensure_topic(self) -> ErrorCode:
        """Create ``__transaction_state`` on first use; COORDINATOR_NOT_AVAILABLE if that fails."""
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.core.num_partitions or not self.loaded:
            return ErrorCode.NONE
        existing = self.ctx.image.topics.get(TXN_TOPIC)
        if existing is not None:
            self.core.num_partitions = len(existing.partitions)
            return ErrorCode.NONE
        config = self.ctx.config
        # Replication factor and min ISR are capped to the live brokers: this one.
        replicas = min(config.get_int("transaction.state.log.replication.factor"), 1)
        min_isr = min(config.get_int("transaction.state.log.min.isr"), replicas)
        outcome = await self.ctx.topics.create_topic(
            TXN_TOPIC, config.get_int("transaction.state.log.num.partitions"), replicas,
            configs=[("cleanup.policy", "compact"), ("min.insync.replicas", str(min_isr)),
                     ("segment.bytes", str(config.get_int("transaction.state.log.segment.bytes")))],
        )
        if not outcome.ok or outcome.topic is None:
            log.error("cannot create %s: %s %s", TXN_TOPIC, outcome.error.name, outcome.message)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self.core.num_partitions = len(outcome.topic.partitions)
        log.info("created %s with %d partitions", TXN_TOPIC, self.core.num_partitions)
        return ErrorCode.NONE

    async def _load(self, count: int) -> None:
        loop = asyncio.get_running_loop()
        total = 0
        for partition in range(count):
            plog = self.ctx.logs.get_log(TXN_TOPIC, partition)
            if plog is None:
                continue
            offset = plog.log_start_offset
            try:
                while offset < plog.log_end_offset:
                    data = await loop.run_in_executor(None, plog.read, offset, LOAD_CHUNK)
                    if not data.ranges or data.end_offset <= offset:
                        break
                    for record in decode_txn_batches(await loop.run_in_executor(None, data.read_bytes)):
                        self.core.replay(record)
                        total += 1
                    offset = data.end_offset
            except KafkaError as exc:
                # The ids of this partition are lost until a restart reads it; the others are served.
                log.error("loading %s-%d stopped at offset %d: %s", TXN_TOPIC, partition, offset, exc)
        self.core.num_partitions = count
        self.loaded = True
        log.info("loaded %s: %d records, %d transactional ids", TXN_TOPIC, total, len(self.core.txns))
        groups = self.ctx.groups
        while groups is not None and groups.running and groups.core.is_loading():
            await asyncio.sleep(0.05)  # offsets of a preparing commit go to loaded groups only
        async with self.lock:
            for transactional_id in self.core.preparing():
                await self._complete(transactional_id)

    # ------------------------------------------------------------------------------ sweeper

    async def _sweeper(self) -> None:
        last_removal = self.ctx.now_ms()
        while True:
            await asyncio.sleep(self.abort_interval_s)
            if not self.loaded:
                continue
            try:
                async with self.lock:
                    now = self.ctx.now_ms()
                    for decision in self.core.timed_out(now):
                        txn_id = decision.records[0].transactional_id
                        log.info("transaction %s timed out: aborting it", txn_id)
                        if await self._write(decision.records) is ErrorCode.NONE:
                            await self._complete(txn_id)
                    if now - last_removal >= self.remove_interval_ms:
                        last_removal = now
                        expired = self.core.expired_ids(now)
                        if expired:
                            await self._write(expired)
            except Exception:
                log.exception("transaction sweeper failed")

    # ----------------------------------------------------------------------------- writing

    def _txn_log(self, partition: int) -> PartitionLog:
        plog: PartitionLog | None = self.ctx.logs.get_log(TXN_TOPIC, partition)
        if plog is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"{TXN_TOPIC}-{partition} is not here")
        return plog

    def _leader_epoch(self, topic: str, partition: int) -> int:
        known = self.ctx.image.topics.get(topic)
        if known is None or partition >= len(known.partitions):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist")
        return known.partitions[partition].leader_epoch

    async def _write(self, records: list[TxnRecord]) -> ErrorCode:
        """Append ``records`` (one batch per partition), replay them, fsync; the error if any failed."""
        now = self.ctx.now_ms()
        by_partition: dict[int, list[TxnRecord]] = {}
        for record in records:
            by_partition.setdefault(self.core.partition_of(record.transactional_id), []).append(record)
        written: list[PartitionLog] = []
        try:
            for partition, batch_records in by_partition.items():
                plog = self._txn_log(partition)
                batch = build_batch([
                    Record(i, now, encode_key(r.transactional_id), encode_value(r.value))
                    for i, r in enumerate(batch_records)
                ])
                plog.append_as_leader(batch, leader_epoch=self._leader_epoch(TXN_TOPIC, partition), now_ms=now,
                                      from_client=False)
                for record in batch_records:
                    self.core.replay(record)
                written.append(plog)
        except KafkaError as exc:
            log.warning("append to %s failed: %s", TXN_TOPIC, exc)
            return ErrorCode.NOT_COORDINATOR if exc.code is ErrorCode.NOT_COORDINATOR else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return await self._flush(written)

    async def _flush(self, logs: list[PartitionLog]) -> ErrorCode:
        loop = asyncio.get_running_loop()
        try:
            for plog in logs:
                await loop.run_in_executor(None, plog.flush)
        except KafkaError as exc:
            log.error("flush failed: %s", exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    async def _complete(self, transactional_id: str) -> ErrorCode:
        """Write the markers of a preparing transaction, then its Complete record.

        Order, so that a crash at any point leaves a state the restart can finish: the markers of
        the data partitions; then, on COMMIT, the offsets sent with TxnOffsetCommit as plain commits;
        then the marker of ``__consumer_offsets`` (after it the producer's transactional offset batch
        is no longer open there, so it must come after the plain commits); then the Complete record.
        """
        value = self.core.txns.get(transactional_id)
        if value is None or value.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.NONE
        commit = value.state is TxnState.PREPARE_COMMIT
        data = sorted(tp for tp in value.partitions if tp[0] != OFFSETS_TOPIC)
        offsets = sorted(tp for tp in value.partitions if tp[0] == OFFSETS_TOPIC)
        error = await self._flush(self._write_markers(transactional_id, value, data, commit))
        if error is ErrorCode.NONE and offsets:
            await self._complete_offsets(value, offsets, commit)
            error = await self._flush(self._write_markers(transactional_id, value, offsets, commit))
        if error is not ErrorCode.NONE:
            return error
        return await self._write(self.core.complete(transactional_id, self.ctx.now_ms()))

    def _write_markers(self, transactional_id: str, value: TxnValue, partitions: list[tuple[str, int]],
                       commit: bool) -> list[PartitionLog]:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        now = self.ctx.now_ms()
        written: list[PartitionLog] = []
        for topic, partition in partitions:
            plog = self.ctx.logs.get_log(topic, partition)
            if plog is None:
                log.warning("transaction %s: %s-%d is gone; no marker written there", transactional_id, topic, partition)
                continue
            marker = build_control_batch(kind, value.producer_id, value.producer_epoch, COORDINATOR_EPOCH, now)
            try:
                plog.append_as_leader(marker, leader_epoch=self._leader_epoch(topic, partition), now_ms=now,
                                      from_client=False)
            except KafkaError as exc:
                # A newer epoch of this producer already wrote there: nothing of this epoch is open.
                log.warning("transaction %s: marker to %s-%d refused: %s", transactional_id, topic, partition, exc)
                continue
            written.append(plog)
            self.ctx.purgatory.notify((topic, partition))
        return written

    async def _complete_offsets(self, value: TxnValue, partitions: list[tuple[str, int]], commit: bool) -> None:
        groups = self.ctx.groups
        if groups is None or not groups.running:
            return
        manager = groups.core.offset_manager
        if commit and value.producer_id not in manager.pending_txn:
            self._recover_offsets(value.producer_id, [p for _, p in partitions])
        manager.complete_txn(value.producer_id, commit, self.ctx.now_ms())
        await groups.drain()  # the offset records queued above, fsynced

    def _recover_offsets(self, producer_id: int, partitions: list[int]) -> None:
        """After a restart: the offsets a preparing transaction sent, read back from its open
        transactional batches in ``__consumer_offsets``."""
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
                data = plog.read(offset, LOAD_CHUNK)
                if not data.ranges or data.end_offset <= offset:
                    break
                for record in _transactional_offsets(data.read_bytes(), producer_id):
                    if record.value is not None:
                        held[record.key] = record.value
                offset = data.end_offset
        log.info("recovered %d transactional offsets of producer %d", len(held), producer_id)

    async def txn_offset_commit(self, producer_id: int, producer_epoch: int, req: OffsetCommit) -> PartitionErrors:
        """Hold the offsets until the transaction ends and write them, as Kafka does, as a
        transactional batch of the producer to the group's ``__consumer_offsets`` partition (skipped
        by the group loader; read back only to finish a commit interrupted by a crash)."""
        groups = self.ctx.groups
        assert groups is not None
        async with self.lock:
            now = self.ctx.now_ms()
            result = groups.core.offset_manager.txn_commit_offsets(producer_id, req, now)
            held = groups.core.offset_manager.pending_txn.get(producer_id, {})
            records = [
                OffsetCommitRecord(key, held[key])
                for topic, parts in result.topics for p, e in parts
                if e is ErrorCode.NONE and (key := OffsetCommitKey(req.group_id, topic, p)) in held
            ]
            if not records:
                return result
            batch = build_batch(
                [Record(i, now, encode_offset_key(r), encode_offset_value(r)) for i, r in enumerate(records)],
                producer_id=producer_id, producer_epoch=producer_epoch, transactional=True,
            )
            partition = groups.core.partition_of(req.group_id)
            try:
                plog = self.ctx.logs.get_log(OFFSETS_TOPIC, partition)
                if plog is None:
                    raise KafkaError(ErrorCode.NOT_COORDINATOR)
                plog.append_as_leader(batch, leader_epoch=self._leader_epoch(OFFSETS_TOPIC, partition), now_ms=now,
                                      from_client=False)
            except KafkaError as exc:
                log.warning("transactional offsets of producer %d not written: %s", producer_id, exc)
                return result.with_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            error = await self._flush([plog])
            return result if error is ErrorCode.NONE else result.with_error(error)

    async def _decide_and_complete(self, decision: Decision) -> Decision:
        if decision.records:
            error = await self._write(decision.records)
            if error is not ErrorCode.NONE:
                return Decision(error)
            if decision.markers_needed:
                error = await self._complete(decision.records[0].transactional_id)
                if error is not ErrorCode.NONE and decision.error is ErrorCode.NONE:
                    return Decision(error)
        return decision

    # -------------------------------------------------------------------------------- APIs

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, pid: int, epoch: int) -> Decision:
        error = await self.status()
        if error is not ErrorCode.NONE:
            return Decision(error)
        assert self.ctx.producer_ids is not None
        await self.ctx.producer_ids.reserve()
        async with self.lock:
            decision = self.core.init_producer_id(transactional_id, timeout_ms, pid, epoch, self.ctx.now_ms(),
                                                  self.ctx.producer_ids.take)
            return await self._decide_and_complete(decision)

    async def add_partitions(self, transactional_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> ErrorCode:
        error = await self.status()
        if error is not ErrorCode.NONE:
            return error
        async with self.lock:
            decision = self.core.add_partitions(transactional_id, pid, epoch, partitions, self.ctx.now_ms())
            return (await self._decide_and_complete(decision)).error

    async def add_offsets(self, transactional_id: str, pid: int, epoch: int, group_id: str) -> ErrorCode:
        error = await self.status()
        if error is not ErrorCode.NONE:
            return error
        offsets = self.ctx.image.topics.get(OFFSETS_TOPIC)
        groups = self.ctx.groups
        if offsets is None and groups is not None and await groups.ensure_topic() is ErrorCode.NONE:
            offsets = self.ctx.image.topics.get(OFFSETS_TOPIC)
        if offsets is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        async with self.lock:
            decision = self.core.add_offsets(transactional_id, pid, epoch, group_id, len(offsets.partitions),
                                             self.ctx.now_ms())
            return (await self._decide_and_complete(decision)).error

    async def end_txn(self, transactional_id: str, pid: int, epoch: int, commit: bool) -> Decision:
        error = await self.status()
        if error is not ErrorCode.NONE:
            return Decision(error)
        async with self.lock:
            decision = self.core.end_txn(transactional_id, pid, epoch, commit, self.ctx.now_ms())
            return await self._decide_and_complete(decision)

    async def abort(self, transactional_id: str) -> ErrorCode:
        """Abort an open transaction on an operator's request."""
        error = await self.status()
        if error is not ErrorCode.NONE:
            return error
        async with self.lock:
            return (await self._decide_and_complete(self.core.abort(transactional_id, self.ctx.now_ms()))).error

    async def check_offsets_producer(self, transactional_id: str, pid: int, epoch: int) -> ErrorCode:
        """TxnOffsetCommit: the producer must own the id, and the group's partition be in its transaction."""
        error = await self.status()
        if error is not ErrorCode.NONE:
            return error
        error, value = self.core.check_producer(transactional_id, pid, epoch)
        if error is not ErrorCode.NONE:
            return error
        assert value is not None
        if value.state is not TxnState.ONGOING or not any(t == OFFSETS_TOPIC for t, _ in value.partitions):
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def verify_produce(self, transactional_id: str, pid: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        if not self.loaded:
            return ErrorCode.NOT_ENOUGH_REPLICAS  # retriable: the coordinator is still loading
        return self.core.verify_produce(transactional_id, pid, epoch, topic, partition)

    async def describe(self, transactional_ids: list[str]) -> list[DescribedTxn]:
        error = await self.status()
        if error is not ErrorCode.NONE:
            return [DescribedTxn(t, error) for t in transactional_ids]
        return [self.core.describe(t) for t in transactional_ids]

    def list(self, states: list[str], producer_ids: list[int], duration_ms: int) -> tuple[ErrorCode, list[DescribedTxn]]:
        if not self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        return ErrorCode.NONE, self.core.list(states, producer_ids, duration_ms, self.ctx.now_ms())
