"""LogProducer: at-least-once sending that survives cluster and network outages through a disk spool.

Modes (the sender thread moves between them; ``send`` reads the mode under the lock)::

    LIVE ──outage──> SPOOLING ──probe answered──> REPLAYING ──spool drained──> LIVE
      ^                  ^                            │
      └──────────────────┴─────────outage─────────────┘

* LIVE: ``send`` hands the record straight to librdkafka (idempotent, so retries neither duplicate
  nor reorder). When librdkafka's queue is full the record waits in the memory queue, and every
  later record queues behind it until the sender has moved them on, in order.
* An outage is declared when records are outstanding and none was acknowledged for
  ``spool.outage.ms``, when librdkafka reports all brokers down while records are outstanding, or
  when a delivery fails with a transport, timeout or fatal error. The sender then purges librdkafka
  (queued and in-flight records come back as delivery errors), writes the live records that came
  back to the spool, oldest first, and replaces the librdkafka handle by a fresh one.
* SPOOLING: ``send`` puts records in the memory queue (bounded by ``buffer.memory``); the sender
  writes them to the spool in batches. A probe thread asks the new handle for metadata every
  ``spool.probe.interval.ms``.
* REPLAYING: once the probe is answered, the sender produces the spool's records from the oldest
  on, keeping at most ``spool.replay.max.inflight.bytes`` unacknowledged. New records still go to
  the spool behind them. When the replay has produced everything spooled, the mode becomes LIVE
  again: librdkafka keeps per-partition order for what it already holds, so live records follow
  the replayed ones.

Order: per partition, a record never overtakes an older one. Records in librdkafka are older than
those in the memory queue, which are older than those spooled later. Records that come back from
librdkafka (purged or failed) are put back in the order they were handed to it, by a number each
one carries: librdkafka's own order of reports cannot be trusted for this (a request that failed
puts its records back in the partition's queue, so they are reported as queued, after newer records
reported as in flight). A record whose first copy was lost can therefore appear at most as a
duplicate after newer ones, never before them.

Acknowledgement and deletion: replayed spool batches are tracked in a :class:`DonePrefix`; the
spool's position (what a restart replays from) moves only past batches whose every record was
acknowledged, and whole segments below it are deleted. A restart, or a new LogProducer on the same
folder, replays what is left.

Durability: ``flush()`` returns True once every record sent before it is acknowledged or written
to the spool and fsynced; records still in memory are lost with the process (kill -9), spooled ones
are not. ``close()`` spools whatever librdkafka could not deliver before returning.

Threads: any number of threads may call ``send``; one sender thread owns the spool and serves
librdkafka's callbacks; one probe thread asks for metadata during outages.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError as RdKafkaError
from confluent_kafka import KafkaException, Message, Producer

from tidelog.clients.errors import ClosedError, QueueFullError, SpoolFullError
from tidelog.clients.offsets import DonePrefix
from tidelog.clients.settings import ProducerSettings
from tidelog.clients.spool import Spool, SpooledRecord, normalize_headers
from tidelog.common.errors import ErrorCode
from tidelog.common.errors import KafkaError as TidelogKafkaError

log = logging.getLogger(__name__)

HeadersArg = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]] | None
ErrorCallback = Callable[["FailedRecord"], None]

# Delivery errors that mean "the cluster is out of reach": the record goes to the spool.
_OUTAGE_CODES = frozenset({
    RdKafkaError._MSG_TIMED_OUT, RdKafkaError._TIMED_OUT, RdKafkaError._TRANSPORT,
    RdKafkaError._ALL_BROKERS_DOWN, RdKafkaError._PURGE_QUEUE, RdKafkaError._PURGE_INFLIGHT,
    RdKafkaError.REQUEST_TIMED_OUT, RdKafkaError.NETWORK_EXCEPTION, RdKafkaError._DESTROY,
})
# Retriable by librdkafka's flags, yet replaying cannot help: reported to on_error instead.
_HOPELESS_CODES = frozenset({RdKafkaError.UNKNOWN_TOPIC_OR_PART, RdKafkaError._UNKNOWN_TOPIC,
                             RdKafkaError._UNKNOWN_PARTITION})


class Mode(enum.Enum):
    LIVE = "live"
    SPOOLING = "spooling"
    REPLAYING = "replaying"


@dataclass(frozen=True, slots=True)
class FailedRecord:
    """A record given up on: a non-retriable delivery error, the ``fail`` policy, or a corrupt spool."""

    record: SpooledRecord
    error: str


@dataclass(frozen=True, slots=True)
class ProducerMetrics:
    """A snapshot of the LogProducer's counters (totals since it was created)."""

    mode: str
    queued: int  # records in the memory queue
    in_flight: int  # records handed to librdkafka, not yet acknowledged
    spooled: int  # records in the spool now
    spool_bytes: int
    oldest_spooled_age_ms: int  # 0 when the spool is empty
    sent_total: int
    delivered_total: int  # acknowledged, live or replayed
    spooled_total: int
    replayed_total: int  # acknowledged replays
    dropped_total: int  # removed by the drop-oldest policy
    failed_total: int  # reported to on_error
    outages_total: int
    spool_truncated_bytes: int  # torn tail cut when the spool was opened


def _is_outage(err: RdKafkaError) -> bool:
    code = err.code()
    if code in _OUTAGE_CODES or err.fatal():
        return True
    return bool(err.retriable()) and code not in _HOPELESS_CODES


def _record_of(msg: Message) -> SpooledRecord:
    _, timestamp = msg.timestamp()
    headers = normalize_headers(msg.headers())
    partition = msg.partition()
    return SpooledRecord(msg.topic() or "", msg.value(), msg.key(), headers,
                         -1 if partition is None else partition, timestamp)


class _LiveAck:
    """The delivery callback of one live record. It keeps the record's fields, from which the
    SpooledRecord is built only if the record comes back (one small object on the hot path)."""

    __slots__ = ("headers", "key", "number", "owner", "partition", "timestamp", "topic", "value")

    def __init__(self, owner: LogProducer, number: int, topic: str, value: bytes | None, key: bytes | None,
                 headers: tuple[tuple[str, bytes | None], ...], partition: int, timestamp: int) -> None:
        self.owner = owner
        self.number = number  # the order in which records were handed to librdkafka
        self.topic = topic
        self.value = value
        self.key = key
        self.headers = headers
        self.partition = partition
        self.timestamp = timestamp

    def __call__(self, err: RdKafkaError | None, _msg: Message) -> None:
        if err is None:
            self.owner._on_live_ack()
        else:
            record = SpooledRecord(self.topic, self.value, self.key, self.headers, self.partition, self.timestamp)
            self.owner._on_live_delivery(self.number, record, err)


class _ReplayBatch:
    """One spool batch on its way to the cluster; its bound ``ack`` is every record's callback."""

    __slots__ = ("base", "generation", "owner", "records", "remaining")

    def __init__(self, owner: LogProducer, base: int, records: list[SpooledRecord], generation: int) -> None:
        self.owner = owner
        self.base = base
        self.records = deque(records)  # not yet handed to librdkafka
        self.remaining = len(records)  # not yet acknowledged
        self.generation = generation

    def ack(self, err: RdKafkaError | None, msg: Message) -> None:
        self.owner._on_replay_delivery(self, err, msg)


class LogProducer:
    """Send records at least once, whatever the cluster does (see the module docstring).

    ``config`` is a confluent-kafka producer config plus the ``spool.*`` keys, ``buffer.memory`` and
    ``max.block.ms`` (see :class:`~tidelog.clients.settings.ProducerSettings`); ``spool.dir`` is required.
    ``on_error`` is called, from the sender thread, for each record given up on.
    """

    def __init__(self, config: Mapping[str, object], *, on_error: ErrorCallback | None = None) -> None:
        self._settings, self._kafka_config = ProducerSettings.split(config)
        self._on_error = on_error
        settings = self._settings
        self._spool = Spool(Path(settings.spool_dir), segment_bytes=settings.spool_segment_bytes,
                            compression=settings.spool_compression)
        if self._spool.truncated_bytes:
            log.warning("spool %s: %d bytes of torn or corrupt tail cut away; %d records left to replay",
                        settings.spool_dir, self._spool.truncated_bytes, self._spool.record_count)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: deque[SpooledRecord] = deque()
        self._queue_bytes = 0
        self._to_spool: deque[SpooledRecord] = deque()  # taken from the queue (or purged), not yet written
        self._returned: list[tuple[int, SpooledRecord]] = []  # (number, record): purged or failed live records
        self._mode = Mode.LIVE if self._spool.record_count == 0 else Mode.SPOOLING
        self._closed = False
        self._stopping = False
        self._spool_full = False  # the fail policy refuses sends while this holds
        self._settled = False
        self._flushers = 0
        self._sync_due = False
        self._last_sync = time.monotonic()
        # Counters: each written by one side only (send() under the lock, or the sender thread).
        self._sent = self._live_produced = self._live_done = 0
        self._delivered = self._spooled_total = self._replayed = self._dropped = self._failed = 0
        self._outages = 0
        self._outage_reason: str | None = None
        self._brokers_down = False
        self._last_progress = time.monotonic()
        # Replay state (sender thread only).
        self._tracker = DonePrefix(self._spool.start_offset)
        self._cursor = self._spool.start_offset
        self._replay_batches: deque[_ReplayBatch] = deque()
        self._replay_outstanding = 0
        self._replay_bytes = 0
        self._generation = 0
        self._oldest_timestamp = self._spool.oldest_timestamp()
        self._producer = self._new_producer()
        self._probe_ok = threading.Event()
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self._sender = threading.Thread(target=self._run_sender, name="tidelog-producer-sender", daemon=True)
        self._prober = threading.Thread(target=self._run_probe, name="tidelog-producer-probe", daemon=True)
        self._sender.start()
        self._prober.start()

    # -- the application's side ---------------------------------------------------------------------

    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             headers: HeadersArg = None, *, partition: int = -1, timestamp: int | None = None) -> None:
        """Take one record; return at once (or after at most ``max.block.ms`` when memory is full).

        Raises QueueFullError when the memory queue stayed full for ``max.block.ms``, SpoolFullError
        under the ``fail`` policy while the spool is full, ClosedError after close(), and
        confluent-kafka's KafkaException for records librdkafka refuses outright (too large, bad
        partition).
        """
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        header_tuple = normalize_headers(headers)
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        with self._lock:
            if self._closed:
                raise ClosedError("the LogProducer is closed")
            self._settled = False
            if self._mode is Mode.LIVE and not self._queue:
                try:
                    self._producer.produce(topic, value, key, partition=partition, timestamp=ts,
                                           headers=list(header_tuple) if header_tuple else None,
                                           on_delivery=_LiveAck(self, self._live_produced, topic, value, key,
                                                                header_tuple, partition, ts))
                except BufferError:
                    pass
                else:
                    self._live_produced += 1
                    self._sent += 1
                    return
            elif self._spool_full:
                raise SpoolFullError(f"the spool holds spool.max.bytes ({self._settings.spool_max_bytes})")
            record = SpooledRecord(topic, value, key, header_tuple, partition, ts)
            self._wait_for_room(record.size)
            self._queue.append(record)
            self._queue_bytes += record.size
            self._sent += 1
        self._wake.set()

    def _wait_for_room(self, size: int) -> None:
        deadline = time.monotonic() + self._settings.max_block_ms / 1000
        while self._queue and self._queue_bytes + size > self._settings.buffer_memory:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise QueueFullError(f"the memory queue stayed full (buffer.memory {self._settings.buffer_memory} "
                                     f"bytes) for max.block.ms {self._settings.max_block_ms}")
            self._wake.set()
            self._cond.wait(remaining)
            if self._closed:
                raise ClosedError("the LogProducer is closed")

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record sent so far is acknowledged or spooled and fsynced.

        Returns False when ``timeout`` (seconds) passed first."""
        with self._lock:
            self._flushers += 1
            self._settled = False
            self._wake.set()
            try:
                return self._cond.wait_for(lambda: self._settled or self._closed, timeout)
            finally:
                self._flushers -= 1

    def close(self, timeout: float = 30.0) -> None:
        """Flush for up to ``timeout`` seconds, then spool whatever is still undelivered and stop."""
        if self._closed:
            return
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._stopping = True
            self._cond.notify_all()
        self._stop_event.set()
        self._wake.set()
        self._sender.join()
        self._prober.join()

    def __enter__(self) -> LogProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metrics(self) -> ProducerMetrics:
        with self._lock:
            oldest = self._oldest_timestamp
            age = max(0, int(time.time() * 1000) - oldest) if oldest is not None and self._spool.record_count else 0
            return ProducerMetrics(
                mode=self._mode.value, queued=len(self._queue) + len(self._to_spool),
                in_flight=self._live_produced - self._live_done + self._replay_outstanding,
                spooled=self._spool.record_count, spool_bytes=self._spool.size_bytes, oldest_spooled_age_ms=age,
                sent_total=self._sent, delivered_total=self._delivered, spooled_total=self._spooled_total,
                replayed_total=self._replayed, dropped_total=self._dropped, failed_total=self._failed,
                outages_total=self._outages, spool_truncated_bytes=self._spool.truncated_bytes,
            )

    @property
    def mode(self) -> Mode:
        return self._mode

    # -- librdkafka ---------------------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        config: dict[str, Any] = {**self._kafka_config, "error_cb": self._on_client_error}
        return Producer(config)

    def _on_client_error(self, err: RdKafkaError) -> None:
        if err.code() == RdKafkaError._ALL_BROKERS_DOWN or err.fatal():
            self._brokers_down = True
            if err.fatal():
                self._outage_reason = f"fatal producer error: {err.str()}"

    def _on_live_ack(self) -> None:
        self._live_done += 1
        self._delivered += 1
        self._last_progress = time.monotonic()
        self._brokers_down = False

    def _on_live_delivery(self, number: int, record: SpooledRecord, err: RdKafkaError) -> None:
        self._live_done += 1
        if _is_outage(err):
            self._returned.append((number, record))
            self._outage_reason = self._outage_reason or f"delivery failed: {err.str()}"
        else:
            self._fail(record, err.str())

    def _on_replay_delivery(self, batch: _ReplayBatch, err: RdKafkaError | None, msg: Message) -> None:
        if batch.generation != self._generation:
            return  # from before a purge: the spool still has the record, replay sends it again
        self._replay_outstanding -= 1
        self._replay_bytes -= len(msg.value() or b"") + len(msg.key() or b"")
        if err is not None and _is_outage(err):
            self._outage_reason = self._outage_reason or f"replay delivery failed: {err.str()}"
            return
        if err is None:
            self._replayed += 1
            self._delivered += 1
            self._progress()
        else:
            self._fail(_record_of(msg), err.str())
        batch.remaining -= 1
        if batch.remaining == 0 and not batch.records:
            self._tracker.finish(batch.base)

    def _progress(self) -> None:
        self._last_progress = time.monotonic()
        self._brokers_down = False

    def _fail(self, record: SpooledRecord, error: str) -> None:
        # counted once reported, so failed_total never names a record on_error has not been given yet
        if self._on_error is not None:
            try:
                self._on_error(FailedRecord(record, error))
            except Exception:
                log.exception("on_error callback raised")
        self._failed += 1

    # -- the sender thread ----------------------------------------------------------------------------

    def _run_sender(self) -> None:
        try:
            while True:
                with self._lock:
                    stopping = self._stopping
                if stopping:
                    self._shutdown()
                    return
                self._step()
        except Exception:
            log.exception("LogProducer sender thread failed; records stay in the spool")
            with self._lock:
                self._closed = True
                self._cond.notify_all()
            self._spool.close()

    def _step(self) -> None:
        replay_can_go = (self._mode is Mode.REPLAYING and self._cursor < self._spool.end_offset
                         and self._replay_bytes < self._settings.replay_max_inflight_bytes)
        self._producer.poll(0 if self._queue or self._to_spool or replay_can_go else 0.01)
        now = time.monotonic()
        if self._live_produced - self._live_done + self._replay_outstanding == 0:
            self._last_progress = now
        if self._mode is not Mode.SPOOLING and (reason := self._outage_detected(now)):
            self._enter_outage(reason)
        if self._mode is Mode.LIVE:
            self._drain_queue_live()
        else:
            self._drain_queue_to_spool()
            if self._mode is Mode.SPOOLING and self._probe_ok.is_set():
                self._start_replay()
            if self._mode is Mode.REPLAYING:
                self._replay_some()
        self._release_spool()
        self._sync_and_settle(now)
        if not (self._queue or self._to_spool) and self._mode is Mode.SPOOLING:
            self._wake.wait(0.02)
            self._wake.clear()

    def _outage_detected(self, now: float) -> str | None:
        if self._outage_reason is not None:
            return self._outage_reason
        outstanding = self._live_produced - self._live_done + self._replay_outstanding
        if outstanding == 0:
            return None
        if self._brokers_down:
            return "all brokers are down"
        if now - self._last_progress > self._settings.outage_ms / 1000:
            return f"no acknowledgement for spool.outage.ms ({self._settings.outage_ms} ms)"
        return None

    def _enter_outage(self, reason: str) -> None:
        with self._lock:
            self._mode = Mode.SPOOLING
        self._probe_ok.clear()
        self._outages += 1
        log.warning("cluster out of reach (%s): spooling to %s", reason, self._settings.spool_dir)
        self._purge()
        self._producer = self._new_producer()
        self._outage_reason = None
        self._brokers_down = False

    def _purge(self) -> None:
        """Take every record back from librdkafka: live ones to the spool, replayed ones rewound."""
        old = self._producer
        old.purge(in_queue=True, in_flight=True)
        deadline = time.monotonic() + 10
        while len(old) and time.monotonic() < deadline:
            old.poll(0.01)
        if len(old):
            log.error("%d records were not returned by librdkafka's purge", len(old))
        returned = sorted(self._returned, key=lambda item: item[0])
        self._returned.clear()
        self._to_spool.extendleft(reversed([record for _, record in returned]))
        self._generation += 1
        self._tracker.reset(self._tracker.position)
        self._cursor = self._tracker.position
        self._replay_batches.clear()
        self._replay_outstanding = 0
        self._replay_bytes = 0
        self._live_done = self._live_produced

    def _drain_queue_live(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    return
                record = self._queue[0]
                try:
                    self._produce_live(record)
                except BufferError:
                    return
                self._queue.popleft()
                self._queue_bytes -= record.size
                self._cond.notify_all()

    def _produce_live(self, record: SpooledRecord) -> None:
        """Hand ``record`` to librdkafka (under the lock). Its callback keeps the record: librdkafka
        reports a purged message without its headers and timestamp, and the spool needs both."""
        try:
            self._producer.produce(record.topic, record.value, record.key, partition=record.partition,
                                   timestamp=record.timestamp, headers=list(record.headers) or None,
                                   on_delivery=_LiveAck(self, self._live_produced, record.topic, record.value,
                                                        record.key, record.headers, record.partition,
                                                        record.timestamp))
        except KafkaException as exc:
            self._fail(record, str(exc))  # refused outright (too large...): counted as handled
        else:
            self._live_produced += 1

    def _drain_queue_to_spool(self) -> None:
        limit = self._settings.spool_batch_bytes
        while True:
            with self._lock:
                taken = sum(r.size for r in self._to_spool)
                while self._queue and taken < limit:
                    record = self._queue.popleft()
                    self._queue_bytes -= record.size
                    taken += record.size
                    self._to_spool.append(record)
                self._cond.notify_all()
            if not self._to_spool or not self._write_spool_batch():
                return

    def _write_spool_batch(self) -> bool:
        """Write up to spool.batch.bytes from ``_to_spool``; False when the spool refused (full)."""
        batch: list[SpooledRecord] = []
        size = 0
        while self._to_spool and (not batch or size + self._to_spool[0].size <= self._settings.spool_batch_bytes):
            record = self._to_spool.popleft()
            batch.append(record)
            size += record.size
        encoded = self._spool.encode(batch)
        if self._room_for(len(encoded)) and self._append(batch, encoded):
            with self._lock:
                self._spool_full = False
            return True
        policy = self._settings.spool_full_policy
        if policy == "block" or (policy == "drop-oldest" and self._spool.record_count):
            # block: the records wait (send() blocks once the queue is full); drop-oldest: retry
            # now that the oldest segment went.
            self._to_spool.extendleft(reversed(batch))
            return policy != "block"
        with self._lock:
            self._spool_full = policy == "fail"
        for record in batch:  # fail, or a batch larger than the whole spool
            self._fail(record, "SPOOL_FULL: spool.max.bytes reached")
        return True

    def _room_for(self, size: int) -> bool:
        limit = self._settings.spool_max_bytes
        while self._spool.size_bytes + size > limit:
            if self._settings.spool_full_policy != "drop-oldest" or self._spool.record_count == 0:
                return False
            self._drop_oldest()
        return True

    def _drop_oldest(self) -> None:
        dropped = self._spool.drop_oldest()
        self._dropped += dropped
        self._oldest_timestamp = self._spool.oldest_timestamp()
        # Replays in flight from the dropped segment may still be acknowledged; they no longer
        # hold the position back.
        self._tracker.advance_to(self._spool.start_offset)
        self._cursor = max(self._cursor, self._spool.start_offset)
        log.warning("spool full: dropped the %d oldest records (spool.full.policy drop-oldest)", dropped)

    def _append(self, batch: list[SpooledRecord], encoded: bytes | None = None) -> bool:
        was_empty = self._spool.record_count == 0
        try:
            self._spool.append(self._spool.encode(batch) if encoded is None else encoded)
        except TidelogKafkaError as exc:
            if exc.code != ErrorCode.KAFKA_STORAGE_ERROR:  # not the disk's fault: retrying cannot help
                for record in batch:
                    self._fail(record, f"the spool refused the record: {exc}")
                return True
            log.warning("spool write failed: %s", exc)  # a full disk: handled as a full spool
            if self._settings.spool_full_policy == "drop-oldest" and self._spool.record_count:
                self._drop_oldest()
            return False
        self._spooled_total += len(batch)
        self._sync_due = True
        if was_empty:
            self._oldest_timestamp = batch[0].timestamp
        return True

    def _start_replay(self) -> None:
        with self._lock:
            if self._spool.record_count == 0 and not self._to_spool:
                self._mode = Mode.LIVE
                log.warning("cluster reachable again; nothing spooled, sending live")
                return
            self._mode = Mode.REPLAYING
        self._brokers_down = False  # said by the new handle before it first connected
        log.warning("cluster reachable again: replaying %d spooled records", self._spool.record_count)
        self._last_progress = time.monotonic()

    def _replay_some(self) -> None:
        limit = self._settings.replay_max_inflight_bytes
        while self._replay_bytes < limit:
            nothing_left = not self._replay_batches or not self._replay_batches[-1].records
            if nothing_left and not self._read_replay_batches():
                break
            batch = next(b for b in self._replay_batches if b.records)
            record = batch.records[0]
            try:
                self._producer.produce(record.topic, record.value, record.key, partition=record.partition,
                                       timestamp=record.timestamp, headers=list(record.headers) or None,
                                       on_delivery=batch.ack)
            except BufferError:
                break
            except KafkaException as exc:
                self._fail(record, str(exc))
                batch.remaining -= 1
            else:
                self._replay_outstanding += 1
                self._replay_bytes += len(record.value or b"") + len(record.key or b"")
            batch.records.popleft()
            if not batch.records and batch.remaining == 0:
                self._tracker.finish(batch.base)
            while self._replay_batches and not self._replay_batches[0].records:
                self._replay_batches.popleft()
        if self._cursor >= self._spool.end_offset and not self._replay_batches and not self._to_spool:
            with self._lock:
                self._mode = Mode.LIVE
            log.warning("spool replayed; sending live")

    def _read_replay_batches(self) -> bool:
        if self._cursor >= self._spool.end_offset:
            return False
        try:
            batches = self._spool.read(self._cursor, self._settings.spool_batch_bytes)
        except (TidelogKafkaError, ValueError) as exc:
            # Corrupt beyond what recovery cut (a disk error since): skip the rest, say so.
            log.error("spool unreadable at offset %d (%s): its %d records are given up",
                      self._cursor, exc, self._spool.end_offset - self._cursor)
            self._failed += self._spool.end_offset - self._cursor
            self._tracker.reset(self._spool.end_offset)
            self._cursor = self._spool.end_offset
            return False
        for spooled in batches:
            self._tracker.begin(spooled.base_offset, spooled.next_offset)
            if not spooled.records:
                self._tracker.finish(spooled.base_offset)
                continue
            self._replay_batches.append(_ReplayBatch(self, spooled.base_offset, spooled.records, self._generation))
        self._cursor = batches[-1].next_offset if batches else self._spool.end_offset
        return bool(self._replay_batches) and any(b.records for b in self._replay_batches)

    def _release_spool(self) -> None:
        position = self._tracker.position
        if position > self._spool.start_offset:
            self._spool.release(position)
            self._oldest_timestamp = self._spool.oldest_timestamp()

    def _sync_and_settle(self, now: float) -> None:
        if self._sync_due and (self._flushers or now - self._last_sync >= self._settings.spool_sync_ms / 1000):
            self._spool.sync()
            self._sync_due = False
            self._last_sync = now
        with self._lock:
            settled = (not self._queue and not self._to_spool and self._live_produced == self._live_done
                       and not self._sync_due and not self._returned)
            if settled and not self._settled and self._flushers:
                self._settled = True
                self._cond.notify_all()

    def _shutdown(self) -> None:
        """Stop: whatever librdkafka still holds is purged and spooled, so nothing sent is lost."""
        if self._live_produced != self._live_done or self._replay_outstanding:
            self._purge()
        with self._lock:
            self._to_spool.extend(self._queue)
            self._queue.clear()
            self._queue_bytes = 0
        while self._to_spool:
            batch = [self._to_spool.popleft() for _ in range(min(len(self._to_spool), 10_000))]
            if not self._append(batch):
                for record in batch:
                    self._fail(record, "not delivered before close() and the spool refused it")
        self._spool.close()

    def _run_probe(self) -> None:
        interval = self._settings.probe_interval_ms / 1000
        while True:
            with self._lock:
                if self._stopping:
                    return
                producer = self._producer if self._mode is Mode.SPOOLING else None
            if producer is None or self._probe_ok.is_set():
                self._stop_event.wait(min(interval, 0.05))
                continue
            started = time.monotonic()
            try:
                producer.list_topics(timeout=min(interval, 5.0))
            except KafkaException:
                self._stop_event.wait(max(0.0, interval - (time.monotonic() - started)))
            else:
                self._probe_ok.set()
                self._wake.set()
