"""LogConsumer: one reader thread, a bounded hand-off to worker threads, and commits that never pass
unfinished work.

Threads and hand-off::

    reader thread ── poll ──> dispatch ──> bounded queue(s) ──> worker threads ──> handler
          │                      │                                   │
          │ pause + seek back    └ DonePrefix.begin(offset)          └ DonePrefix.finish(offset)
          │ when a queue is full
          └ every commit interval: commit each partition's done prefix (offsets, a transaction,
            or the handler's own commit)

Back-pressure: when a record finds its queue full, the reader pauses the record's partition and
holds that record (and any the client had already fetched for the partition) in order; it keeps
polling (a paused partition returns nothing new), so ``max.poll.interval.ms`` never expires and no
rebalance follows from slow workers. Held records go to the queue first as room appears, and the
partition resumes once none is held. Memory beyond the queues is bounded by librdkafka's prefetch.

Ordering: ``ordering="key"`` (default) routes each record to a worker by a hash of its key (or of
its partition when it has none), so records of one key are handled one at a time, in offset order;
``ordering="none"`` shares one queue between all workers.

Commits: a :class:`DonePrefix` per partition gives the offset below which every record was handled.
Only that offset is committed, so a record finished early never lets a commit skip an earlier one
that is still running (or that a crash interrupts): after a crash, what was not committed is
delivered again (at least once).

Modes:

* ``at-least-once`` (default): ``handler(record)``; offsets committed with ``commit()``.
* ``exactly-once``: ``handler(record)`` returns the records to produce (``OutputRecord``). Workers
  only compute; at each commit the reader produces, in input order, the outputs of the done prefix
  and sends the input offsets in the same Kafka transaction, then commits it. A failed
  transaction is aborted and the partitions are sought back to their last committed offset.
  The input is read with ``isolation.level=read_committed``.
* ``transactional`` (360's interface): the handler is a :class:`TransactionalHandler`; workers call
  ``process(record)``; at each commit the reader calls ``commit(records)`` with the done prefix's
  records, in order, then commits their offsets; if that fails it calls ``rollback(records)`` and
  seeks back, and the records are processed again.

Poison records: a handler that raises is retried ``max_retries`` times with exponential backoff
(``retry_backoff_ms`` doubled each time, at most 5 s); then the record goes to ``dlq_topic`` with
headers naming the error, the source topic, partition and offset, and counts as handled. Without a
dead-letter topic the consumer stops with :class:`HandlerError`, committing nothing past the record.

Rebalances: when partitions are revoked the reader stops handing out their queued records, waits
up to ``rebalance_deadline_ms`` for their in-flight records, commits their done prefix, and only then
lets the revoke complete. Records still running after the deadline are abandoned: their outcome is
ignored and the new owner receives them again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException, Message, Producer, TopicPartition

from tidelog.clients.errors import ClientError
from tidelog.clients.offsets import DonePrefix
from tidelog.clients.spool import normalize_headers
from tidelog.common.errors import ConfigError

log = logging.getLogger(__name__)
TP = tuple[str, int]
DLQ_HEADERS = ("tidelog.dlq.error", "tidelog.dlq.topic", "tidelog.dlq.partition", "tidelog.dlq.offset",
               "tidelog.dlq.attempts")
MODES = ("at-least-once", "exactly-once", "transactional")


class HandlerError(ClientError):
    """A record kept failing and there is no dead-letter topic; the consumer stopped before it."""


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int = 0


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """A record an exactly-once handler asks to produce."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int = -1


class TransactionalHandler(Protocol):
    """360's handler interface: side effects staged by ``process``, made final by ``commit``."""

    def process(self, record: ConsumedRecord) -> None: ...

    def commit(self, records: Sequence[ConsumedRecord]) -> None: ...

    def rollback(self, records: Sequence[ConsumedRecord]) -> None: ...


@dataclass(frozen=True, slots=True)
class ConsumerMetrics:
    queued: int
    in_flight: int
    paused_partitions: int
    committed: dict[TP, int]  # the last offset this consumer committed per partition (owned or not now)
    lag: dict[TP, int]  # high watermark minus committed offset, per owned partition, as of the last commit
    handled_total: int
    retries_total: int
    dlq_total: int
    rollbacks_total: int
    rebalances_total: int


@dataclass
class _Partition:
    """What the reader and workers share about one owned partition (under the consumer's lock)."""

    generation: int
    prefix: DonePrefix | None = None
    committed: int | None = None  # the last offset committed (or the first one handed out)
    in_flight: int = 0
    revoking: bool = False
    resume_at: int | None = None  # after a seek back: records are taken again from this offset on
    results: dict[int, Any] = field(default_factory=dict)  # offset -> outputs or the record itself


class LogConsumer:
    """Consume ``topics`` in group ``config["group.id"]`` with a pool of workers (module docstring)."""

    def __init__(
        self,
        config: Mapping[str, object],
        topics: Sequence[str],
        handler: Callable[[ConsumedRecord], Any] | TransactionalHandler,
        *,
        mode: str = "at-least-once",
        workers: int = 4,
        queue_size: int = 1000,
        ordering: str = "key",
        dlq_topic: str | None = None,
        max_retries: int = 3,
        retry_backoff_ms: int = 100,
        commit_interval_ms: int = 1000,
        rebalance_deadline_ms: int = 10_000,
        producer_config: Mapping[str, object] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if ordering not in ("key", "none"):
            raise ConfigError(f"ordering: expected key or none, got {ordering!r}")
        if workers < 1 or queue_size < workers:
            raise ConfigError("workers: at least 1, and queue_size at least workers")
        if "group.id" not in config:
            raise ConfigError("group.id: required")
        if mode == "transactional" and not all(hasattr(handler, m) for m in ("process", "commit", "rollback")):
            raise ConfigError("mode transactional: the handler needs process, commit and rollback methods")
        self._mode = mode
        self._handler = handler
        self._topics = list(topics)
        self._dlq_topic = dlq_topic
        self._max_retries = max_retries
        self._retry_backoff = retry_backoff_ms / 1000
        self._commit_interval = commit_interval_ms / 1000
        self._rebalance_deadline = rebalance_deadline_ms / 1000
        consumer_config: dict[str, Any] = {"enable.auto.commit": False, "enable.auto.offset.store": False,
                                           **config}
        if mode == "exactly-once":
            consumer_config["isolation.level"] = "read_committed"
        self._consumer = RdConsumer(consumer_config)
        base_producer: dict[str, Any] = {"bootstrap.servers": config["bootstrap.servers"], "linger.ms": 5,
                                         **(producer_config or {})}
        self._producer: Producer | None = None
        if mode == "exactly-once":
            base_producer.setdefault("transactional.id", f"{config['group.id']}-log-consumer")
            self._producer = Producer(base_producer)
            self._producer.init_transactions(30)
        elif dlq_topic is not None:
            self._producer = Producer({**base_producer, "enable.idempotence": True})
        self._queues: list[queue.Queue[tuple[int, ConsumedRecord] | None]] = (
            [queue.Queue(queue_size // workers) for _ in range(workers)] if ordering == "key"
            else [queue.Queue(queue_size)])
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._parts: dict[TP, _Partition] = {}
        self._held: dict[TP, deque[ConsumedRecord]] = {}  # paused partitions' records that found no room
        self._generation = 0
        self._stop = threading.Event()
        self._lag: dict[TP, int] = {}
        self._committed: dict[TP, int] = {}  # every offset this consumer committed, kept after a revoke
        self._error: BaseException | None = None
        self._handled = self._retries = self._dlq = self._rollbacks = self._rebalances = 0
        self._workers = [threading.Thread(target=self._work, args=(self._queues[i % len(self._queues)],),
                                          name=f"tidelog-consumer-worker-{i}", daemon=True) for i in range(workers)]
        self._reader = threading.Thread(target=self._read_loop, name="tidelog-consumer-reader", daemon=True)
        self._started = False

    # -- life cycle --------------------------------------------------------------------------------

    def start(self) -> LogConsumer:
        self._started = True
        for worker in self._workers:
            worker.start()
        self._reader.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop reading, let the workers finish what they hold (up to ``timeout``), commit, close.
        Raises HandlerError if the consumer stopped because of a poison record."""
        self._stop.set()
        if self._started:
            self._reader.join(timeout)
        if self._error is not None:
            raise HandlerError(str(self._error)) from self._error

    def run(self) -> None:
        """Start and block until :meth:`stop` is called from another thread (or a fatal error)."""
        self.start()
        self._reader.join()
        if self._error is not None:
            raise HandlerError(str(self._error)) from self._error

    def __enter__(self) -> LogConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def error(self) -> BaseException | None:
        return self._error

    def metrics(self) -> ConsumerMetrics:
        with self._lock:
            committed = dict(self._committed)
            in_flight = sum(p.in_flight for p in self._parts.values())
        lag = dict(self._lag)
        return ConsumerMetrics(
            queued=sum(q.qsize() for q in self._queues), in_flight=in_flight, paused_partitions=len(self._held),
            committed=committed, lag=lag, handled_total=self._handled, retries_total=self._retries,
            dlq_total=self._dlq, rollbacks_total=self._rollbacks, rebalances_total=self._rebalances,
        )

    # -- the reader thread ---------------------------------------------------------------------------

    def _read_loop(self) -> None:
        consumer = self._consumer
        consumer.subscribe(self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                           on_lost=self._on_lost)
        next_commit = time.monotonic() + self._commit_interval
        try:
            while not self._stop.is_set() and self._error is None:
                for message in consumer.consume(num_messages=500, timeout=0.1):
                    error = message.error()
                    if error is None:
                        self._dispatch(message)
                    elif error.code() != RdKafkaError._PARTITION_EOF:
                        if error.fatal():
                            raise KafkaException(error)
                        log.warning("consumer error: %s", error)
                self._maybe_resume()
                if time.monotonic() >= next_commit:
                    self._commit(list(self._parts))
                    self._update_lag()
                    next_commit = time.monotonic() + self._commit_interval
            self._finish()
        except BaseException as exc:
            self._error = self._error or exc
            log.exception("LogConsumer reader stopped")
        finally:
            for q in self._queues:
                for _ in self._workers:
                    q.put(None)
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                pass

    def _update_lag(self) -> None:
        """Lag per owned partition from the high watermarks of the last fetches (reader thread only:
        confluent-kafka's consumer is not called from other threads)."""
        with self._lock:
            committed = {tp: p.committed for tp, p in self._parts.items() if p.committed is not None}
        lag: dict[TP, int] = {}
        for (topic, partition), offset in committed.items():
            try:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except KafkaException:
                continue
            if high >= 0:
                lag[(topic, partition)] = max(0, high - offset)
        self._lag = lag

    def _finish(self) -> None:
        """Wait for the queues to empty and the in-flight records to finish, then commit."""
        deadline = time.monotonic() + self._rebalance_deadline
        while time.monotonic() < deadline and self._error is None:
            with self._lock:
                busy = any(p.in_flight for p in self._parts.values())
            if not busy and all(q.empty() for q in self._queues):
                break
            time.sleep(0.01)
        if self._error is None:
            self._commit(list(self._parts))

    def _dispatch(self, message: Message) -> None:
        tp = (message.topic() or "", message.partition() or 0)
        offset = message.offset() or 0
        record = ConsumedRecord(tp[0], tp[1], offset, message.key(), message.value(),
                                normalize_headers(message.headers()), message.timestamp()[1])
        with self._lock:
            part = self._parts.get(tp)
            if part is None or part.revoking:
                return
            if part.resume_at is not None:
                if offset != part.resume_at:
                    return  # fetched before a seek back took effect
                part.resume_at = None
            if tp in self._held:
                self._held[tp].append(record)  # fetched before the pause took effect: kept in order
                return
            if self._hand_out(part, record):
                return
            self._held[tp] = deque([record])
        self._consumer.pause([TopicPartition(tp[0], tp[1])])

    def _hand_out(self, part: _Partition, record: ConsumedRecord) -> bool:
        """Queue ``record`` for a worker (under the lock); False when its queue is full."""
        if part.prefix is None:
            part.prefix = DonePrefix(record.offset)
            part.committed = record.offset if part.committed is None else part.committed
        if record.offset < part.prefix.end:
            return True  # already handed out (a stale fetch): dropped
        part.prefix.begin(record.offset, record.offset + 1)
        try:
            self._queue_for(record).put_nowait((part.generation, record))
        except queue.Full:
            part.prefix.cancel(record.offset)
            return False
        return True

    def _queue_for(self, record: ConsumedRecord) -> queue.Queue[tuple[int, ConsumedRecord] | None]:
        if len(self._queues) == 1:
            return self._queues[0]
        basis = record.key if record.key is not None else f"{record.topic}/{record.partition}".encode()
        return self._queues[zlib.crc32(basis) % len(self._queues)]

    def _maybe_resume(self) -> None:
        """Move held records to the queues as room appears; resume a partition once none is held."""
        if not self._held:
            return
        resumed = []
        with self._lock:
            for tp, held in list(self._held.items()):
                part = self._parts.get(tp)
                while held and part is not None and self._hand_out(part, held[0]):
                    held.popleft()
                if not held or part is None:
                    del self._held[tp]
                    if part is not None:
                        resumed.append(TopicPartition(tp[0], tp[1]))
        if resumed:
            self._consumer.resume(resumed)

    # -- commits ---------------------------------------------------------------------------------------

    def _commit(self, tps: Iterable[TP]) -> None:
        """Commit the done prefix of ``tps`` by the mode's means."""
        batch: dict[TP, tuple[int, list[Any]]] = {}
        with self._lock:
            for tp in tps:
                part = self._parts.get(tp)
                if part is None or part.prefix is None or part.committed is None:
                    continue
                position = part.prefix.position
                if position > part.committed:
                    results = [part.results.pop(o) for o in sorted(part.results) if o < position]
                    batch[tp] = (position, results)
        if not batch:
            return
        try:
            if self._mode == "exactly-once":
                self._commit_transaction(batch)
            elif self._mode == "transactional":
                self._commit_handler(batch)
            else:
                self._consumer.commit(offsets=[TopicPartition(t, p, pos) for (t, p), (pos, _) in batch.items()],
                                      asynchronous=False)
        except (KafkaException, _RolledBack) as exc:
            log.warning("commit of %s failed (%s): seeking back to the last commit", sorted(batch), exc)
            self._rewind(list(batch))
            return
        with self._lock:
            for tp, (position, _) in batch.items():
                self._committed[tp] = position
                if tp in self._parts:
                    self._parts[tp].committed = position

    def _commit_transaction(self, batch: dict[TP, tuple[int, list[Any]]]) -> None:
        producer = self._producer
        assert producer is not None
        producer.begin_transaction()
        try:
            for _, outputs in batch.values():
                for output in outputs:
                    for out in output or ():
                        _produce(producer, out)
            offsets = [TopicPartition(t, p, pos) for (t, p), (pos, _) in batch.items()]
            producer.send_offsets_to_transaction(offsets, self._consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        except KafkaException as exc:
            if exc.args and isinstance(exc.args[0], RdKafkaError) and exc.args[0].fatal():
                raise
            try:
                producer.abort_transaction(30)
            except KafkaException:
                log.exception("abort_transaction failed")
            raise

    def _commit_handler(self, batch: dict[TP, tuple[int, list[Any]]]) -> None:
        handler: TransactionalHandler = self._handler  # type: ignore[assignment]
        records = [r for _, rs in batch.values() for r in rs if r is not None]  # None: dead-lettered
        try:
            handler.commit(records)
            self._consumer.commit(offsets=[TopicPartition(t, p, pos) for (t, p), (pos, _) in batch.items()],
                                  asynchronous=False)
        except Exception as exc:
            self._rollbacks += 1
            try:
                handler.rollback(records)
            except Exception:
                log.exception("rollback failed")
            raise _RolledBack(str(exc)) from exc

    def _rewind(self, tps: list[TP]) -> None:
        """Forget the work of ``tps`` since their last commit and read them again from it."""
        seeks = []
        with self._lock:
            for tp in tps:
                part = self._parts.get(tp)
                if part is None or part.committed is None:
                    continue
                self._generation += 1
                part.generation = self._generation  # queued and in-flight records of before are ignored
                part.in_flight = 0
                part.results.clear()
                part.prefix = DonePrefix(part.committed)
                part.resume_at = part.committed
                self._held.pop(tp, None)
                seeks.append(TopicPartition(tp[0], tp[1], part.committed))
        for partition in seeks:
            try:
                self._consumer.seek(partition)
            except KafkaException as exc:
                log.warning("seek %s failed: %s", partition, exc)

    # -- rebalances -----------------------------------------------------------------------------------

    def _on_assign(self, consumer: RdConsumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self._rebalances += 1
            for tp in partitions:
                self._generation += 1
                self._parts[(tp.topic, tp.partition)] = _Partition(self._generation)
        consumer.assign(partitions)
        consumer.resume(partitions)  # a partition paused under its previous owner-ship starts fetching

    def _on_revoke(self, consumer: RdConsumer, partitions: list[TopicPartition]) -> None:
        self._release([(tp.topic, tp.partition) for tp in partitions], commit=True)

    def _on_lost(self, consumer: RdConsumer, partitions: list[TopicPartition]) -> None:
        self._release([(tp.topic, tp.partition) for tp in partitions], commit=False)

    def _release(self, tps: list[TP], *, commit: bool) -> None:
        deadline = time.monotonic() + self._rebalance_deadline
        with self._lock:
            for tp in tps:
                if tp in self._parts:
                    self._parts[tp].revoking = True  # queued records of these are skipped from now on
            self._cond.wait_for(lambda: all(self._parts[tp].in_flight == 0 for tp in tps if tp in self._parts),
                                max(0.0, deadline - time.monotonic()))
        if commit and self._error is None:
            self._commit(tps)
        with self._lock:
            for tp in tps:
                self._parts.pop(tp, None)
                self._held.pop(tp, None)

    # -- workers ---------------------------------------------------------------------------------------

    def _work(self, source: queue.Queue[tuple[int, ConsumedRecord] | None]) -> None:
        while True:
            item = source.get()
            if item is None:
                return
            generation, record = item
            tp = (record.topic, record.partition)
            with self._lock:
                part = self._parts.get(tp)
                if part is None or part.generation != generation or part.revoking or self._error is not None:
                    continue
                part.in_flight += 1
            try:
                outcome = self._handle(record)
            except BaseException as exc:
                self._error = self._error or exc
                self._stop.set()
                with self._lock:
                    part.in_flight -= 1
                    self._cond.notify_all()
                continue
            with self._lock:
                if part.generation == generation and self._parts.get(tp) is part:
                    part.in_flight -= 1
                    if self._mode != "at-least-once":
                        part.results[record.offset] = outcome
                    assert part.prefix is not None
                    part.prefix.finish(record.offset)
                    self._handled += 1
                self._cond.notify_all()

    def _handle(self, record: ConsumedRecord) -> Any:
        """Run the handler with retries; after the last one, send the record to the DLQ."""
        attempt = 0
        while True:
            try:
                if self._mode == "transactional":
                    self._handler.process(record)  # type: ignore[union-attr]
                    return record
                outputs = self._handler(record)  # type: ignore[operator]
                return list(outputs or ()) if self._mode == "exactly-once" else None
            except Exception as exc:
                attempt += 1
                if attempt <= self._max_retries:
                    with self._lock:
                        self._retries += 1
                    time.sleep(min(5.0, self._retry_backoff * 2 ** (attempt - 1)))
                    continue
                if self._dlq_topic is None:
                    raise HandlerError(f"{record.topic}/{record.partition}@{record.offset} failed "
                                       f"{attempt} times: {exc!r}") from exc
                return self._dead_letter(record, exc, attempt)

    def _dead_letter(self, record: ConsumedRecord, exc: Exception, attempts: int) -> Any:
        assert self._dlq_topic is not None and self._producer is not None
        values = (repr(exc), record.topic, str(record.partition), str(record.offset), str(attempts))
        headers = (*record.headers, *((name, value.encode()) for name, value in zip(DLQ_HEADERS, values, strict=True)))
        out = OutputRecord(self._dlq_topic, record.value, record.key, headers)
        with self._lock:
            self._dlq += 1
        log.warning("%s/%d@%d sent to %s after %d attempts: %r", record.topic, record.partition, record.offset,
                    self._dlq_topic, attempts, exc)
        if self._mode == "exactly-once":
            return [out]  # produced in the commit's transaction, with the input offset
        errors: list[RdKafkaError] = []
        _produce(self._producer, out, lambda err, _msg: errors.append(err) if err is not None else None)
        if self._producer.flush(30) != 0 or errors:
            raise HandlerError(f"dead-letter write of {record.topic}/{record.partition}@{record.offset} failed: "
                               f"{errors or 'timeout'}")
        return None


class _RolledBack(Exception):
    """The transactional handler's commit failed and its rollback ran."""


def _produce(producer: Producer, out: OutputRecord, callback: Callable[[Any, Any], None] | None = None) -> None:
    kwargs: dict[str, Any] = {"headers": list(out.headers) or None}
    if out.partition >= 0:
        kwargs["partition"] = out.partition
    if callback is not None:
        kwargs["on_delivery"] = callback
    while True:
        try:
            producer.produce(out.topic, out.value, out.key, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)

