"""An incremental reader of a compacted state topic: the last value of every key, kept up to date.

The platform processes keep their state in compacted topics (the governor's plan and control, the
mirror's checkpoints, the gateway's last seqno per source). The console shows that state by reading
the topics through the Kafka protocol like any consumer; ``StateTail`` keeps one group-less consumer
per topic (``read_committed``, nothing committed, no group joined) and, at each ``refresh``, reads
only what was appended since the last one, so a page view costs the new records, not the topic.

State: per partition, ``key -> decoded value`` (a null value deletes the key; a record that does not
decode is counted in ``skipped`` and leaves the previous value, as the processes' own loaders do).

When is a partition read "to its end"? ``refresh`` takes the high watermarks (``ends``, from the
caller's ListOffsets). A partition is done when the next offset to read reaches its end, or when the
consumer reported end of partition at that very offset: under ``read_committed`` librdkafka stops at
the last stable offset, so an open transaction (a mirror or gateway writing right now) holds the
reader below the high watermark, and the records behind it are shown at the next refresh once
committed. A partition whose end went below what was read (the topic was deleted and made again) is
read again from its start. ``refresh`` gives up after ``timeout_s`` and keeps what it has read.
Reaching an end of partition needs a fetch that comes back empty, which the broker holds for
``fetch.wait.max.ms``: 100 ms here (librdkafka's 500 ms would be paid by a page view).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from tidelog.console.kafka import KafkaFailure, failure_of

V = TypeVar("V")


class StateTail(Generic[V]):
    def __init__(self, settings: Mapping[str, Any], topic: str, decode: Callable[[bytes, bytes], V],
                 timeout_s: float = 10.0) -> None:
        self.settings = dict(settings)
        self.topic = topic
        self.decode = decode
        self.timeout_s = timeout_s
        self.values: dict[int, dict[bytes, V]] = {}
        self.skipped = 0
        self._next: dict[int, int] = {}
        self._eof_at: dict[int, int] = {}
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()

    def refresh(self, ends: Mapping[int, int]) -> dict[int, dict[bytes, V]]:
        """Read every partition in ``ends`` (partition -> high watermark) up to its end; a copy of the
        state per partition. Raises ``KafkaFailure`` when the cluster refuses the read."""
        with self._lock:
            try:
                self._catch_up(ends)
            except KafkaException as exc:
                raise failure_of(exc) from None
            return {p: dict(values) for p, values in self.values.items() if p in ends}

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def _catch_up(self, ends: Mapping[int, int]) -> None:
        consumer = self._open()
        restart = [p for p, end in ends.items() if p in self._next and end < self._next[p]]
        fresh = [p for p in ends if p not in self._next] + restart
        if restart:
            consumer.incremental_unassign([TopicPartition(self.topic, p) for p in restart])
        for p in fresh:
            self.values[p], self._next[p] = {}, 0
            self._eof_at.pop(p, None)
        if fresh:
            consumer.incremental_assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in fresh])
        deadline = time.monotonic() + self.timeout_s
        rounds = 0
        while self._pending(ends, rounds) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.05):
                self._apply(message)
            rounds += 1

    def _pending(self, ends: Mapping[int, int], rounds: int) -> list[int]:
        """Partitions not read to their end (an end-of-partition seen at the current offset counts as
        the end once at least one poll of this refresh brought nothing past it)."""
        return [p for p, end in ends.items()
                if self._next[p] < end and not (rounds > 0 and self._eof_at.get(p) == self._next[p])]

    def _apply(self, message: Message) -> None:
        p = message.partition()
        offset = message.offset()
        if p is None or offset is None or p not in self._next:
            return
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._eof_at[p] = offset
                self._next[p] = max(self._next[p], offset)
                return
            raise KafkaFailure(error.name(), f"{self.topic} [{p}]: {error.str()}")
        self._next[p] = offset + 1
        key, value = message.key() or b"", message.value()
        if value is None:
            self.values[p].pop(key, None)
            return
        try:
            self.values[p][key] = self.decode(key, value)
        except ValueError:
            self.skipped += 1

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({
                **self.settings, "group.id": f"tidelog-console-{uuid.uuid4().hex}", "enable.auto.commit": False,
                "enable.partition.eof": True, "isolation.level": "read_committed",
                "queued.max.messages.kbytes": 4096, "fetch.wait.max.ms": 100,
                "client.id": f"tidelog-console-{self.topic}"})
        return self._consumer
