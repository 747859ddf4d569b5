"""The asyncio shell around the transaction coordinator: the log, the markers, the sweeper, ownership.

The coordinator (``tidelog.coordinator.txn_coordinator``) decides; this module carries out:

- ownership: the coordinator serves the ``__transaction_state`` partitions it owns. A single node
  owns all of them from the start; in a cluster it owns those this broker leads (``on_image``, fed
  by the metadata store like the group coordinator): a partition is loaded when the broker becomes
  its leader and unloaded when it stops being the leader, and its **coordinator epoch** is the
  partition's leader epoch, written into every marker. FindCoordinator names the leader of the id's
  partition (``coordinator_node``); an id whose partition is not served here answers NOT_COORDINATOR
  (COORDINATOR_LOAD_IN_PROGRESS while it loads);
- loading: a partition's records are read in chunks off the loop and replayed on it; then each
  transaction found in PrepareCommit/PrepareAbort gets its markers (it was decided but not finished
  by the previous owner). A transaction found Ongoing stays open until its producer re-initialises
  (InitProducerId aborts it, fencing the old epoch) or its timeout passes (the sweeper aborts it),
  as in Kafka;
- writes: the records of a decision go to their partition as one batch, are replayed at once (no
  ``await`` between append and replay, so state follows log order), and the answer waits until they
  are durable: replicated to the ISR (high watermark) in a cluster, as Kafka's coordinator appends
  with acks=all; appended on a single node, fsynced only where the log's flush policy asks for it
  (``flush.messages``, ``flush.ms``), as Kafka leaves it to the OS. A write is refused (NOT_COORDINATOR) if the partition's
  leader epoch is no longer the one it was loaded at;
- a lock per transactional id serialises its decisions and their writes, so a transaction's steps
  never interleave with another request's for the same id; different ids are decided and written
  side by side (in a cluster each write waits for the followers: one lock for all would make every
  producer wait for every other's replication);
- markers: a decision that starts PrepareCommit or PrepareAbort starts a *completion* task: the
  COMMIT/ABORT marker goes to every partition of the transaction (``broker/txn_markers.py``: written
  locally for partitions this broker leads, sent with WriteTxnMarkers to the others' leaders,
  retried until done), then the Complete record is written. The ``__consumer_offsets`` partitions'
  leaders turn the offsets sent with TxnOffsetCommit into plain commits (COMMIT) or drop them (ABORT)
  before taking the marker. EndTxn answers when the completion is done (so a read_committed consumer
  sees a committed transaction as soon as its producer does), or after ``END_TXN_WAIT_S`` with the
  Prepare record durable, as Kafka answers: the completion goes on and the producer's next
  transaction meets CONCURRENT_TRANSACTIONS, which clients retry, until it is done;
- the sweeper: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` transactions
  open longer than their timeout are aborted (their producer fenced by an epoch bump); every
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle for longer than
  ``transactional.id.expiration.ms`` get a tombstone;
- the topic is created (compacted, ``transaction.state.log.num.partitions`` partitions,
  ``transaction.state.log.replication.factor`` replicas and ``transaction.state.log.min.isr`` both
  capped to the live brokers) the first time a client looks for a transaction coordinator.

TxnOffsetCommit is served by the group's coordinator, which in a cluster is usually another broker
than the transaction's: it holds the offsets in the group coordinator's memory and writes them as a
transactional batch of the producer into the group's ``__consumer_offsets`` partition (replicated
like any write), which the marker later closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from tidelog.broker.keyed_locks import KeyedLocks
from tidelog.broker.txn_markers import RETRY_BACKOFF_S, Marker, MarkerChannel, MarkerWriter, TxnHost, durable
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.coordinator.messages import OffsetCommit, PartitionErrors
from tidelog.coordinator.records import OffsetCommitKey, OffsetCommitRecord, partition_for
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
    decode,
    encode_key,
    encode_value,
)
from tidelog.metadata.image import ClusterImage
from tidelog.protocol.records import LOG_OVERHEAD, Record, build_batch, decode_records, iter_batches
from tidelog.storage.log import PartitionLog

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
LOAD_CHUNK = 1 << 20
END_TXN_WAIT_S = 10.0
# Append errors as the coordinator answers them (Kafka's TransactionStateManager mapping).
_NOT_COORDINATOR = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR})


def write_error(error: ErrorCode) -> ErrorCode:
    if error is ErrorCode.NONE:
        return error
    return ErrorCode.NOT_COORDINATOR if error in _NOT_COORDINATOR else ErrorCode.COORDINATOR_NOT_AVAILABLE


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


class TxnRuntime:
    def __init__(self, ctx: TxnHost) -> None:
        self.ctx = ctx
        config = ctx.config
        self.core = TxnCoordinator(TxnConfig(
            max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
            id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
        ))
        self.abort_interval_s = config.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        self.remove_interval_ms = config.get_int("transaction.remove.expired.transaction.cleanup.interval.ms")
        self.clustered = bool(config.get("metadata.store"))
        self.locks: KeyedLocks[str] = KeyedLocks()
        self.writer = MarkerWriter(ctx)
        self.channel = MarkerChannel(ctx, self.writer)
        self._completions: dict[str, asyncio.Task[ErrorCode]] = {}
        self._running = False
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        self._running = True
        topic = self.ctx.image.topics.get(TXN_TOPIC)
        if topic is not None and not self.clustered:
            self._own_all(self.ctx.image)
        self._spawn(self._sweeper(), "txn-coordinator-sweeper")

    def _own_all(self, image: ClusterImage) -> None:
        """A single node owns every partition, at the leader epoch its metadata gives it."""
        topic = image.topics[TXN_TOPIC]
        self.core.num_partitions = len(topic.partitions)
        for partition in topic.partitions:
            self.core.begin_loading(partition.index, partition.leader_epoch)
        self._spawn(self._load([p.index for p in topic.partitions]), "txn-coordinator-load")

    def on_image(self, _old: ClusterImage, image: ClusterImage) -> None:
        """Clusters: load the partitions this broker now leads, unload those it no longer leads."""
        topic = image.topics.get(TXN_TOPIC)
        if topic is None or not self._running:
            return
        self.core.num_partitions = len(topic.partitions)
        led = {p.index: p.leader_epoch for p in topic.partitions if p.leader == self.ctx.node_id}
        owned = {**self.core.active, **self.core.loading}
        for partition, epoch in sorted(owned.items()):
            if led.get(partition) != epoch:
                dropped = self.core.unload(partition)
                log.info("%s-%d moved (coordinator epoch %d): %d transactional id(s) unloaded",
                         TXN_TOPIC, partition, epoch, dropped)
        gained = sorted(p for p, epoch in led.items() if owned.get(p) != epoch)
        for partition in gained:
            self.core.begin_loading(partition, led[partition])
        if gained:
            self._spawn(self._load(gained), "txn-coordinator-load")

    def coordinator_node(self, transactional_id: str) -> int:
        """Clusters: the broker leading the id's ``__transaction_state`` partition (-1: none yet)."""
        topic = self.ctx.image.topics.get(TXN_TOPIC)
        if topic is None or not topic.partitions:
            return -1
        return topic.partitions[partition_for(transactional_id, len(topic.partitions))].leader

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        self._running = False
        tasks = [*self._tasks, *self._completions.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._completions.clear()
        await self.channel.stop()

    async def status(self) -> ErrorCode:
        """FindCoordinator: NONE when a coordinator can be named, else the error to answer."""
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = await self.ensure_topic()
        if error is ErrorCode.NONE and not self.clustered and self.core.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return error

    async def _ready(self, transactional_id: str) -> ErrorCode:
        """NONE when requests for ``transactional_id`` are served here now."""
        error = await self.ensure_topic()
        return error if error is not ErrorCode.NONE else self.core.status(transactional_id)

    async def ensure_topic(self) -> ErrorCode:
        """Create ``__transaction_state`` on first use; COORDINATOR_NOT_AVAILABLE if that fails."""
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.core.num_partitions:
            return ErrorCode.NONE
        existing = self.ctx.image.topics.get(TXN_TOPIC)
        if existing is not None:
            if self.clustered:
                self.on_image(self.ctx.image, self.ctx.image)
            else:
                self._own_all(self.ctx.image)
            return ErrorCode.NONE
        config = self.ctx.config
        live = max(1, len(self.ctx.image.brokers))
        replicas = min(config.get_int("transaction.state.log.replication.factor"), live)
        min_isr = min(config.get_int("transaction.state.log.min.isr"), replicas)
        outcome = await self.ctx.topics.create_topic(
            TXN_TOPIC, config.get_int("transaction.state.log.num.partitions"), replicas,
            configs=[("cleanup.policy", "compact"), ("min.insync.replicas", str(min_isr)),
                     ("segment.bytes", str(config.get_int("transaction.state.log.segment.bytes")))],
        )
        if outcome.error is ErrorCode.TOPIC_ALREADY_EXISTS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE  # another broker created it first; retried, it is found
        if not outcome.ok or outcome.topic is None:
            log.error("cannot create %s: %s %s", TXN_TOPIC, outcome.error.name, outcome.message)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        count = len(outcome.topic.partitions)
        log.info("created %s with %d partitions, replication factor %d, min.insync.replicas %d",
                 TXN_TOPIC, count, replicas, min_isr)
        if self.clustered:
            self.core.num_partitions = count  # each leader loads its partitions when the image reaches it
            return ErrorCode.NONE
        self.core.num_partitions = count
        for partition in outcome.topic.partitions:
            self.core.begin_loading(partition.index, partition.leader_epoch)
            self.core.complete_loading(partition.index)  # new and empty: nothing to replay
        return ErrorCode.NONE

    async def _load(self, partitions: list[int]) -> None:
        loop = asyncio.get_running_loop()
        for partition in partitions:
            epoch = self.core.loading.get(partition)
            plog = self.ctx.logs.get_log(TXN_TOPIC, partition)
            if epoch is None or plog is None:
                continue
            offset, total = plog.log_start_offset, 0
            try:
                while offset < plog.log_end_offset:
                    data = await loop.run_in_executor(None, plog.read, offset, LOAD_CHUNK)
                    if not data.ranges or data.end_offset <= offset:
                        break
                    records = decode_txn_batches(await loop.run_in_executor(None, data.read_bytes))
                    if self.core.loading.get(partition) != epoch:
                        break  # unloaded (or loaded again at a newer epoch) meanwhile
                    for record in records:
                        self.core.replay(record)
                    total += len(records)
                    offset = data.end_offset
            except KafkaError as exc:
                # The ids of this partition stay unavailable until it is loaded again; the others are served.
                log.error("loading %s-%d stopped at offset %d: %s", TXN_TOPIC, partition, offset, exc)
                continue
            if self.core.loading.get(partition) != epoch or not self.core.complete_loading(partition):
                continue
            preparing = self.core.preparing(partition)
            log.info("loaded %s-%d at coordinator epoch %d: %d records, %d to finish",
                     TXN_TOPIC, partition, epoch, total, len(preparing))
            for transactional_id in preparing:
                self._complete_in_background(transactional_id)

    # ------------------------------------------------------------------------------ sweeper

    async def _sweeper(self) -> None:
        last_removal = self.ctx.now_ms()
        while True:
            await asyncio.sleep(self.abort_interval_s)
            try:
                now = self.ctx.now_ms()
                for txn_id in [d.records[0].transactional_id for d in self.core.timed_out(now)]:
                    async with self.locks.hold(txn_id):  # decided again under the id's lock
                        decision = self.core.abort_if_timed_out(txn_id, self.ctx.now_ms())
                        if decision is None:
                            continue
                        log.info("transaction %s timed out: aborting it", txn_id)
                        if await self._write(decision.records) is ErrorCode.NONE:
                            self._complete_in_background(txn_id)
                if now - last_removal >= self.remove_interval_ms:
                    last_removal = now
                    ids = {r.transactional_id for r in self.core.expired_ids(now)}
                    if ids:
                        async with self.locks.hold(*ids):
                            expired = [r for r in self.core.expired_ids(self.ctx.now_ms()) if r.transactional_id in ids]
                            if expired:
                                await self._write(expired)
            except Exception:
                log.exception("transaction sweeper failed")

    # ----------------------------------------------------------------------------- writing

    async def _write(self, records: list[TxnRecord]) -> ErrorCode:
        """Append ``records`` (one batch per partition), replay them, wait until durable; the error if any."""
        now = self.ctx.now_ms()
        by_partition: dict[int, list[TxnRecord]] = {}
        for record in records:
            by_partition.setdefault(self.core.partition_of(record.transactional_id), []).append(record)
        written: dict[tuple[str, int], tuple[PartitionLog, int]] = {}
        try:
            for partition, batch_records in by_partition.items():
                plog = self._appendable(partition)
                batch = build_batch([
                    Record(i, now, encode_key(r.transactional_id), encode_value(r.value))
                    for i, r in enumerate(batch_records)
                ])
                plog.append_as_leader(batch, leader_epoch=self.core.active[partition], now_ms=now, from_client=False)
                if self.ctx.replicas is not None:
                    self.ctx.replicas.appended((TXN_TOPIC, partition), plog)
                for record in batch_records:
                    self.core.replay(record)
                written[(TXN_TOPIC, partition)] = (plog, plog.log_end_offset)
        except KafkaError as exc:
            log.warning("append to %s failed: %s", TXN_TOPIC, exc)
            return write_error(exc.code)
        outcome = await durable(self.ctx, written)
        worst = next((e for e in outcome.values() if e is not ErrorCode.NONE), ErrorCode.NONE)
        if worst is not ErrorCode.NONE:
            log.warning("a write to %s did not become durable: %s", TXN_TOPIC, worst.name)
        return write_error(worst)

    def _appendable(self, partition: int) -> PartitionLog:
        """The partition's log if this coordinator may write it now: it serves the partition, and (in a
        cluster) still leads it at the epoch it was loaded at, with enough in-sync replicas."""
        epoch = self.core.active.get(partition)
        plog = self.ctx.logs.get_log(TXN_TOPIC, partition)
        if epoch is None or plog is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, f"{TXN_TOPIC}-{partition} is not served here")
        replicas = self.ctx.replicas
        if replicas is not None:
            state = replicas.check_writable((TXN_TOPIC, partition), -1, self.writer.min_insync(TXN_TOPIC))
            if state.leader_epoch != epoch:
                raise KafkaError(ErrorCode.NOT_COORDINATOR, f"{TXN_TOPIC}-{partition} moved to epoch {state.leader_epoch}")
        return plog

    # ----------------------------------------------------------------------------- completing

    def _complete_in_background(self, transactional_id: str) -> asyncio.Task[ErrorCode]:
        task = self._completions.get(transactional_id)
        if task is None or task.done():
            task = asyncio.create_task(self._complete(transactional_id), name=f"txn-complete-{transactional_id}")
            self._completions[transactional_id] = task
            task.add_done_callback(
                lambda t: self._completions.pop(transactional_id, None) if self._completions.get(transactional_id) is t else None)
        return task

    async def _complete(self, transactional_id: str) -> ErrorCode:
        """Write the markers of a preparing transaction, then its Complete record.

        A crash (or a move of the partition) at any point leaves a state the next owner finishes:
        it finds the transaction preparing and sends the markers again; a marker already there is
        answered as done by the partition's producer state, and offsets already committed are
        committed again with the same values.
        """
        value = self.core.txns.get(transactional_id)
        epoch = self.core.coordinator_epoch(transactional_id)
        if value is None or value.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.NONE
        if epoch is None:
            return ErrorCode.NOT_COORDINATOR

        def owned() -> bool:
            return self._running and self.core.coordinator_epoch(transactional_id) == epoch \
                and self.core.txns.get(transactional_id) is value

        marker = Marker(value.producer_id, value.producer_epoch, value.state is TxnState.PREPARE_COMMIT, epoch,
                        tuple(sorted(value.partitions)))
        if not await self.channel.deliver(marker, owned):
            return ErrorCode.NOT_COORDINATOR
        while True:
            async with self.locks.hold(transactional_id):
                if not owned():
                    return ErrorCode.NOT_COORDINATOR
                error = await self._write(self.core.complete(transactional_id, self.ctx.now_ms()))
            if error is ErrorCode.NONE or not owned():
                return error
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _decide(self, decision: Decision) -> tuple[Decision, asyncio.Task[ErrorCode] | None]:
        """Write a decision's records (the caller holds the id's lock) and start its completion if it needs
        markers; the decision (its error replaced by the write's) and that completion."""
        if not decision.records:
            return decision, None
        error = await self._write(decision.records)
        if error is not ErrorCode.NONE:
            return Decision(error), None
        if not decision.markers_needed:
            return decision, None
        return decision, self._complete_in_background(decision.records[0].transactional_id)

    @staticmethod
    async def _finished(decision: Decision, completion: asyncio.Task[ErrorCode] | None) -> Decision:
        """Wait (without the id's lock) up to ``END_TXN_WAIT_S`` for the markers of a decision."""
        if completion is None:
            return decision
        try:
            done = await asyncio.wait_for(asyncio.shield(completion), END_TXN_WAIT_S)
        except TimeoutError:
            log.info("transaction %s: markers still being written; answering with the Prepare record durable",
                     decision.records[0].transactional_id)
            return decision
        if done is not ErrorCode.NONE and decision.error is ErrorCode.NONE:
            return Decision(done)
        return decision

    # -------------------------------------------------------------------------------- APIs

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, pid: int, epoch: int) -> Decision:
        error = await self._ready(transactional_id)
        if error is not ErrorCode.NONE:
            return Decision(error)
        assert self.ctx.producer_ids is not None
        await self.ctx.producer_ids.reserve()
        async with self.locks.hold(transactional_id):
            decision, completion = await self._decide(self.core.init_producer_id(
                transactional_id, timeout_ms, pid, epoch, self.ctx.now_ms(), self.ctx.producer_ids.take))
        # A fenced transaction's abort is finished before the answer (CONCURRENT_TRANSACTIONS), so
        # that the client's retry finds the id ready.
        return await self._finished(decision, completion)

    async def add_partitions(self, transactional_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> ErrorCode:
        error = await self._ready(transactional_id)
        if error is not ErrorCode.NONE:
            return error
        async with self.locks.hold(transactional_id):
            decision = self.core.add_partitions(transactional_id, pid, epoch, partitions, self.ctx.now_ms())
            return (await self._decide(decision))[0].error

    async def add_offsets(self, transactional_id: str, pid: int, epoch: int, group_id: str) -> ErrorCode:
        error = await self._ready(transactional_id)
        if error is not ErrorCode.NONE:
            return error
        offsets = self.ctx.image.topics.get(OFFSETS_TOPIC)
        groups = self.ctx.groups
        if offsets is None and groups is not None and await groups.ensure_topic() is ErrorCode.NONE:
            offsets = self.ctx.image.topics.get(OFFSETS_TOPIC)
        if offsets is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        async with self.locks.hold(transactional_id):
            decision = self.core.add_offsets(transactional_id, pid, epoch, group_id, len(offsets.partitions),
                                             self.ctx.now_ms())
            return (await self._decide(decision))[0].error

    async def end_txn(self, transactional_id: str, pid: int, epoch: int, commit: bool) -> Decision:
        error = await self._ready(transactional_id)
        if error is not ErrorCode.NONE:
            return Decision(error)
        async with self.locks.hold(transactional_id):
            decision, completion = await self._decide(
                self.core.end_txn(transactional_id, pid, epoch, commit, self.ctx.now_ms()))
        return await self._finished(decision, completion)

    async def check_offsets_producer(self, transactional_id: str, pid: int, epoch: int) -> ErrorCode:
        """TxnOffsetCommit: the producer must own the id, and the group's partition be in its transaction.

        Checked when this broker coordinates the id; in a cluster the group's coordinator is often
        another broker than the transaction's, and then (as Kafka's group coordinator before KIP-890)
        the offsets are held without that check: the markers decide their fate."""
        error = await self._ready(transactional_id)
        if error is ErrorCode.NOT_COORDINATOR and self.clustered:
            return ErrorCode.NONE
        if error is not ErrorCode.NONE:
            return error
        error, value = self.core.check_producer(transactional_id, pid, epoch)
        if error is not ErrorCode.NONE:
            return error
        assert value is not None
        if value.state is not TxnState.ONGOING or not any(t == OFFSETS_TOPIC for t, _ in value.partitions):
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    async def txn_offset_commit(self, producer_id: int, producer_epoch: int, req: OffsetCommit) -> PartitionErrors:
        """Hold the offsets until the transaction ends and write them, as Kafka does, as a
        transactional batch of the producer to the group's ``__consumer_offsets`` partition (skipped
        by the group loader; read back only to finish a commit interrupted by a crash or a failover)."""
        groups = self.ctx.groups
        assert groups is not None
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
            end = groups.port.append(partition, batch)
            plog = self.ctx.logs.get_log(OFFSETS_TOPIC, partition)
            assert plog is not None
        except KafkaError as exc:
            log.warning("transactional offsets of producer %d not written: %s", producer_id, exc)
            return result.with_error(write_error(exc.code))
        outcome = await durable(self.ctx, {(OFFSETS_TOPIC, partition): (plog, end)})
        error = write_error(outcome[(OFFSETS_TOPIC, partition)])
        return result if error is ErrorCode.NONE else result.with_error(error)

    def verify_produce(self, transactional_id: str, pid: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        """A transactional batch is checked against the id's state where the id is coordinated. In a
        cluster the partition's leader is usually not the coordinator: the batch then goes in
        unverified, as before Kafka 3.6 (the markers' epoch bump still fences a zombie producer)."""
        status = self.core.status(transactional_id)
        if status is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or (not self.clustered and self.core.loading):
            return ErrorCode.NOT_ENOUGH_REPLICAS  # retriable: the coordinator is still loading
        if status is not ErrorCode.NONE and self.clustered:
            return ErrorCode.NONE
        return self.core.verify_produce(transactional_id, pid, epoch, topic, partition)

    async def describe(self, transactional_ids: list[str]) -> list[DescribedTxn]:
        out = []
        for transactional_id in transactional_ids:
            error = await self._ready(transactional_id)
            out.append(self.core.describe(transactional_id) if error is ErrorCode.NONE else DescribedTxn(transactional_id, error))
        return out

    def list(self, states: list[str], producer_ids: list[int], duration_ms: int) -> tuple[ErrorCode, list[DescribedTxn]]:
        """The transactions of the partitions served here (every broker answers for its own)."""
        if self.core.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        return ErrorCode.NONE, self.core.list(states, producer_ids, duration_ms, self.ctx.now_ms())

