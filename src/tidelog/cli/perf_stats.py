"""Latency and throughput arithmetic of the perf tools (pure; shared by the worker processes).

``LatencyHistogram`` keeps counts in logarithmic buckets 1 % wide (from 1 µs up), so a percentile is
within 1 % of the true value whatever the number of samples, memory stays a few kB, and histograms
from several processes merge by adding counts. Min, max, sum and count are exact.

Throughput follows kafka-producer-perf-test: MB means 2^20 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PRECISION = 0.01
_LOG_BASE = math.log1p(PRECISION)
_FLOOR_S = 1e-6  # values below one microsecond share the first bucket
MB = 1024 * 1024
PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p99.9", 99.9))


@dataclass
class LatencyHistogram:
    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0
    total: float = 0.0
    min: float = math.inf
    max: float = 0.0

    @staticmethod
    def bucket(seconds: float) -> int:
        return max(0, int(math.log(max(seconds, _FLOOR_S) / _FLOOR_S) / _LOG_BASE))

    @staticmethod
    def bucket_value(index: int) -> float:
        """The upper bound of a bucket, in seconds."""
        return float(_FLOOR_S * math.exp((index + 1) * _LOG_BASE))

    def record(self, seconds: float) -> None:
        index = self.bucket(seconds)
        self.counts[index] = self.counts.get(index, 0) + 1
        self.count += 1
        self.total += seconds
        self.min = min(self.min, seconds)
        self.max = max(self.max, seconds)

    def merge(self, other: LatencyHistogram) -> None:
        for index, n in other.counts.items():
            self.counts[index] = self.counts.get(index, 0) + n
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def percentile(self, p: float) -> float:
        """The smallest recorded value such that ``p`` % of the samples are at or below it (to 1 %)."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(p / 100 * self.count))
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return min(max(self.bucket_value(index), self.min), self.max)
        return self.max

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def summary_ms(self) -> dict[str, float]:
        """avg, p50, p95, p99, p99.9 and max in milliseconds, rounded to µs."""
        out = {"avg": self.mean}
        out.update({name: self.percentile(p) for name, p in PERCENTILES})
        out["max"] = self.max if self.count else 0.0
        return {name: round(value * 1000, 3) for name, value in out.items()}

    def to_wire(self) -> dict[str, Any]:
        return {"counts": self.counts, "count": self.count, "total": self.total, "min": self.min, "max": self.max}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> LatencyHistogram:
        return cls({int(k): int(v) for k, v in data["counts"].items()}, int(data["count"]), float(data["total"]),
                   float(data["min"]), float(data["max"]))


def summary(records: int, nbytes: int, errors: int, elapsed_s: float, latency: LatencyHistogram, **extra: Any) -> dict[str, Any]:
    """The final report of a perf run (what ``--json`` prints)."""
    elapsed = max(elapsed_s, 1e-9)
    return {
        "records": records,
        "bytes": nbytes,
        "errors": errors,
        "duration_s": round(elapsed_s, 3),
        "records_per_sec": round(records / elapsed, 1),
        "mb_per_sec": round(nbytes / MB / elapsed, 3),
        "latency_ms": latency.summary_ms(),
        **extra,
    }


def progress_line(records: int, nbytes: int, elapsed_s: float, window: LatencyHistogram, verb: str = "sent") -> str:
    """kafka-producer-perf-test's periodic line."""
    elapsed = max(elapsed_s, 1e-9)
    return (f"{records} records {verb}, {records / elapsed:.1f} records/sec ({nbytes / MB / elapsed:.2f} MB/sec), "
            f"{window.mean * 1000:.1f} ms avg latency, {window.max * 1000:.1f} ms max latency.")
