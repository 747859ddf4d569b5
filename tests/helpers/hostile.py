"""For the hostile tier (tests/system/hostile): one client misbehaves, and the test measures what it
costs everyone else. Here: a bystander producer that measures its own delivery latency while the hostile client
works, and the peak resident memory of a process (``VmHWM``, the kernel's high-water mark, so a spike
between two samples is not missed).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Producer


def peak_rss(pid: int) -> int:
    """The most memory ``pid`` has had resident since it started (bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("VmHWM missing from /proc status")


class Bystander:
    """A confluent-kafka producer sending one small record every ``interval`` seconds (acks=1, no linger)
    on a thread; :meth:`stop` returns each record's produce-to-acknowledgement latency in seconds."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.005) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
        self._topic = topic
        self._interval = interval
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bystander", daemon=True)

    def __enter__(self) -> Bystander:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.perf_counter()

            def delivered(err: object, _msg: object, sent: float = sent) -> None:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.latencies.append(time.perf_counter() - sent)

            self._producer.produce(self._topic, b"bystander", on_delivery=delivered)
            self._producer.poll(self._interval)
        self._producer.flush(10)

    def stop(self) -> list[float]:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(15)
        return self.latencies

    def p99_ms(self) -> float:
        ordered = sorted(self.latencies)
        assert len(ordered) >= 20, f"only {len(ordered)} bystander records acknowledged"
        return ordered[int(len(ordered) * 0.99) - 1] * 1000
