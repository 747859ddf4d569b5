"""Priority tiers: which tier a client is in, what holds each tier back now, and the saturation rule.

A client's tier is its quota entity's ``tidelog.tier`` (0 high, 1 medium, 2 low), resolved with the
same precedence as Kafka's quota keys (``manager.resolve``); without one, the broker's
``quota.tier.default``. AlterClientQuotas carries doubles only, so the tier is a small number there.

What holds a tier back (``TierRules``), from the broker's dynamic settings plus the saturation rule:

- a tier throttle: the tier's clients together may move at most N bytes/s per direction (produce,
  fetch) on this broker, measured and enforced like a quota (a sampled rate and its throttle time);
- a pause: the tier's produce requests are held unanswered and its fetches answered empty, until
  resumed.

High is never held back by tier rules (its clients keep their own Kafka quotas).

The saturation rule (``Saturation``) looks at the broker's measured utilisation (the largest of the
network's and the log disks', each 0..1) once per interval. Above ``high`` it escalates one step,
lowest tier first: 1 = low throttled, 2 = low and medium throttled, 3 = low paused and medium
throttled. Below ``low`` it steps back down one level per interval, so throttles lift as load
falls; in between it holds. Each step is returned with its reason for the log and the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HIGH, MEDIUM, LOW = 0, 1, 2
TIER_NAMES = ("high", "medium", "low")
MAX_LEVEL = 3


def tier_number(name: str) -> int:
    return TIER_NAMES.index(name)


@dataclass(frozen=True, slots=True)
class TierRules:
    """What holds each tier back now: a byte rate per tier (None: none) and the paused tiers."""

    byte_rate: dict[int, float] = field(default_factory=dict)
    paused: frozenset[int] = frozenset()
    reasons: dict[int, str] = field(default_factory=dict)

    def rate_of(self, tier: int) -> float | None:
        return None if tier == HIGH else self.byte_rate.get(tier)

    def is_paused(self, tier: int) -> bool:
        return tier != HIGH and tier in self.paused


def combine(manual_rates: dict[int, float], manual_paused: frozenset[int], level: int, auto_rate: float,
            auto_reason: str) -> TierRules:
    """The rules from the operator's commands and the saturation level; the tighter one wins."""
    rates = {t: r for t, r in manual_rates.items() if t != HIGH and r > 0}
    reasons = {t: f"operator: throttled to {r:.0f} B/s" for t, r in rates.items()}
    paused = {t for t in manual_paused if t != HIGH}
    for t in paused:
        reasons[t] = "operator: paused"
    auto_throttled = {1: (LOW,), 2: (LOW, MEDIUM), 3: (LOW, MEDIUM)}.get(level, ())
    for t in auto_throttled:
        if t not in paused and auto_rate < rates.get(t, float("inf")):
            rates[t] = auto_rate
            reasons[t] = f"saturation: {auto_reason}"
    if level >= MAX_LEVEL and LOW not in paused:
        paused.add(LOW)
        reasons[LOW] = f"saturation: {auto_reason}"
    return TierRules(rates, frozenset(paused), reasons)


@dataclass(slots=True)
class Saturation:
    """The automatic tier throttling level, stepped once per interval from measured utilisation."""

    high: float = 0.9
    low: float = 0.7
    level: int = 0
    reason: str = ""

    def step(self, utilisation: float, what: str) -> str | None:
        """Move one level for this interval's utilisation (``what`` names its source).

        Returns what happened (for the log) when the level moved, else None. ``reason`` stays the
        cause of the last escalation while any level is left: it is why the tiers are held back."""
        if utilisation > self.high and self.level < MAX_LEVEL:
            self.level += 1
            self.reason = f"{what} utilisation {utilisation:.2f} above {self.high:.2f}"
            return f"level {self.level}: {self.reason}"
        if utilisation < self.low and self.level > 0:
            self.level -= 1
            if not self.level:
                self.reason = ""
            return f"level {self.level}: {what} utilisation {utilisation:.2f} below {self.low:.2f}"
        return None
