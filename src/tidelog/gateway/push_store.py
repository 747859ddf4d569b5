"""Push subscriptions kept in the cluster, so that every gateway instance of a deployment runs the same
ones and a restarted instance takes them up again.

The store is a compacted topic of one partition (``gateway.push.topic``, by default
``<gateway.state.topic>-subscriptions``; record format in ``push_model``): a creation is a record
keyed by the subscription id, a deletion its tombstone. Every instance reads the topic from the
beginning at start-up (the listener opens only once it has read up to the end), then follows it on a
thread of its own and calls ``on_change`` (on the event loop) after each record, so a subscription
created or deleted through any instance starts or stops on all of them within a poll (``_TAIL_WAIT_S``).
Writes are produced with ``acks=all`` and idempotence and flushed before the API answers, and the
instance applies its own write at once (it reads it back later too; applying twice changes nothing).

Threads: ``put``/``delete``/``load`` block (call them from worker threads); ``specs`` is safe anywhere.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.push_model import SubscriptionSpec, spec_from_record, spec_record

log = logging.getLogger(__name__)
_TAIL_WAIT_S = 0.2
_FLUSH_TIMEOUT_S = 15.0
_LOAD_TIMEOUT_S = 60.0


class StoreFailed(Exception):
    """The subscription record was not acknowledged by the cluster."""


class SubscriptionStore:
    def __init__(self, config: GatewayConfig, admin: AdminClient) -> None:
        self.config = config
        self.topic = config.subscriptions_topic
        self._admin = admin
        self._lock = threading.Lock()
        self._specs: dict[str, SubscriptionSpec] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tail, name="gateway-push-store", daemon=True)
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_change: Callable[[], None] = lambda: None

    def specs(self) -> dict[str, SubscriptionSpec]:
        with self._lock:
            return dict(self._specs)

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._load)
        self._thread.start()

    def _load(self) -> None:
        """Create or find the topic, then read it to its end (blocking)."""
        new = NewTopic(self.topic, num_partitions=1, replication_factor=self.config.state_replication_factor,
                       config={"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
        try:
            self._admin.create_topics([new], operation_timeout=10, request_timeout=15)[self.topic].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        self._producer = Producer(self.config.kafka_config(**{"acks": "all", "enable.idempotence": True,
                                                              "linger.ms": 0}))
        consumer = Consumer(self.config.kafka_config(**{
            "group.id": f"{self.config.group_id}-subscriptions", "enable.auto.commit": False,
            "enable.partition.eof": True, "fetch.wait.max.ms": 100, "isolation.level": "read_committed"}))
        consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self._consumer = consumer
        deadline = time.monotonic() + _LOAD_TIMEOUT_S
        while True:  # to the end: an instance must know every subscription before it serves requests
            if time.monotonic() > deadline:
                raise StoreFailed(f"could not read {self.topic} to its end within {_LOAD_TIMEOUT_S:.0f} s")
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                    continue  # a topic just created: the metadata is not everywhere yet
                raise KafkaException(error)
            self._apply(message)
        log.info("push subscriptions: %d read from %s", len(self._specs), self.topic)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.flush(5)

    def _tail(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self._stop.is_set():
            try:
                message = consumer.poll(_TAIL_WAIT_S)
            except KafkaException as exc:
                log.warning("push subscriptions: reading %s: %s", self.topic, exc)
                continue
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("push subscriptions: reading %s: %s", self.topic, error.str())
                continue
            if self._apply(message):
                self._changed()

    def _apply(self, message: Message) -> bool:
        key, value = message.key(), message.value()
        if key is None:
            return False
        sub_id = key.decode(errors="replace")
        if value is None:
            with self._lock:
                return self._specs.pop(sub_id, None) is not None
        try:
            spec = spec_from_record(key, value)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("push subscriptions: skipping record %r at offset %s of %s: %s", sub_id[:100],
                        message.offset(), self.topic, exc)
            return False
        with self._lock:
            changed = self._specs.get(sub_id) != spec
            self._specs[sub_id] = spec
        return changed

    def _changed(self) -> None:
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self.on_change)
            except RuntimeError:  # the loop is closed: the gateway is stopping
                pass

    # -- writes (blocking) ------------------------------------------------------------------------

    def put(self, spec: SubscriptionSpec) -> None:
        self._write(spec.id, spec_record(spec))
        with self._lock:
            self._specs[spec.id] = spec

    def delete(self, sub_id: str) -> None:
        self._write(sub_id, None)
        with self._lock:
            self._specs.pop(sub_id, None)

    def _write(self, key: str, value: bytes | None) -> None:
        producer = self._producer
        assert producer is not None
        errors: list[KafkaError] = []

        def delivered(error: KafkaError | None, _: Message) -> None:
            if error is not None:
                errors.append(error)

        producer.produce(self.topic, key=key.encode(), value=value, partition=0, on_delivery=delivered)
        if producer.flush(_FLUSH_TIMEOUT_S) > 0:
            raise StoreFailed(f"the cluster did not acknowledge the record in {self.topic} within "
                              f"{_FLUSH_TIMEOUT_S:.0f} s")
        if errors:
            raise StoreFailed(f"the cluster refused the record in {self.topic}: {errors[0].str()}")
