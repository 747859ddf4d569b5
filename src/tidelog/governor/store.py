"""The governor's state, kept on the cluster it governs: a compacted topic (``__tidelog_governor``,
one partition), so that a governor restarted anywhere resumes, and ``tidelog governor pause`` from
another shell reaches a running service.

Records (key -> JSON value; compaction keeps the last of each key, a null value deletes):

- ``plan``: the plan being executed: ``{"id", "createdMs", "reason", "throttle": bytes/s,
  "moves": [PartitionMove...], "cancelled": [[topic, partition]...]}``. Which moves are done or in
  flight is never stored: it is derived from Metadata and ListPartitionReassignments.
- ``control``: ``{"paused": bool, "pausedBy": "operator"|"breaker"|"", "reason", "drained": [ids],
  "updatedMs"}``.
- ``throttles``: the throttles the governor set (``{"topics": {topic: {config: value}}, "brokers":
  [ids]}``), so that a restarted governor removes exactly those.
- ``last``: a summary of the last finished or cancelled plan.

Reading: the partition from the beginning to its high watermark. Writing: one produce per change,
acks=all, idempotent, flushed before the call returns.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "__tidelog_governor"


class StoreError(Exception):
    pass


class Store:
    def __init__(self, config: Mapping[str, Any], topic: str = TOPIC, timeout_s: float = 15.0) -> None:
        self.config = dict(config)
        self.topic = topic
        self.timeout_s = timeout_s
        self._producer: Producer | None = None

    def ensure(self, admin: AdminClient) -> None:
        """Create the topic (compacted, replication factor min(3, brokers)) if it does not exist."""
        try:
            metadata = admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise StoreError(f"cannot list the cluster's topics: {exc.args[0].str()}") from None
        if self.topic in metadata.topics:
            return
        topic = NewTopic(self.topic, 1, min(3, max(1, len(metadata.brokers))), config={"cleanup.policy": "compact",
                                                                        "min.insync.replicas": "1"})
        try:
            admin.create_topics([topic], request_timeout=self.timeout_s)[self.topic].result()
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise StoreError(f"cannot create {self.topic}: {exc.args[0].str()}") from None

    def read(self) -> dict[str, Any]:
        consumer = Consumer({**self.config, "group.id": f"tidelog-governor-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=self.timeout_s)
            state: dict[str, Any] = {}
            if high <= 0:
                return state
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            position = -1
            while position < high - 1:
                message = consumer.poll(self.timeout_s)
                if message is None:
                    raise StoreError(f"{self.topic}: no records within {self.timeout_s:g} s before offset {high}")
                error = message.error()
                if error is not None:
                    if error.code() == -191:  # _PARTITION_EOF
                        break
                    raise StoreError(f"{self.topic}: {error.str()}")
                position = message.offset() or 0
                key = (message.key() or b"").decode()
                value = message.value()
                if value is None:
                    state.pop(key, None)
                else:
                    state[key] = json.loads(value)
            return state
        except KafkaException as exc:
            raise StoreError(f"cannot read {self.topic}: {exc.args[0].str()}") from None
        finally:
            consumer.close()

    def write(self, key: str, value: object | None) -> None:
        if self._producer is None:
            self._producer = Producer({**self.config, "acks": "all", "enable.idempotence": True})
        errors: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                errors.append(error.str())

        payload = None if value is None else json.dumps(value, separators=(",", ":")).encode()
        self._producer.produce(self.topic, key=key.encode(), value=payload, on_delivery=delivered)
        if self._producer.flush(self.timeout_s) > 0:
            raise StoreError(f"{self.topic}: the {key} record was not acknowledged within {self.timeout_s:g} s")
        if errors:
            raise StoreError(f"{self.topic}: cannot write the {key} record: {errors[0]}")
