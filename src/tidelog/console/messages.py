"""Reading a partition and writing one record, for the messages page (confluent-kafka, no group).

``browse`` assigns one partition to a group-less consumer (``enable.auto.commit=false``, no
``group.id`` use: nothing is committed, no group appears on the cluster) at a start position (an
offset, the first offset at or after a timestamp, or ``limit`` records before the end), reads until
``limit`` records matched the filters or ``scan`` records were read or the high watermark is reached,
and returns them decoded for display: text (UTF-8 with replacement), JSON pretty-printed when the
bytes parse as JSON, or hex. A filter on key, header or substring is applied to what was read; the
answer says how many records were scanned, so a page can say "40 of 1,000 scanned matched".

``render`` is pure, so the three formats are tested without a broker.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tidelog.console.config import ConsoleConfig
from tidelog.console.kafka import KafkaFailure, failure_of

FORMATS = ("text", "json", "hex")
MAX_SHOWN_BYTES = 64 * 1024


@dataclass(frozen=True)
class Shown:
    offset: int
    timestamp_ms: int
    key: str
    value: str
    headers: tuple[tuple[str, str], ...]
    value_bytes: int


@dataclass(frozen=True)
class Filters:
    key: str = ""
    header: str = ""  # "name" or "name=value"
    contains: str = ""

    def match(self, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> bool:
        if self.key and (key or b"").decode(errors="replace") != self.key:
            return False
        if self.header:
            name, has_value, wanted = self.header.partition("=")
            if not any(h == name and (not has_value or (v or b"").decode(errors="replace") == wanted)
                       for h, v in headers):
                return False
        if self.contains:
            needle = self.contains.encode()
            if needle not in (key or b"") and needle not in (value or b""):
                return False
        return True


def _bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def render(data: bytes | None, fmt: str) -> str:
    """Bytes as the page shows them; ``None`` (a null key or a tombstone) as ``null``."""
    if data is None:
        return "null"
    clipped = data[:MAX_SHOWN_BYTES]
    if fmt == "hex":
        return clipped.hex(" ", 1)
    text = clipped.decode(errors="replace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(clipped), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def start_offset(low: int, high: int, start: str, value: int, limit: int, by_time: int | None) -> int:
    """The first offset to read: ``offset`` (clamped to the log), ``timestamp`` (``by_time``, the
    broker's answer, or the end when no record is that recent), ``end`` (``limit`` before the end)."""
    if start == "end":
        return max(low, high - limit)
    if start == "timestamp":
        return high if by_time is None or by_time < 0 else max(low, min(by_time, high))
    return max(low, min(value, high))


class ConsumerPool:
    """Idle group-less consumers kept between browses (at most ``size``): a new consumer costs a
    connection, its handshake and metadata round trips, which a busy broker makes a page wait for.
    A browse takes one (or makes one), assigns its partition, and gives it back unassigned; librdkafka
    drops whatever was fetched for an earlier assignment, so a browse never sees another's records."""

    def __init__(self, config: ConsoleConfig, size: int = 4) -> None:
        self.config = config
        self.size = size
        self._idle: list[Consumer] = []
        self._lock = threading.Lock()

    def take(self) -> Consumer:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Consumer(self.config.kafka_config(**{
            "group.id": f"tidelog-console-browse-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.partition.eof": True, "client.id": "tidelog-console",
            # a fetch left waiting at the end of an earlier browse's partition holds the connection's
            # next request (the next browse's) for up to this long: keep it short
            "fetch.wait.max.ms": 50}))

    def give_back(self, consumer: Consumer, healthy: bool) -> None:
        if healthy:
            try:
                consumer.unassign()
            except Exception:
                healthy = False
        with self._lock:
            if healthy and len(self._idle) < self.size:
                self._idle.append(consumer)
                return
        consumer.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for consumer in idle:
            consumer.close()


def browse(config: ConsoleConfig, topic: str, partition: int, first: int, high: int, *, limit: int = 50,
           scan: int = 1000, filters: Filters | None = None, fmt: str = "text",
           pool: ConsumerPool | None = None) -> tuple[list[Shown], int]:
    """Records from ``first`` up to ``high`` (the high watermark read before): (shown, scanned)."""
    if first >= high:
        return [], 0
    pool = pool or ConsumerPool(config, size=0)
    consumer = pool.take()
    healthy = False
    try:
        found = _browse(consumer, config, topic, partition, first, high, limit, scan, filters or Filters(), fmt)
        healthy = True
        return found
    finally:
        pool.give_back(consumer, healthy)


def _browse(consumer: Consumer, config: ConsoleConfig, topic: str, partition: int, first: int, high: int,
            limit: int, scan: int, filters: Filters, fmt: str) -> tuple[list[Shown], int]:
    shown: list[Shown] = []
    scanned = 0
    deadline_polls = max(20, config.request_timeout_ms // 50)
    consumer.assign([TopicPartition(topic, partition, first)])
    idle = 0
    while len(shown) < limit and scanned < scan and idle < deadline_polls:
        # a short wait: consume() returns at its timeout unless the batch is full, and a browse
        # usually wants fewer records than a full batch
        batch = consumer.consume(min(500, scan - scanned), timeout=0.05)
        if not batch:
            idle += 1
            continue
        for message in batch:
            if message.topic() != topic or message.partition() != partition or (message.offset() or 0) < first:
                continue  # left from an earlier browse by this pooled consumer (librdkafka drops them; be sure)
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return shown, scanned
                raise failure_of(KafkaFailure(error.name(), error.str()))
            scanned += 1
            raw_headers: list[Any] = list(message.headers() or [])
            headers = [(str(h), v if isinstance(v, bytes | None) else str(v).encode()) for h, v in raw_headers]
            key = _bytes(message.key())
            if filters.match(key, message.value(), headers) and len(shown) < limit:
                _, ts = message.timestamp()
                shown.append(Shown(message.offset() or 0, ts, render(key, "text"),
                                   render(message.value(), fmt),
                                   tuple((h, render(v, "text")) for h, v in headers),
                                   len(message.value() or b"")))
            if (message.offset() or 0) + 1 >= high:
                return shown, scanned
    return shown, scanned


def timestamp_at(config: ConsoleConfig, positions: Sequence[tuple[str, int, int]], timeout_s: float = 2.0
                 ) -> dict[tuple[str, int, int], int]:
    """The timestamp of the record at each (topic, partition, offset): the first unconsumed record of a
    lagging group. Positions whose record is not read in time are left out."""
    if not positions:
        return {}
    consumer = Consumer(config.kafka_config(**{
        "group.id": f"tidelog-console-lag-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 4096, "client.id": "tidelog-console"}))
    wanted = {(t, p): o for t, p, o in positions}
    found: dict[tuple[str, int, int], int] = {}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in wanted.items()])
        idle = 0
        while wanted and idle < timeout_s / 0.1:
            batch = consumer.consume(500, timeout=0.1)
            idle = 0 if batch else idle + 1
            for message in batch:
                if message.error() is not None:
                    continue
                tp = (message.topic() or "", message.partition() or 0)
                if tp in wanted and (message.offset() or 0) >= wanted[tp]:
                    found[(tp[0], tp[1], wanted.pop(tp))] = message.timestamp()[1]
                    consumer.pause([TopicPartition(tp[0], tp[1])])
    finally:
        consumer.close()
    return found


def produce(config: ConsoleConfig, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
            headers: Sequence[tuple[str, bytes]]) -> tuple[int, int]:
    """Write one record (acks=all) and return (partition, offset); the broker's refusal is raised."""
    producer = Producer(config.kafka_config(**{"acks": "all", "client.id": "tidelog-console",
                                                "linger.ms": 0}))
    outcome: dict[str, object] = {}

    def delivered(error: KafkaError | None, message: object) -> None:
        outcome["error"], outcome["message"] = error, message

    kwargs: dict[str, object] = {"key": key, "value": value, "headers": list(headers), "on_delivery": delivered}
    if partition is not None:
        kwargs["partition"] = partition
    try:
        producer.produce(topic, **kwargs)  # type: ignore[arg-type]
    except BufferError as exc:
        raise KafkaFailure("QUEUE_FULL", str(exc)) from None
    except Exception as exc:
        raise failure_of(exc) from None
    producer.flush(config.request_timeout_ms / 1000)
    error = outcome.get("error")
    if isinstance(error, KafkaError):
        raise KafkaFailure(error.name(), error.str())
    message = outcome.get("message")
    if message is None:
        raise KafkaFailure("REQUEST_TIMED_OUT", "the record was not acknowledged in time")
    return int(message.partition()), int(message.offset())  # type: ignore[attr-defined]

