"""Profile a tidelog broker under one load with py-spy; print where its time goes.

    python bench/profile_broker.py produce --count 500000 --size 1024      # confluent-kafka produce
    python bench/profile_broker.py consume --count 500000 --size 1024      # (fills the topic first)
    python bench/profile_broker.py produce --tool java                      # Kafka's ProducerPerformance
    python bench/profile_broker.py consume --partitions 64 --keys 10000     # workload 4's consume
    python bench/profile_broker.py latency --rate 1000                     # workload 3: 2,000 records/s, 10 s

Starts tidelog (``bench/peers.py``), runs the load while ``py-spy record -f raw`` samples the broker
(``--rate`` Hz, GIL-holding and idle frames both kept: ``--idle``), then prints the functions with
the most samples on top of the stack (self) and anywhere on the stack (total), as shares of all
samples. The raw folded stacks are kept with ``--raw FILE`` (feed them to any flame-graph tool).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
import workloads as wl
from compare import PRODUCER_PROPS, create_topics


def summarise(raw: Path, top: int) -> str:
    self_counts: collections.Counter[str] = collections.Counter()
    total_counts: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].rstrip(")") for f in stack.split(";")]
        samples += count
        self_counts[frames[-1]] += count
        for frame in set(frames):
            total_counts[frame] += count
    lines = [f"{samples} samples"]
    for title, counter in (("self", self_counts), ("total", total_counts)):
        lines.append(f"-- top {top} by {title} --")
        lines += [f"{n / samples:6.1%}  {frame}" for frame, n in counter.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["produce", "consume", "latency"])
    parser.add_argument("--tool", choices=["confluent", "java"], default="confluent")
    parser.add_argument("--count", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=1, help="partitions of the topic (workload 4: 64)")
    parser.add_argument("--keys", type=int, default=0, help="distinct keys of the produced records (workload 4: 10,000)")
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--raw", help="keep py-spy's folded stacks here")
    parser.add_argument("--idle", action="store_true", help="keep idle (waiting) samples too")
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if pyspy is None:
        raise SystemExit("py-spy is needed (pip install py-spy: the bench extra)")
    with tempfile.TemporaryDirectory(prefix="tidelog-profile-", dir="/var/tmp") as tmp:
        broker = peers.start_tidelog(Path(tmp) / "broker")
        try:
            topic = "profile"
            create_topics(broker.bootstrap, {topic: args.partitions})
            if args.mode == "consume":
                wl.confluent("produce", broker.bootstrap, topic, count=args.count, size=args.size, keys=args.keys)
            raw = Path(args.raw) if args.raw else Path(tmp) / "raw.txt"
            command = [pyspy, "record", "-f", "raw", "-r", str(args.rate), "-o", str(raw), "-p", str(broker.pid)]
            if args.idle:
                command.append("--idle")
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            cpu = broker.cpu_seconds()
            if args.mode == "produce" and args.tool == "java":
                run = wl.java_produce(peers.kafka_libs(), broker.bootstrap, topic, args.count, args.size, PRODUCER_PROPS)
            elif args.mode == "latency":
                run = wl.confluent("latency", broker.bootstrap, topic, rate=2000, seconds=10, size=200, linger_ms=0)
            elif args.mode == "produce":
                run = wl.confluent("produce", broker.bootstrap, topic, count=args.count, size=args.size, keys=args.keys)
            elif args.tool == "java":
                run = wl.java_consume(peers.kafka_libs(), broker.bootstrap, topic, args.count, args.size)
            else:
                run = wl.confluent("consume", broker.bootstrap, topic, count=args.count, size=args.size)
            cpu = broker.cpu_seconds() - cpu
            spy.send_signal(2)
            spy.wait(30)
        finally:
            broker.stop()
        if args.mode == "latency":
            print(f"latency 2,000/s x 200 B for 10 s: p50 {run.figures['lat_p50_ms']:.2f} ms, "
                  f"p99 {run.figures['lat_p99_ms']:.2f} ms, broker CPU {cpu:.2f} s")
        else:
            print(f"{args.mode} {args.count:,} x {args.size} B with {run.tool}: {run.figures['mb_s']:.0f} MB/s, "
                  f"broker CPU {cpu:.2f} s, tool {run.client_cores:.2f} cores")
        print(summarise(raw, args.top))


if __name__ == "__main__":
    main()
