"""Guardian's page-cache rule: the cache horizon, cold offsets, and which partitions a busy dir throttles."""

from __future__ import annotations

import math

import pytest

from tidelog.quotas.cold_reads import (
    DirThrottle,
    DiskCounters,
    DiskSample,
    OffsetRate,
    Thresholds,
    cache_horizon_s,
    cold_boundary,
    disk_sample,
    is_cold,
    mem_available,
    parse_diskstats,
)

BUSY = DiskSample(utilisation=0.97, latency_ms=3.0, read_bps=50e6, write_bps=10e6)
CALM = DiskSample(utilisation=0.10, latency_ms=1.0, read_bps=1e6, write_bps=1e6)
MIDDLE = DiskSample(utilisation=0.85, latency_ms=1.0, read_bps=1e6, write_bps=1e6)


def test_cache_horizon_is_available_memory_over_disk_inflow() -> None:
    assert cache_horizon_s(8e9, 60e6, 20e6) == pytest.approx(100.0)
    assert cache_horizon_s(8e9, 0, 0) == math.inf, "no inflow: nothing is ever evicted"


@pytest.mark.parametrize(("offset", "cold"), [(0, True), (8_999, True), (9_000, False), (9_999, False)])
def test_reads_behind_the_rate_times_horizon_are_cold(offset: int, cold: bool) -> None:
    # LEO 10 000, 100 messages/s, a 10 s horizon: the last 1000 offsets are cached
    assert cold_boundary(10_000, 100.0, 10.0) == 9_000
    assert is_cold(offset, 10_000, 100.0, 10.0) is cold


def test_an_idle_partition_is_all_cold_and_an_infinite_horizon_nothing_cold() -> None:
    assert is_cold(9_999, 10_000, 0.0, 10.0)
    assert not is_cold(0, 10_000, 100.0, math.inf)


def test_offset_rate_spans_its_samples_and_restarts_after_truncation() -> None:
    rate = OffsetRate(span=3)
    for second, leo in enumerate((0, 100, 300, 600, 1000)):
        rate.sample(float(second), leo)
    assert rate.rate() == pytest.approx((1000 - 100) / 3), "only the last span of 3 intervals"
    rate.sample(5.0, 10)
    assert rate.rate() == 0.0


def test_a_busy_dir_throttles_the_heaviest_cold_reader_first_then_the_next() -> None:
    dir_ = DirThrottle()
    cold = {("a", 0): 5e6, ("b", 0): 20e6, ("c", 0): 0.0}
    changes = dir_.step(BUSY, cold, Thresholds())
    assert list(dir_.throttled) == [("b", 0)]
    assert "utilisation 0.97 above 0.90" in changes[0] and "b-0" in changes[0]
    dir_.step(BUSY, cold, Thresholds())
    assert set(dir_.throttled) == {("a", 0), ("b", 0)}
    dir_.step(BUSY, cold, Thresholds())
    assert ("c", 0) not in dir_.throttled, "no cold traffic: not an offender"


def test_throttles_hold_between_thresholds_and_lift_together_on_recovery() -> None:
    dir_ = DirThrottle()
    dir_.step(BUSY, {("a", 0): 1e6, ("b", 0): 2e6}, Thresholds(partitions_per_step=2))
    assert len(dir_.throttled) == 2
    assert dir_.step(MIDDLE, {}, Thresholds()) == [] and len(dir_.throttled) == 2
    assert dir_.step(CALM, {}, Thresholds()) == dir_.step(CALM, {}, Thresholds()) == [], "not yet three calm intervals"
    (note,) = dir_.step(CALM, {}, Thresholds())
    assert dir_.throttled == {} and not dir_.over
    assert note.startswith("recovered") and "a-0, b-0" in note


def test_a_busy_interval_restarts_the_count_of_calm_ones() -> None:
    dir_ = DirThrottle()
    dir_.step(BUSY, {("a", 0): 1e6}, Thresholds())
    dir_.step(CALM, {}, Thresholds())
    dir_.step(CALM, {}, Thresholds())
    dir_.step(BUSY, {}, Thresholds())
    for _ in range(2):
        assert dir_.step(CALM, {}, Thresholds()) == []
    assert dir_.throttled == {("a", 0): "disk utilisation 0.97 above 0.90; cold reads 1000000 B/s"}
    assert dir_.step(CALM, {}, Thresholds())[0].startswith("recovered")


def test_latency_threshold_counts_only_when_set() -> None:
    slow = DiskSample(utilisation=0.2, latency_ms=80.0, read_bps=0, write_bps=0)
    assert DirThrottle().step(slow, {("a", 0): 1.0}, Thresholds()) == []
    dir_ = DirThrottle()
    (change,) = dir_.step(slow, {("a", 0): 1.0}, Thresholds(latency_ms=50.0))
    assert "latency 80.0 ms above 50.0 ms" in change
    assert dir_.step(DiskSample(0.2, 45.0, 0, 0), {}, Thresholds(latency_ms=50.0)) == [], "45 ms is not below 0.8 x 50"


def test_diskstats_and_meminfo_are_read_as_the_kernel_writes_them() -> None:
    text = ("   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
            " 254       0 vda 1000 5 20000 300 2000 7 40000 700 0 900 1000 0 0 0 0 0 0\n")
    (vda,) = parse_diskstats(text, {"vda"}).values()
    assert vda == DiskCounters(1000, 20000, 300, 2000, 40000, 700, 900)
    later = DiskCounters(1100, 22048, 330, 2100, 42048, 770, 1400)
    sample = disk_sample(vda, later, 0.5)
    assert sample.utilisation == pytest.approx(1.0)
    assert sample.latency_ms == pytest.approx(100 / 200)
    assert sample.read_bps == pytest.approx(2048 * 512 / 0.5)
    assert mem_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2048 * 1024
