"""Connection limits with Kafka's names and meaning (KIP-402, KIP-612), decided without sockets.

``ConnectionLimits.admit(listener, address, now)`` decides one new connection and counts it if it is
admitted; ``closed(listener, address)`` forgets it. The settings are read at every decision (Kafka lets
them change at run time):

- ``max.connections``: open connections on the broker; ``listener.name.<l>.max.connections``:
  on one listener. The inter-broker listener is exempt from the broker-wide limit (not from its own),
  so brokers can always reach each other.
- ``max.connections.per.ip``: open connections from one address, on all listeners;
  ``max.connections.per.ip.overrides`` (``host:count,host:count``; a host name is resolved when the
  setting is read) gives some addresses another limit (``0`` refuses them). With
  ``max.connections.per.ip=0`` only the addresses named in the overrides may connect.
- ``max.connection.creation.rate``: new connections per second on the broker (the inter-broker
  listener exempt) and, as ``listener.name.<l>.max.connection.creation.rate``, on one listener. A
  token bucket holding one second's worth of connections; refused connections take no token.

Kafka blocks its acceptor at ``max.connections`` and delays accepts past the creation rate; tidelog
closes the connection at once instead (the client sees it closed and retries with its back-off,
rather than hanging in the listen backlog). Refused connections are never counted as open.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

UNLIMITED = 2**31 - 1  # Kafka's Int.MaxValue default


def parse_overrides(raw: str, resolve: Callable[[str], list[str]] | None = None) -> dict[str, int]:
    """``host:count,host:count`` → {address: count}. Raises ValueError on a malformed entry."""
    resolve = resolve or _addresses
    limits: dict[str, int] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"expected host:count, not {item!r}")
        for address in resolve(host.strip().strip("[]")):
            limits[address] = int(count)
    return limits




def _addresses(host: str) -> list[str]:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return [host]
    except OSError:
        pass
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
    except OSError:
        return []  # an unknown name limits nobody (Kafka refuses the setting; we keep serving)


@dataclass(frozen=True)
class Limits:
    """The limits in force for one decision (read from the configuration each time)."""

    max_connections: int = UNLIMITED
    listener_max: int = UNLIMITED
    per_ip: int = UNLIMITED
    per_ip_overrides: dict[str, int] | None = None
    creation_rate: int = UNLIMITED
    listener_creation_rate: int = UNLIMITED
    inter_broker: bool = False  # the connection is on the inter-broker listener


class _Bucket:
    """``rate`` tokens a second, holding at most one second's worth."""

    def __init__(self) -> None:
        self.tokens = -1.0  # full on first use
        self.at = 0.0

    def take(self, rate: int, now: float) -> bool:
        if rate >= UNLIMITED:
            return True
        self.tokens = rate if self.tokens < 0 else min(float(rate), self.tokens + (now - self.at) * rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class ConnectionLimits:
    """Open connections by listener and address, and the creation-rate buckets."""

    def __init__(self) -> None:
        self.total = 0
        self.by_listener: Counter[str] = Counter()
        self.by_address: Counter[str] = Counter()
        self._broker_bucket = _Bucket()
        self._listener_buckets: dict[str, _Bucket] = {}

    def admit(self, listener: str, address: str, limits: Limits, now: float) -> str | None:
        """None (and the connection is counted) or why it is refused: ``max.connections``,
        ``max.connections.per.ip`` or ``max.connection.creation.rate``."""
        if self.by_listener[listener] >= limits.listener_max:
            return "max.connections"
        if not limits.inter_broker and self.total >= limits.max_connections:
            return "max.connections"
        overrides = limits.per_ip_overrides or {}
        if self.by_address[address] >= overrides.get(address, limits.per_ip):
            return "max.connections.per.ip"
        bucket = self._listener_buckets.setdefault(listener, _Bucket())
        if limits.listener_creation_rate < UNLIMITED and not _peek(bucket, limits.listener_creation_rate, now):
            return "max.connection.creation.rate"
        if not limits.inter_broker and not self._broker_bucket.take(limits.creation_rate, now):
            return "max.connection.creation.rate"
        bucket.take(limits.listener_creation_rate, now)
        self.total += 1
        self.by_listener[listener] += 1
        self.by_address[address] += 1
        return None

    def closed(self, listener: str, address: str) -> None:
        self.total -= 1
        self.by_listener[listener] -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]  # addresses come and go: keep only those with connections


def _peek(bucket: _Bucket, rate: int, now: float) -> bool:
    """Would ``bucket`` give a token now (without taking it)?"""
    tokens = rate if bucket.tokens < 0 else min(float(rate), bucket.tokens + (now - bucket.at) * rate)
    return tokens >= 1
