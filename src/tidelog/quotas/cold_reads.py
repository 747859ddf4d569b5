"""Partition-level throttling of cold reads from a page-cache estimate (Guardian's rule): pure rules.

**How long data stays in the page cache.** Per log dir, ``T = available memory / (disk read rate +
disk write rate)``: the page cache takes in what the disk reads and what is written, so at that
inflow a page lives about as long as it takes to fill the memory left. No disk traffic: T is
infinite (nothing is evicted, nothing is cold).

**Cold or hot.** A partition takes in ``MessageInRate`` offsets a second (``OffsetRate``, from its
log end offset over the last few intervals), so the data written within the last T seconds lies at
offsets from ``LEO - MessageInRate * T`` on: a fetch at an offset before that boundary reads data
older than T, which is likely no longer cached, a **cold read** from disk. A fetch at or after it is
hot, served by the cache. A partition taking in nothing has its boundary at the LEO: everything it
holds is old.

**When to throttle** (``DirThrottle``, one per log dir, stepped once per interval): the dir is
*over* when its disk's utilisation is above the threshold, or its mean I/O latency is above the
latency threshold (0: not considered). While over, each interval throttles the next
``partitions_per_step`` partitions of the dir with the most cold-read bytes per second (the
highest-traffic offenders first, only those with cold traffic). It is *recovered* when utilisation
and latency have been below ``recovery_ratio`` times their thresholds for ``recovery_intervals``
intervals in a row (one quiet sample does not flap the throttles); then every throttle of the dir
is lifted at once. In between it holds. Hot reads are never throttled, only a throttled partition's
cold reads, which are held to ``partition_byte_rate`` (0: held entirely) by the broker.

Each throttle carries its reason (for the metrics and the log). Nothing here reads a clock or a file.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]


def cache_horizon_s(available_bytes: float, read_bps: float, write_bps: float) -> float:
    """Guardian's T: seconds a page stays in the page cache at this disk inflow (inf without any)."""
    inflow = max(0.0, read_bps) + max(0.0, write_bps)
    if inflow <= 0:
        return math.inf
    return max(0.0, available_bytes) / inflow


def cold_boundary(log_end_offset: int, messages_in_rate: float, horizon_s: float) -> float:
    """The lowest offset still in the cache: ``LEO - MessageInRate * T`` (-inf when T is infinite)."""
    if math.isinf(horizon_s):
        return -math.inf
    return log_end_offset - max(0.0, messages_in_rate) * horizon_s


def is_cold(fetch_offset: int, log_end_offset: int, messages_in_rate: float, horizon_s: float) -> bool:
    return fetch_offset < cold_boundary(log_end_offset, messages_in_rate, horizon_s)


class OffsetRate:
    """Offsets per second a partition took in, over the last ``span`` samples of its log end offset."""

    __slots__ = ("_samples",)

    def __init__(self, span: int = 10) -> None:
        self._samples: deque[tuple[float, int]] = deque(maxlen=span + 1)

    def sample(self, now_s: float, log_end_offset: int) -> None:
        if self._samples and log_end_offset < self._samples[-1][1]:
            self._samples.clear()  # truncated or recreated: start afresh
        self._samples.append((now_s, log_end_offset))

    def rate(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, o0), (t1, o1) = self._samples[0], self._samples[-1]
        return (o1 - o0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass(frozen=True, slots=True)
class DiskSample:
    """One interval of a log dir's disk: utilisation (0..1, time busy), mean I/O latency (ms), bytes/s."""

    utilisation: float
    latency_ms: float
    read_bps: float
    write_bps: float


@dataclass(frozen=True, slots=True)
class Thresholds:
    utilisation: float = 0.9
    latency_ms: float = 0.0  # 0: latency not considered
    recovery_ratio: float = 0.8
    partitions_per_step: int = 1
    recovery_intervals: int = 3


@dataclass(slots=True)
class DirThrottle:
    """The throttled partitions of one log dir, stepped once per interval."""

    over: bool = False
    reason: str = ""
    calm: int = 0  # consecutive recovered intervals while over
    throttled: dict[TopicPartition, str] = field(default_factory=dict)

    def step(self, disk: DiskSample, cold_bps: Mapping[TopicPartition, float], limits: Thresholds) -> list[str]:
        """One interval: throttle the next offenders while over, lift all once recovered.

        ``cold_bps``: cold-read bytes per second of each partition of the dir over the interval.
        Returns what changed, for the log."""
        why = self._over(disk, limits)
        if why:
            self.over, self.reason, self.calm = True, why, 0
            offenders = sorted(((bps, tp) for tp, bps in cold_bps.items() if bps > 0 and tp not in self.throttled),
                               key=lambda item: (-item[0], item[1]))
            changed = []
            for bps, tp in offenders[:max(1, limits.partitions_per_step)]:
                self.throttled[tp] = f"{why}; cold reads {bps:.0f} B/s"
                changed.append(f"throttling cold reads of {tp[0]}-{tp[1]}: {self.throttled[tp]}")
            return changed
        self.calm = self.calm + 1 if self.over and self._recovered(disk, limits) else 0
        if self.calm >= max(1, limits.recovery_intervals):
            lifted = sorted(self.throttled)
            self.over, self.reason, self.calm = False, "", 0
            self.throttled.clear()
            note = f"recovered (utilisation {disk.utilisation:.2f}, latency {disk.latency_ms:.1f} ms)"
            return [f"{note}: lifted {', '.join(f'{t}-{p}' for t, p in lifted) or 'nothing'}"]
        return []

    @staticmethod
    def _over(disk: DiskSample, limits: Thresholds) -> str:
        if disk.utilisation > limits.utilisation:
            return f"disk utilisation {disk.utilisation:.2f} above {limits.utilisation:.2f}"
        if limits.latency_ms > 0 and disk.latency_ms > limits.latency_ms:
            return f"disk latency {disk.latency_ms:.1f} ms above {limits.latency_ms:.1f} ms"
        return ""

    @staticmethod
    def _recovered(disk: DiskSample, limits: Thresholds) -> bool:
        ratio = limits.recovery_ratio
        if disk.utilisation >= limits.utilisation * ratio:
            return False
        return limits.latency_ms <= 0 or disk.latency_ms < limits.latency_ms * ratio


@dataclass(frozen=True, slots=True)
class DiskCounters:
    """The cumulative counters of one block device in /proc/diskstats."""

    reads: int
    read_sectors: int
    read_ms: int
    writes: int
    write_sectors: int
    write_ms: int
    io_ms: int


def parse_diskstats(text: str, devices: set[str]) -> dict[str, DiskCounters]:
    """The counters of ``devices`` from /proc/diskstats' text (fields 4-13 of the kernel's format)."""
    found = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) > 12 and f[2] in devices:
            found[f[2]] = DiskCounters(int(f[3]), int(f[5]), int(f[6]), int(f[7]), int(f[9]), int(f[10]), int(f[12]))
    return found


def disk_sample(before: DiskCounters, after: DiskCounters, elapsed_s: float) -> DiskSample:
    """The interval between two readings (sectors are 512 bytes, whatever the device's block size)."""
    elapsed_s = max(elapsed_s, 1e-3)
    ios = (after.reads - before.reads) + (after.writes - before.writes)
    io_ms = (after.read_ms - before.read_ms) + (after.write_ms - before.write_ms)
    return DiskSample(
        utilisation=min(1.0, max(0.0, (after.io_ms - before.io_ms) / (elapsed_s * 1000))),
        latency_ms=io_ms / ios if ios > 0 else 0.0,
        read_bps=max(0, after.read_sectors - before.read_sectors) * 512 / elapsed_s,
        write_bps=max(0, after.write_sectors - before.write_sectors) * 512 / elapsed_s,
    )


def mem_available(text: str) -> int | None:
    """MemAvailable from /proc/meminfo's text, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None
