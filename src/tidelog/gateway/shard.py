"""One shard of sources: its transactional producer, its state, and the thread that writes for it.

A shard is one partition of the state topic. Its owner (one gateway instance at a time) runs one
``ShardWriter``, whose thread:

1. **opens** the shard: a transactional producer with ``transactional.id = <prefix>-shard-<n>``;
   ``init_transactions`` fences any earlier owner (a zombie's later writes fail with
   PRODUCER_FENCED) and settles its open transaction (commits a prepared one, aborts the rest);
   only then does it read the state partition from the beginning to its end, ``read_committed``,
   into memory. Fencing before reading is what makes the state complete: nothing can be committed to
   the partition after the read but by this producer.
2. **writes** in transactions: it takes every job queued (up to ``txn_max_requests``), plans each
   with the seqno rule against the state (and the jobs before it in the same transaction), produces
   the records to the source's partition and one state record per touched source to the shard's
   state partition, flushes, commits. The in-memory state moves only after the commit succeeds.
3. on any failure whose outcome is not a clean abort (a commit that timed out, a fenced or fatal
   producer), it **reopens**: a new producer instance with the same transactional id settles the
   open transaction, and the state is read again. Jobs of a failed transaction get ``WriteFailed``;
   whether some chunks landed or not, retrying the same chunks is safe, because the rule skips those
   that did.

Invariant: for every source of the shard, ``states[key]`` equals the last committed state record of
that key in the state partition, and every chunk with seqno <= that state's seqno is in the data
topic exactly once (written in the same transaction as the state record that covers it).

**When the cluster goes away.** The producer's error callback (served by the thread's polls, idle
or flushing) reports ``_ALL_BROKERS_DOWN`` and a metadata request (``PROBE_S``) confirms it (brokers
closing idle connections cause the same report); a transaction fails; an open attempt fails. Then the
shard is *down*: ``submit`` refuses every job at once (``ShardUnavailable``, answered 503 with
Retry-After: nothing was written, retrying is safe), the queued jobs are refused likewise, a
transaction being flushed is given up without a commit (the next ``init_transactions`` aborts it),
and the thread reopens the shard (step 1: a new producer, fencing, the state read again) every
``OPEN_RETRY_S`` until the cluster answers. Every blocking call is bounded: ``init_transactions``
by ``OPEN_ATTEMPT_S`` per attempt (retried on the same producer while the error is retriable),
flushes, commits and aborts by ``min(gateway.transaction.timeout.ms, gateway.request.timeout.ms)``;
so ``close`` is answered within a few seconds even with the cluster gone. Only a transaction whose
commit was already sent when the cluster went away keeps its requests waiting, up to that bound.

Threads: ``submit`` may be called from any thread (the event loop); the producer (and the state
loader's consumer) are used only by the shard's own thread, and a producer given up is purged and
destroyed there too, never while another call on it is under way. Results go back through
``concurrent.futures.Future``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.model import WriteRequest
from tidelog.gateway.seqno import Plan, SourceState, default_partition, plan
from tidelog.gateway.state_codec import decode_key, decode_state, encode_state, state_key, transactional_id

log = logging.getLogger(__name__)
OPEN_RETRY_S = 0.5
OPEN_ATTEMPT_S = 5.0
FLUSH_SLICE_S = 0.1
PROBE_S = 1.0


class ShardUnavailable(Exception):
    """This instance does not serve the shard (any more): it moved, or it is closing."""


class WriteFailed(Exception):
    """The transaction holding the job did not commit, or its outcome is unknown. Retrying the
    same chunks is safe: those already written are reported as duplicates."""


class Unreachable(WriteFailed):
    """The cluster went away while the transaction's records were being delivered (before any commit)."""


@dataclass(frozen=True)
class ChunkResult:
    seqno: int
    written: bool
    offset: int = -1  # first record's offset, when written
    records: int = 0


@dataclass(frozen=True)
class WriteResult:
    topic: str
    source_id: str
    partition: int
    last_seqno: int
    chunks: tuple[ChunkResult, ...]


@dataclass
class WriteJob:
    """One request for the shard thread. ``topic`` is the data topic (dc prefix applied)."""

    topic: str
    request: WriteRequest
    partition_count: int
    enrichment: Sequence[tuple[str, bytes]]  # headers added to every record
    future: Future[WriteResult] = field(default_factory=Future)


@dataclass
class Pending:
    job: WriteJob
    plan: Plan
    first_offsets: list[int]  # per written chunk, filled by the delivery report of its first record


def _kafka_error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _describe(exc: BaseException) -> str:
    error = _kafka_error(exc)
    return error.str() if error is not None else str(exc) or type(exc).__name__


def _dispose(producer: Producer) -> None:
    """Purge what the producer still holds and let it be destroyed; never ``close()``, which aborts
    the open transaction and flushes, waiting for a cluster that may be gone."""
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.poll(0)
    except (KafkaException, RuntimeError) as exc:
        log.info("disposing of a producer: %s", exc)


class ShardWriter:
    def __init__(self, config: GatewayConfig, shard: int,
                 on_commit: Callable[[int, float], None] | None = None) -> None:
        self.config = config
        self.shard = shard
        self.states: dict[bytes, SourceState] = {}
        self.ready = threading.Event()
        self.load_seconds = 0.0
        self.down = ""  # why the shard cannot serve now ("" when it can, or while it first opens)
        self.reopens = 0
        self._unreachable = ""  # set by the producer's error callback, on this shard's thread
        self._op_timeout_s = min(config.transaction_timeout_ms, config.request_timeout_ms) / 1000
        self._jobs: queue.SimpleQueue[WriteJob | None] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._producer: Producer | None = None
        self._opening: Producer | None = None  # a producer whose init_transactions timed out, tried again
        self._on_commit = on_commit
        self._thread = threading.Thread(target=self._run, name=f"gateway-shard-{shard}", daemon=True)

    # -- any thread ------------------------------------------------------------------------------

    def start(self) -> ShardWriter:
        self._thread.start()
        return self

    def submit(self, job: WriteJob) -> Future[WriteResult]:
        if self._closing.is_set():
            job.future.set_exception(ShardUnavailable(f"shard {self.shard} is closing"))
        elif self.down:
            job.future.set_exception(ShardUnavailable(self.down))
        else:
            self._jobs.put(job)
        return job.future

    def state_of(self, topic: str, source_id: str) -> SourceState | None:
        return self.states.get(state_key(topic, source_id))

    def begin_close(self) -> None:
        """Stop taking jobs; the thread finishes the transaction in progress and fails what is queued."""
        self._closing.set()
        self._jobs.put(None)

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end; False if it is still in a (bounded) call after ``timeout``."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()

    def close(self, timeout: float = 10.0) -> None:
        self.begin_close()
        if not self.join(timeout):
            log.warning("shard %d: still in a call to the cluster after %.0f s; it ends on its own", self.shard, timeout)

    # -- the shard's thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                if not self.ready.is_set():
                    try:
                        self._open()
                    except ShardUnavailable:
                        break
                    except Exception as exc:
                        self._go_down(f"shard {self.shard} cannot reach the cluster ({_describe(exc)}); it reopens "
                                      "when the cluster answers")
                        self._closing.wait(OPEN_RETRY_S)
                        continue
                jobs = self._take()
                if jobs:
                    self._write(jobs)
                elif self._unreachable and self._producer is not None and not self._cluster_answers(self._producer):
                    self._give_up_producer(f"the producer reported: {self._unreachable}")
        finally:
            for producer in (self._producer, self._opening):
                if producer is not None:
                    _dispose(producer)
            self._producer = self._opening = None
            self._fail_queued()

    def _go_down(self, reason: str) -> None:
        if reason != self.down and not self._closing.is_set():
            log.warning("%s", reason)
        self.down = reason
        self.ready.clear()
        self._fail_queued(reason)

    def _give_up_producer(self, why: str) -> None:
        """Drop the producer (on this thread, no call on it under way) and reopen: a new producer fences
        this one and settles its open transaction before the state is read again."""
        producer, self._producer = self._producer, None
        if producer is not None:
            _dispose(producer)
        self.reopens += 1
        self._go_down(f"shard {self.shard} is reopening: {why}; retry shortly")

    def _cluster_answers(self, producer: Producer) -> bool:
        """Whether a metadata request is answered now: ``_ALL_BROKERS_DOWN`` also comes when idle
        connections are closed by the brokers, which librdkafka makes again on demand."""
        try:
            producer.list_topics(self.config.state_topic, timeout=PROBE_S)
        except KafkaException:
            return False
        self._unreachable = ""
        return True

    def _on_error(self, error: KafkaError) -> None:
        """The producer's error callback, served on this thread by poll and flush."""
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._unreachable = "no broker answers"  # librdkafka's own text counts brokers confusingly
        elif error.fatal():
            self._unreachable = error.str()
        else:
            log.debug("shard %d: %s", self.shard, error.str())

    def _new_producer(self) -> Producer:
        return Producer(self.config.kafka_config(**{
            "transactional.id": transactional_id(self.config.txn_prefix, self.shard),
            "transaction.timeout.ms": self.config.transaction_timeout_ms,
            "linger.ms": 1,
            "retry.backoff.ms": 20,  # librdkafka's 100 ms first backoff adds ~0.5 s to a cold init_transactions
            "queue.buffering.max.kbytes": max(1024, 2 * self.config.max_inflight_bytes // 1024),
            "error_cb": self._on_error,
        }))

    def _open(self) -> None:
        started = time.monotonic()
        self.ready.clear()
        producer = self._opening or self._new_producer()
        self._opening = producer
        try:
            producer.init_transactions(min(OPEN_ATTEMPT_S, self._op_timeout_s))
        except KafkaException as exc:
            error = _kafka_error(exc)
            if error is None or not error.retriable():
                self._opening = None
                _dispose(producer)
            raise
        self._opening = None
        self._unreachable = ""
        try:
            self.states = self._load_states(self._op_timeout_s)
        except BaseException:
            _dispose(producer)
            raise
        producer.poll(0)  # errors from before the fence are stale now
        self._unreachable = ""
        self._producer = producer
        self.load_seconds = time.monotonic() - started
        self.down = ""
        self.ready.set()
        log.info("shard %d: open with %d sources in %.3f s", self.shard, len(self.states), self.load_seconds)

    def _load_states(self, timeout: float) -> dict[bytes, SourceState]:
        consumer = Consumer(self.config.kafka_config(**{
            "group.id": f"{self.config.group_id}-loader", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True, "fetch.wait.max.ms": 10,
        }))
        states: dict[bytes, SourceState] = {}
        deadline = time.monotonic() + timeout
        try:
            # Metadata first: assigned before the leader is known, librdkafka waits a fixed 500 ms to retry.
            consumer.list_topics(self.config.state_topic, timeout=timeout)
            consumer.assign([TopicPartition(self.config.state_topic, self.shard, OFFSET_BEGINNING)])
            while True:
                if self._closing.is_set():
                    raise ShardUnavailable(f"shard {self.shard} closed while loading")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"state partition {self.shard} not read to its end in {timeout:.0f} s")
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return states
                    raise KafkaException(error)
                self._replay(states, message)
        finally:
            consumer.close()

    def _replay(self, states: dict[bytes, SourceState], message: Message) -> None:
        key, value = message.key(), message.value()
        if key is None:
            return
        try:
            decode_key(key)
            if value is None:
                states.pop(key, None)
            else:
                states[key] = decode_state(value)
        except ValueError as exc:
            log.warning("shard %d: skipping state record at offset %s: %s", self.shard, message.offset(), exc)

    def _take(self) -> list[WriteJob]:
        if self._producer is not None:
            self._producer.poll(0)  # serves the error callback while idle
        try:
            first = self._jobs.get(timeout=0.5)
        except queue.Empty:
            return []
        jobs = [] if first is None else [first]
        while len(jobs) < self.config.txn_max_requests:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                jobs.append(job)
        return jobs

    def _fail_queued(self, reason: str = "") -> None:
        reason = reason or f"shard {self.shard} moved to another instance"
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None and not job.future.done():
                job.future.set_exception(ShardUnavailable(reason))

    # -- one transaction -------------------------------------------------------------------------

    def _write(self, jobs: list[WriteJob]) -> None:
        producer = self._producer
        assert producer is not None
        started = time.monotonic()
        overlay: dict[bytes, SourceState] = {}
        pending: list[Pending] = []
        errors: list[KafkaError] = []
        try:
            producer.begin_transaction()
            for job in jobs:
                pending.append(self._produce_job(producer, job, overlay, errors))
            for key, state in overlay.items():
                producer.produce(self.config.state_topic, encode_state(state), key, partition=self.shard,
                                 on_delivery=_collect_error(errors))
            self._flush(producer)
            if errors:
                raise KafkaException(errors[0])
            producer.commit_transaction(self._op_timeout_s)
        except Exception as exc:
            self._after_failure(producer, jobs, exc)
            return
        self.states.update(overlay)
        for item in pending:
            item.job.future.set_result(_result(item))
        if self._on_commit is not None:
            self._on_commit(len(pending), time.monotonic() - started)

    def _produce_job(self, producer: Producer, job: WriteJob, overlay: dict[bytes, SourceState],
                     errors: list[KafkaError]) -> Pending:
        request = job.request
        key = state_key(job.topic, request.source_id)
        current = overlay.get(key) or self.states.get(key)
        decision = plan(current, [c.seqno for c in request.chunks],
                        default_partition(request.source_id.encode(), job.partition_count))
        item = Pending(job, decision, [])
        if not decision.writes_anything:
            return item
        for chunk, write in zip(request.chunks, decision.write, strict=True):
            if not write:
                continue
            slot = len(item.first_offsets)
            item.first_offsets.append(-1)
            common: list[tuple[str, str | bytes | None]] = [
                *job.enrichment, *_chunk_headers(self.config, request.source_id, chunk.seqno)]
            first, *rest = chunk.records
            producer.produce(job.topic, first.value, first.key, partition=decision.partition,
                             headers=[*first.headers, *common], on_delivery=_first_offset(item.first_offsets, slot, errors))
            # No callback for the others: a failed delivery puts the transaction in an abortable state,
            # so commit_transaction raises and the whole transaction is aborted. librdkafka copies the
            # headers, so one list serves every record without headers of its own.
            produce, topic, partition = producer.produce, job.topic, decision.partition  # the hot loop's names
            for record_value, record_key, own in rest:
                produce(topic, record_value, record_key, partition=partition,
                        headers=[*own, *common] if own else common)
        overlay[key] = SourceState(decision.last_seqno, decision.partition)
        return item

    def _flush(self, producer: Producer) -> None:
        """Deliver the transaction's records, in slices so that an unreachable cluster or a close is
        noticed at once; a transaction given up here was never committed (nothing of it is visible)."""
        deadline = time.monotonic() + self._op_timeout_s
        while producer.flush(FLUSH_SLICE_S) > 0:
            if self._unreachable and not self._cluster_answers(producer):
                raise Unreachable(f"the cluster became unreachable ({self._unreachable}); nothing of this "
                                  "transaction was committed")
            if time.monotonic() > deadline:
                raise WriteFailed(f"records not delivered within {self._op_timeout_s:.0f} s; nothing of this "
                                  "transaction was committed")

    def _after_failure(self, producer: Producer, jobs: list[WriteJob], exc: Exception) -> None:
        error = _kafka_error(exc)
        clean = False
        if isinstance(exc, Unreachable):
            pass  # an abort would only wait for the cluster: the new producer's init_transactions aborts it
        elif error is None or error.txn_requires_abort() or isinstance(exc, WriteFailed):
            try:
                producer.abort_transaction(self._op_timeout_s)
                clean = True
            except Exception as abort_exc:
                log.warning("shard %d: abort failed: %s", self.shard, abort_exc)
        committed = "not committed" if clean or isinstance(exc, Unreachable) else "outcome unknown"
        reason = f"transaction {committed}: {error.str() if error else exc}"
        log.warning("shard %d: %s", self.shard, reason)
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(WriteFailed(reason))
        if not clean or self._unreachable:
            self._give_up_producer(reason)


def _chunk_headers(config: GatewayConfig, source_id: str, seqno: int) -> list[tuple[str, bytes]]:
    out = []
    if config.headers.source_id:
        out.append((config.headers.source_id, source_id.encode()))
    if config.headers.seqno:
        out.append((config.headers.seqno, str(seqno).encode()))
    return out


def _collect_error(errors: list[KafkaError]) -> Callable[[KafkaError | None, Message], None]:
    def callback(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
    return callback


def _first_offset(offsets: list[int], slot: int, errors: list[KafkaError]) -> Callable[[KafkaError | None, Message], None]:
    def callback(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            offsets[slot] = message.offset() or 0
    return callback


def _result(item: Pending) -> WriteResult:
    request, chunks = item.job.request, []
    written = iter(item.first_offsets)
    for chunk, write in zip(request.chunks, item.plan.write, strict=True):
        if write:
            chunks.append(ChunkResult(chunk.seqno, True, next(written), len(chunk.records)))
        else:
            chunks.append(ChunkResult(chunk.seqno, False))
    return WriteResult(item.job.topic, request.source_id, item.plan.partition, item.plan.last_seqno, tuple(chunks))

