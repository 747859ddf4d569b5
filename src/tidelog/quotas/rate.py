"""Kafka's sampled rate and the throttle time of a quota violation.

A ``SampledRate`` keeps ``samples`` windows of ``window_ms`` each (Kafka's ``quota.window.num`` = 11
and ``quota.window.size.seconds`` = 1). A value is added to the current window; a window is complete
once ``window_ms`` has passed since it began, and the next value starts the following window (the
oldest is reused). Windows older than ``samples * window_ms`` are reset before every measurement.

The rate is the sum of the live windows divided by the elapsed time since the oldest one began,
where that time is never taken as less than ``samples - 1`` full windows: a new sensor does not see
a huge rate from its first few bytes (Kafka's ``Rate.windowSize``).

Throttle time (Kafka's ``QuotaUtils.throttleTime``): with rate ``r`` over window ``w`` above bound
``b``, the client must stay silent for ``(r - b) / b * w``: that long with no new bytes brings the
measured rate back to the bound.

Times are milliseconds from any monotonic clock the caller passes in; nothing here reads a clock.
"""

from __future__ import annotations


class SampledRate:
    """Sum of recorded values per second over the last ``samples`` windows."""

    __slots__ = ("_current", "_starts", "_values", "last_record_ms", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int, now_ms: int) -> None:
        if samples < 2 or window_ms < 1:
            raise ValueError("a sampled rate needs at least 2 windows of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self._starts = [now_ms] + [now_ms] * (samples - 1)
        self._values = [0.0] * samples
        self._current = 0
        self.last_record_ms = now_ms

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            self._starts[self._current] = now_ms
            self._values[self._current] = 0.0
        self._values[self._current] += value
        self.last_record_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: int) -> int:
        """Kafka's ``Rate.windowSize``: elapsed since the oldest window, at least samples-1 windows."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(self._values)

    def rate(self, now_ms: int) -> float:
        """Per second."""
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(rate: float, bound: float, window_ms: int) -> int:
    """How long a client over ``bound`` must wait for its rate to fall back to it (0 if not over)."""
    if bound <= 0 or rate <= bound:
        return 0
    return round((rate - bound) / bound * window_ms)
