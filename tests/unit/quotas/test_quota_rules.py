"""Kafka's quota entities, key checks, describe filters, precedence and sampled-rate throttle maths."""

from __future__ import annotations

import pytest

from tidelog.common.errors import ErrorCode
from tidelog.quotas.entity import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QuotaError,
    QuotaFilter,
    alter,
    entity,
    validate_entity,
)
from tidelog.quotas.manager import QuotaManager, resolve
from tidelog.quotas.rate import SampledRate, throttle_time_ms


@pytest.mark.parametrize(("components", "message"), [
    ([], "Invalid empty client quota entity"),
    ([("user", "a"), ("user", "b")], "Invalid empty client quota entity, duplicate entity entry user"),
    ([("group", "g")], "Unhandled client quota entity type: group"),
    ([("user", "")], "Empty user not supported"),
    ([("ip", "not-an-ip")], "not-an-ip is not a valid IP or resolvable host."),
    ([("ip", "10.0.0.1"), ("user", "a")], "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
])
def test_bad_entities_are_refused_with_kafkas_words(components: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(QuotaError) as caught:
        validate_entity(components)
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    assert str(caught.value) == message


@pytest.mark.parametrize(("key", "value", "message"), [
    ("bogus_rate", 1.0, "Invalid configuration key bogus_rate"),
    ("producer_byte_rate", -5.0, "Quota producer_byte_rate must be greater than 0"),
    ("producer_byte_rate", 0.0, "Quota producer_byte_rate must be greater than 0"),
    ("producer_byte_rate", 1.5, "producer_byte_rate cannot be a fractional value."),
    ("consumer_byte_rate", 2.0**64, "Proposed value for consumer_byte_rate is too large for a LONG."),
    ("connection_creation_rate", 1.0, "Invalid configuration key connection_creation_rate"),
    ("tidelog.tier", 3.0, "tidelog.tier must be 0 (high), 1 (medium) or 2 (low)"),
])
def test_bad_values_are_refused(key: str, value: float, message: str) -> None:
    _, keys = validate_entity([("user", "alice")])
    with pytest.raises(QuotaError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        alter({}, keys, [(key, value, False)])


def test_ip_entities_take_only_the_connection_rate() -> None:
    _, keys = validate_entity([("ip", None)])
    assert alter({}, keys, [("connection_creation_rate", 10.0, False)]) == {"connection_creation_rate": 10.0}
    with pytest.raises(QuotaError, match="too large for an INT"):
        alter({}, keys, [("connection_creation_rate", 2.0**31, False)])


def test_alter_sets_removes_and_refuses_a_key_named_twice() -> None:
    _, keys = validate_entity([("client-id", "app")])
    values = alter({"producer_byte_rate": 10.0, "request_percentage": 50.0}, keys,
                   [("producer_byte_rate", 0.0, True), ("request_percentage", 12.5, False)])
    assert values == {"request_percentage": 12.5}
    with pytest.raises(QuotaError, match="Duplicate quota key producer_byte_rate"):
        alter({}, keys, [("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)])


QUOTAS = {
    entity(user="alice"): {"producer_byte_rate": 100.0},
    entity(user="alice", client_id="etl"): {"consumer_byte_rate": 5.0},
    entity(user=None): {"producer_byte_rate": 10.0},
    entity(client_id=None): {"consumer_byte_rate": 7.0},
    entity(ip="10.0.0.1"): {"connection_creation_rate": 3.0},
}


@pytest.mark.parametrize(("components", "strict", "expected"), [
    ([("user", MATCH_EXACT, "alice")], False, [entity(user="alice"), entity(user="alice", client_id="etl")]),
    ([("user", MATCH_EXACT, "alice")], True, [entity(user="alice")]),
    ([("user", MATCH_DEFAULT, None)], False, [entity(user=None)]),
    ([("client-id", MATCH_SPECIFIED, None)], False, [entity(user="alice", client_id="etl"), entity(client_id=None)]),
    ([("ip", MATCH_SPECIFIED, None)], True, [entity(ip="10.0.0.1")]),
    ([], False, list(QUOTAS)),
])
def test_describe_filters_match_as_kafka_does(components: list[tuple[str, int, str | None]], strict: bool, expected: list[object]) -> None:
    flt = QuotaFilter(components, strict)
    assert [e for e in QUOTAS if flt.matches(e)] == expected


@pytest.mark.parametrize(("components", "code"), [
    ([("user", MATCH_EXACT, None)], ErrorCode.INVALID_REQUEST),
    ([("user", MATCH_DEFAULT, "x")], ErrorCode.INVALID_REQUEST),
    ([("user", MATCH_EXACT, "a"), ("user", MATCH_DEFAULT, None)], ErrorCode.INVALID_REQUEST),
    ([("group", MATCH_EXACT, "g")], ErrorCode.UNSUPPORTED_VERSION),
    ([("user", 9, None)], ErrorCode.INVALID_REQUEST),
    ([("ip", MATCH_SPECIFIED, None), ("user", MATCH_SPECIFIED, None)], ErrorCode.INVALID_REQUEST),
])
def test_bad_filters_are_refused_whole(components: list[tuple[str, int, str | None]], code: ErrorCode) -> None:
    with pytest.raises(QuotaError) as caught:
        QuotaFilter(components, False)
    assert caught.value.code is code


@pytest.mark.parametrize(("configured", "user", "client", "entity_found", "tags"), [
    ([entity(user="u", client_id="c"), entity(user="u")], "u", "c", entity(user="u", client_id="c"), ("u", "c")),
    ([entity(user="u", client_id=None), entity(user="u")], "u", "c", entity(user="u", client_id=None), ("u", "c")),
    ([entity(user="u"), entity(user=None, client_id="c")], "u", "c", entity(user="u"), ("u", "")),
    ([entity(user=None, client_id="c"), entity(user=None)], "u", "c", entity(user=None, client_id="c"), ("u", "c")),
    ([entity(user=None, client_id=None), entity(user=None)], "u", "c", entity(user=None, client_id=None), ("u", "c")),
    ([entity(user=None), entity(client_id="c")], "u", "c", entity(user=None), ("u", "")),
    ([entity(client_id="c"), entity(client_id=None)], "u", "c", entity(client_id="c"), ("", "c")),
    ([entity(client_id=None)], "u", "c", entity(client_id=None), ("", "c")),
])
def test_precedence_is_kafkas(configured: list[object], user: str, client: str, entity_found: object, tags: tuple[str, str]) -> None:
    quotas = {e: {"producer_byte_rate": 1.0} for e in configured}  # type: ignore[misc]
    found = resolve(quotas, "producer_byte_rate", user, client)  # type: ignore[arg-type]
    assert found is not None
    assert found[:2] == (entity_found, tags)


def test_each_key_resolves_separately() -> None:
    assert resolve(QUOTAS, "consumer_byte_rate", "alice", "other") == (entity(client_id=None), ("", "other"), 7.0)
    assert resolve(QUOTAS, "request_percentage", "alice", "etl") is None


def test_a_new_rate_counts_at_least_the_whole_window_but_one() -> None:
    rate = SampledRate(11, 1000, now_ms=0)
    rate.record(10_000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.rate(0) == pytest.approx(1000.0)


def test_old_windows_expire_and_the_rate_follows_the_recent_ones() -> None:
    rate = SampledRate(3, 1000, now_ms=0)
    for second in range(10):
        rate.record(500, second * 1000)
    # the live windows hold the last three seconds: 1500 bytes over 2 s (+ the ms since the oldest began)
    assert rate.rate(9000) == pytest.approx(750.0)
    assert rate.rate(20_000) == 0.0


def test_throttle_brings_the_rate_back_to_the_bound() -> None:
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5000
    assert throttle_time_ms(90.0, 100.0, 10_000) == 0
    rate = SampledRate(11, 1000, now_ms=0)
    rate.record(2000, 0)  # 2000 bytes over a 10 s window: 200 B/s against a bound of 100
    wait = throttle_time_ms(rate.rate(0), 100.0, rate.window_size_ms(0))
    assert wait == 10_000  # 2000 bytes over 10 s + 10 s of silence: 100 B/s


def test_a_producer_held_to_its_quota_by_the_throttle_it_is_given() -> None:
    manager = QuotaManager(11, 1000)
    manager.update({entity(user="alice"): {"producer_byte_rate": 1000.0}}, 0)
    now, sent = 0, 0
    while now < 60_000:
        recorded = manager.record("producer_byte_rate", "alice", "any", 500, now)
        assert recorded is not None
        sent += 500
        now += 50 + recorded.throttle_ms  # a client that waits what it is told between requests
    assert sent / (now / 1000) == pytest.approx(1000.0, rel=0.1)


def test_a_fetch_is_capped_at_what_the_window_holds_and_unrecorded_when_throttled() -> None:
    manager = QuotaManager(11, 1000)
    manager.update({entity(client_id=None): {"consumer_byte_rate": 100.0}}, 0)
    assert manager.max_value_in_window("consumer_byte_rate", "u", "c") == 1000.0
    assert manager.max_value_in_window("producer_byte_rate", "u", "c") is None
    recorded = manager.record("consumer_byte_rate", "u", "c", 5000, 0)
    assert recorded is not None and recorded.throttle_ms > 0
    manager.unrecord("consumer_byte_rate", "u", "c", 5000, 0)
    assert manager.rates[("consumer_byte_rate", ("", "c"))].total(0) == 0.0


def test_users_without_a_quota_are_not_measured() -> None:
    manager = QuotaManager()
    manager.update({entity(user="alice"): {"producer_byte_rate": 1.0}}, 0)
    assert manager.record("producer_byte_rate", "bob", "c", 10**9, 0) is None
    assert not manager.rates
