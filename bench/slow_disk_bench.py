"""Slow-request isolation: latency of a healthy log dir's clients while the other dir's reads are slow.

    python bench/slow_disk_bench.py [--delay-ms 200] [--seconds 8] [--scenarios baseline,fault,fault-inline]

One tidelog broker with two log dirs (``data/a``, ``data/b``) and one topic on each. The *slow* topic
(on ``data/b``) holds a backlog that two consumers read from its start, in small fetches; the
*healthy* topic (on ``data/a``) has a paced producer (one 100 B record every 10 ms, acks=all,
linger 0) and a consumer in a group at its tail. Printed per scenario, for the healthy dir's
clients: the producer's ack latency and the end-to-end latency (produce to consume), p50/p99/max in
ms; the records the slow dir's readers got; and *loop stalls*: of the broker's own event-loop lag
samples during the run (``tidelog_event_loop_lag_seconds``, one every 250 ms), those more than
50 ms late. A client's spike with no stall is the machine (the client's or the broker's process not
scheduled), not the broker's loop.

Scenarios (each on a fresh broker):

- ``baseline``: no fault, the disk pools on (the defaults);
- ``fault``: every read of ``data/b`` that returns bytes sleeps ``--delay-ms`` first
  (``tidelog.test.log.dir.read.delay``, the test seam of ``broker/disk_pools.py``), pools on;
- ``fault-inline``: the same fault with ``tidelog.log.dir.io.threads=0``: every read on the event
  loop, as before the pools existed (what the fault does without isolation).

The issue's goal: in ``fault`` the healthy dir's p99 stays within 2x of ``baseline``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from peers import free_port, start_tidelog  # type: ignore[import-not-found]

SHOW_LOG = bool(os.environ.get("SLOW_DISK_BENCH_LOG"))  # print the broker log's tail after each scenario
FAST = {"socket.nagle.disable": True, "topic.metadata.refresh.interval.ms": 1000}


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)


def _place(bootstrap: str, data: Path) -> tuple[str, str]:
    """Two topics, one per dir (each new log goes to the least-loaded dir): (on a, on b)."""
    names = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        _create(bootstrap, name)
    on_b = next(n for n in names if (data / "b" / f"{n}-0").exists())
    on_a = next(n for n in names if n != on_b)
    assert (data / "a" / f"{on_a}-0").exists(), "both topics landed in one dir"
    return on_a, on_b


def _fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, **FAST})
    for _ in range(count):
        producer.produce(topic, b"x" * 1024)
        producer.poll(0)
    assert producer.flush(60) == 0


class SlowReader(threading.Thread):
    """Reads the slow topic from its start in small fetches (many reads of the slow dir), at most
    ~500 records/s, so that without the fault it is still reading when the run ends."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.count = 0
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"slow-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "max.partition.fetch.bytes": 16384,
                                  "fetch.queue.backoff.ms": 0, **FAST})
        self.consumer.assign([TopicPartition(topic, 0, 0)])

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.count += 1
                time.sleep(0.002)  # at most ~500 records/s: without the fault the backlog lasts the run
        self.consumer.close()


class HealthyClients:
    """A paced acks=all producer and a group consumer at the tail of the healthy topic."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acks: list[float] = []
        self.e2e: list[float] = []
        self.measuring = False
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True), threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> None:
        self.threads[1].start()
        assert self.ready.wait(30), "the healthy consumer got no assignment"
        self.threads[0].start()

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0, "acks": "all", **FAST})

        def delivered(err: KafkaError | None, msg: object, sent: float) -> None:
            if err is None and self.measuring:
                self.acks.append((time.perf_counter() - sent) * 1000)

        next_at = time.perf_counter()
        while not self.stop.is_set():
            now = time.perf_counter()
            producer.produce(self.topic, struct.pack(">d", time.time()) + b"h" * 92,
                             on_delivery=lambda err, msg, sent=now: delivered(err, msg, sent))
            producer.poll(0)
            next_at += 0.01
            while (left := next_at - time.perf_counter()) > 0:
                producer.poll(left)  # delivery callbacks as they come, so ack times are not rounded up
        producer.flush(10)

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"healthy-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "latest", "fetch.wait.max.ms": 100, **FAST})
        consumer.subscribe([self.topic], on_assign=lambda c, parts: self.ready.set())
        while not self.stop.is_set():
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None and self.measuring:
                self.e2e.append((time.time() - struct.unpack(">d", msg.value()[:8])[0]) * 1000)
        consumer.close()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(15)


def _stalls(metrics_port: int) -> tuple[float, float]:
    """The broker's own loop-lag samples (one per 250 ms): (all, those later than 50 ms)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    total = under = 0.0
    for line in text.splitlines():
        if line.startswith("tidelog_event_loop_lag_seconds_count"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith('tidelog_event_loop_lag_seconds_bucket{le="0.05"}'):
            under = float(line.rsplit(" ", 1)[1])
    return total, total - under


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_scenario(name: str, delay_ms: int, seconds: float, backlog: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        workdir = Path(tmp)
        data = workdir / "data"
        metrics_port = free_port()
        overrides = {"log.dirs": f"{data / 'a'},{data / 'b'}", "metrics.port": str(metrics_port)}
        if name.startswith("fault"):
            overrides["tidelog.test.log.dir.read.delay"] = f"{data / 'b'}:{delay_ms}"
        if name == "fault-inline":
            overrides["tidelog.log.dir.io.threads"] = "0"
        broker = start_tidelog(workdir, overrides)
        try:
            bootstrap = f"127.0.0.1:{broker.port}"
            healthy_topic, slow_topic = _place(bootstrap, data)
            _fill(bootstrap, slow_topic, backlog)
            healthy = HealthyClients(bootstrap, healthy_topic)
            readers = [SlowReader(bootstrap, slow_topic) for _ in range(2)]
            try:
                healthy.start()
                for reader in readers:
                    reader.start()
                time.sleep(2.0)  # warm-up: assignments settle, the slow dir gets marked
                healthy.measuring = True
                read_before = sum(r.count for r in readers)
                lag_before = _stalls(metrics_port)
                time.sleep(seconds)
                healthy.measuring = False
                read = sum(r.count for r in readers) - read_before
                lag_after = _stalls(metrics_port)
            finally:
                for reader in readers:
                    reader.stop.set()
                healthy.close()
                for reader in readers:
                    reader.join(15)
        finally:
            broker.stop()
            if SHOW_LOG:
                print(broker.log_path.read_text()[-4000:])
    return {
        "ack_p50": statistics.median(healthy.acks) if healthy.acks else float("nan"),
        "ack_p99": _pct(healthy.acks, 0.99), "ack_max": max(healthy.acks, default=float("nan")),
        "e2e_p50": statistics.median(healthy.e2e) if healthy.e2e else float("nan"),
        "e2e_p99": _pct(healthy.e2e, 0.99), "e2e_max": max(healthy.e2e, default=float("nan")),
        "samples": float(len(healthy.e2e)), "slow_read_per_s": read / seconds,
        "stalls": lag_after[1] - lag_before[1], "lag_samples": lag_after[0] - lag_before[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay-ms", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--backlog", type=int, default=20_000, help="1 KiB records on the slow topic")
    parser.add_argument("--scenarios", default="baseline,fault,fault-inline")
    args = parser.parse_args()
    print(f"healthy dir's clients, ms (delay {args.delay_ms} ms on the slow dir's reads, {args.seconds:.0f} s each)")
    print(f"{'scenario':14s} {'ack p50':>8s} {'ack p99':>8s} {'ack max':>8s} {'e2e p50':>8s} {'e2e p99':>8s} {'e2e max':>8s} {'samples':>8s} {'slow-dir rec/s':>15s} {'loop stalls':>12s}")
    results = {}
    for name in args.scenarios.split(","):
        r = results[name] = run_scenario(name, args.delay_ms, args.seconds, args.backlog)
        print(f"{name:14s} {r['ack_p50']:8.1f} {r['ack_p99']:8.1f} {r['ack_max']:8.1f} {r['e2e_p50']:8.1f} "
              f"{r['e2e_p99']:8.1f} {r['e2e_max']:8.1f} {r['samples']:8.0f} {r['slow_read_per_s']:15.0f} "
              f"{r['stalls']:5.0f} of {r['lag_samples']:<3.0f}", flush=True)
    if "baseline" in results and "fault" in results:
        ratio = results["fault"]["e2e_p99"] / results["baseline"]["e2e_p99"]
        print(f"fault / baseline e2e p99: {ratio:.2f}x (goal: within 2x)")


if __name__ == "__main__":
    main()
