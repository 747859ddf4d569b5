"""A LogConsumer handler that finishes records out of order and fails some of them, each at most
twice (within the consumer's three retries), keeping what it handled as (key, int(value)) pairs."""

from __future__ import annotations

import random
import threading
import time

from tidelog.clients import ConsumedRecord


class FlakyHandler:
    def __init__(self, seed: int, failure_rate: float = 0.05, max_failures: int = 2) -> None:
        self.handled: list[tuple[bytes, int]] = []
        self._lock = threading.Lock()
        self._failed: dict[tuple[str, int, int], int] = {}
        self._rng = random.Random(seed)
        self._rate, self._max = failure_rate, max_failures

    def __call__(self, record: ConsumedRecord) -> None:
        time.sleep(self._rng.random() * 0.002)  # workers finish out of order
        where = (record.topic, record.partition, record.offset)
        with self._lock:
            failing = self._rng.random() < self._rate and self._failed.get(where, 0) < self._max
            if failing:
                self._failed[where] = self._failed.get(where, 0) + 1
            else:
                self.handled.append((record.key or b"", int(record.value or b"-1")))
        if failing:
            raise RuntimeError("flaky downstream")  # retried
