"""The broker's own share of end-to-end latency: a parked Fetch woken by a Produce, without client libraries.

    python bench/wake_latency.py                                   # tidelog and Kafka, 8,000 rounds each
    python bench/wake_latency.py --only tidelog --gap-ms 2 --rounds 3000
    python bench/wake_latency.py --tidelog-src /tmp/before/src      # another tidelog tree (A/B)

Each broker is started on its own (``bench/peers.py``, default settings as in ``compare.py``) with a
one-partition topic. Two plain sockets: one sends a Fetch (v4, min bytes 1, max wait 500 ms) for the
next offset, which the broker parks; after ``--gap-ms`` the other sends a Produce (v8, acks=all) of
one 200 B record (the requests of ``workloads.py raw-consume`` and ``raw-produce``). The figure is
the time from handing the Produce to the kernel to having the whole Fetch response: the broker
reads the Produce, appends, wakes the Fetch, reads and answers it. Then
the Produce response is read and the next round starts. The first 200 rounds are not counted (JIT
warm-up for Kafka). The requests are encoded before the clock starts; the client is a blocking
socket in one thread, so its own share is two syscalls.

Workload 3 of ``compare.py`` measures the same path through librdkafka at 2,000 records/s (a gap
of 0.5 ms, this script's default). This script takes the client libraries out, so that a change to
the broker's request path shows with less noise, and says how much of the end-to-end figure is the
broker's.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
import workloads as wl
from compare import create_topics

WARM_UP_ROUNDS = 200


def _receive(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


def measure(bootstrap: str, rounds: int, gap_s: float) -> list[float]:
    """µs from sending each Produce to having the woken Fetch's response, after the warm-up rounds."""
    create_topics(bootstrap, {"wake": 1})
    host, port = bootstrap.rsplit(":", 1)
    producer = socket.create_connection((host, int(port)))
    fetcher = socket.create_connection((host, int(port)))
    for sock in (producer, fetcher):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    latencies: list[float] = []
    try:
        for number in range(rounds + WARM_UP_ROUNDS):
            produce = wl.produce_request(number, "wake", wl.record_batch(1, 200), acks=-1)
            fetcher.sendall(wl.fetch_request(number, "wake", [number], wl.MIB, 50 * wl.MIB))
            time.sleep(gap_s)  # the Fetch is parked by now
            started = time.perf_counter()
            producer.sendall(produce)
            answer = _receive(fetcher)
            elapsed = time.perf_counter() - started
            _receive(producer)
            if len(answer) < 200:
                raise RuntimeError(f"round {number}: the Fetch came back without the record ({len(answer)} bytes)")
            if number >= WARM_UP_ROUNDS:
                latencies.append(elapsed * 1e6)
    finally:
        producer.close()
        fetcher.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="tidelog,kafka", help="brokers, comma separated: tidelog,kafka")
    parser.add_argument("--rounds", type=int, default=8000)
    parser.add_argument("--gap-ms", type=float, default=0.5, help="idle time before each Produce (0.5: 2,000/s)")
    parser.add_argument("--tidelog-src", help="the tidelog src directory to run (default: the installed one)")
    args = parser.parse_args()
    print("| broker | p50 µs | p90 µs | p99 µs | mean µs | broker CPU µs/round |")
    print("|---|---|---|---|---|---|")
    for name in args.only.split(","):
        with tempfile.TemporaryDirectory(prefix="wake-", dir="/var/tmp") as tmp:
            if name == "tidelog":
                env = {"PYTHONPATH": str(Path(args.tidelog_src).resolve())} if args.tidelog_src else None
                broker = peers.start_tidelog(Path(tmp) / "broker", env=env)
            else:
                broker = peers.start_kafka(Path(tmp) / "broker", peers.kafka_libs())
            try:
                cpu_before = broker.cpu_seconds()
                latencies = sorted(measure(broker.bootstrap, args.rounds, args.gap_ms / 1000))
                cpu = (broker.cpu_seconds() - cpu_before) / (args.rounds + WARM_UP_ROUNDS) * 1e6
            finally:
                broker.stop()
        count = len(latencies)
        print(f"| {name} | {latencies[count // 2]:.0f} | {latencies[count * 9 // 10]:.0f} | "
              f"{latencies[count * 99 // 100]:.0f} | {statistics.mean(latencies):.0f} | {cpu:.0f} |", flush=True)


if __name__ == "__main__":
    main()
