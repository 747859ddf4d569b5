"""Small conveniences around confluent-kafka shared by the integration and system tests.

Consumers assign partitions by hand (no group subscription: consumer groups come later), so
``group.id`` is set only because librdkafka requires one, and auto commit is off.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence

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

from helpers.broker_process import wait_until

FAST_CLIENT = {
    "socket.connection.setup.timeout.ms": 5000,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 200,
    "topic.metadata.refresh.interval.ms": 1000,
}


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def admin_client(bootstrap: str) -> AdminClient:
    # librdkafka lets producer-type handles auto-create the topics they ask Metadata for: not here,
    # or checking that a deleted topic is gone would bring it back
    return AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False, **FAST_CLIENT})


def topic_partition_count(bootstrap: str, topic: str) -> int:
    """Partitions of ``topic`` that have a leader, per Metadata (0 when the topic is unknown)."""
    metadata = admin_client(bootstrap).list_topics(topic, timeout=5)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        return 0
    return sum(1 for p in described.partitions.values() if p.leader >= 0 and p.error is None)


def create_topic(bootstrap: str, topic: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
    """Create ``topic`` and wait until Metadata shows every partition with a leader."""
    admin = admin_client(bootstrap)  # must outlive the future
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
        operation_timeout=10,
    )
    futures[topic].result(timeout=15)
    wait_until(lambda: topic_partition_count(bootstrap, topic) == partitions, message=f"{topic} in metadata")
    return topic


def producer(bootstrap: str, config: Mapping[str, object] | None = None) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **FAST_CLIENT, **(config or {})})


class DeliveryLog:
    """Delivery reports of a confluent-kafka producer: acknowledged messages and errors."""

    def __init__(self) -> None:
        self.acked: list[Message] = []
        self.errors: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.acked.append(message)
        else:
            self.errors.append(error)


def produce_all(
    prod: Producer,
    topic: str,
    values: Iterable[bytes | None],
    *,
    partition: int | None = None,
    key: bytes | None = None,
    timeout: float = 30.0,
) -> DeliveryLog:
    """Produce ``values``, flush, and fail unless every message was acknowledged."""
    log = DeliveryLog()
    for value in values:
        kwargs: dict[str, object] = {"value": value, "key": key, "on_delivery": log}
        if partition is not None:
            kwargs["partition"] = partition
        prod.produce(topic, **kwargs)
        prod.poll(0)
    remaining = prod.flush(timeout)
    assert remaining == 0, f"{remaining} messages still queued after {timeout} s"
    assert not log.errors, f"delivery errors: {log.errors[:5]}"
    return log


def leave_and_close(cons: Consumer, timeout: float = 10.0) -> None:
    """Close a subscribed consumer without the close-time rebalance that can hang librdkafka.

    ``close()`` revokes the assignment itself, and librdkafka's ``rd_kafka_assign`` from that
    rebalance callback can wait forever (librdkafka issues 4527 and 4884); confluent-kafka holds the
    GIL in the callback, so every thread of the process stops with it. Unsubscribing and polling until
    the assignment is gone first (the workaround named in issue 4527) leaves ``close()`` nothing to
    revoke. Records polled meanwhile are dropped, as a closing consumer's are.
    """
    cons.unsubscribe()
    deadline = time.monotonic() + timeout
    while cons.assignment() and time.monotonic() < deadline:
        cons.poll(0.05)
    cons.close()


def consumer(bootstrap: str, config: Mapping[str, object] | None = None) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"g-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        **FAST_CLIENT,
        **(config or {}),
    })


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partitions: Sequence[int] = (0,),
    offset: int = OFFSET_BEGINNING,
    timeout: float = 20.0,
    settle: float = 0.0,
    config: Mapping[str, object] | None = None,
) -> list[Message]:
    """Assign ``partitions`` from ``offset`` and return ``count`` messages (AssertionError if fewer come
    within ``timeout``). With ``settle`` > 0, keep polling that long afterwards so that records beyond
    ``count`` (duplicates) are returned too."""
    cons = consumer(bootstrap, config)
    try:
        cons.assign([TopicPartition(topic, p, offset) for p in partitions])
        messages: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(messages) < count and time.monotonic() < deadline:
            messages.extend(_poll_batch(cons, 0.2))
        assert len(messages) >= count, f"got {len(messages)} of {count} messages from {topic} in {timeout} s"
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            messages.extend(_poll_batch(cons, 0.1))
        return messages
    finally:
        cons.close()


def _poll_batch(cons: Consumer, timeout: float) -> list[Message]:
    out = []
    for message in cons.consume(num_messages=1000, timeout=timeout):
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {error}")
        out.append(message)
    return out


def watermark_offsets(cons: Consumer, tp: TopicPartition, timeout: float = 15.0) -> tuple[int, int]:
    """``get_watermark_offsets``, asked again while the partition's leader moves (librdkafka answers
    NOT_LEADER_FOR_PARTITION once from a stale leader and refreshes its metadata meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = cons.get_watermark_offsets(tp, timeout=max(1.0, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            retriable = exc.args[0].code() in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                                               KafkaError._TRANSPORT, KafkaError.UNKNOWN_TOPIC_OR_PART)
            if not retriable or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def watermarks(bootstrap: str, topic: str, partitions: Sequence[int] = (0,)) -> dict[int, tuple[int, int]]:
    """(log start offset, high watermark) per partition, from ListOffsets."""
    cons = consumer(bootstrap)
    try:
        return {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
    finally:
        cons.close()
