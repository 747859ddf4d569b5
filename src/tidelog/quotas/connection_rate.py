"""Per-IP connection creation rates: the ``connection_creation_rate`` quota of ``ip`` entities (KIP-612).

The bound of an address is the ``connection_creation_rate`` of the entity ``ip=<address>``, else of
``ip=<default>``, else none (the address is not measured). Each measured address has one
``SampledRate`` (``quota.window.num`` windows of ``quota.window.size.seconds``, as every client
quota), kept for an hour after its last connection.

A new connection is recorded; if the address's rate is then over its bound the connection is
throttled: its record is taken back (a throttled connection never counts as created) and the
throttle time is Kafka's ``(rate - bound) / bound x window``, capped at one window
(``quota.window.size.seconds``; Kafka's ``boundedThrottleTime``). The caller holds the throttled
connection unread for that long and then closes it (Kafka's delayed close), so a client that
reconnects at once cannot spin through refused connections faster than its quota allows.

Addresses are compared in their canonical form (``ipaddress``): ``::ffff:10.0.0.7`` from a
dual-stack listener and the entity ``10.0.0.7`` are the same address; so are two spellings of an IPv6
address. Nothing here reads a clock or touches a socket.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from tidelog.quotas.entity import CONNECTION_CREATION_RATE, IP, Entity
from tidelog.quotas.rate import SampledRate, throttle_time_ms

IDLE_EXPIRY_MS = 3_600_000


def canonical(address: str) -> str:
    """``address`` as one spelling per IP (an IPv4-mapped IPv6 address as its IPv4 form); a string
    that is not an address is kept as it is."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


def ip_bounds(quotas: Mapping[Entity, Mapping[str, float]]) -> tuple[dict[str, float], float | None]:
    """The per-address bounds and the default bound configured in ``quotas``."""
    by_address: dict[str, float] = {}
    default: float | None = None
    for entity, values in quotas.items():
        if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
            continue
        name = entity[0][1]
        if name is None:
            default = values[CONNECTION_CREATION_RATE]
        else:
            by_address[canonical(name)] = values[CONNECTION_CREATION_RATE]
    return by_address, default


class IpConnectionRates:
    """The sampled connection creation rate of every measured address."""

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.rates: dict[str, SampledRate] = {}
        self._quotas: Mapping[Entity, Mapping[str, float]] | None = None
        self._bounds: tuple[dict[str, float], float | None] = ({}, None)

    def configure(self, quotas: Mapping[Entity, Mapping[str, float]], samples: int, window_ms: int, now_ms: int) -> None:
        """Follow the configured quotas and window settings (new windows start every rate afresh)."""
        if (samples, window_ms) != (self.samples, self.window_ms):
            self.samples, self.window_ms = samples, window_ms
            self.rates.clear()
        if quotas is not self._quotas:
            self._quotas = quotas
            self._bounds = ip_bounds(quotas)
            for address in [a for a, r in self.rates.items() if now_ms - r.last_record_ms > IDLE_EXPIRY_MS]:
                del self.rates[address]

    def bound(self, address: str) -> float | None:
        """The connection_creation_rate ``address`` is held to; None when it is not limited."""
        by_address, default = self._bounds
        return by_address.get(canonical(address), default)

    def record(self, address: str, now_ms: int) -> tuple[int, float, float]:
        """A new connection from ``address``: (throttle ms, the address's rate, its bound). A
        throttled connection's record is taken back. An unlimited address: (0, 0.0, 0.0)."""
        bound = self.bound(address)
        if bound is None:
            return 0, 0.0, 0.0
        key = canonical(address)
        rate = self.rates.get(key)
        if rate is None:
            rate = self.rates[key] = SampledRate(self.samples, self.window_ms, now_ms)
        rate.record(1.0, now_ms)
        measured = rate.rate(now_ms)
        throttle = min(throttle_time_ms(measured, bound, rate.window_size_ms(now_ms)), self.window_ms)
        if throttle > 0:
            rate.record(-1.0, now_ms)
        return throttle, measured, bound
