"""Metrics cheap enough for the request path, and their Prometheus text exposition (format 0.0.4).

Three owned kinds, each a dict from a tuple of label values to its state:

- ``Counter.inc(labels, n)`` is one dict lookup and one add (``values[labels] = values.get(labels, 0) + n``);
- ``Gauge.set/inc`` likewise;
- ``Histogram.observe(labels, x)`` is a dict lookup, a ``bisect`` over the bucket bounds and three adds.
  Bucket counts are kept per bucket and made cumulative only when scraped.

Label values are positional (the order of ``labelnames``) so that a caller can keep a ready tuple and
pay for no formatting on the hot path. Updates are meant for one thread (the broker's event loop); a
rare update from another thread (a GC callback) may at worst lose an increment, never corrupt state.

Values read at scrape time (log offsets, disk usage) come from *collectors*: callables returning
``MetricFamily`` objects. ``Registry.collect_owned`` is cheap and runs on the event loop;
``Registry.collect_external`` runs the collectors and may block (the HTTP endpoint runs it in a
worker thread). A collector that raises is logged and skipped: one broken source never empties a scrape.

Exposition: for each family ``# HELP name text`` and ``# TYPE name kind``, then one line per sample,
``name{label="value",...} value``; histograms expose ``name_bucket{le="..."}`` (cumulative, ending with
``le="+Inf"``), ``name_sum`` and ``name_count``. Help text escapes ``\\`` and newlines; label values
escape ``\\``, ``"`` and newlines.
"""

from __future__ import annotations

import logging
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Labels = tuple[str, ...]
# (name suffix, label names, label values, value): one exposition line.
Sample = tuple[str, Labels, Labels, float]
Collector = Callable[[], Iterable["MetricFamily"]]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")

# Seconds, from 100 µs to 30 s: request phases, event-loop lag and GC pauses all fit.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
KINDS = ("counter", "gauge", "histogram", "untyped")


def _check_names(name: str, labelnames: Sequence[str]) -> None:
    if not _NAME.match(name):
        raise ValueError(f"invalid metric name {name!r}")
    for label in labelnames:
        if not _LABEL.match(label) or label.startswith("__") or label == "le":
            raise ValueError(f"invalid label name {label!r} for {name}")
    if len(set(labelnames)) != len(labelnames):
        raise ValueError(f"duplicate label names for {name}")


@dataclass
class MetricFamily:
    """One metric name with its help, type and samples, as a collector returns it."""

    name: str
    help: str
    kind: str
    labelnames: Labels = ()
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_names(self.name, self.labelnames)
        if self.kind not in KINDS:
            raise ValueError(f"unknown metric type {self.kind!r}")

    def add(self, labels: Labels, value: float) -> MetricFamily:
        """Add one sample of a counter, gauge or untyped family; returns self for chaining."""
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labels}")
        self.samples.append(("", self.labelnames, labels, value))
        return self


class Counter:
    """A monotonically increasing value per label set. Name it ``..._total``."""

    kind = "counter"
    __slots__ = ("help", "labelnames", "name", "values")

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        _check_names(name, labelnames)
        self.name, self.help, self.labelnames = name, help, tuple(labelnames)
        self.values: dict[Labels, float] = {}

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        values = self.values
        values[labels] = values.get(labels, 0.0) + amount

    def value(self, labels: Labels = ()) -> float:
        return self.values.get(labels, 0.0)

    def remove(self, labels: Labels) -> None:
        self.values.pop(labels, None)

    def family(self) -> MetricFamily:
        return MetricFamily(self.name, self.help, self.kind, self.labelnames,
                            [("", self.labelnames, labels, value) for labels, value in list(self.values.items())])


class Gauge(Counter):
    """A value that goes up and down per label set."""

    kind = "gauge"
    __slots__ = ()

    def set(self, labels: Labels, value: float) -> None:
        self.values[labels] = value

    def dec(self, labels: Labels = (), amount: float = 1.0) -> None:
        values = self.values
        values[labels] = values.get(labels, 0.0) - amount


class Histogram:
    """Observations counted into fixed buckets (upper bounds, ``le``), with their sum and count."""

    kind = "histogram"
    __slots__ = ("bounds", "help", "labelnames", "name", "series")

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = (),
                 buckets: Sequence[float] = LATENCY_BUCKETS) -> None:
        _check_names(name, labelnames)
        bounds = tuple(float(b) for b in buckets if b != math.inf)
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: buckets must be increasing and distinct")
        self.name, self.help, self.labelnames, self.bounds = name, help, tuple(labelnames), bounds
        # labels -> [count in bucket 0 .. count in +Inf bucket, sum, count]
        self.series: dict[Labels, list[float]] = {}

    def observe(self, labels: Labels, value: float) -> None:
        observe_into(self.state(labels), self.bounds, value)

    def state(self, labels: Labels) -> list[float]:
        """The series of ``labels`` (created empty): bucket counts, then sum, then count. For hot
        paths that observe into the same series many times: ``observe_into`` without the lookup."""
        state = self.series.get(labels)
        if state is None:
            state = self.series[labels] = [0.0] * (len(self.bounds) + 3)
        return state

    def count(self, labels: Labels = ()) -> int:
        state = self.series.get(labels)
        return 0 if state is None else int(state[-1])

    def sum(self, labels: Labels = ()) -> float:
        state = self.series.get(labels)
        return 0.0 if state is None else state[-2]

    def remove(self, labels: Labels) -> None:
        self.series.pop(labels, None)

    def family(self) -> MetricFamily:
        out = MetricFamily(self.name, self.help, self.kind, self.labelnames)
        names = (*self.labelnames, "le")
        for labels, state in list(self.series.items()):
            state = list(state)
            running = 0.0
            for bound, in_bucket in zip((*self.bounds, math.inf), state, strict=False):
                running += in_bucket
                out.samples.append(("_bucket", names, (*labels, format_value(bound)), running))
            out.samples.append(("_sum", self.labelnames, labels, state[-2]))
            out.samples.append(("_count", self.labelnames, labels, state[-1]))
        return out


Metric = Counter | Histogram


def observe_into(state: list[float], bounds: tuple[float, ...], value: float) -> None:
    """``Histogram.observe`` on a series already looked up with ``Histogram.state``."""
    state[bisect_left(bounds, value)] += 1
    state[-2] += value
    state[-1] += 1


class Registry:
    """The metrics of one process: owned metrics by name, plus scrape-time collectors."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self._collectors: list[Collector] = []

    def _register(self, metric: Metric) -> None:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} is already registered")
        self._metrics[metric.name] = metric

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        metric = Counter(name, help, labelnames)
        self._register(metric)
        return metric

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Gauge:
        metric = Gauge(name, help, labelnames)
        self._register(metric)
        return metric

    def histogram(self, name: str, help: str, labelnames: Sequence[str] = (),
                  buckets: Sequence[float] = LATENCY_BUCKETS) -> Histogram:
        metric = Histogram(name, help, labelnames, buckets)
        self._register(metric)
        return metric

    def get(self, name: str) -> Metric | None:
        return self._metrics.get(name)

    def add_collector(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def collect_owned(self) -> list[MetricFamily]:
        """Snapshot of the owned metrics; cheap, call it on the thread that updates them."""
        return [metric.family() for metric in list(self._metrics.values())]

    def collect_external(self) -> list[MetricFamily]:
        """Run the collectors; may block on what they read."""
        families: list[MetricFamily] = []
        for collector in list(self._collectors):
            try:
                families.extend(collector())
            except Exception:
                log.exception("metrics collector %r failed; its metrics are left out of this scrape", collector)
        return families

    def collect(self) -> list[MetricFamily]:
        return self.collect_owned() + self.collect_external()

    def render(self) -> str:
        return render(self.collect())


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(families: Iterable[MetricFamily]) -> str:
    """The text exposition format 0.0.4. Families of the same name are merged under one HELP/TYPE."""
    merged: dict[str, MetricFamily] = {}
    for family in families:
        first = merged.get(family.name)
        if first is None:
            merged[family.name] = MetricFamily(family.name, family.help, family.kind, family.labelnames, list(family.samples))
        elif first.kind != family.kind:
            log.warning("metric %s reported as both %s and %s; keeping %s", family.name, first.kind, family.kind, first.kind)
        else:
            first.samples.extend(family.samples)
    lines: list[str] = []
    for family in merged.values():
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for suffix, names, values, value in family.samples:
            if names:
                pairs = ",".join(f'{n}="{_escape_label(v)}"' for n, v in zip(names, values, strict=True))
                lines.append(f"{family.name}{suffix}{{{pairs}}} {format_value(value)}")
            else:
                lines.append(f"{family.name}{suffix} {format_value(value)}")
    return "\n".join(lines) + "\n" if lines else ""
