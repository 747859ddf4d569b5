"""The broker's side of priority tiers (``quotas/tiers.py``): tier throttles, pauses, saturation.

The operator's rules are dynamic broker settings (``quota.tier.<tier>.byte.rate``,
``quota.tier.<tier>.paused``), set cluster-wide by ``tidelog quotas tier ...`` (IncrementalAlterConfigs
on the cluster-default broker resource), so they sit in the cluster metadata and every broker applies
them. The saturation rule runs here, per broker, once per ``quota.tier.auto.interval.ms``:

- network utilisation: bytes this broker took in (produce) and sent (fetch) over the interval,
  divided by ``quota.tier.auto.network.bytes.per.sec``;
- disk utilisation: the busiest log dir device's share of the interval spent doing I/O (the
  ``io_ticks`` column of ``/proc/diskstats``; absent elsewhere, then only the network counts).

A tier throttle is one sampled rate per (tier, direction) shared by all the tier's clients on the
broker, enforced with the same throttle-time rule as a Kafka quota. Metrics:
``tidelog_quota_tier_held{tier,reason}`` (1 while a rule holds the tier back, with why),
``tidelog_quota_tier_saturation_level``, ``tidelog_quota_tier_utilisation{resource}``,
``tidelog_quota_tier_throttle_seconds_total{tier}`` and ``tidelog_quota_tier_rate{tier,direction}``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import time
from collections.abc import Callable, Sequence

from tidelog.common.config import BrokerConfig
from tidelog.observability.registry import Registry
from tidelog.quotas.rate import SampledRate, throttle_time_ms
from tidelog.quotas.tiers import LOW, MEDIUM, TIER_NAMES, Saturation, TierRules, combine

log = logging.getLogger(__name__)


def device_of(path: pathlib.Path) -> str | None:
    """The block device name (as /proc/diskstats lists it) holding ``path``, or None."""
    try:
        dev = os.stat(path).st_dev
        link = pathlib.Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
        name = link.resolve().name
    except OSError:
        return None
    if (link / "partition").exists():
        name = link.resolve().parent.name  # a partition's busy time is its disk's
    return name


def io_ticks(devices: set[str], text: str) -> dict[str, int]:
    """ms spent doing I/O per device, from /proc/diskstats' text (column 13)."""
    ticks = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 12 and fields[2] in devices:
            ticks[fields[2]] = int(fields[12])
    return ticks


class TierRuntime:
    def __init__(self, config: BrokerConfig, registry: Registry, now_ms: Callable[[], int]) -> None:
        self.config = config
        self.saturation = Saturation()
        self._now_ms = now_ms
        self._rates: dict[tuple[int, str], SampledRate] = {}
        self.moved = 0  # bytes produced and fetched, for network utilisation
        self._rules_key: tuple[object, ...] | None = None
        self.rules = TierRules()
        r = registry
        self.m_held = r.gauge("tidelog_quota_tier_held", "1 while a tier rule holds a tier back, labelled with why.", ("tier", "reason"))
        self.m_level = r.gauge("tidelog_quota_tier_saturation_level", "Automatic tier throttling: 0 none, 1 low throttled, 2 low and medium, 3 low paused.")
        self.m_util = r.gauge("tidelog_quota_tier_utilisation", "Measured utilisation (0-1) the saturation rule looks at.", ("resource",))
        self.m_throttle = r.counter("tidelog_quota_tier_throttle_seconds_total", "Throttle time given by tier rules.", ("tier",))
        self.m_rate = r.gauge("tidelog_quota_tier_rate", "Measured byte rate of a tier held back by a throttle.", ("tier", "direction"))
        self._published: dict[int, str] = {}
        self.m_level.set((), 0)  # shown from the start, not only after the first interval

    # -- rules --------------------------------------------------------------------------------

    def current_rules(self) -> TierRules:
        c = self.config
        manual_rates = {MEDIUM: float(c.get_int("quota.tier.medium.byte.rate")), LOW: float(c.get_int("quota.tier.low.byte.rate"))}
        manual_paused = frozenset(t for t, key in ((MEDIUM, "quota.tier.medium.paused"), (LOW, "quota.tier.low.paused")) if c.get(key))
        level = self.saturation.level if c.get("quota.tier.auto.enable") else 0
        key = (tuple(manual_rates.items()), manual_paused, level, self.saturation.reason, c.get_int("quota.tier.auto.byte.rate"))
        if key != self._rules_key:
            self._rules_key = key
            self.rules = combine(manual_rates, manual_paused, level, float(c.get_int("quota.tier.auto.byte.rate")), self.saturation.reason)
            self._publish()
        return self.rules

    def _publish(self) -> None:
        for tier, reason in self._published.items():
            self.m_held.remove((TIER_NAMES[tier], reason))
        self._published = dict(self.rules.reasons)
        for tier, reason in self._published.items():
            self.m_held.set((TIER_NAMES[tier], reason), 1)
            log.info("tier %s held back: %s", TIER_NAMES[tier], reason)

    # -- enforcement --------------------------------------------------------------------------

    def record(self, tier: int, direction: str, size: int) -> int:
        """Bytes moved by a client of ``tier``; the tier throttle's time (0 when not throttled)."""
        self.moved += size
        rate_limit = self.current_rules().rate_of(tier)
        if rate_limit is None:
            return 0
        now = self._now_ms()
        rate = self._rates.get((tier, direction))
        if rate is None:
            rate = self._rates[(tier, direction)] = SampledRate(
                self.config.get_int("quota.window.num"), self.config.get_int("quota.window.size.seconds") * 1000, now)
        rate.record(size, now)
        measured = rate.rate(now)
        self.m_rate.set((TIER_NAMES[tier], direction), measured)
        throttle = throttle_time_ms(measured, rate_limit, rate.window_size_ms(now))
        if throttle:
            self.m_throttle.inc((TIER_NAMES[tier],), throttle / 1000)
        return throttle

    def unrecord(self, tier: int, direction: str, size: int) -> None:
        self.moved -= size
        rate = self._rates.get((tier, direction))
        if rate is not None:
            rate.record(-size, self._now_ms())

    def is_paused(self, tier: int) -> bool:
        return self.current_rules().is_paused(tier)

    # -- saturation ---------------------------------------------------------------------------

    async def run(self, log_dirs: Sequence[pathlib.Path]) -> None:
        """Measure utilisation and step the saturation level, once per interval, until cancelled."""
        devices = {d for d in map(device_of, log_dirs) if d is not None}
        ticks = self._disk_ticks(devices)
        moved, last = self.moved, time.monotonic()
        while True:
            await asyncio.sleep(self.config.get_int("quota.tier.auto.interval.ms") / 1000)
            now = time.monotonic()
            elapsed = max(now - last, 1e-3)
            new_ticks = self._disk_ticks(devices)
            disk = max((new_ticks[d] - ticks.get(d, new_ticks[d])) / (elapsed * 1000) for d in new_ticks) if new_ticks else 0.0
            capacity = self.config.get_int("quota.tier.auto.network.bytes.per.sec")
            network = (self.moved - moved) / elapsed / capacity if capacity > 0 else 0.0
            ticks, moved, last = new_ticks, self.moved, now
            self.observe(network, disk if self.config.get("quota.tier.auto.disk.enable") else 0.0)

    def observe(self, network: float, disk: float) -> None:
        """One interval's utilisation: step the saturation level (when enabled) and publish."""
        self.m_util.set(("network",), network)
        self.m_util.set(("disk",), disk)
        c = self.config
        self.saturation.high = float(c.get("quota.tier.auto.high.utilisation") or 0.9)  # type: ignore[arg-type]
        self.saturation.low = float(c.get("quota.tier.auto.low.utilisation") or 0.7)  # type: ignore[arg-type]
        if not c.get("quota.tier.auto.enable"):
            self.saturation.level, self.saturation.reason = 0, ""
        else:
            what, value = ("network", network) if network >= disk else ("disk", disk)
            moved = self.saturation.step(value, what)
            if moved is not None:
                log.warning("tier saturation %s", moved)
        self.m_level.set((), self.saturation.level)
        self.current_rules()

    @staticmethod
    def _disk_ticks(devices: set[str]) -> dict[str, int]:
        if not devices:
            return {}
        try:
            return io_ticks(devices, pathlib.Path("/proc/diskstats").read_text())
        except OSError:
            return {}
