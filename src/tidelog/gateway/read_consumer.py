"""The Kafka consumer under a read session (``reader``): its settings and the librdkafka behaviours
the session works around. Blocking calls, for the session's own thread.

- ``consumer_config``: a consumer-group member that reads ``read_committed``, commits only when told,
  assigns ``cooperative-sticky``, and prefetches no more than the session's buffer;
- ``consume_now``: the records there now, waiting only for the first;
- ``wake_fetchers``: after a resume, make librdkafka fetch at once rather than up to a second later;
- ``leave_group``: leave without the close-time revoke that can hang librdkafka.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.read_model import Delivered, SessionRequest

log = logging.getLogger(__name__)
CONSUME_BATCH = 500
PATTERN_REFRESH_MS = 5_000


def consumer_config(config: GatewayConfig, session_id: str, request: SessionRequest, buffer_bytes: int) -> dict[str, Any]:
    fetch_bytes = min(max(buffer_bytes, 1_000_000), 64 * 1024 * 1024)
    patterns = len(request.named_topics) < len(request.topics)
    return config.kafka_config(**{
        # A pattern picks up a new data centre's topic at the next metadata refresh (5 min by default; here 5 s).
        **({"topic.metadata.refresh.interval.ms": PATTERN_REFRESH_MS} if patterns else {}),
        "group.id": request.group,
        "client.id": f"tidelog-gateway-read-{session_id.rpartition('.')[2]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": request.auto_offset_reset,
        "isolation.level": "read_committed",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": config.session_timeout_ms,
        "heartbeat.interval.ms": max(100, config.session_timeout_ms // 5),
        "allow.auto.create.topics": False,
        "queued.max.messages.kbytes": max(1, buffer_bytes // 1024),
        # Past that cap librdkafka waits this long before fetching again (1 s by default): with a cap
        # as small as a session's, a poll that empties the buffer would then wait for nothing.
        "fetch.queue.backoff.ms": 10,
        "fetch.error.backoff.ms": 50,
        "fetch.max.bytes": fetch_bytes,
        "max.partition.fetch.bytes": min(1024 * 1024, fetch_bytes),
    })


def delivered(message: Message) -> Delivered:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None
    raw = message.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw  # a consumer's are a list; the stubs allow a dict
    headers = tuple((name, _bytes(value)) for name, value in pairs)
    return Delivered(topic, partition, offset, message.timestamp()[1], message.key(), message.value(), headers)


def _bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def wake_fetchers(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Make librdkafka fetch resumed partitions now: it notices a resume only when the leader's broker
    thread next wakes up, up to a second later (measured with 2.16: 0.65 s, every time). Any request
    to the leader wakes that thread, so ask each leader for one partition's watermarks."""
    try:
        per_leader: dict[int, TopicPartition] = {}
        for topic in {tp.topic for tp in partitions}:
            metadata = consumer.list_topics(topic, timeout=5).topics[topic].partitions
            for tp in partitions:
                if tp.topic == topic and tp.partition in metadata:
                    per_leader.setdefault(metadata[tp.partition].leader, tp)
        for tp in per_leader.values():
            consumer.get_watermark_offsets(tp, timeout=5, cached=False)
    except KafkaException as exc:  # only a wake-up: fetching resumes anyway, later
        log.debug("waking fetchers: %s", exc)


def consume_now(consumer: Consumer, wait_s: float) -> list[Message]:
    """What is there now, waiting at most ``wait_s`` for a first record: ``consume(n, t)`` alone waits
    out ``t`` unless ``n`` records come, which would delay every record by up to ``t``."""
    first = consumer.poll(wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(CONSUME_BATCH - 1, 0)]


def leave_group(consumer: Consumer, timeout_s: float = 10.0) -> None:
    """Leave the group, so the partitions are reassigned at once rather than after the session timeout.

    Unsubscribe and poll until the assignment is gone, then close: ``close()`` with partitions still
    assigned revokes them from inside librdkafka, whose assign call from that callback can hang the
    process (librdkafka issues 4527 and 4884, the workaround named there). Records polled meanwhile
    are dropped: they were not delivered, so they are not committed either.
    """
    consumer.unsubscribe()
    deadline = time.monotonic() + timeout_s
    while consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.05)
    consumer.close()
