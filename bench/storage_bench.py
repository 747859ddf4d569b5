"""Storage figures: append and read throughput, recovery time, next to the disk's own write speed.

Not a test: it prints numbers. Usage::

    python bench/storage_bench.py [--dir DIR] [--gib 1.0]

Everything is measured in the same run on the same file system (``--dir``, default the current
directory): a plain sequential buffered write loop (``os.write`` of the same sizes and the same total,
no fsync, alternated with the append runs three times, best run of each kept, with ``sync`` between runs so each
starts with a clean page cache) is the reference the append figures are compared to. Records are 1 KiB; batches are uncompressed v2 batches
of 16 KiB and 1 MiB built once and appended again and again (the log rewrites their offsets).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log import PartitionLog
from tidelog.storage.log_config import LogConfig

NOW = int(time.time() * 1000)
MIB = 1024 * 1024
ROUNDS = 3


def make_batch(batch_bytes: int) -> bytes:
    count = max(1, batch_bytes // 1024)
    return build_batch([Record(i, NOW, b"key-%06d" % i, os.urandom(1000)) for i in range(count)])


def plain_write(directory: Path, chunk: int, total: int) -> float:
    """MB/s of a sequential buffered write loop of ``chunk``-byte writes (the disk reference)."""
    data = os.urandom(chunk)
    path = directory / "plain.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    written = 0
    while written < total:
        written += os.write(fd, data)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return written / elapsed / 1e6


def append_run(directory: Path, batch: bytes, total: int) -> tuple[float, float, PartitionLog]:
    """(MB/s, batches/s) of append_as_leader into a fresh log."""
    log = PartitionLog(directory / f"bench-{len(batch)}", LogConfig(segment_bytes=1 << 30), now_ms=NOW)
    count = max(1, total // len(batch))
    start = time.perf_counter()
    for _ in range(count):
        log.append_as_leader(batch, leader_epoch=0, now_ms=NOW)
    elapsed = time.perf_counter() - start
    return count * len(batch) / elapsed / 1e6, count / elapsed, log


def read_run(log: PartitionLog, max_bytes: int) -> float:
    """MB/s of sequential fetches of ``max_bytes`` through FetchData.read_bytes()."""
    offset, done = log.log_start_offset, 0
    start = time.perf_counter()
    while offset < log.log_end_offset:
        fetch = log.read(offset, max_bytes)
        done += len(fetch.read_bytes())
        offset = fetch.end_offset
    return done / (time.perf_counter() - start) / 1e6


def recovery_run(log: PartitionLog) -> tuple[float, int]:
    """Seconds to reopen ``log`` after an unclean shutdown (every segment scanned, CRCs checked)."""
    path, size = log.dir, log.size_bytes
    log.close(clean=False)
    start = time.perf_counter()
    reopened = PartitionLog(path, LogConfig(segment_bytes=1 << 30), clean_shutdown=False, now_ms=NOW)
    elapsed = time.perf_counter() - start
    assert reopened.recovered_unclean and reopened.size_bytes == size
    reopened.close(clean=False)
    return elapsed, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where to write (same disk for all runs)")
    parser.add_argument("--gib", type=float, default=1.0, help="GiB written per 1 MiB-batch run")
    args = parser.parse_args()
    total = int(args.gib * 1024 * MIB)
    work = Path(tempfile.mkdtemp(prefix="tidelog-bench-", dir=args.dir))
    try:
        print(f"directory {work}, {total / MIB:.0f} MiB per 1 MiB-batch run, {total / 4 / MIB:.0f} MiB per 16 KiB run")
        for label, size, amount in (("16 KiB", 16 * 1024, total // 4), ("1 MiB", MIB, total)):
            batch = make_batch(size)
            plain_runs: list[float] = []
            append_runs: list[tuple[float, float]] = []
            log: PartitionLog | None = None
            for _ in range(ROUNDS):
                if log is not None:
                    log.close(clean=False)
                    shutil.rmtree(log.dir)
                os.sync()
                plain_runs.append(plain_write(work, len(batch), amount))
                os.sync()
                mbps, per_s, log = append_run(work, batch, amount)
                append_runs.append((mbps, per_s))
            assert log is not None
            disk = max(plain_runs)
            mbps, per_s = max(append_runs)
            print(f"append {label} batches: {mbps:8.1f} MB/s ({per_s:8.0f} batches/s, {per_s * (size // 1024):9.0f} records/s)"
                  f"   plain write same size: {disk:8.1f} MB/s   ratio {mbps / disk:5.2f}"
                  f"   (best of {ROUNDS}; plain {', '.join(f'{r:.0f}' for r in plain_runs)};"
                  f" append {', '.join(f'{r:.0f}' for r, _ in append_runs)})")
            if size == MIB:
                print(f"read 1 MiB fetches: {read_run(log, MIB):8.1f} MB/s")
                seconds, bytes_ = recovery_run(log)
                print(f"recovery of {bytes_ / (1 << 30):.2f} GiB after unclean shutdown: {seconds:6.2f} s")
            else:
                print(f"read 1 MiB fetches over 16 KiB batches: {read_run(log, MIB):8.1f} MB/s")
                log.close(clean=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
