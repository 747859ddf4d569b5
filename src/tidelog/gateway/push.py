"""Push reads: each subscription delivers batches of records to its endpoint, at least once, in order per
partition, committing to its consumer group only what the endpoint answered 2xx for.

Design:

- **Where they run.** Every instance runs every subscription of its deployment (``push_store``), each
  as one member of the subscription's consumer group (a ``reader.ReadSession``, the pull reads'
  consumer machinery: ``read_committed``, ``cooperative-sticky``, a bounded buffer). The instances
  therefore share each subscription's partitions through the group protocol, and a partition's
  records come from one instance at a time; an instance that stops or dies gives its partitions to
  the others (at once, or after ``gateway.session.timeout.ms``), which resume from the committed offsets.
- **One batch at a time.** A subscription's loop (``PushRunner``, on the event loop) takes at most
  ``maxBatchRecords`` records from its session's buffer and POSTs them (``push_model`` for the body);
  until that batch has been answered 2xx it takes nothing else. So per partition the endpoint sees
  the records in order, and nothing later than an undelivered record is ever delivered or committed.
  Meanwhile the session's buffer fills up to ``gateway.read.session.max.bytes`` and its partitions are
  paused there (the member keeps its place in the group), so a failing endpoint costs bounded memory.
- **Retries.** Any answer other than 2xx, a connection error, or no answer within ``timeoutMs`` is a
  failure: the same batch (same ``deliveryId``, ``attempt`` + 1) is sent again after
  ``retryBackoffMs`` doubling up to ``retryBackoffMaxMs``, without end: a failing endpoint pauses
  the subscription, and data are never skipped (a 4xx too is retried: the gateway cannot tell a
  poison batch from a misconfigured endpoint, and dropping data is not its call). While a batch is
  failing, ``gateway_push_paused{subscription}`` is 1; failures are counted by reason.
- **Dead letters** (the subscriber's call: ``deadLetterTopic``). A batch that failed
  ``deadLetterAfterAttempts`` times is written to that topic instead (``DeadLetters``: an idempotent
  producer, acks=all; each record with its key, value, timestamp and headers, plus
  ``tidelog-dlq-topic``/``-partition``/``-offset``/``-subscription``/``-error``), then committed like a
  delivered batch, and delivery goes on. Written before committed: a crash in between writes it again
  (at least once there too). A dead-letter write that fails is retried with the next attempt.
- **Commits.** After a 2xx the offsets after the batch's last record of each partition are committed
  to the group, for the partitions the member still holds. A partition that a rebalance took away
  while the batch was in flight is not committed here (the group refuses it anyway): its new owner
  delivers those records again from the committed offset (at least once). Before each retry the
  records of partitions no longer held are dropped from the batch for the same reason. A commit that
  fails is logged and counted, not retried: the next batch's commit covers it (offsets are cumulative),
  and until then a restart only delivers again what was delivered already.
- **Redelivery** happens only after a gateway restart, a rebalance, or a failed commit, and always
  starts at a committed offset, which is never past an undelivered record.

Event-loop only; the session's consumer has its own thread (``reader``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from confluent_kafka import Producer

from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.push_model import SubscriptionSpec, backoff_s, delivery_body
from tidelog.gateway.push_store import SubscriptionStore
from tidelog.gateway.read_model import Delivered, Offset
from tidelog.gateway.reader import BeyondDelivered, CommitFailed, PartitionsNotAssigned, ReadSession
from tidelog.observability.registry import Counter, MetricFamily, Registry

log = logging.getLogger(__name__)
_IDLE_WAIT_S = 1.0
_SESSION_RETRY_S = 1.0


@dataclass
class PushMetrics:
    records: Counter
    batches: Counter
    failures: Counter
    commit_failures: Counter
    dead_lettered: Counter

    @classmethod
    def register(cls, registry: Registry) -> PushMetrics:
        return cls(
            registry.counter("gateway_push_records_delivered_total", "Records an endpoint answered 2xx for, by "
                             "subscription", ("subscription",)),
            registry.counter("gateway_push_batches_delivered_total", "Batches an endpoint answered 2xx for, by "
                             "subscription", ("subscription",)),
            registry.counter("gateway_push_delivery_failures_total", "Deliveries that failed and will be retried, by "
                             "subscription and reason (http_<status>, timeout, connect, error)",
                             ("subscription", "reason")),
            registry.counter("gateway_push_commit_failures_total", "Commits after a delivery that the group refused "
                             "or did not answer, by subscription", ("subscription",)),
            registry.counter("gateway_push_dead_lettered_records_total", "Records written to the subscription's "
                             "dead-letter topic after deadLetterAfterAttempts failed deliveries", ("subscription",)))


class DeadLetters:
    """Writes failed batches to dead-letter topics: one idempotent producer (acks=all), made on first use."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    def write(self, topic: str, subscription: str, records: list[Delivered], error: str) -> None:
        """Blocking (a worker thread): every record acknowledged, else RuntimeError naming why."""
        with self._lock:
            if self._producer is None:
                self._producer = Producer(self.config.kafka_config(**{
                    "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                    "client.id": f"tidelog-gateway-dead-letters-{self.config.group_id}"}))
            producer = self._producer
            failed: list[str] = []

            def delivered(err: Any, _message: Any) -> None:
                if err is not None:
                    failed.append(str(err))

            for r in records:
                headers: list[tuple[str, str | bytes | None]] = [
                    *r.headers, ("tidelog-dlq-topic", r.topic.encode()),
                    ("tidelog-dlq-partition", str(r.partition).encode()), ("tidelog-dlq-offset", str(r.offset).encode()),
                    ("tidelog-dlq-subscription", subscription.encode()), ("tidelog-dlq-error", error.encode())]
                producer.produce(topic, value=r.value, key=r.key, headers=headers, timestamp=max(r.timestamp, 0),
                                 on_delivery=delivered)
            left = producer.flush(self.config.request_timeout_ms / 1000)
            if left or failed:
                raise RuntimeError(f"{left} records not acknowledged" if left else failed[0])

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(5)
                self._producer = None


class PushRunner:
    """One subscription on this instance: its group member and its delivery loop."""

    def __init__(self, spec: SubscriptionSpec, config: GatewayConfig, http: httpx.AsyncClient,
                 metrics: PushMetrics, dead_letters: DeadLetters) -> None:
        self.spec = spec
        self.config = config
        self.http = http
        self.metrics = metrics
        self.dead_letters = dead_letters
        self.session: ReadSession | None = None
        self.paused = False
        self.failures = 0  # in a row, of the batch in flight
        self.last_error = ""
        self.last_delivered_ms = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"push-{self.spec.id}")

    async def stop(self) -> None:
        """Stop delivering (a batch in flight stays uncommitted: it is delivered again) and leave the group."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._close_session()

    async def _close_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await asyncio.to_thread(session.close)

    async def _open_session(self) -> ReadSession:
        request = self.spec.session_request(own_group=self.config.group_id, state_topic=self.config.state_topic)
        session = ReadSession(f"{self.spec.id}.{uuid.uuid4().hex}", request, self.config,
                              self.config.read_session_max_bytes, self.spec.principal)
        starting = asyncio.ensure_future(asyncio.to_thread(session.start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:  # stopped while joining: a member left behind would hold partitions
            with contextlib.suppress(Exception):
                await starting
                await asyncio.to_thread(session.close)
            raise
        self.session = session
        log.info("push subscription %s: delivering group %s, topics %s to %s", self.spec.id, self.spec.group,
                 list(request.topics), self.spec.endpoint)
        return session

    async def _run(self) -> None:
        while True:
            try:
                session = self.session or await self._open_session()
            except Exception as exc:  # the cluster did not answer: try again
                self.last_error = f"opening the consumer: {exc}"
                log.warning("push subscription %s: %s", self.spec.id, self.last_error)
                await asyncio.sleep(_SESSION_RETRY_S)
                continue
            if not session.alive:
                self.last_error = f"the consumer stopped ({session.error}); opening a new one"
                log.warning("push subscription %s: %s", self.spec.id, self.last_error)
                await self._close_session()
                await asyncio.sleep(_SESSION_RETRY_S)
                continue
            records = await session.poll(_IDLE_WAIT_S, self.spec.max_batch_records, self.config.read_session_max_bytes)
            if records:
                await self._deliver(session, records)

    async def _deliver(self, session: ReadSession, records: list[Delivered]) -> None:
        delivery_id = uuid.uuid4().hex
        attempt = 0
        dead_lettered = False
        while True:
            held = {(o.topic, o.partition) for o in session.positions()}
            records = [r for r in records if (r.topic, r.partition) in held]
            if not records:  # every partition of the batch moved to another member, which delivers it
                break
            attempt += 1
            reason = await self._post(delivery_id, attempt, records)
            if reason is None:
                break
            self.failures += 1
            self.paused = True
            self.metrics.failures.inc((self.spec.id, reason))
            if attempt >= self.spec.dead_letter_after_attempts and await self._dead_letter(delivery_id, records):
                dead_lettered = True
                break
            wait = backoff_s(self.spec, self.failures)
            log.info("push subscription %s: delivery %s attempt %d failed (%s); retrying in %.2f s", self.spec.id,
                     delivery_id, attempt, self.last_error, wait)
            await asyncio.sleep(wait)
        if self.paused:
            log.info("push subscription %s: delivery %s %s at attempt %d; resuming", self.spec.id, delivery_id,
                     "dead-lettered" if dead_lettered else "succeeded", attempt)
        self.paused = False
        self.failures = 0
        if records:
            if not dead_lettered:
                self.metrics.records.inc((self.spec.id,), len(records))
                self.metrics.batches.inc((self.spec.id,))
                self.last_delivered_ms = int(time.time() * 1000)
            await self._commit(session, records)

    async def _dead_letter(self, delivery_id: str, records: list[Delivered]) -> bool:
        """Write the batch to the subscription's dead-letter topic (if it has one); whether it was."""
        topic = self.spec.dead_letter_topic
        if topic is None:
            return False
        error = self.last_error
        try:
            await asyncio.to_thread(self.dead_letters.write, topic, self.spec.id, records, error)
        except Exception as exc:  # KafkaException, BufferError, RuntimeError: try again with the next attempt
            self.last_error = f"{error}; the dead-letter write to {topic} failed: {exc}"
            log.warning("push subscription %s: delivery %s: %s", self.spec.id, delivery_id, self.last_error)
            return False
        self.metrics.dead_lettered.inc((self.spec.id,), len(records))
        log.warning("push subscription %s: delivery %s failed %d times (last: %s): its %d records were written to "
                    "dead-letter topic %s", self.spec.id, delivery_id, self.failures, error, len(records), topic)
        return True

    async def _post(self, delivery_id: str, attempt: int, records: list[Delivered]) -> str | None:
        """None when the endpoint took the batch (2xx), else the failure's reason (a metric label)."""
        body = delivery_body(self.spec, delivery_id, attempt, records)
        headers = {"content-type": "application/json", "x-tidelog-subscription": self.spec.id,
                   "x-tidelog-delivery": delivery_id}
        try:
            answer = await self.http.post(self.spec.endpoint, content=body, headers=headers,
                                          timeout=self.spec.timeout_ms / 1000)
        except httpx.TimeoutException:
            self.last_error = f"no answer within timeoutMs={self.spec.timeout_ms}"
            return "timeout"
        except httpx.ConnectError as exc:
            self.last_error = f"cannot connect: {exc}"
            return "connect"
        except httpx.HTTPError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            return "error"
        if 200 <= answer.status_code < 300:
            return None
        self.last_error = f"the endpoint answered {answer.status_code}"
        return f"http_{answer.status_code}"

    async def _commit(self, session: ReadSession, records: list[Delivered]) -> None:
        following: dict[tuple[str, int], int] = {}
        for record in records:
            following[(record.topic, record.partition)] = record.offset + 1
        # Still held since the batch was taken: the session's delivered position is exactly the batch's end
        # (this loop is the session's only taker; a revocation drops the position).
        positions = {(o.topic, o.partition): o.offset for o in session.positions()}
        offsets = [Offset(t, p, o) for (t, p), o in sorted(following.items()) if positions.get((t, p)) == o]
        if not offsets:
            return
        try:
            await session.commit(offsets)
        except (PartitionsNotAssigned, BeyondDelivered, CommitFailed) as exc:
            self.metrics.commit_failures.inc((self.spec.id,))
            log.info("push subscription %s: commit after delivery failed (%s); a later commit covers it, and a "
                     "rebalance delivers the records again", self.spec.id, exc)

    def describe(self) -> dict[str, Any]:
        session = self.session
        out: dict[str, Any] = {"state": "paused" if self.paused else ("delivering" if session is not None
                                                                        and session.alive else "starting"),
                               "consecutiveFailures": self.failures}
        if session is not None:
            state = session.describe(time.monotonic())
            out["assignment"] = state["assignment"]
            out["bufferedRecords"] = state["bufferedRecords"]
        if self.last_error:
            out["lastError"] = self.last_error
        if self.last_delivered_ms:
            out["lastDeliveredMs"] = self.last_delivered_ms
        return out


class PushManager:
    """Runs, on this instance, the subscriptions the store holds (started and stopped as it changes)."""

    def __init__(self, config: GatewayConfig, registry: Registry, store: SubscriptionStore) -> None:
        self.config = config
        self.store = store
        self.metrics = PushMetrics.register(registry)
        self.runners: dict[str, PushRunner] = {}
        self.dead_letters = DeadLetters(config)
        self._http = httpx.AsyncClient(follow_redirects=False, limits=httpx.Limits(max_connections=256))
        self._reconciling: asyncio.Task[None] | None = None
        self._stopping = False
        store.on_change = self.reconcile
        registry.add_collector(self._collect)

    def start(self) -> None:
        self.reconcile()

    def reconcile(self) -> None:
        """Start runners for new subscriptions, stop those of deleted ones (in the background)."""
        if self._stopping:
            return
        wanted = self.store.specs()
        for sub_id, spec in wanted.items():
            if sub_id not in self.runners:
                runner = PushRunner(spec, self.config, self._http, self.metrics, self.dead_letters)
                self.runners[sub_id] = runner
                runner.start()
        gone = [self.runners.pop(sub_id) for sub_id in list(self.runners) if sub_id not in wanted]
        for runner in gone:
            log.info("push subscription %s deleted: stopping", runner.spec.id)
            asyncio.get_running_loop().create_task(self._retire(runner))

    async def _retire(self, runner: PushRunner) -> None:
        await runner.stop()
        for metric in (self.metrics.records, self.metrics.batches, self.metrics.commit_failures,
                       self.metrics.dead_lettered):
            metric.remove((runner.spec.id,))

    async def stop(self) -> None:
        self._stopping = True
        runners, self.runners = list(self.runners.values()), {}
        await asyncio.gather(*(r.stop() for r in runners))
        await self._http.aclose()
        await asyncio.to_thread(self.dead_letters.close)

    def _collect(self) -> list[MetricFamily]:
        count = MetricFamily("gateway_push_subscriptions", "Push subscriptions this instance runs", "gauge", ())
        count.add((), len(self.runners))
        paused = MetricFamily("gateway_push_paused", "1 while the subscription's batch in flight has failed and "
                              "is being retried (nothing later is delivered meanwhile)", "gauge", ("subscription",))
        failures = MetricFamily("gateway_push_consecutive_failures", "Failed attempts in a row of the batch in "
                                "flight", "gauge", ("subscription",))
        for sub_id, runner in list(self.runners.items()):
            paused.add((sub_id,), 1 if runner.paused else 0)
            failures.add((sub_id,), runner.failures)
        return [count, paused, failures]
