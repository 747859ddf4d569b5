"""Load and latency from the brokers' Prometheus endpoints (text exposition format 0.0.4).

Which series the governor reads (``FLAVOURS``):

tidelog (``tidelog.observability.broker_metrics``):
  ``tidelog_topic_bytes_in_total{topic}``, ``tidelog_topic_bytes_out_total{topic}``,
  ``tidelog_topic_messages_in_total{topic}`` (counters, counted by the leader),
  ``tidelog_request_total_time_seconds_bucket{api="Produce",le}`` (histogram: p99 by interpolation).
Apache Kafka through the Prometheus JMX exporter (its stock kafka rules):
  ``kafka_server_brokertopicmetrics_bytesin_total{topic}``, ``..._bytesout_total{topic}``,
  ``..._messagesin_total{topic}`` (the meters' counts), and
  ``kafka_network_requestmetrics_99thpercentile{request="Produce",name="TotalTimeMs"}`` (ms).

Rates come from two scrapes of the same endpoint (counter deltas over the time between them; a
counter that went down was reset and counts from zero). Per-partition load: a broker's per-topic rate
is split evenly across the partitions of that topic it leads (the brokers count per topic, not per
partition; an even split is exact for keyless producers and close for keyed ones).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import httpx

Labels = tuple[tuple[str, str], ...]
Samples = dict[str, dict[Labels, float]]

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Flavour:
    bytes_in: str
    bytes_out: str
    messages_in: str
    p99: str             # histogram bucket series, or a ready quantile gauge
    p99_labels: Labels   # labels selecting produce requests
    p99_is_histogram: bool
    p99_scale_ms: float  # multiply to get milliseconds


FLAVOURS = {
    "tidelog": Flavour("tidelog_topic_bytes_in_total", "tidelog_topic_bytes_out_total", "tidelog_topic_messages_in_total",
                       "tidelog_request_total_time_seconds_bucket", (("api", "Produce"),), True, 1000.0),
    "kafka-jmx": Flavour("kafka_server_brokertopicmetrics_bytesin_total", "kafka_server_brokertopicmetrics_bytesout_total",
                         "kafka_server_brokertopicmetrics_messagesin_total",
                         "kafka_network_requestmetrics_99thpercentile",
                         (("name", "TotalTimeMs"), ("request", "Produce")), False, 1.0),
}


def parse(text: str) -> Samples:
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        name, _, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        key = tuple(sorted(_LABEL.findall(labels or "")))
        out.setdefault(name, {})[key] = number
    return out


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in samples.get(name, {}).items():
        for k, v in labels:
            if k == label:
                out[v] = out.get(v, 0.0) + value
    return out


def rates(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    if seconds <= 0:
        return {}
    return {k: (v - before.get(k, 0.0) if v >= before.get(k, 0.0) else v) / seconds for k, v in after.items()}


def p99_ms(samples: Samples, flavour: Flavour) -> float | None:
    series = samples.get(flavour.p99, {})
    wanted = set(flavour.p99_labels)
    if not flavour.p99_is_histogram:
        values = [v for labels, v in series.items() if wanted <= set(labels)]
        return max(values) * flavour.p99_scale_ms if values else None
    buckets: dict[float, float] = {}
    for labels, count in series.items():
        if not wanted <= set(labels):
            continue
        le = dict(labels).get("le")
        if le is not None:
            bound = math.inf if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + count
    return quantile(sorted(buckets.items()), 0.99) * flavour.p99_scale_ms if buckets else None


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus' histogram_quantile over cumulative (upper bound, count) buckets."""
    total = buckets[-1][1]
    if total <= 0:
        return 0.0
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass
class Scrape:
    at: float
    samples: Samples


def scrape(url: str, at: float, timeout_s: float = 5.0) -> Scrape | None:
    """One scrape, or None when the endpoint does not answer (the governor then plans on sizes alone)."""
    try:
        response = httpx.get(url, timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError:
        return None
    return Scrape(at, parse(response.text))


@dataclass(frozen=True)
class BrokerLoad:
    bytes_in: dict[str, float]     # topic -> bytes/s this broker took in as leader
    bytes_out: dict[str, float]
    messages_in: dict[str, float]
    p99_ms: float | None


def broker_load(before: Scrape | None, after: Scrape, flavour: Flavour) -> BrokerLoad:
    def rate(name: str) -> dict[str, float]:
        if before is None:
            return {}
        return rates(by_label(before.samples, name, "topic"), by_label(after.samples, name, "topic"), after.at - before.at)
    return BrokerLoad(rate(flavour.bytes_in), rate(flavour.bytes_out), rate(flavour.messages_in),
                      p99_ms(after.samples, flavour))
