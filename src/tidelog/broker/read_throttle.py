"""The broker's side of cold-read throttling (``quotas/cold_reads.py``: Guardian's page-cache rule).

Once per ``tidelog.read.throttle.interval.ms`` (``tick``) the broker measures, per log dir:

- available memory: ``MemAvailable`` of ``<procfs>/meminfo`` (the page cache is the machine's, so
  every dir sees the same memory);
- its disk's read and write rates, utilisation (share of the interval busy, ``io_ticks``) and mean
  I/O latency, from ``<procfs>/diskstats`` for the block device holding the dir. The device's own
  counters, not the broker's bytes, are what fills the page cache: disk reads are cache misses
  (including other processes' and the cleaner's), disk writes are the write-back of appends. A dir
  whose device is not found (no /sys/dev/block entry) is never throttled;
- ``T = available / (read + write rate)`` (``tidelog_read_cache_horizon_seconds{dir}``);
- each partition's ``MessageInRate``: its log end offset over the last ten intervals.

A consumer's fetch (never a follower's) of a partition is **cold** when its offset is below
``LEO - MessageInRate * T``, decided once per read (``estimate``, with the log end offset before the
read) and handed to the throttle, the disk pools and the count of bytes served. Cold bytes served are counted per partition; the dir's ``DirThrottle``
picks the heaviest cold readers while the dir is over its threshold, and lifts them once it
recovers. A throttled partition's cold reads are held (the partition answered with no records,
its offsets intact, so the fetch long-polls like one with nothing new) while its cold-read rate is
above ``tidelog.read.throttle.partition.bytes.per.sec`` (0: held entirely); its hot reads, and
every other partition, are served as before. Nothing here mutes a connection: the throttle is per
partition, not per client.

With ``tidelog.read.throttle.residency.check.enable`` each consumer read is checked, before it
touches the file, with ``mincore(2)`` (the segment's pages mapped, not read; Linux) over the first
64 KiB from the fetch offset's index entry, and counted against the estimate (resident: at least half
the pages cached): ``tidelog_read_residency_checks_total{estimate,resident}``.

``tidelog.read.throttle.procfs.path`` is where meminfo and diskstats are read: ``/proc``, or a
directory of files written by a test to stand for a disk in any state.

Metrics: ``tidelog_read_cache_horizon_seconds{dir}``, ``tidelog_read_disk_utilisation{dir}``,
``tidelog_read_disk_latency_ms{dir}``, ``tidelog_read_throttle_over{dir}`` (1 while over),
``tidelog_read_throttled{dir,topic,partition,reason}`` (1 while throttled, with why),
``tidelog_read_bytes_total{dir,temperature}`` (cold or hot), ``tidelog_read_throttle_held_total{topic,partition}``.
"""

from __future__ import annotations

import asyncio
import bisect
import ctypes
import ctypes.util
import logging
import math
import mmap
import pathlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tidelog.broker.tier_runtime import device_of
from tidelog.common.config import BrokerConfig
from tidelog.observability.registry import Registry
from tidelog.quotas.cold_reads import (
    DirThrottle,
    DiskCounters,
    OffsetRate,
    Thresholds,
    TopicPartition,
    cache_horizon_s,
    disk_sample,
    is_cold,
    mem_available,
    parse_diskstats,
)
from tidelog.quotas.rate import SampledRate
from tidelog.storage.log import FetchData, PartitionLog
from tidelog.storage.manager import LogManager

log = logging.getLogger(__name__)

RATE_SPAN = 10  # intervals a partition's MessageInRate is measured over


@dataclass(slots=True)
class _Dir:
    path: pathlib.Path
    device: str | None
    counters: DiskCounters | None = None
    horizon_s: float = math.inf
    throttle: DirThrottle = field(default_factory=DirThrottle)
    published: dict[TopicPartition, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadEstimate:
    """One consumer read against the page-cache estimate: its log dir and whether it is cold."""

    where: _Dir
    cold: bool


class ReadThrottleRuntime:
    def __init__(self, config: BrokerConfig, logs: LogManager, registry: Registry) -> None:
        self.config = config
        self.logs = logs
        self._dirs: dict[pathlib.Path, _Dir] = {}
        self._offset_rates: dict[TopicPartition, OffsetRate] = {}
        self._cold_bytes: dict[TopicPartition, int] = {}
        self._limits: dict[TopicPartition, SampledRate] = {}
        self._last_tick = time.monotonic()
        r = registry
        self.m_horizon = r.gauge("tidelog_read_cache_horizon_seconds", "Estimated seconds a page stays in the page cache (MemAvailable / disk read+write rate).", ("dir",))
        self.m_util = r.gauge("tidelog_read_disk_utilisation", "Share of the last interval the log dir's disk was busy.", ("dir",))
        self.m_latency = r.gauge("tidelog_read_disk_latency_ms", "Mean I/O latency of the log dir's disk over the last interval.", ("dir",))
        self.m_over = r.gauge("tidelog_read_throttle_over", "1 while the log dir's disk is over its threshold.", ("dir",))
        self.m_throttled = r.gauge("tidelog_read_throttled", "1 while a partition's cold reads are throttled, labelled with why.", ("dir", "topic", "partition", "reason"))
        self.m_bytes = r.counter("tidelog_read_bytes_total", "Bytes served to consumers, by whether the estimate called them cold or hot.", ("dir", "temperature"))
        self.m_held = r.counter("tidelog_read_throttle_held_total", "Cold reads held back by a partition's throttle.", ("topic", "partition"))
        self.m_residency = r.counter("tidelog_read_residency_checks_total", "Reads checked with mincore: the estimate against the page cache.", ("estimate", "resident"))

    # -- the fetch path -----------------------------------------------------------------------

    def _state(self, tp: TopicPartition) -> _Dir | None:
        path = self.logs.log_dir_of(*tp)
        return None if path is None else self._dirs.get(path)

    def estimate(self, tp: TopicPartition, fetch_offset: int, log_end_offset: int) -> ReadEstimate | None:
        """Where a consumer's read at ``fetch_offset`` stands in the page-cache estimate; None when
        the partition's dir is not measured (never cold, never counted). Made once per read: the
        throttle (``held``), the disk pool's choice (disk_pools.py) and the count of the bytes
        served (``served``) all take this one."""
        path = self.logs.log_dir_of(*tp)
        state = None if path is None else self._dirs.get(path)
        if state is None:
            return None
        rate = self._offset_rates.get(tp)
        return ReadEstimate(state, is_cold(fetch_offset, log_end_offset, rate.rate() if rate else 0.0, state.horizon_s))

    def held(self, tp: TopicPartition, pl: PartitionLog, fetch_offset: int, estimate: ReadEstimate | None) -> bool:
        """Before a consumer's read: True when it is a cold read of a throttled partition over its rate."""
        if estimate is None:
            return False
        cold = estimate.cold
        if fetch_offset < pl.log_end_offset and self.config.get("tidelog.read.throttle.residency.check.enable"):
            fraction = _residency_at(pl, fetch_offset)
            if fraction is not None:
                self.m_residency.inc(("cold" if cold else "hot", "yes" if fraction >= 0.5 else "no"))
        if not cold or tp not in estimate.where.throttle.throttled:
            return False
        allowed = self.config.get_int("tidelog.read.throttle.partition.bytes.per.sec")
        limit = self._limits.get(tp)
        if allowed > 0 and (limit is None or limit.rate(self._now_ms()) <= allowed):
            return False
        self.m_held.inc((tp[0], str(tp[1])))
        return True

    def served(self, tp: TopicPartition, estimate: ReadEstimate | None, data: FetchData) -> None:
        """After a consumer's read of ``data``: count it cold or hot, as its estimate said."""
        if estimate is None or not data.ranges:
            return
        size = data.size
        state = estimate.where
        self.m_bytes.inc((str(state.path), "cold" if estimate.cold else "hot"), size)
        if estimate.cold:
            self._cold_bytes[tp] = self._cold_bytes.get(tp, 0) + size
            if tp in state.throttle.throttled:
                now = self._now_ms()
                limit = self._limits.get(tp)
                if limit is None:
                    limit = self._limits[tp] = SampledRate(11, 1000, now)
                limit.record(size, now)

    @staticmethod
    def _now_ms() -> int:
        return time.monotonic_ns() // 1_000_000

    # -- once per interval --------------------------------------------------------------------

    async def run(self, log_dirs: Sequence[pathlib.Path]) -> None:
        for path in log_dirs:
            self._dirs[path] = _Dir(path, device_of(path))
        while True:
            await asyncio.sleep(self.config.get_int("tidelog.read.throttle.interval.ms") / 1000)
            try:
                self.tick(time.monotonic())
            except OSError as exc:
                log.warning("cold-read throttling: could not measure the disks: %s", exc)

    def tick(self, now_s: float) -> None:
        elapsed = max(now_s - self._last_tick, 1e-3)
        self._last_tick = now_s
        enabled = bool(self.config.get("tidelog.read.throttle.enable"))
        for pl in self.logs.all_logs():
            tp = (pl.topic, pl.partition)
            rate = self._offset_rates.get(tp)
            if rate is None:
                rate = self._offset_rates[tp] = OffsetRate(RATE_SPAN)
            rate.sample(now_s, pl.log_end_offset)
        procfs = pathlib.Path(str(self.config.get("tidelog.read.throttle.procfs.path")))
        available = mem_available((procfs / "meminfo").read_text())
        devices = {d.device for d in self._dirs.values() if d.device}
        counters = parse_diskstats((procfs / "diskstats").read_text(), devices) if devices else {}
        cold, self._cold_bytes = self._cold_bytes, {}
        limits = self._thresholds()
        for state in self._dirs.values():
            self._tick_dir(state, counters.get(state.device or ""), available, elapsed, cold, limits, enabled)
        for tp in [t for t in self._offset_rates if self.logs.get_log(*t) is None]:
            self._offset_rates.pop(tp, None)
            self._limits.pop(tp, None)

    def _thresholds(self) -> Thresholds:
        c = self.config
        return Thresholds(float(c.get("tidelog.read.throttle.utilisation.threshold")),  # type: ignore[arg-type]
                          float(c.get("tidelog.read.throttle.latency.threshold.ms")),  # type: ignore[arg-type]
                          float(c.get("tidelog.read.throttle.recovery.ratio")),  # type: ignore[arg-type]
                          c.get_int("tidelog.read.throttle.partitions.per.step"),
                          c.get_int("tidelog.read.throttle.recovery.intervals"))

    def _tick_dir(self, state: _Dir, now: DiskCounters | None, available: int | None, elapsed: float,
                  cold: dict[TopicPartition, int], limits: Thresholds, enabled: bool) -> None:
        before, state.counters = state.counters, now
        label = (str(state.path),)
        if now is None or before is None or available is None:
            return
        disk = disk_sample(before, now, elapsed)
        state.horizon_s = cache_horizon_s(available, disk.read_bps, disk.write_bps)
        self.m_horizon.set(label, state.horizon_s if math.isfinite(state.horizon_s) else -1)
        self.m_util.set(label, disk.utilisation)
        self.m_latency.set(label, disk.latency_ms)
        if not enabled:
            state.throttle = DirThrottle()
        else:
            on_dir = {tp: n / elapsed for tp, n in cold.items() if self.logs.log_dir_of(*tp) == state.path}
            for change in state.throttle.step(disk, on_dir, limits):
                log.warning("log dir %s: %s", state.path, change)
        self.m_over.set(label, 1 if state.throttle.over else 0)
        self._publish(state)

    def _publish(self, state: _Dir) -> None:
        if state.published == state.throttle.throttled:
            return
        for (topic, partition), reason in state.published.items():
            self.m_throttled.remove((str(state.path), topic, str(partition), reason))
        state.published = dict(state.throttle.throttled)
        for (topic, partition), reason in state.published.items():
            self.m_throttled.set((str(state.path), topic, str(partition), reason), 1)
        for tp in [t for t in self._limits if t not in state.published and self.logs.log_dir_of(*t) == state.path]:
            del self._limits[tp]


# -- page-cache residency (Linux) ------------------------------------------------------------

RESIDENCY_WINDOW = 64 * 1024  # bytes checked from the fetch offset's index entry on


def _residency_at(pl: PartitionLog, offset: int) -> float | None:
    """Residency of the bytes a read at ``offset`` starts with, before it touches them: the position
    comes from the offset index (its floor entry, within index.interval.bytes), not from the file."""
    segments = pl.segments_snapshot()
    i = bisect.bisect_right([seg.base_offset for seg in segments], offset) - 1
    if i < 0:
        return None
    seg = segments[i]
    position = seg.offset_index.lookup(offset)[1]
    length = min(RESIDENCY_WINDOW, seg.size - position)
    return resident_fraction(seg.fd, position, length) if length > 0 else None


_libc: ctypes.CDLL | None = None


def _load_libc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        if name is None:
            return None
        libc = ctypes.CDLL(name, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
        _libc = libc
    return _libc


def resident_fraction(fd: int, position: int, length: int) -> float | None:
    """Share of the pages of ``fd``'s bytes [position, position + length) in the page cache; None
    where mincore(2) is not available. Maps the pages without touching them (no read-ahead)."""
    libc = _load_libc()
    if libc is None or length <= 0:
        return None
    page = mmap.PAGESIZE
    start = position - position % page
    size = position + length - start
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        pages = (size + page - 1) // page
        vec = ctypes.create_string_buffer(pages)
        if libc.mincore(addr, size, vec) != 0:
            return None
        return sum(b & 1 for b in vec.raw) / pages
    finally:
        libc.munmap(addr, size)
