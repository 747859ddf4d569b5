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

Callbacks run on this class's polling thread: ``on_assign(shards)`` and ``on_revoke(shards)``;
``on_revoke`` returns only when the shards' writers have stopped, so the next owner's
``init_transactions`` rarely has an open transaction to abort.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tidelog.gateway.config import GatewayConfig

log = logging.getLogger(__name__)
ShardsCallback = Callable[[list[int]], None]


class Membership:
    def __init__(self, config: GatewayConfig, on_assign: ShardsCallback, on_revoke: ShardsCallback) -> None:
        self.config = config
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._stop = threading.Event()
        self.joined = threading.Event()
        self.error = ""
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
        consumer = Consumer(self._consumer_config())

        def assigned(c: Consumer, partitions: list[TopicPartition]) -> None:
            c.incremental_assign(partitions)
            if partitions:
                c.pause(partitions)
            self.joined.set()
            shards = sorted(p.partition for p in partitions)
            if shards:
                log.info("shards assigned: %s", shards)
                self._on_assign(shards)

        def revoked(c: Consumer, partitions: list[TopicPartition]) -> None:
            shards = sorted(p.partition for p in partitions)
            if shards:
                log.info("shards revoked: %s", shards)
                self._on_revoke(shards)
            c.incremental_unassign(partitions)

        consumer.subscribe([self.config.state_topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        try:
            while not self._stop.is_set():
                try:
                    message = consumer.poll(0.2)
                except KafkaException as exc:
                    self.error = str(exc)
                    log.warning("membership: %s", exc)
                    continue
                if message is not None and message.error() is not None:
                    self.error = str(message.error())
                    log.warning("membership: %s", message.error())
        finally:
            consumer.close()  # a dynamic member leaves the group: revoke callbacks run first
