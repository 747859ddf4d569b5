"""What checking the records' offset deltas costs a compressed batch kept as sent, per shape and codec.

    python bench/inner_offsets_bench.py [--repeat 20]

A compressed producer batch on a topic that keeps it as sent (``compression.type=producer``) is
inflated on a worker thread. Before the check it was only counted (``inflated_records_size``); now
each record's offset delta is read as it inflates (``inner_offset_errors``). Prints both, best of 5
rounds of ``--repeat`` calls, in µs per batch, and the difference per record. Figures, not pass/fail;
the codec's own cost is in both columns.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from tidelog.protocol.compression import Compression
from tidelog.protocol.records import Record, build_batch, inflated_records_size, inner_offset_errors

NOW = 1_700_000_000_000
CAP = 2 << 20
# (label, records, value size, codec): a producer's 16 KiB batch, a 64 KiB one, 1 MiB ones
SHAPES = [
    ("16 KiB of 100 B, lz4", 160, 100, Compression.LZ4),
    ("16 KiB of 100 B, zstd", 160, 100, Compression.ZSTD),
    ("64 KiB of 200 B, gzip", 320, 200, Compression.GZIP),
    ("64 KiB of 200 B, snappy", 320, 200, Compression.SNAPPY),
    ("1 MiB of 1 KiB, lz4", 1000, 1000, Compression.LZ4),
    ("1 MiB of 100 B, zstd", 9000, 100, Compression.ZSTD),
]


def batch(count: int, size: int, codec: Compression) -> memoryview:
    # half random-looking text, half repeated: compresses about as much as JSON does
    records = [Record(i, NOW + i, b"key-%d" % i, (b"%x" % (i * 7919)) * (size // 12) + b"a" * (size // 2))
               for i in range(count)]
    return memoryview(build_batch(records, compression=codec))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    repeat: int = parser.parse_args().repeat
    print(f"{'shape':26} {'bytes':>8} {'count only':>11} {'check':>9} {'per record':>11}")
    for label, count, size, codec in SHAPES:
        data = batch(count, size, codec)

        def best(work: Callable[[], object]) -> float:
            return min(timeit.repeat(work, number=repeat, repeat=5)) / repeat * 1e6

        counted = best(lambda: inflated_records_size(data, max_inflated=CAP))  # noqa: B023
        checked = best(lambda: inner_offset_errors(data, max_inflated=CAP))  # noqa: B023
        print(f"{label:26} {len(data):8} {counted:9.1f}us {checked:7.1f}us {(checked - counted) / count * 1000:8.0f} ns")


if __name__ == "__main__":
    main()
