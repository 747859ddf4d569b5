"""What a segment roll costs the thread that appends (the event loop, for produce): its snapshot fsyncs in it, or not.

    python bench/roll_bench.py [--rolls 200] [--dir /var/tmp]

A ``PartitionLog`` on ``--dir`` (a real disk: on tmpfs an fsync costs nothing) takes one idempotent
1 KB record and is rolled, ``--rolls`` times; each ``roll()`` is timed. Two modes, alternated twice:
without a roll hook (the snapshot written durably in the roll: its file and the partition directory
fsynced, as a roll did before the disk pools took them) and with a hook that takes the sync (as the
broker's disk pools do: the roll writes the snapshot and returns; the fsyncs run on the dir's pool,
not timed here). Prints the median, p99 and worst roll in ms. Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

NOW = 1_700_000_000_000
MODES = ("fsyncs in the roll", "fsyncs handed off")


def run(mode: str, rolls: int, where: str) -> list[float]:
    with tempfile.TemporaryDirectory(dir=where) as folder:
        hook = (lambda plog: True) if mode == MODES[1] else None
        log = PartitionLog(Path(folder) / "t-0", LogConfig(), now_ms=NOW, on_roll_snapshot=hook)
        took = []
        for i in range(rolls):
            batch = build_batch([Record(0, NOW, None, b"x" * 1000)], producer_id=5, producer_epoch=0, base_sequence=i)
            log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
            started = time.perf_counter()
            log.roll(now_ms=NOW)
            took.append((time.perf_counter() - started) * 1000)
        log.close(clean=False)
        return sorted(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rolls", type=int, default=200)
    parser.add_argument("--dir", default="/var/tmp")
    args = parser.parse_args()
    for mode in MODES * 2:
        took = run(mode, args.rolls, args.dir)
        p99 = took[max(0, int(len(took) * 0.99) - 1)]
        print(f"{mode:20s} roll median {statistics.median(took):7.3f} ms   p99 {p99:7.3f} ms   max {took[-1]:7.3f} ms")


if __name__ == "__main__":
    main()
