"""One pull-read session: a Kafka consumer in a consumer group, on a thread of its own, and the
bounded buffer of records it has read that no poll has handed out yet.

The thread owns the consumer (every call on it, commits included, runs there: commands reach it
through a queue) and never stops polling, whether or not the HTTP client polls, so the member keeps
its place in the group and rebalances are served at once. What it reads goes into the buffer:

- **Memory bound.** When the buffer holds ``buffer_bytes`` the thread pauses its partitions (the
  consumer keeps heartbeating, and takes part in rebalances, but fetches nothing) and resumes them
  once polls have taken half of it out. librdkafka's own prefetch queue is capped at the same size
  (``queued.max.messages.kbytes``) and one fetch at ``max(buffer_bytes, 1 MB)``, so a session holds
  about three times ``buffer_bytes`` at most.
- **Delivered positions.** A poll takes records from the buffer and moves the session's delivered
  position of each partition (the offset after the last record handed out). A commit may name any
  offset up to that position for a partition the session holds; "commit everything" commits the
  delivered positions. Records read but not yet delivered are never committed.
- **Rebalances** (``cooperative-sticky``). Partitions revoked from the session lose their buffered
  records and their delivered positions: the new owner reads them again from the group's committed
  offset, so records delivered here but not committed are delivered again there (at least once).
  A commit naming a partition the session no longer holds is refused (``PartitionsNotAssigned``):
  the group protocol would accept it from a member of the current generation and could move the new
  owner's committed offset back or forward. Records already returned by a ``consume`` call that ran
  a revocation are dropped unless their partition is still assigned.
- Records are read ``read_committed``: the gateway writes in transactions, and an aborted write
  must never reach a reader.

Threads: ``take`` and ``describe`` run on the event loop; the consumer only on the session's thread;
the buffer, the assignment and the delivered positions are shared under ``_lock``.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.read_consumer import consume_now, consumer_config, delivered, leave_group, wake_fetchers
from tidelog.gateway.read_model import Delivered, Offset, SessionRequest

log = logging.getLogger(__name__)
TP = tuple[str, int]
_CONSUME_WAIT_S = 0.1  # also the longest a commit waits for the thread
_PAUSED_WAIT_S = 0.01
COMMIT_TIMEOUT_S = 30.0


class PartitionsNotAssigned(Exception):
    """A commit names partitions this session does not hold (any more)."""

    def __init__(self, partitions: list[TP]) -> None:
        names = ", ".join(f"{t}-{p}" for t, p in partitions)
        super().__init__(f"this session does not hold {names} (moved to another reader by a rebalance, or never "
                         "assigned): its records will be delivered again to the partition's owner")
        self.partitions = partitions


class BeyondDelivered(ValueError):
    """A commit names an offset past what this session has delivered for the partition."""


class CommitFailed(Exception):
    """The group coordinator refused or did not answer the commit; ``error`` is Kafka's."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(f"the commit failed: {error.str()}")
        self.error = error


class ReadSession:
    def __init__(self, session_id: str, request: SessionRequest, config: GatewayConfig, buffer_bytes: int,
                 principal: str) -> None:
        self.id = session_id
        self.request = request
        self.principal = principal
        self.buffer_bytes = buffer_bytes
        self.last_seen = time.monotonic()
        self.active_requests = 0
        self.poll_lock = asyncio.Lock()
        self.error = ""
        self._config = consumer_config(config, session_id, request, buffer_bytes)
        self._loop = asyncio.get_running_loop()
        self._arrived = asyncio.Event()
        self._lock = threading.Lock()
        self._buffer: deque[Delivered] = deque()
        self._buffered_bytes = 0
        self._assigned: set[TP] = set()
        self._positions: dict[TP, int] = {}  # delivered position per assigned partition
        self._paused = False
        self._interrupted = False
        self._commands: queue.SimpleQueue[Callable[[Consumer | None], None]] = queue.SimpleQueue()
        self._stop = threading.Event()
        short = session_id.rpartition(".")[2][:8]
        self._thread = threading.Thread(target=self._run, name=f"gateway-read-{short}", daemon=True)
        self._consumer: Consumer | None = None

    # -- life cycle (blocking: call from a worker thread) -------------------------------------------

    def start(self) -> ReadSession:
        consumer = Consumer(self._config)
        consumer.subscribe(list(self.request.topics), on_assign=self._assigned_cb, on_revoke=self._revoked_cb,
                           on_lost=self._revoked_cb)
        self._consumer = consumer
        self._thread.start()
        return self

    def close(self, timeout: float = 15.0) -> None:
        """Leave the group (the partitions go to the group's other readers at once) and stop the thread."""
        self._stop.set()
        self._wake()  # a waiting poll answers now
        self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        """Closed by the gateway (deleted, expired, stopping), as opposed to its consumer failing."""
        return self._stop.is_set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    # -- the consumer's thread --------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            while not self._stop.is_set():
                self._run_commands(consumer)
                self._flow(consumer)
                try:
                    # Paused, nothing comes: wait less, so that commits (run between waits) are not held up.
                    messages = consume_now(consumer, _PAUSED_WAIT_S if self._paused else _CONSUME_WAIT_S)
                except KafkaException as exc:
                    self.error = str(exc)
                    log.warning("read session %s: %s", self.id, exc)
                    continue
                self._keep(messages)
        except Exception:
            log.exception("read session %s stopped", self.id)
            self.error = "the session's consumer stopped; see the gateway's log"
        finally:
            self._wake()
            try:
                leave_group(consumer)
            finally:
                self._fail_commands()

    def _keep(self, messages: list[Message]) -> None:
        records = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.error = error.str()
                    log.warning("read session %s: %s", self.id, error.str())
                continue
            records.append(delivered(message))
        if not records:
            return
        with self._lock:
            for record in records:
                if (record.topic, record.partition) in self._assigned:
                    self._buffer.append(record)
                    self._buffered_bytes += record.size
        self._wake()

    def _flow(self, consumer: Consumer) -> None:
        """Pause at a full buffer, resume at half (so a resume is worth its cost, below)."""
        size = self._buffered_bytes
        if not self._paused and size >= self.buffer_bytes:
            partitions = consumer.assignment()
            if partitions:
                consumer.pause(partitions)
            self._paused = True
        elif self._paused and size <= self.buffer_bytes // 2:
            partitions = consumer.assignment()
            if partitions:
                consumer.resume(partitions)
                wake_fetchers(consumer, partitions)
            self._paused = False

    def _assigned_cb(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if partitions and self._paused:
            consumer.pause(partitions)
        with self._lock:
            self._assigned.update((tp.topic, tp.partition) for tp in partitions)
        if partitions:
            log.info("read session %s (group %s): assigned %s", self.id, self.request.group, _names(partitions))
            self._wake()

    def _revoked_cb(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        with self._lock:
            self._assigned -= gone
            for tp in gone:
                self._positions.pop(tp, None)
            kept = deque(r for r in self._buffer if (r.topic, r.partition) not in gone)
            self._buffered_bytes = sum(r.size for r in kept)
            self._buffer = kept
        consumer.incremental_unassign(partitions)
        if partitions:
            log.info("read session %s (group %s): revoked %s", self.id, self.request.group, _names(partitions))

    def _run_commands(self, consumer: Consumer) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command(consumer)

    def _fail_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            command(None)  # a command given no consumer fails its future

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._arrived.set)
        except RuntimeError:  # the loop is closed: the gateway is stopping
            pass

    # -- the event loop ---------------------------------------------------------------------------

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def idle_s(self, now: float) -> float:
        return 0.0 if self.active_requests else now - self.last_seen

    def take(self, max_records: int, max_bytes: int) -> list[Delivered]:
        """Hand out buffered records (at least one if any is buffered, even if larger than ``max_bytes``)."""
        out: list[Delivered] = []
        size = 0
        with self._lock:
            while self._buffer and len(out) < max_records:
                record = self._buffer[0]
                if out and size + record.size > max_bytes:
                    break
                self._buffer.popleft()
                size += record.size
                out.append(record)
                self._positions[(record.topic, record.partition)] = record.offset + 1
            self._buffered_bytes -= size
        return out

    async def poll(self, wait_s: float, max_records: int, max_bytes: int) -> list[Delivered]:
        """Records as soon as any is buffered, or an empty list after ``wait_s``."""
        deadline = self._loop.time() + wait_s
        while True:
            self._arrived.clear()
            records = self.take(max_records, max_bytes)
            remaining = deadline - self._loop.time()
            if records or remaining <= 0 or not self.alive or self._interrupted:
                return records
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                return self.take(max_records, max_bytes)

    def interrupt(self) -> None:
        """End waiting polls now, and those to come at once (the gateway is stopping)."""
        self._interrupted = True
        self._arrived.set()

    def positions(self) -> list[Offset]:
        with self._lock:
            return [Offset(t, p, o) for (t, p), o in sorted(self._positions.items())]

    async def commit(self, offsets: list[Offset] | None) -> list[Offset]:
        """Commit ``offsets`` (None: every delivered position) to the group; returns what was committed."""
        future: Future[list[Offset]] = Future()

        def run(consumer: Consumer | None) -> None:
            if not future.set_running_or_notify_cancel():
                return
            if consumer is None:
                future.set_exception(CommitFailed(KafkaError(KafkaError._DESTROY, "the session is closing")))
                return
            try:
                future.set_result(self._commit(consumer, offsets))
            except Exception as exc:  # handed to the request that asked
                future.set_exception(exc)

        if not self.alive:
            raise CommitFailed(KafkaError(KafkaError._DESTROY, "the session is closing"))
        self._commands.put(run)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), COMMIT_TIMEOUT_S)
        except TimeoutError:
            raise CommitFailed(KafkaError(KafkaError._TIMED_OUT, "no answer from the group coordinator")) from None

    def _commit(self, consumer: Consumer, offsets: list[Offset] | None) -> list[Offset]:
        with self._lock:
            chosen = offsets if offsets is not None else [Offset(t, p, o) for (t, p), o in sorted(self._positions.items())]
            missing = sorted({(o.topic, o.partition) for o in chosen} - self._assigned)
            if missing:
                raise PartitionsNotAssigned(missing)
            for o in chosen:
                delivered = self._positions.get((o.topic, o.partition))
                if delivered is None or o.offset > delivered:
                    raise BeyondDelivered(f"offset {o.offset} of {o.topic}-{o.partition} is beyond what this session "
                                          f"delivered ({'nothing yet' if delivered is None else delivered}); commit "
                                          "the offset after the last record you processed")
        if not chosen:
            return []
        try:
            answer = consumer.commit(offsets=[TopicPartition(o.topic, o.partition, o.offset) for o in chosen],
                                     asynchronous=False)
        except KafkaException as exc:
            raise CommitFailed(exc.args[0]) from None
        for tp in answer or []:
            if tp.error is not None:
                raise CommitFailed(tp.error)
        return chosen

    def describe(self, now: float) -> dict[str, Any]:
        with self._lock:
            assignment = sorted(self._assigned)
            buffered, size = len(self._buffer), self._buffered_bytes
        return {"sessionId": self.id, "group": self.request.group, "topics": list(self.request.topics),
                "timeoutMs": self.request.timeout_ms,
                "assignment": [{"topic": t, "partition": p} for t, p in assignment],
                "delivered": [{"topic": o.topic, "partition": o.partition, "offset": o.offset} for o in self.positions()],
                "bufferedRecords": buffered, "bufferedBytes": size, "idleMs": int(self.idle_s(now) * 1000),
                **({"error": self.error} if self.error else {})}

    @property
    def buffered_bytes(self) -> int:
        return self._buffered_bytes


def _names(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
