"""Latency histogram percentiles, merging, and the perf summary."""

from __future__ import annotations

import math
import random

import pytest

from tidelog.cli.perf_stats import LatencyHistogram, progress_line, summary


def exact_percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_are_within_one_percent_of_the_exact_ones(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(-6, 1.5) for _ in range(20_000)]  # around 2.5 ms, long tail
    histogram = LatencyHistogram()
    for value in values:
        histogram.record(value)
    for p in (50, 95, 99, 99.9, 100):
        assert histogram.percentile(p) == pytest.approx(exact_percentile(values, p), rel=0.011)
    assert histogram.mean == pytest.approx(sum(values) / len(values))
    assert (histogram.min, histogram.max) == (min(values), max(values))


def test_histograms_from_several_processes_merge_into_the_whole() -> None:
    rng = random.Random(7)
    values = [rng.uniform(0.001, 0.2) for _ in range(5000)]
    whole, parts = LatencyHistogram(), [LatencyHistogram() for _ in range(3)]
    for i, value in enumerate(values):
        whole.record(value)
        parts[i % 3].record(value)
    merged = LatencyHistogram()
    for part in parts:
        merged.merge(LatencyHistogram.from_wire(part.to_wire()))  # as it crosses the process boundary
    assert merged.counts == whole.counts
    assert merged.count == 5000 and merged.max == whole.max and merged.min == whole.min
    assert merged.percentile(99) == whole.percentile(99)


def test_an_empty_histogram_reports_zeros() -> None:
    assert LatencyHistogram().summary_ms() == {"avg": 0, "p50": 0, "p95": 0, "p99": 0, "p99.9": 0, "max": 0}


def test_a_single_sample_is_every_percentile() -> None:
    histogram = LatencyHistogram()
    histogram.record(0.0042)
    assert set(histogram.summary_ms().values()) == {4.2}


def test_summary_rates_use_two_to_the_twenty_bytes_per_mb() -> None:
    histogram = LatencyHistogram()
    histogram.record(0.010)
    report = summary(1000, 2 * 1024 * 1024, 0, 2.0, histogram, processes=2)
    assert report["records_per_sec"] == 500.0
    assert report["mb_per_sec"] == 1.0
    assert report["latency_ms"]["max"] == 10.0
    assert report["processes"] == 2


def test_progress_lines_read_like_kafka_producer_perf_test() -> None:
    window = LatencyHistogram()
    window.record(0.002)
    window.record(0.004)
    assert progress_line(5000, 5000 * 1024 * 1024 // 1000, 1.0, window) == (
        "5000 records sent, 5000.0 records/sec (5.00 MB/sec), 3.0 ms avg latency, 4.0 ms max latency."
    )
