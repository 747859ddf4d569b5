"""Time charts of the brokers: bytes in and out per second and disk use, sampled by the console.

``BrokerCharts.run`` scrapes every metrics endpoint (``console.metrics.urls``, through the shared
``Scraper``) every ``console.chart.interval.ms`` and appends, per endpoint (one broker each):

- ``bytes_in`` / ``bytes_out``: the increase of ``tidelog_topic_bytes_in_total`` /
  ``tidelog_topic_bytes_out_total`` (summed over topics) since this sampler's previous reading of the
  same endpoint, divided by the seconds between the two readings (a tidelog endpoint, known by its
  ``tidelog_build_info``, that has no such series yet has moved no bytes: its rate is 0);
- ``disk``: bytes used on the file systems of the endpoint's log dirs, the sum over its log dirs of
  ``tidelog_log_dir_total_bytes - tidelog_log_dir_usable_bytes``;
- ``log_size``: bytes of the partitions' segments the endpoint's broker holds, the sum of
  ``tidelog_log_size_bytes`` (the part of ``disk`` that is the broker's own data).

A series is a ``Ring``: at most ``console.chart.history.s / interval`` points ``(t_ms, value)``,
oldest dropped first, times strictly increasing. ``None`` is a gap, drawn as a break in the line: the
endpoint did not answer, it lacks the series (an Apache Kafka JMX exporter has other names), or a
counter went down (the broker restarted; the next reading starts a new line).

Drawing is split so that the arithmetic is tested here and the browser only places elements:
``svg_path`` turns points into an SVG path ``d`` (``M`` starts a line, ``L`` continues it; a gap
ends it; a lone point is ``M x y h0``, drawn as a dot by the round line cap), ``nice_ceiling``
picks the y axis' top (1, 2 or 5 times a power of ten, of KiB, MiB... for bytes), and ``chart_document`` is what the overview's
JSON twin sends for each chart; ``static/console.js`` draws the axes, the labels and the paths.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from tidelog.console.config import ConsoleConfig
from tidelog.console.scrape import Scrape, Scraper

log = logging.getLogger(__name__)
Point = tuple[int, float | None]
SERIES = ("bytes_in", "bytes_out", "disk", "log_size")
BYTES_IN, BYTES_OUT = "tidelog_topic_bytes_in_total", "tidelog_topic_bytes_out_total"
LOG_SIZE = "tidelog_log_size_bytes"
DISK_TOTAL, DISK_USABLE = "tidelog_log_dir_total_bytes", "tidelog_log_dir_usable_bytes"
BUILD_INFO = "tidelog_build_info"  # a tidelog endpoint: no byte counter yet means nothing moved yet


class Ring:
    """A bounded, time-ordered history: the last ``capacity`` points of one series."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"a chart history needs at least 2 points, got {capacity}")
        self._points: deque[Point] = deque(maxlen=capacity)

    def append(self, t_ms: int, value: float | None) -> bool:
        """Add a point; one not later than the last is refused (a clock step back), returning False."""
        if self._points and t_ms <= self._points[-1][0]:
            return False
        self._points.append((t_ms, value))
        return True

    def points(self, since_ms: int | None = None) -> list[Point]:
        return [p for p in self._points if since_ms is None or p[0] >= since_ms]

    @property
    def last(self) -> float | None:
        return self._points[-1][1] if self._points else None

    def __len__(self) -> int:
        return len(self._points)


@dataclass(frozen=True)
class Box:
    """The chart's drawing area inside an SVG ``viewBox="0 0 width height"``."""

    width: float = 600
    height: float = 160
    left: float = 64
    right: float = 8
    top: float = 10
    bottom: float = 22

    def x(self, t: float, t0: float, t1: float) -> float:
        return self.left + (self.width - self.left - self.right) * (t - t0) / max(t1 - t0, 1)

    def y(self, value: float, top_value: float) -> float:
        return self.top + (self.height - self.top - self.bottom) * (1 - value / top_value if top_value > 0 else 1)


def nice_ceiling(value: float, base: int = 1000) -> float:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``value`` (1 for nothing); with
    ``base=1024``, in the binary unit the value is shown in (9.5 MiB gives 10 MiB, not 10 MB)."""
    if not value > 0 or math.isinf(value):
        return 1.0
    if base != 1000:
        unit = float(base ** max(0, math.floor(math.log(value, base))))
        mantissa = nice_ceiling(value / unit)
        return unit * base if mantissa > 1000 else mantissa * unit  # 2000 KiB would read 1.95 MiB
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value * (1 - 1e-12):
            return float(step * power)
    return float(10 * power)


def svg_path(points: Sequence[Point], t0: float, t1: float, top_value: float, box: Box = Box()) -> str:
    parts: list[str] = []
    drawing = False
    for i, (t, value) in enumerate(points):
        if value is None:
            drawing = False
            continue
        xy = f"{box.x(t, t0, t1):.1f} {box.y(min(value, top_value), top_value):.1f}"
        if drawing:
            parts.append(f"L{xy}")
        else:
            lone = i + 1 >= len(points) or points[i + 1][1] is None
            parts.append(f"M{xy}" + (" h0" if lone else ""))
        drawing = True
    return " ".join(parts)


def chart_document(series: dict[str, Sequence[Point]], box: Box = Box(), base: int = 1000) -> dict[str, Any]:
    """What the browser needs to draw one chart: a path per named series, the axes' ends."""
    times = [t for points in series.values() for t, _ in points]
    values = [v for points in series.values() for _, v in points if v is not None]
    if not times:
        return {"t0": 0, "t1": 0, "top": 1.0, "lines": []}
    t0, t1 = min(times), max(max(times), min(times) + 1)
    top = nice_ceiling(max(values, default=0.0), base)
    return {"t0": t0, "t1": t1, "top": top, "box": [box.width, box.height, box.left, box.right, box.top, box.bottom],
            "lines": [{"name": name, "d": svg_path(points, t0, t1, top, box),
                       "last": next((v for _, v in reversed(points) if v is not None), None)}
                      for name, points in series.items()]}


def endpoint_name(url: str) -> str:
    """A metrics endpoint as a chart legend names it: ``host:port``."""
    parts = urlsplit(url)
    return parts.netloc or url


class BrokerCharts:
    def __init__(self, config: ConsoleConfig, scraper: Scraper, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.scraper = scraper
        self.clock = clock
        self.capacity = max(2, config.chart_history_s * 1000 // config.chart_interval_ms)
        self.rings: dict[tuple[str, str], Ring] = {}  # (series, url) -> history
        self._previous: dict[str, tuple[float, float, float]] = {}  # url -> (monotonic at, bytes in, bytes out)

    def record(self, scrape: Scrape) -> None:
        """Append one point per endpoint and series from a scrape (its ``at`` is monotonic seconds)."""
        now_ms = int(self.clock() * 1000)
        for url in self.scraper.urls:
            families = scrape.by_url.get(url)
            in_rate = out_rate = disk = log_size = None
            if families is not None:
                in_rate, out_rate = self._rates(url, scrape.at, families)
                disk = _disk_used(families)
                if LOG_SIZE in families or BUILD_INFO in families:
                    log_size = sum(v for _, v in families.get(LOG_SIZE, []))
            else:
                self._previous.pop(url, None)
            for name, value in (("bytes_in", in_rate), ("bytes_out", out_rate), ("disk", disk), ("log_size", log_size)):
                self.rings.setdefault((name, url), Ring(self.capacity)).append(now_ms, value)

    def _rates(self, url: str, at: float, families: dict[str, list[tuple[dict[str, str], float]]]
               ) -> tuple[float | None, float | None]:
        if BYTES_IN not in families and BYTES_OUT not in families and BUILD_INFO not in families:
            self._previous.pop(url, None)
            return None, None
        total_in = sum(v for _, v in families.get(BYTES_IN, []))
        total_out = sum(v for _, v in families.get(BYTES_OUT, []))
        previous = self._previous.get(url)
        self._previous[url] = (at, total_in, total_out)
        if previous is None or at <= previous[0] or total_in < previous[1] or total_out < previous[2]:
            return None, None  # the first reading, or a counter reset: no rate yet
        seconds = at - previous[0]
        return (total_in - previous[1]) / seconds, (total_out - previous[2]) / seconds

    def document(self, since_ms: int | None = None) -> dict[str, Any]:
        """Every chart, for the page and its JSON twin: ``{series: chart_document}``."""
        return {name: chart_document({endpoint_name(url): self.rings[(name, url)].points(since_ms)
                                      for url in self.scraper.urls if (name, url) in self.rings}, base=1024)
                for name in SERIES}

    async def sample(self, http: httpx.AsyncClient) -> None:
        scrape = await self.scraper.scrape(http, min_age_s=0.0)
        if scrape is not None:
            self.record(scrape)

    async def run(self, stop: asyncio.Event, http: httpx.AsyncClient) -> None:
        if not self.scraper.enabled:
            return
        while not stop.is_set():
            try:
                await self.sample(http)
            except Exception as exc:  # an endpoint's bad answer must not end the sampling
                log.warning("chart sampling failed: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), self.config.chart_interval_ms / 1000)
            except TimeoutError:
                pass


def _disk_used(families: dict[str, list[tuple[dict[str, str], float]]]) -> float | None:
    totals = families.get(DISK_TOTAL)
    if not totals:
        return None
    usable = {labels.get("log_dir"): value for labels, value in families.get(DISK_USABLE, [])}
    if any(labels.get("log_dir") not in usable for labels, _ in totals):
        return None
    return sum(total - usable[labels.get("log_dir")] for labels, total in totals)
