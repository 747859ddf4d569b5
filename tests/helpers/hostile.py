"""For the hostile tier (tests/system/hostile): one client misbehaves, and the test measures what it
costs everyone else. Here: a bystander producer that measures its own delivery latency while the hostile client
works, the peak resident memory of a process (``VmHWM``, the kernel's high-water mark, so a spike
between two samples is not missed), a broker metric, connections from chosen loopback addresses, and a
sender that declares a large request and never finishes it.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
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


def metric(port: int, name: str, **labels: str) -> float:
    """The sum of a Prometheus series ``name`` (those with ``labels`` among theirs) on ``metrics.port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    total = 0.0
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if (series == name or series.startswith(name + "{")) and all(label in series for label in wanted):
            total += float(value)
    return total


def connect_from(source: str, host: str, port: int, timeout: float = 5.0) -> socket.socket:
    """A TCP connection to ``host:port`` from the loopback address ``source`` (any 127.x.y.z works on
    Linux), so one test can play many client addresses."""
    sock = socket.socket()
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect((host, port))
    return sock


def closed_by_peer(sock: socket.socket, within: float) -> bool:
    """True when the peer closes (or resets) ``sock`` within ``within`` seconds, sending nothing."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


class SlowSender:
    """A thread that declares a request of ``declared`` bytes and sends ``send`` bytes of it as fast as
    the broker reads them, then holds the connection open without completing it."""

    def __init__(self, host: str, port: int, declared: int, send: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.declared, self.send, self.sent = declared, send, 0
        self.closed_by_broker = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-sender", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.sock.settimeout(0.2)
        chunk = bytes(1 << 20)
        pending = memoryview(struct.pack(">i", self.declared) + chunk)
        while not self._stop.is_set() and self.sent < self.send:
            try:
                count = self.sock.send(pending[: self.send - self.sent])
            except TimeoutError:
                continue
            except OSError:
                self.closed_by_broker = True
                return
            self.sent += count
            pending = pending[count:] if count < len(pending) else memoryview(chunk)
        while not self._stop.is_set() and not self.closed_by_broker:  # all sent: hold, watching for a close
            self.closed_by_broker = closed_by_peer(self.sock, 0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sock.close()
