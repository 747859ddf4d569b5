"""Runtime metrics: event-loop lag, GC pauses, and the standard ``process_*`` series.

- ``EventLoopLagMonitor``: a task that sleeps ``interval_s`` and measures how late it wakes up. A loop
  blocked by a slow callback (a synchronous disk read, a big JSON encode) shows as lag.
- ``GcMonitor``: a ``gc.callbacks`` hook timing each collection (start → stop) per generation. The
  callback runs on whatever thread triggered the collection, with the GIL held.
- ``collect_process``: CPU seconds, resident and virtual memory, open and maximum file descriptors and
  start time, read from ``/proc/self`` at scrape time (Prometheus' client libraries use these names,
  so stock dashboards work). Where ``/proc`` is missing only the CPU time is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

from tidelog.observability.registry import Gauge, Histogram, MetricFamily, Registry

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
GC_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class EventLoopLagMonitor:
    """Measures how late the event loop runs a timer; ``start()`` from inside the loop."""

    def __init__(self, registry: Registry, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.histogram: Histogram = registry.histogram(
            "tidelog_event_loop_lag_seconds", "How late the event loop ran a timer (blocked loop).", (), LAG_BUCKETS
        )
        self.last: Gauge = registry.gauge("tidelog_event_loop_lag_last_seconds", "Event-loop lag at the latest sample.")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="event-loop-lag")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval_s)
            self.record(max(0.0, loop.time() - before - self.interval_s))

    def record(self, lag_s: float) -> None:
        self.histogram.observe((), lag_s)
        self.last.set((), lag_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class GcMonitor:
    """Times garbage collections through ``gc.callbacks``; ``install()`` / ``uninstall()``."""

    def __init__(self, registry: Registry) -> None:
        self.pauses: Histogram = registry.histogram(
            "tidelog_gc_pause_seconds", "Duration of garbage collections, by generation.", ("generation",), GC_BUCKETS
        )
        self.collected = registry.counter(
            "tidelog_gc_collected_objects_total", "Objects freed by the garbage collector, by generation.", ("generation",)
        )
        self._labels = [(str(generation),) for generation in range(3)]
        self._started = 0.0

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        labels = self._labels[int(info.get("generation", 0)) % 3]
        self.pauses.observe(labels, time.perf_counter() - self._started)
        self.collected.inc(labels, float(info.get("collected", 0)))


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _boot_time(proc: Path) -> float | None:
    with contextlib.suppress(OSError, ValueError):
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    return None


def collect_process(proc: Path = Path("/proc")) -> list[MetricFamily]:
    """``process_*`` series of this process, read now."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = MetricFamily("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter")
    cpu.add((), usage.ru_utime + usage.ru_stime)
    out = [cpu]
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        out.append(MetricFamily("process_max_fds", "Maximum number of open file descriptors.", "gauge").add((), soft))
    me = proc / "self"
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = (me / "stat").read_text().rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state): vsize is field 23, rss 24, starttime 22.
        vsize, rss, start_ticks = int(fields[20]), int(fields[21]), int(fields[19])
        out.append(MetricFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge").add((), vsize))
        out.append(MetricFamily("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge").add((), rss * _PAGE))
        boot = _boot_time(proc)
        if boot is not None:
            out.append(MetricFamily("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                                    "gauge").add((), boot + start_ticks / _TICKS))
    with contextlib.suppress(OSError):
        fds = len(os.listdir(me / "fd"))
        out.append(MetricFamily("process_open_fds", "Number of open file descriptors.", "gauge").add((), fds))
    return out


def register_build_info(registry: Registry, version: str) -> None:
    """``tidelog_build_info{version, python}`` = 1: which build a series came from."""
    info = registry.gauge("tidelog_build_info", "Always 1; labels name the tidelog and Python versions.", ("version", "python"))
    info.set((version, platform.python_version()), 1)

