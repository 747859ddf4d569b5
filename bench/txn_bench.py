"""Transactions per second on one broker: tidelog side by side with Apache Kafka.

    python bench/txn_bench.py                          # tidelog, then Kafka, 10 s each
    python bench/txn_bench.py --producers 4 --records 100 --size 1024 --peers tidelog

``producers`` transactional confluent-kafka producers, one thread each (librdkafka does the I/O in
its own threads), each looping: begin, ``records`` records of ``size`` bytes to one partition of a
``partitions``-partition topic (producer ``n`` writes partition ``n % partitions``), commit. The
figure is what a gateway shard or a mirror task does per transaction. Printed per broker: committed
transactions/s, records/s, commit_transaction latency p50/p99 (the call alone: EndTxn and the wait
for the markers), the p50 of the part before it (begin, produce, flush: AddPartitionsToTxn and the
Produce round trips) and the broker's CPU seconds per 1,000 transactions.

Both brokers start with their defaults for one node (``bench/peers.py``): neither fsyncs data.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from peers import Broker, kafka_libs, start_kafka, start_tidelog


def run_producer(bootstrap: str, topic: str, n: int, partitions: int, records: int, size: int,
                 deadline: float, commits: list[float], flushes: list[float] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-txn-{n}",
                         "linger.ms": 1, "queue.buffering.max.kbytes": 262144})
    producer.init_transactions(30)
    value = b"x" * size
    while time.monotonic() < deadline:
        began = time.monotonic()
        producer.begin_transaction()
        for _ in range(records):
            producer.produce(topic, value, partition=n % partitions)
        producer.flush(30)
        started = time.monotonic()
        producer.commit_transaction(30)
        commits.append(time.monotonic() - started)
        if flushes is not None:
            flushes.append(started - began)


def measure(broker: Broker, args: argparse.Namespace) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("txn-bench", args.partitions, 1)])["txn-bench"].result(30)
    # One warm-up transaction per producer id outside the measure: creates __transaction_state.
    warm: list[float] = []
    run_producer(broker.bootstrap, "txn-bench", 999, args.partitions, 1, 1, time.monotonic() + 0.01, warm)
    per_producer: list[list[float]] = [[] for _ in range(args.producers)]
    per_producer_flush: list[list[float]] = [[] for _ in range(args.producers)]
    cpu_before = broker.cpu_seconds()
    start = time.monotonic()
    deadline = start + args.seconds
    threads = [threading.Thread(target=run_producer, args=(broker.bootstrap, "txn-bench", n, args.partitions,
                                                           args.records, args.size, deadline, per_producer[n],
                                                           per_producer_flush[n]))
               for n in range(args.producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    commits = sorted(c for p in per_producer for c in p)
    flushes = sorted(c for p in per_producer_flush for c in p)
    cpu = broker.cpu_seconds() - cpu_before
    return {"txn/s": len(commits) / elapsed, "records/s": len(commits) * args.records / elapsed,
            "commit p50 ms": 1000 * commits[len(commits) // 2] if commits else float("nan"),
            "commit p99 ms": 1000 * commits[min(len(commits) - 1, int(0.99 * len(commits)))] if commits else float("nan"),
            "produce+flush p50 ms": 1000 * flushes[len(flushes) // 2] if flushes else float("nan"),
            "broker CPU s per 1,000 txn": 1000 * cpu / max(1, len(commits))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--peers", default="tidelog,kafka", help="comma-separated: tidelog, kafka")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for name in args.peers.split(","):
            folder = Path(work) / name
            folder.mkdir()
            broker = start_tidelog(folder) if name == "tidelog" else start_kafka(folder, kafka_libs())
            try:
                results[name] = measure(broker, args)
            finally:
                broker.stop()
    names = list(results)
    print(f"{args.producers} transactional producers, {args.records} records of {args.size} B per transaction, "
          f"{args.seconds:.0f} s\n")
    print("| figure | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for figure in next(iter(results.values())):
        print(f"| {figure} | " + " | ".join(f"{results[n][figure]:,.1f}" for n in names) + " |")


if __name__ == "__main__":
    main()
