"""Before/after for a broker change: two tidelog source trees, the same loads, alternating rounds.

    git worktree add /tmp/before <commit>                   # the tree before the change
    python bench/ab.py --tree before=/tmp/before/src --tree after=src --loads consume64,produce --rounds 3

Each round starts every tree's broker in turn (``bench/peers.py``, ``PYTHONPATH`` pointing at the
tree's ``src``), fills what the loads read, runs the loads and records each figure with the broker's
CPU seconds for that load alone. Alternating trees within a round spreads the machine's noise over
both; the table shows every round and the median. Loads:

- ``produce``: confluent-kafka, 500,000 x 1 KiB to one partition (workload 1's settings);
- ``produce64``: the same, keyed (10,000 keys) over 64 partitions (workload 4);
- ``raw``: the raw pipelined producer, 500,000 x 1 KiB (the broker's intake ceiling);
- ``consume``: confluent-kafka reads 2,000,000 x 100 B from one partition;
- ``consume-java``: Kafka's ConsumerPerformance reads 500,000 x 1 KiB from one partition (written by
  ProducerPerformance with workload 1's settings);
- ``consume64``: confluent-kafka reads 500,000 x 1 KiB keyed records over 64 partitions (workload 4);
- ``raw-consume``: the raw fetcher (``workloads.py raw-consume``) reads 500,000 x 1 KiB from one
  partition: the broker's read ceiling;
- ``latency``: workload 3's probe for 10 s (2,000 records/s of 200 B, acks=all, linger 0): p50 and
  p99 in ms, and the broker's CPU per record in µs (each record is one Produce and one Fetch).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
import workloads as wl
from compare import PRODUCER_PROPS, create_topics, warm_memory

LOAD_BYTES = 500_000 * 1024  # what each produce load writes


def run_loads(bootstrap: str, loads: list[str], cpu: Callable[[], float], folder: Path) -> dict[str, float]:
    figures: dict[str, float] = {}

    def measure(name: str, run: Callable[[], wl.ToolRun], writes: int = 0) -> None:
        # The fill's writes on disk first: otherwise the load measures their writeback too. A load
        # that writes gets warmed memory, as in compare.py (``warm_memory``: this VM's page faults).
        if writes:
            warm_memory(folder, writes)
        else:
            os.sync()
        before = cpu()
        result = run()
        figures[f"{name} MB/s"] = result.figures["mb_s"]
        figures[f"{name} broker CPU s"] = cpu() - before

    if "produce" in loads:
        create_topics(bootstrap, {"ab-produce": 1})
        measure("produce", lambda: wl.confluent("produce", bootstrap, "ab-produce", count=500_000, size=1024),
                LOAD_BYTES)
    if "produce64" in loads:
        create_topics(bootstrap, {"ab-produce64": 64})
        measure("produce64", lambda: wl.confluent("produce", bootstrap, "ab-produce64", count=500_000, size=1024,
                                                  keys=10_000), LOAD_BYTES)
    if "raw" in loads:
        create_topics(bootstrap, {"ab-raw": 1})
        measure("raw", lambda: wl.raw_produce(bootstrap, "ab-raw", 500_000, 1024), LOAD_BYTES)
    if "consume" in loads:
        create_topics(bootstrap, {"ab-consume": 1})
        wl.confluent("produce", bootstrap, "ab-consume", count=2_000_000, size=100)
        measure("consume", lambda: wl.confluent("consume", bootstrap, "ab-consume", count=2_000_000, size=100))
    if "consume-java" in loads:
        create_topics(bootstrap, {"ab-consume-java": 1})
        # Filled as workload 1 fills it (ProducerPerformance, 1 MiB batches), so that each Fetch
        # carries one ~1 MiB batch, as in compare.py's ConsumerPerformance figure.
        wl.java_produce(peers.kafka_libs(), bootstrap, "ab-consume-java", 500_000, 1024, PRODUCER_PROPS)
        measure("consume-java", lambda: wl.java_consume(peers.kafka_libs(), bootstrap, "ab-consume-java", 500_000, 1024))
    if "consume64" in loads:
        create_topics(bootstrap, {"ab-consume64": 64})
        wl.confluent("produce", bootstrap, "ab-consume64", count=500_000, size=1024, keys=10_000)
        measure("consume64", lambda: wl.confluent("consume", bootstrap, "ab-consume64", count=500_000, size=1024))
    if "raw-consume" in loads:
        create_topics(bootstrap, {"ab-raw-consume": 1})
        wl.confluent("produce", bootstrap, "ab-raw-consume", count=500_000, size=1024)
        measure("raw-consume", lambda: wl.raw_consume(bootstrap, "ab-raw-consume", 500_000))
    if "latency" in loads:
        create_topics(bootstrap, {"ab-latency": 1})
        before = cpu()
        result = wl.confluent("latency", bootstrap, "ab-latency", rate=2000, seconds=10, size=200, linger_ms=0)
        figures["latency p50 ms"] = result.figures["lat_p50_ms"]
        figures["latency p99 ms"] = result.figures["lat_p99_ms"]
        figures["latency broker CPU us/record"] = (cpu() - before) / result.figures["records"] * 1e6
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="LABEL=PATH of a tidelog src directory")
    parser.add_argument("--loads", default="produce,raw,consume,consume64")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = dict(tree.split("=", 1) for tree in args.tree)
    loads = args.loads.split(",")
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
    for number in range(args.rounds):
        for label, src in trees.items():
            subprocess.run(["sync"], check=False)  # start each broker with little dirty page cache
            with tempfile.TemporaryDirectory(prefix="tidelog-ab-", dir="/var/tmp") as tmp:
                broker = peers.start_tidelog(Path(tmp) / "broker", env={"PYTHONPATH": str(Path(src).resolve())})
                try:
                    figures = run_loads(broker.bootstrap, loads, broker.cpu_seconds, Path(tmp))
                finally:
                    broker.stop()
            rounds[label].append(figures)
            print(f"round {number + 1} {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                  file=sys.stderr, flush=True)
    keys = list(next(iter(rounds.values()))[0])
    print("| figure | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for key in keys:
        cells = []
        for label in trees:
            values = [r[key] for r in rounds[label]]
            cells.append(f"**{statistics.median(values):.2f}** ({', '.join(f'{v:.2f}' for v in values)})")
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
