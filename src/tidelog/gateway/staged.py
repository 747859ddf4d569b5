"""The legacy staged write API's core: /store, /commit_request, /commit over a durable local spool
and one Kafka transaction per staged transaction.

Steps and states of a staged transaction (``staged_spool`` has the file format)::

    /store ...       -> stored      chunks appended to <id>.spool, each fsynced before the answer
    /commit_request  -> requested   a Kafka transaction is opened under the transaction's own
                                    transactional.id and every spooled record is produced and
                                    acknowledged in it; it stays open: read_committed readers see nothing
    /commit          -> committed   the Kafka transaction commits: every record becomes visible at once;
                                    <id>.done records the outcome and the spool is deleted

Choices, and why:

- **One transactional id per staged transaction** (``<prefix>-staged-<instance>-<id>``, kept in the
  spool's first frame): several staged transactions can be requested and waiting for /commit at the
  same time, which one producer (one open transaction at a time) could not do; and a restart can
  fence exactly the transactions that were open. Each requested transaction holds one producer until
  /commit or expiry, so ``gateway.staged.max.transactions`` bounds them.
- **All records of a transaction go to one partition** (murmur2 of the transaction id): the order
  of the chunks is kept, and an open transaction holds back read_committed readers of one partition
  only. It does hold them back: Kafka's last stable offset cannot pass an open transaction, so
  readers of that partition wait (they never see the uncommitted records) until /commit or expiry.
  Keep the time between /commit_request and /commit short.
- **Not the sourceId/seqno dedupe of the write API.** Staged writes do not touch the state topic;
  exactly-once is per transaction instead: chunks carry a ``seqno`` that only grows within the
  transaction (a repeated /store is answered ``duplicate`` and stored once), the records are written
  to the cluster only inside the transaction's Kafka transaction, and that transaction commits at
  most once (a repeated /commit answers the recorded outcome). A transaction whose Kafka
  transaction was aborted is written again whole by the next /commit_request; the aborted copy is
  never visible to read_committed readers.
- **Expiry**: a transaction not committed within ``gateway.staged.timeout.ms`` of its first /store
  is aborted (its Kafka transaction, if any), its spool deleted, and its id answered 410 for another
  timeout period. The staged producers' ``transaction.timeout.ms`` is the staged timeout plus a
  minute, so the gateway, not the broker, decides.

Crashes (kill -9, power loss), what the restarted gateway does, and what the client is told:

- between /store and /commit_request: nothing to do; every acknowledged chunk is in the spool, and
  the client goes on (a /store it saw no answer to is repeated with the same seqno, safely);
- between /commit_request and /commit (state ``requesting`` or ``requested`` on disk): at start-up
  a producer with the transaction's transactional id is initialised, which fences the dead one and
  aborts its open transaction; an ``aborted`` frame puts the transaction back to ``stored``. /commit
  then answers 409 ``INVALID_TXN_STATE`` with ``"redo": "commit_request"``: call /commit_request
  again (the chunks are still spooled), then /commit;
- during /commit (state ``committing``): the initialisation completes a commit the coordinator had
  already prepared, or aborts; which one is read back from the partition (read_committed: is the
  transaction's first offset visible?). Committed: /commit answers 200 as if nothing happened;
  aborted: 409 with ``redo: commit_request`` as above.

Threads: the state lives on the event loop; each transaction's steps run under its own
``asyncio.Lock``; producers, consumers and file I/O run in worker threads (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tidelog.gateway.config import GatewayConfig, default_instance_id
from tidelog.gateway.model import Record
from tidelog.gateway.seqno import default_partition
from tidelog.gateway.staged_spool import (
    COMMITTING,
    REQUESTED,
    REQUESTING,
    STORED,
    Replayed,
    Spool,
    chunk_frame,
    chunk_records,
    encode_frame,
)
from tidelog.gateway.topics import TopicCache
from tidelog.observability.registry import MetricFamily, Registry

log = logging.getLogger(__name__)
KAFKA_TIMEOUT_S = 30.0
RESTART_REASON = ("the gateway restarted after commit_request and aborted that Kafka transaction (nothing of it "
                  "is visible); the chunks are still spooled: call commit_request again, then commit")


class StagedError(Exception):
    """An answer other than success: HTTP status, a stable code, and what the client should do next
    (``redo``: the step to call again, when there is one)."""

    def __init__(self, status: int, code: str, message: str, *, state: str = "", redo: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.state = state
        self.redo = redo


@dataclass
class Txn:
    facts: Replayed
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    producer: Producer | None = None
    unsettled: bool = False  # a Kafka transaction may be open under its id with no producer of ours

    @property
    def id(self) -> str:
        return self.facts.transaction_id


class StagedTransactions:
    def __init__(self, config: GatewayConfig, topics: TopicCache, registry: Registry) -> None:
        self.config = config
        self.topics = topics
        self.spool = Spool(config.staged_dir)
        self.open: dict[str, Txn] = {}
        self.done: dict[str, dict[str, Any]] = {}
        self.timeout_ms = config.staged_timeout_ms
        instance = config.instance_id or default_instance_id(config.listen_port)
        self._txn_prefix = f"{config.txn_prefix}-staged-{instance}"
        self._task: asyncio.Task[None] | None = None
        self._outcomes = registry.counter("gateway_staged_transactions_total", "Staged transactions finished or "
                                          "set back, by outcome (committed, expired, aborted)", ("outcome",))
        registry.add_collector(self._collect)

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Recover the spool folder; transactions that may have a Kafka transaction open are settled
        (fenced) in the background, and by the first request that touches them."""
        replayed, self.done, problems = await asyncio.to_thread(self.spool.open)
        for problem in problems:
            log.warning("staged spool: %s", problem)
        for facts in replayed:
            self.open[facts.transaction_id] = Txn(facts, unsettled=facts.state != STORED)
        if self.open:
            log.info("staged spool: %d open transactions recovered (%d to settle)", len(self.open),
                     sum(t.unsettled for t in self.open.values()))
        self._task = asyncio.get_running_loop().create_task(self._housekeeping())

    async def stop(self) -> None:
        """Abort the open Kafka transactions (bounded wait): a stopped gateway must not hold back
        readers. Their spools stay; the clients are told to call commit_request again."""
        if self._task is not None:
            self._task.cancel()
        for txn in list(self.open.values()):
            if txn.producer is not None and not txn.lock.locked():
                async with txn.lock:
                    await self._abort(txn, "the gateway was stopped after commit_request and aborted that "
                                      "Kafka transaction; call commit_request again, then commit")

    def _collect(self) -> list[MetricFamily]:
        family = MetricFamily("gateway_staged_transactions_open", "Staged transactions spooled, by state",
                              "gauge", ("state",))
        counts = dict.fromkeys((STORED, REQUESTING, REQUESTED, COMMITTING), 0)
        for txn in list(self.open.values()):
            counts[txn.facts.state] += 1
        for state, count in counts.items():
            family.add((state,), count)
        return [family]

    async def _housekeeping(self) -> None:
        """Expire abandoned transactions, settle those a restart left unsettled, forget old outcomes."""
        period = min(1.0, self.timeout_ms / 4000)
        while True:
            await asyncio.sleep(period)
            try:
                await self._sweep(_now_ms())
            except Exception:  # never fatal: the next round tries again
                log.exception("staged housekeeping failed")

    async def _sweep(self, now: int) -> None:
        for txn in list(self.open.values()):
            if txn.lock.locked():
                continue
            async with txn.lock:
                if txn.id not in self.open:
                    continue
                try:
                    if self._expired(txn, now):
                        await self._expire(txn)
                    elif txn.unsettled:
                        await self._settle(txn, RESTART_REASON)
                except Exception as exc:  # the cluster is away: tried again next round
                    log.warning("staged transaction %s: %s", txn.id, exc)
        for txn_id, outcome in list(self.done.items()):
            if now >= int(outcome.get("finishedMs", 0)) + self.timeout_ms:
                del self.done[txn_id]
                await asyncio.to_thread(self.spool.forget, txn_id)

    # -- requests --------------------------------------------------------------------------------

    async def store(self, topic: str, txn_id: str | None, seqno: int, records: Sequence[Record],
                    enrichment: Sequence[tuple[str, bytes]]) -> dict[str, Any]:
        if txn_id is None:
            txn_id = uuid.uuid4().hex
        txn = self.open.get(txn_id) or await self._create(topic, txn_id)
        async with txn.lock:
            await self._usable(txn)
            facts = txn.facts
            if facts.topic != topic:
                raise StagedError(409, "INVALID_REQUEST", f"transaction {txn_id} writes to {facts.topic}, not {topic}",
                                  state=facts.state)
            if facts.state != STORED:
                raise StagedError(409, "INVALID_TXN_STATE", f"transaction {txn_id} is {facts.state}: no more chunks "
                                  "can be stored; call commit", state=facts.state, redo="commit")
            if seqno <= facts.last_seqno:
                return {**self._view(txn), "chunk": {"seqno": seqno, "status": "duplicate"}}
            full = tuple(Record(r.value, r.key, (*r.headers, *enrichment)) for r in records)
            frame = chunk_frame(seqno, full)
            size = len(encode_frame(frame))
            if facts.valid_bytes + size > self.config.staged_max_transaction_bytes:
                raise StagedError(413, "REQUEST_TOO_LARGE", f"transaction {txn_id} would hold more than "
                                  f"gateway.staged.max.transaction.bytes={self.config.staged_max_transaction_bytes}; "
                                  "commit it and start another", state=facts.state)
            await asyncio.to_thread(self.spool.append, txn_id, frame)
            facts.valid_bytes += size
            facts.last_seqno = seqno
            facts.chunks += 1
            facts.records += len(full)
            return {**self._view(txn), "chunk": {"seqno": seqno, "status": "stored", "records": len(full)}}

    async def commit_request(self, txn_id: str) -> dict[str, Any]:
        txn = self._find(txn_id)
        async with txn.lock:
            await self._usable(txn)
            facts = txn.facts
            if facts.state == REQUESTED and txn.producer is not None:
                return self._view(txn)  # a repeated request: the transaction is open and complete
            if facts.chunks == 0:
                raise StagedError(409, "INVALID_TXN_STATE", f"transaction {txn_id} holds no chunks; call store",
                                  state=facts.state, redo="store")
            await asyncio.to_thread(self.spool.append, txn_id, {"type": REQUESTING})
            facts.state = REQUESTING
            try:
                txn.producer, facts.first_offset, facts.last_offset = await asyncio.to_thread(self._produce_all, facts)
            except Exception as exc:
                txn.unsettled = True
                reason = f"writing the transaction to the cluster failed ({exc}); nothing of it is visible"
                try:
                    await self._settle(txn, reason)
                except Exception as settle_exc:
                    log.warning("staged transaction %s: settle failed: %s", txn_id, settle_exc)
                raise StagedError(503, "SERVICE_UNAVAILABLE", f"{reason}; call commit_request again",
                                  state=facts.state, redo="commit_request") from None
            await asyncio.to_thread(self.spool.append, txn_id, {
                "type": REQUESTED, "first": facts.first_offset, "last": facts.last_offset, "records": facts.records})
            facts.state = REQUESTED
            return self._view(txn)

    async def commit(self, txn_id: str) -> dict[str, Any]:
        if txn_id in self.done:
            return self._outcome(txn_id)
        txn = self._find(txn_id)
        async with txn.lock:
            try:
                await self._usable(txn)
            except StagedError:
                if self.done.get(txn_id, {}).get("state") == "committed":
                    return self._outcome(txn_id)  # the commit in flight at a crash did land
                raise
            facts = txn.facts
            if facts.state != REQUESTED or txn.producer is None:
                why = facts.aborted_reason or "call commit_request, then commit"
                raise StagedError(409, "INVALID_TXN_STATE", f"transaction {txn_id} is not requested: {why}",
                                  state=facts.state, redo="commit_request")
            await asyncio.to_thread(self.spool.append, txn_id, {"type": COMMITTING})
            facts.state = COMMITTING
            producer, txn.producer = txn.producer, None
            try:
                await asyncio.to_thread(producer.commit_transaction, KAFKA_TIMEOUT_S)
            except Exception as exc:
                log.warning("staged transaction %s: commit failed (%s); settling", txn_id, exc)
                txn.unsettled = True
                try:
                    committed = await self._settle(txn, f"the commit failed ({exc}) and the transaction was aborted")
                except Exception as settle_exc:
                    raise StagedError(503, "SERVICE_UNAVAILABLE", f"the commit's outcome is unknown ({settle_exc}); "
                                      "call commit again", state=facts.state, redo="commit") from None
                if not committed:
                    raise StagedError(503, "SERVICE_UNAVAILABLE", f"{facts.aborted_reason}; call commit_request "
                                      "again, then commit", state=facts.state, redo="commit_request") from None
                return self._outcome(txn_id)
            await self._finish(txn, "committed")
            return self._outcome(txn_id)

    def status(self, txn_id: str) -> dict[str, Any]:
        if txn_id in self.done:
            return self._outcome(txn_id)
        txn = self._find(txn_id)
        view = self._view(txn)
        if txn.facts.aborted_reason and txn.facts.state == STORED:
            view["redo"] = "commit_request"
            view["reason"] = txn.facts.aborted_reason
        return view

    # -- steps -----------------------------------------------------------------------------------

    async def _create(self, topic: str, txn_id: str) -> Txn:
        if txn_id in self.done:
            raise self._finished_error(txn_id)
        if len(self.open) >= self.config.staged_max_transactions:
            raise StagedError(503, "SERVICE_UNAVAILABLE", f"{len(self.open)} staged transactions are open "
                              f"(gateway.staged.max.transactions={self.config.staged_max_transactions}); retry later")
        count = await self.topics.partition_count(topic)
        if txn_id in self.open:  # created by a request that ran while this one waited
            return self.open[txn_id]
        facts = Replayed(txn_id, topic, default_partition(txn_id.encode(), count),
                         f"{self._txn_prefix}-{txn_id}", _now_ms())
        txn = Txn(facts)
        self.open[txn_id] = txn
        async with txn.lock:
            begin = {"transactionId": txn_id, "topic": topic, "partition": facts.partition,
                     "transactionalId": facts.transactional_id, "createdMs": facts.created_ms}
            try:
                await asyncio.to_thread(self.spool.create, begin)
            except BaseException:
                del self.open[txn_id]
                raise
            facts.valid_bytes = len(encode_frame({"type": "begin", **begin}))
        return txn

    def _find(self, txn_id: str) -> Txn:
        txn = self.open.get(txn_id)
        if txn is None:
            if txn_id in self.done:
                raise self._finished_error(txn_id)
            raise StagedError(404, "TRANSACTIONAL_ID_NOT_FOUND", f"no staged transaction {txn_id} on this gateway "
                              "(staged transactions live in one instance's spool: ask the one that answered /store)")
        return txn

    def _finished_error(self, txn_id: str) -> StagedError:
        state = self.done[txn_id]["state"]
        if state == "expired":
            return StagedError(410, "TRANSACTION_EXPIRED", f"transaction {txn_id} was not committed within "
                               f"gateway.staged.timeout.ms={self.timeout_ms} and was aborted; its chunks are gone: "
                               "store them again under a new transaction id", state=state, redo="store")
        return StagedError(409, "INVALID_TXN_STATE", f"transaction {txn_id} is already committed", state=state)

    async def _usable(self, txn: Txn) -> None:
        """Under the lock: the transaction is neither finished, nor expired, nor unsettled."""
        if txn.id in self.done:
            raise self._finished_error(txn.id)
        if self._expired(txn, _now_ms()):
            await self._expire(txn)
            raise self._finished_error(txn.id)
        if txn.unsettled:
            try:
                await self._settle(txn, RESTART_REASON)
            except Exception as exc:
                raise StagedError(503, "SERVICE_UNAVAILABLE", f"transaction {txn.id}'s Kafka transaction could not "
                                  f"be settled ({exc}); retry", state=txn.facts.state) from None
            if txn.id in self.done:  # a commit in flight at the crash did land
                raise self._finished_error(txn.id)

    def _expired(self, txn: Txn, now_ms: int) -> bool:
        return now_ms >= txn.facts.created_ms + self.timeout_ms

    async def _expire(self, txn: Txn) -> None:
        if txn.producer is not None:
            await self._abort(txn, "expired")
        # A commit in flight at a crash may have landed: then it is committed, not expired.
        if (txn.facts.state != STORED or txn.unsettled) and await self._settle(txn, "expired"):
            return
        await self._finish(txn, "expired")
        log.info("staged transaction %s expired after %d ms: aborted, spool removed", txn.id, self.timeout_ms)

    async def _abort(self, txn: Txn, reason: str) -> None:
        producer, txn.producer = txn.producer, None
        if producer is None:
            return
        try:
            await asyncio.to_thread(producer.abort_transaction, KAFKA_TIMEOUT_S)
        except Exception as exc:
            log.warning("staged transaction %s: abort failed (%s); fencing instead", txn.id, exc)
            txn.unsettled = True
            await self._settle(txn, reason)
            return
        await self._mark_aborted(txn, reason)

    async def _settle(self, txn: Txn, reason: str) -> bool:
        """Fence the transaction's transactional id (aborting, or completing a prepared commit);
        True if it turned out committed (then it is finished), False if it is back to stored."""
        committed = await asyncio.to_thread(self._fence, txn.facts)
        txn.unsettled = False
        if committed:
            await self._finish(txn, "committed")
            return True
        await self._mark_aborted(txn, reason)
        return False

    async def _mark_aborted(self, txn: Txn, reason: str) -> None:
        await asyncio.to_thread(self.spool.append, txn.id, {"type": "aborted", "reason": reason})
        facts = txn.facts
        facts.state, facts.aborted_reason, facts.first_offset, facts.last_offset = STORED, reason, -1, -1
        self._outcomes.inc(("aborted",))

    async def _finish(self, txn: Txn, state: str) -> None:
        facts = txn.facts
        outcome = {"transactionId": txn.id, "topic": facts.topic, "partition": facts.partition, "state": state,
                   "chunks": facts.chunks, "records": facts.records, "lastSeqno": facts.last_seqno,
                   "firstOffset": facts.first_offset if state == "committed" else None,
                   "lastOffset": facts.last_offset if state == "committed" else None, "finishedMs": _now_ms()}
        await asyncio.to_thread(self.spool.finish, txn.id, outcome)
        self.done[txn.id] = outcome
        self.open.pop(txn.id, None)
        self._outcomes.inc((state,))

    def _view(self, txn: Txn) -> dict[str, Any]:
        facts = txn.facts
        view: dict[str, Any] = {
            "transactionId": txn.id, "topic": facts.topic, "partition": facts.partition, "state": facts.state,
            "chunks": facts.chunks, "records": facts.records, "lastSeqno": facts.last_seqno,
            "expiresAtMs": facts.created_ms + self.timeout_ms}
        if facts.state == REQUESTED:
            view["firstOffset"], view["lastOffset"] = facts.first_offset, facts.last_offset
        return view

    def _outcome(self, txn_id: str) -> dict[str, Any]:
        outcome = dict(self.done[txn_id])
        if outcome["state"] == "expired":
            raise self._finished_error(txn_id)
        outcome.pop("finishedMs", None)
        return outcome

    # -- Kafka (worker threads) ------------------------------------------------------------------

    def _producer(self, facts: Replayed) -> Producer:
        producer = Producer(self.config.kafka_config(**{
            "transactional.id": facts.transactional_id,
            "transaction.timeout.ms": self.timeout_ms + 60_000,
            "linger.ms": 5,
            "retry.backoff.ms": 20,
        }))
        producer.init_transactions(KAFKA_TIMEOUT_S)
        return producer

    def _produce_all(self, facts: Replayed) -> tuple[Producer, int, int]:
        """Open the Kafka transaction and write every spooled record in it, acknowledged; the
        transaction is left open. On failure it is aborted (or left for fencing) and this raises."""
        producer = self._producer(facts)
        offsets: list[int] = []
        errors: list[KafkaError] = []
        report = _reporter(offsets, errors)
        try:
            producer.begin_transaction()
            for frame in self.spool.chunks(facts.transaction_id):
                for key, value, headers in chunk_records(frame):
                    _produce(producer, facts, key, value, headers, report)
            if producer.flush(KAFKA_TIMEOUT_S) > 0:
                raise TimeoutError(f"records not acknowledged within {KAFKA_TIMEOUT_S:.0f} s")
            if errors:
                raise KafkaException(errors[0])
        except Exception:
            try:
                producer.abort_transaction(KAFKA_TIMEOUT_S)
            except Exception as exc:
                log.warning("staged transaction %s: abort failed: %s", facts.transaction_id, exc)
            raise
        return producer, min(offsets), max(offsets)

    def _fence(self, facts: Replayed) -> bool:
        """Initialise a producer with the transaction's transactional id: any producer before it is
        fenced and its open transaction aborted, or completed if its commit was already prepared.
        Returns whether the transaction's records are visible (only possible from ``committing``)."""
        self._producer(facts)
        if facts.state != COMMITTING or facts.first_offset < 0:
            return False
        return self._visible(facts)

    def _visible(self, facts: Replayed) -> bool:
        """Whether the record at ``first_offset`` is visible to read_committed readers (the
        transaction is settled, so the last stable offset passes it soon)."""
        consumer = Consumer(self.config.kafka_config(**{
            "group.id": f"{self.config.group_id}-staged-check", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 10,
        }))
        deadline = time.monotonic() + KAFKA_TIMEOUT_S
        try:
            consumer.assign([TopicPartition(facts.topic, facts.partition, facts.first_offset)])
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is None:
                    return message.offset() == facts.first_offset
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                if (message.offset() or 0) > facts.last_offset:
                    return False  # stable past the transaction and its first record was not delivered
            raise TimeoutError(f"{facts.topic}[{facts.partition}] not stable past offset {facts.last_offset}")
        finally:
            consumer.close()


def _produce(producer: Producer, facts: Replayed, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, str | bytes | None]], report: Callable[[KafkaError | None, Message], None]) -> None:
    while True:
        try:
            producer.produce(facts.topic, value, key, partition=facts.partition, headers=headers,
                             on_delivery=report)
            return
        except BufferError:  # the producer's queue is full: let deliveries drain it
            producer.poll(0.1)


def _reporter(offsets: list[int], errors: list[KafkaError]) -> Callable[[KafkaError | None, Message], None]:
    def report(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets.append(message.offset() or 0)
    return report


def _now_ms() -> int:
    return int(time.time() * 1000)
