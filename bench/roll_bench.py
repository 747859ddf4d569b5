"""What a segment roll costs the thread that appends (the event loop, for produce).

    python bench/roll_bench.py [--rolls 200] [--dir /var/tmp]

A ``PartitionLog`` on ``--dir`` (a real disk: on tmpfs an fsync costs nothing) takes one idempotent
1 KB record and is rolled, ``--rolls`` times. Three modes, alternated twice:

- ``fsyncs in the roll``: ``roll()`` without a hook, the snapshot written durably in the roll (its
  file and the partition directory fsynced), as a roll did before the disk pools;
- ``fsyncs handed off``: ``roll()`` with a hook that takes the fsyncs (the broker's disk pools did
  this before rolls moved off the loop): the roll still makes the new segment's files, writes the
  sealed segment's indexes and the snapshot in the appending thread;
- ``planned, pool makes``: what produce does now (storage/roll_plan.py): ``begin_roll()`` in the
  appending thread (no system call), ``complete_roll()`` on a pool of two threads (the default
  ``tidelog.log.dir.io.threads``; files, indexes),
  awaited, then the snapshot written and fsynced by another job on that pool, not awaited. The
  appending thread's time is ``begin_roll``'s; the partition's wait (its next append waits for
  the roll) is shown as "partition waits".

Prints the median, p99 and worst time the appending thread spent in a roll, in ms. Figures, not
pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

NOW = 1_700_000_000_000
MODES = ("fsyncs in the roll", "fsyncs handed off", "planned, pool makes")


def run(mode: str, rolls: int, where: str, pool: ThreadPoolExecutor) -> tuple[list[float], list[float]]:
    """(appending thread's ms per roll, the partition's wait per roll in ms), each sorted."""
    with tempfile.TemporaryDirectory(dir=where) as folder:
        hook = None if mode == MODES[0] else (lambda plog: True)
        log = PartitionLog(Path(folder) / "t-0", LogConfig(), now_ms=NOW, on_roll_snapshot=hook)
        took, waited = [], []
        for i in range(rolls):
            batch = build_batch([Record(0, NOW, None, b"x" * 1000)], producer_id=5, producer_epoch=0, base_sequence=i)
            log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
            started = time.perf_counter()
            if mode == MODES[2]:
                plan = log.begin_roll(NOW)
                planned = time.perf_counter()
                assert plan is not None
                pool.submit(log.complete_roll, plan, write_snapshot=False).result()
                took.append((planned - started) * 1000)
                pool.submit(log.write_pending_snapshots)  # not awaited, as the broker does
            else:
                log.roll(now_ms=NOW)
                took.append((time.perf_counter() - started) * 1000)
            waited.append((time.perf_counter() - started) * 1000)
        log.close(clean=False)
        return sorted(took), sorted(waited)


def summary(values: list[float]) -> str:
    p99 = values[max(0, int(len(values) * 0.99) - 1)]
    return f"median {statistics.median(values):7.3f} ms   p99 {p99:7.3f} ms   max {values[-1]:7.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rolls", type=int, default=200)
    parser.add_argument("--dir", default="/var/tmp")
    args = parser.parse_args()
    with ThreadPoolExecutor(2, thread_name_prefix="disk") as pool:  # tidelog.log.dir.io.threads
        for mode in MODES * 2:
            took, waited = run(mode, args.rolls, args.dir, pool)
            line = f"{mode:20s} appending thread: {summary(took)}"
            if mode == MODES[2]:
                line += f"   | partition waits: {summary(waited)}"
            print(line)


if __name__ == "__main__":
    main()
