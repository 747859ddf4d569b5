"""Brokers' Prometheus endpoints, read for what the Kafka protocol does not tell: disk per log dir,
partition sizes, bytes in and out.

``parse_exposition`` is pure: Prometheus text format 0.0.4 to ``{name: [(labels, value)]}`` (comments,
histograms' ``_bucket`` lines and malformed lines are skipped). ``Scraper`` fetches every configured
URL (``console.metrics.urls``) with a short timeout and keeps the previous scrape, so counters become
rates: ``rate(name)`` is the increase per second between the last two scrapes, summed over labels
matching a filter. An endpoint that does not answer is reported by URL and skipped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

Labels = dict[str, str]
Families = dict[str, list[tuple[Labels, float]]]
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> Families:
    families: Families = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None or match.group(1).endswith("_bucket"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in _LABEL.findall(match.group(2) or "")}
        families.setdefault(match.group(1), []).append((labels, value))
    return families


@dataclass
class Scrape:
    at: float
    by_url: dict[str, Families] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def values(self, name: str) -> list[tuple[str, Labels, float]]:
        return [(url, labels, value) for url, families in self.by_url.items()
                for labels, value in families.get(name, [])]

    def total(self, name: str, where: Callable[[Labels], bool] = lambda _: True) -> float:
        return sum(value for _, labels, value in self.values(name) if where(labels))


class Scraper:
    def __init__(self, urls: Sequence[str], timeout_s: float = 2.0) -> None:
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.last: Scrape | None = None
        self.previous: Scrape | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.urls)

    async def scrape(self, client: httpx.AsyncClient, min_age_s: float = 1.0) -> Scrape | None:
        """A fresh scrape unless the last one is younger than ``min_age_s``."""
        if not self.urls:
            return None
        if self.last is not None and time.monotonic() - self.last.at < min_age_s:
            return self.last
        scrape = Scrape(time.monotonic())
        for url in self.urls:
            try:
                answer = await client.get(url, timeout=self.timeout_s)
                answer.raise_for_status()
                scrape.by_url[url] = parse_exposition(answer.text)
            except httpx.HTTPError as exc:
                scrape.errors[url] = type(exc).__name__
        self.previous, self.last = self.last, scrape
        return scrape

    def rate(self, name: str, where: Callable[[Labels], bool] = lambda _: True) -> float | None:
        if self.last is None or self.previous is None or self.last.at <= self.previous.at:
            return None
        delta = self.last.total(name, where) - self.previous.total(name, where)
        return max(0.0, delta / (self.last.at - self.previous.at))
