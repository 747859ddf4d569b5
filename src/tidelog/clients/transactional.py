"""Pieces shared by the platform processes that write with a transactional producer (agent, mirror).

Both keep their position in a compacted topic written in the same Kafka transaction as the data
(agent: file offsets; mirror: source offsets), read it back with read_committed after
``init_transactions()`` has aborted whatever a previous incarnation left open, and retry through
outages without ever writing outside a transaction. What they share lives here:

- ``FENCED``: the error codes that mean "another producer with this transactional.id took over";
- ``shared_settings``: the librdkafka keys (connection, TLS, SASL) that every client of one cluster
  needs, taken from a producer's settings to build a consumer or an admin client of the same cluster;
- ``retry_retriable``: run a call until it succeeds, retrying retriable errors, raising the others;
- ``read_to_end``: read partitions read_committed from their start to the high watermark taken when
  the call starts (the last value per key wins for compacted topics);
- ``send``: produce, waiting while librdkafka's queue is full.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
# librdkafka settings every client of a cluster understands (connection and security).
SHARED_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "client.", "socket.", "reconnect.",
                   "broker.", "api.version", "metadata.", "topic.metadata", "retry.backoff", "debug", "log_level")


class ReadError(Exception):
    """A topic could not be read to its end (missing, unauthorised, or held by an open transaction)."""


def shared_settings(kafka: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kafka.items() if k.startswith(SHARED_PREFIXES)}


def retry_retriable(stop: threading.Event, call: Callable[[], None], what: str, log: logging.Logger,
                    waiting: str = "retrying") -> bool:
    """Run ``call`` until it succeeds; retriable errors (an outage) are retried every 0.5 s, others
    (abortable, fatal, fenced) raised. False if ``stop`` was set first."""
    logged = False
    while True:
        try:
            call()
            if logged:
                log.warning("the cluster answers again (%s done)", what)
            return True
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if not error.retriable() or error.txn_requires_abort() or error.fatal():
                raise
            if not logged:
                log.warning("the cluster is out of reach (%s: %s); %s", what, error.str(), waiting)
                logged = True
            if stop.wait(0.5):
                return False


def read_to_end(settings: Mapping[str, Any], topic: str, partitions: list[int] | None,
                on_message: Callable[[Message], None], timeout: float = 60.0) -> None:
    """Call ``on_message`` for every committed record of ``partitions`` (all when None) of ``topic``,
    from the start up to the high watermark taken now. ``settings`` are a consumer's (shared_settings)."""
    consumer = Consumer({**settings, "group.id": "tidelog-read-to-end", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        if partitions is None:
            described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if described is None or described.error is not None:
                raise ReadError(f"{topic}: {described.error if described else 'unknown topic'}")
            partitions = sorted(described.partitions)
        ends: dict[int, int] = {}
        for partition in partitions:
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            except KafkaException as exc:
                raise ReadError(f"{topic} [{partition}]: {exc.args[0].str()}") from None
            if high > 0:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        _read(consumer, topic, ends, on_message, time.monotonic() + timeout)
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, ends: dict[int, int], on_message: Callable[[Message], None],
          deadline: float) -> None:
    pending = dict(ends)
    while pending:
        if time.monotonic() > deadline:
            raise ReadError(f"{topic}: not read to its end in time (an open transaction holds it?)")
        for message in consumer.consume(500, 0.2):
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise ReadError(f"{topic}: {error}")
            if error is None and message.value() is not None:
                on_message(message)
        for tp in consumer.position([TopicPartition(topic, p) for p in list(pending)]):
            if tp.offset >= pending[tp.partition]:
                del pending[tp.partition]


def send(producer: Producer, topic: str, value: bytes | None, key: bytes | None,
         headers: list[tuple[str, str | bytes | None]] | None = None, *, partition: int = -1,
         timestamp: int = 0) -> None:
    """Produce, waiting while librdkafka's queue is full (queue.buffering.max.messages/kbytes)."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, timestamp=timestamp, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)
