"""The storage read path alone: how long ``PartitionLog.read`` takes to plan a 1 MiB fetch.

    python bench/read_path_bench.py [--mib 256]

For logs of small (270 B), medium (16 KiB) and large (200 KiB) batches, reads the whole log in
fetches of 1 MiB with ``PartitionLog.read`` (no record bytes are read, as with sendfile) and prints
the time to plan one fetch (find its start from the offset index, find where the whole batches
under the limit end), best of 3 passes. Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

NOW = int(time.time() * 1000)
SHAPES = ((1, 200), (16, 1024), (200, 1024))  # (records per batch, record size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="log size per shape")
    parser.add_argument("--dir", default="/var/tmp")
    args = parser.parse_args()
    for records, size in SHAPES:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            log = PartitionLog(Path(tmp) / "t-0", LogConfig(), now_ms=NOW)
            batch = build_batch([Record(i, NOW, None, b"x" * size) for i in range(records)])
            for _ in range(max(1, (args.mib << 20) // len(batch))):
                log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
            end = log.log_end_offset
            best, fetches = float("inf"), 0
            for _ in range(3):
                started, fetches, offset = time.perf_counter(), 0, 0
                while offset < end:
                    offset = log.read(offset, 1 << 20).end_offset
                    fetches += 1
                best = min(best, time.perf_counter() - started)
            print(f"batches of {len(batch):>7,} B: {fetches} fetches of 1 MiB, {best / fetches * 1e6:8.1f} µs per fetch")
            log.close(clean=True)


if __name__ == "__main__":
    main()
