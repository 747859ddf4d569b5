"""Which quota applies to a connection, and the throttle time of what it just did.

Precedence (Kafka's ClientQuotaManager): for each key separately, the first configured entity of

    1. user=<user>, client-id=<client-id>      5. user=<default>, client-id=<default>
    2. user=<user>, client-id=<default>        6. user=<default>
    3. user=<user>                             7. client-id=<client-id>
    4. user=<default>, client-id=<client-id>   8. client-id=<default>

gives the bound. The level that matched also decides who shares it: at level 3 or 6 every client
of the user shares one rate (tags ``(user, "")``), at 7 and 8 every user of the client-id shares one
(``("", client-id)``), otherwise the pair has its own (``(user, client-id)``). A connection with no
quota for a key is not measured for it.

``QuotaManager`` holds one ``SampledRate`` per (key, tags). A new image replaces the configured
quotas (``update``); the rates survive, so a new limit takes effect at the next request with the
history measured so far, and connections are never closed by a change. Rates unused for an hour are
dropped (Kafka expires its quota sensors the same way).

Byte rates are bytes per second; ``request_percentage`` is the share of one request-handling
thread, in percent, measured as handler time (``nanos * 100 / 1e9`` per second, as Kafka records it).

``controller_mutation_rate`` is a token bucket per (tags) instead of a sampled rate (KIP-599,
``mutation.py``): ``mutation_quota`` hands one request its strict or permissive view of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidelog.quotas.entity import CLIENT_ID, CONTROLLER_MUTATION_RATE, USER, Entity
from tidelog.quotas.mutation import MutationQuota, TokenBucket
from tidelog.quotas.rate import SampledRate, throttle_time_ms

Tags = tuple[str, str]  # (user, client-id); "" where the level does not distinguish it
IDLE_EXPIRY_MS = 3_600_000


def _levels(user: str, client_id: str) -> tuple[tuple[Entity, Tags], ...]:
    both, alone = (user, client_id), (user, "")
    return (
        (((CLIENT_ID, client_id), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), alone),
        (((CLIENT_ID, client_id), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), alone),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    )


def resolve(quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str, client_id: str) -> tuple[Entity, Tags, float] | None:
    """The entity a (user, client-id) takes ``key`` from, who shares it, and the bound; None if unlimited."""
    for candidate, tags in _levels(user, client_id):
        values = quotas.get(candidate)
        if values is not None and key in values:
            return candidate, tags, values[key]
    return None


@dataclass(frozen=True, slots=True)
class Recorded:
    """The outcome of one record: the throttle time and the measurement it came from."""

    throttle_ms: int
    tags: Tags
    bound: float
    rate: float


class QuotaManager:
    """Sampled rates per (key, tags) and the configured quotas they are checked against."""

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.quotas: Mapping[Entity, Mapping[str, float]] = {}
        self.rates: dict[tuple[str, Tags], SampledRate] = {}
        self.buckets: dict[Tags, TokenBucket] = {}

    def update(self, quotas: Mapping[Entity, Mapping[str, float]], now_ms: int) -> None:
        self.quotas = quotas
        stale = [k for k, r in self.rates.items() if now_ms - r.last_record_ms > IDLE_EXPIRY_MS]
        for k in stale:
            del self.rates[k]
        for tags in [t for t, b in self.buckets.items() if now_ms - b.last_ms > IDLE_EXPIRY_MS]:
            del self.buckets[tags]

    def configure_windows(self, samples: int, window_ms: int) -> None:
        """New window settings start every rate afresh (old samples do not fit the new windows)."""
        if (samples, window_ms) != (self.samples, self.window_ms):
            self.samples, self.window_ms = samples, window_ms
            self.rates.clear()

    def sample(self, key: str, tags: Tags, value: float, now_ms: int) -> float:
        """Add ``value`` to the sampled rate of (key, tags), which no bound applies to; the rate now."""
        rate = self._rate(key, tags, now_ms)
        rate.record(value, now_ms)
        return rate.rate(now_ms)

    def _rate(self, key: str, tags: Tags, now_ms: int) -> SampledRate:
        rate = self.rates.get((key, tags))
        if rate is None:
            rate = self.rates[(key, tags)] = SampledRate(self.samples, self.window_ms, now_ms)
        return rate

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> Recorded | None:
        """Add ``value`` to the connection's rate for ``key``; None when no quota applies to it."""
        found = resolve(self.quotas, key, user, client_id)
        if found is None:
            return None
        _, tags, bound = found
        rate = self._rate(key, tags, now_ms)
        rate.record(value, now_ms)
        measured = rate.rate(now_ms)
        return Recorded(throttle_time_ms(measured, bound, rate.window_size_ms(now_ms)), tags, bound, measured)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers empty: its bytes were never sent)."""
        found = resolve(self.quotas, key, user, client_id)
        if found is not None:
            self._rate(key, found[1], now_ms).record(-value, now_ms)

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """Kafka's cap on one fetch response: bound * (samples - 1) * window seconds; None if unlimited."""
        found = resolve(self.quotas, key, user, client_id)
        if found is None:
            return None
        return found[2] * (self.samples - 1) * self.window_ms / 1000.0

    def mutation_quota(self, user: str, client_id: str, strict: bool, burst_s: float,
                       now_ms: int) -> tuple[MutationQuota, Tags] | None:
        """The connection's controller_mutation_rate bucket for one request (a burst of ``burst_s``
        seconds of the quota), and who shares it; None when no quota applies."""
        found = resolve(self.quotas, CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None:
            return None
        _, tags, bound = found
        burst = bound * burst_s
        bucket = self.buckets.get(tags)
        if bucket is None:
            bucket = self.buckets[tags] = TokenBucket(burst, now_ms)
        return MutationQuota(bucket, bound, burst, strict), tags
