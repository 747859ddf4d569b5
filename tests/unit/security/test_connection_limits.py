"""Connection limits decided without sockets: Kafka's settings and what each refuses."""

from __future__ import annotations

import pytest

from tidelog.security.connection_limits import ConnectionLimits, Limits, parse_overrides


def admit_many(limits: ConnectionLimits, listener: str, address: str, settings: Limits, count: int, now: float = 0.0) -> list[str | None]:
    return [limits.admit(listener, address, settings, now) for _ in range(count)]


def test_per_address_limit_and_its_overrides() -> None:
    limits = ConnectionLimits()
    settings = Limits(per_ip=2, per_ip_overrides={"10.0.0.9": 5, "10.0.0.66": 0})
    assert admit_many(limits, "L", "10.0.0.1", settings, 3) == [None, None, "max.connections.per.ip"]
    assert admit_many(limits, "L", "10.0.0.9", settings, 6)[-2:] == [None, "max.connections.per.ip"]
    assert limits.admit("L", "10.0.0.66", settings, 0) == "max.connections.per.ip"
    limits.closed("L", "10.0.0.1")
    assert limits.admit("L", "10.0.0.1", settings, 0) is None
    assert limits.total == 7


@pytest.mark.parametrize(("inter_broker", "expected"), [(False, "max.connections"), (True, None)])
def test_broker_limit_spares_the_inter_broker_listener(inter_broker: bool, expected: str | None) -> None:
    limits = ConnectionLimits()
    assert admit_many(limits, "CLIENTS", "a", Limits(max_connections=2), 2) == [None, None]
    assert limits.admit("INTERNAL", "b", Limits(max_connections=2, inter_broker=inter_broker), 0) == expected


def test_listener_limit() -> None:
    limits = ConnectionLimits()
    settings = Limits(listener_max=1)
    assert limits.admit("A", "x", settings, 0) is None
    assert limits.admit("A", "y", settings, 0) == "max.connections"
    assert limits.admit("B", "y", settings, 0) is None


def test_creation_rate_holds_one_seconds_worth_and_refills() -> None:
    limits = ConnectionLimits()
    settings = Limits(creation_rate=3)
    assert admit_many(limits, "L", "a", settings, 4, now=10.0) == [None, None, None, "max.connection.creation.rate"]
    assert limits.admit("L", "a", settings, 10.34) is None  # a third of a second: one more token
    assert limits.admit("L", "a", settings, 10.35) == "max.connection.creation.rate"
    assert limits.total == 4  # refused connections are not counted as open


def test_overrides_parse_addresses_and_names() -> None:
    assert parse_overrides("127.0.0.1:200, [::1]:7,") == {"127.0.0.1": 200, "::1": 7}
    assert parse_overrides("gw:3", resolve=lambda host: ["10.1.1.1", "10.1.1.2"]) == {"10.1.1.1": 3, "10.1.1.2": 3}
    with pytest.raises(ValueError, match="host:count"):
        parse_overrides("127.0.0.1")
