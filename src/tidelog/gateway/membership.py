"""Which shards this instance owns: a consumer group over the state topic's partitions.

Every gateway instance of one deployment (same ``gateway.group.id``) joins the group
``<group>`` subscribed to the state topic. The group's assignment *is* the ownership: state
partition n assigned to an instance means that instance serves shard n. The group never consumes
through this consumer: assigned partitions are paused at once, and polling only keeps the
membership alive and delivers rebalances.

- Assignment is ``cooperative-sticky``: a rebalance moves only the shards that must move, and the
  others keep serving.
- ``client.id`` is the instance's advertised URL, so that any instance can find a shard's owner by
  describing the group (``router``), against tidelog and Apache Kafka alike.
- With ``gateway.instance.id`` set, membership is static (KIP-345): a restarted instance (after a
  crash or kill -9) takes its shards back at once instead of after the session timeout; the cost
  is that a planned stop leaves its shards unserved until the session timeout unless it restarts.
- Ownership alone never guarantees exclusivity: two instances may briefly both believe they own a
  shard (an instance stalled past its session timeout). The transactional id per shard fences the
  older one, so at most one of them can commit (``shard``).

**Replacing the consumer.** librdkafka gives up on a consumer for good after a fatal error: a
static member answered FENCED_INSTANCE_ID (which a broker restart under a running gateway can
cause: the coordinator sees a rejoin with the same ``group.instance.id`` as a second instance) stays
out of the group forever, and every write would be refused as "moved". So a fatal error (in a poll,
an error callback, or a rebalance callback raising) retires the consumer: the shards it held are
revoked here (their writers stop), the consumer is closed on a helper thread with a bounded wait
(a fatally failed consumer's close is not trusted to return), and a new consumer with the same
settings joins after a back-off (1 s, doubling to 10 s while replacements keep failing quickly).
The new member gets its shards again, and each shard writer opens anew: a new transactional producer
whose ``init_transactions`` fences and settles anything left open, then the state read again. A
retired consumer's late callbacks change nothing. A lost assignment (the coordinator unreachable
for longer than the session timeout: librdkafka's ``on_lost``) revokes the shards too; librdkafka
rejoins by itself once the cluster answers again.

Threads: the consumer is used only by this class's polling thread (and, once retired, only by the
helper that closes it). Callbacks run on the polling thread: ``on_assign(shards)`` and
``on_revoke(shards)``; ``on_revoke`` returns only when the shards' writers have stopped (or a bounded
wait ran out), so the next owner's ``init_transactions`` rarely has an open transaction to abort.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tidelog.gateway.config import GatewayConfig

log = logging.getLogger(__name__)
ShardsCallback = Callable[[list[int]], None]
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 10.0
STABLE_S = 60.0  # a consumer that lived this long resets the back-off
CLOSE_WAIT_S = 10.0


def is_fatal(error: KafkaError) -> bool:
    return bool(error.fatal()) or error.code() in (KafkaError._FATAL, KafkaError.FENCED_INSTANCE_ID)


def _error_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


class Membership:
    def __init__(self, config: GatewayConfig, on_assign: ShardsCallback, on_revoke: ShardsCallback) -> None:
        self.config = config
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._stop = threading.Event()
        self.joined = threading.Event()
        self.error = ""
        self.replacements = 0  # consumers retired after a fatal error
        self._thread = threading.Thread(target=self._run, name="gateway-membership", daemon=True)

    def start(self) -> Membership:
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _consumer_config(self) -> dict[str, object]:
        extra: dict[str, object] = {
            "group.id": self.config.group_id,
            "client.id": self.config.url,
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": self.config.session_timeout_ms,
            "heartbeat.interval.ms": max(100, self.config.session_timeout_ms // 5),
        }
        if self.config.instance_id:
            extra["group.instance.id"] = self.config.instance_id
        return self.config.kafka_config(**extra)

    def _run(self) -> None:
        backoff = FIRST_BACKOFF_S
        while not self._stop.is_set():
            started = time.monotonic()
            reason = self._serve()
            if reason is None:
                return
            self.replacements += 1
            self.error = f"group consumer replaced after: {reason}"
            backoff = FIRST_BACKOFF_S if time.monotonic() - started > STABLE_S else backoff
            log.warning("membership: %s; joining again with a new consumer in %.0f s", self.error, backoff)
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _serve(self) -> str | None:
        """Run one consumer until the stop (None) or a fatal error (its description: replace it)."""
        held: set[int] = set()
        retired = threading.Event()
        fatal: list[str] = []

        def on_error(error: KafkaError) -> None:
            self.error = error.str()
            if is_fatal(error):
                fatal.append(error.str())
            else:
                log.debug("membership: %s", error.str())

        def assigned(c: Consumer, partitions: list[TopicPartition]) -> None:
            c.incremental_assign(partitions)
            if partitions:
                c.pause(partitions)
            if retired.is_set():
                return
            self.joined.set()
            self.error = ""
            shards = sorted(p.partition for p in partitions if p.partition not in held)
            if shards:
                log.info("shards assigned: %s", shards)
                held.update(shards)
                self._on_assign(shards)

        def revoked(c: Consumer, partitions: list[TopicPartition]) -> None:
            shards = sorted(p.partition for p in partitions if p.partition in held)
            if shards:
                log.info("shards revoked: %s", shards)
                held.difference_update(shards)
                self._on_revoke(shards)
            try:
                c.incremental_unassign(partitions)
            except KafkaException as exc:  # a failed consumer: it is being replaced anyway
                log.info("membership: unassign: %s", exc)

        def lost(c: Consumer, partitions: list[TopicPartition]) -> None:
            self.joined.clear()
            log.warning("membership: assignment lost (the group coordinator did not answer for the session "
                        "timeout); rejoining")
            revoked(c, partitions)

        consumer = Consumer({**self._consumer_config(), "error_cb": on_error})
        reason: str | None = None
        try:
            consumer.subscribe([self.config.state_topic], on_assign=assigned, on_revoke=revoked, on_lost=lost)
            while not self._stop.is_set() and not fatal:
                try:
                    message = consumer.poll(0.2)
                except KafkaException as exc:
                    error = _error_of(exc)
                    if error is None or is_fatal(error):
                        fatal.append(str(exc))
                    else:
                        self.error = str(exc)
                        log.warning("membership: %s", exc)
                    continue
                error = message.error() if message is not None else None
                if error is not None:
                    self.error = error.str()
                    if is_fatal(error):
                        fatal.append(error.str())
                    else:
                        log.warning("membership: %s", error.str())
            if fatal:
                reason = fatal[0]
        except Exception as exc:  # a rebalance callback failed: the consumer's state is unknown
            log.exception("membership: the group consumer failed")
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            retired.set()
            self.joined.clear()
            if held:
                shards = sorted(held)
                held.clear()
                log.info("shards released: %s", shards)
                self._on_revoke(shards)
            _close(consumer)
        return reason


def _close(consumer: Consumer) -> None:
    """Close on a helper thread, waiting at most ``CLOSE_WAIT_S``: nothing else uses the consumer any
    more, and a consumer that does not close is left behind rather than blocking a rejoin."""

    def close() -> None:
        try:
            consumer.close()  # a dynamic member leaves the group
        except Exception as exc:
            log.info("membership: closing the group consumer: %s", exc)

    closer = threading.Thread(target=close, name="gateway-membership-close", daemon=True)
    closer.start()
    closer.join(CLOSE_WAIT_S)
    if closer.is_alive():
        log.warning("membership: the old group consumer did not close within %.0f s; left behind", CLOSE_WAIT_S)
