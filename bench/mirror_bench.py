"""tidelog mirror's footprint: peak RSS and throughput of one mirror process over many partitions.

Not a test: it prints numbers. Two tidelog brokers run as subprocesses (tests/helpers) on free ports
in a temporary folder; the source topic gets ``--partitions`` partitions with ``--per-partition``
records of ``--size`` bytes each; one ``tidelog mirror run`` process (budget ``--budget-mib``) copies
them, its RSS sampled every 0.2 s, until every partition's checkpoint is at the source's end.
Usage::

    python bench/mirror_bench.py [--partitions 10000] [--per-partition 10] [--size 1024] [--budget-mib 64]

Printed: partitions, records, peak RSS (MiB), seconds from the mirror's start to caught up (including
its start-up and the creation of the destination topic), and records/s and MB/s over that time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess
from helpers.mirror_run import create_wide_topic, fill_partitions, footprint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--per-partition", type=int, default=10)
    parser.add_argument("--size", type=int, default=1024, help="value bytes per record")
    parser.add_argument("--budget-mib", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as folder:
        work = Path(folder)
        with BrokerProcess(work / "a", GROUP_TEST_BROKER) as a, BrokerProcess(work / "b", GROUP_TEST_BROKER) as b:
            started = time.monotonic()
            topic = create_wide_topic(a.bootstrap, "bench-wide", args.partitions, timeout=600)
            records = fill_partitions(a.bootstrap, topic, args.partitions, args.per_partition, args.size)
            print(f"source ready: {records} records over {args.partitions} partitions in "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            peak, seconds = footprint(a.bootstrap, b.bootstrap, work, topic=topic, partitions=args.partitions,
                                      records=records, budget_bytes=args.budget_mib << 20, timeout=1800)
    volume = records * args.size
    print(f"partitions={args.partitions} records={records} size={args.size} budget={args.budget_mib}MiB "
          f"peak_rss={peak:.0f}MiB seconds={seconds:.1f} records/s={records / seconds:.0f} "
          f"MB/s={volume / seconds / 1e6:.2f}")


if __name__ == "__main__":
    main()
