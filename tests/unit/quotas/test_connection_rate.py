"""Per-IP connection_creation_rate (KIP-612): which bound applies, when a connection is throttled, for how long."""

from __future__ import annotations

from tidelog.quotas.connection_rate import IpConnectionRates, canonical

ADDR = "10.0.0.7"


def rates(quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]], samples: int = 2,
          window_ms: int = 1000) -> IpConnectionRates:
    r = IpConnectionRates()
    r.configure(quotas, samples, window_ms, 0)
    return r


def test_an_address_takes_its_own_bound_before_the_default() -> None:
    r = rates({(("ip", ADDR),): {"connection_creation_rate": 3}, (("ip", None),): {"connection_creation_rate": 50}})
    assert r.bound(ADDR) == 3
    assert r.bound("10.0.0.8") == 50


def test_an_address_without_bound_or_default_is_never_throttled_nor_measured() -> None:
    r = rates({(("ip", ADDR),): {"connection_creation_rate": 1}, (("user", None),): {"producer_byte_rate": 1}})
    assert all(r.record("10.0.0.9", t)[0] == 0 for t in range(100))
    assert "10.0.0.9" not in r.rates


def test_connections_past_the_rate_are_throttled_and_not_counted() -> None:
    r = rates({(("ip", ADDR),): {"connection_creation_rate": 5}})  # 2 windows of 1 s: 5 fit in the first second
    outcomes = [r.record(ADDR, 10 * i)[0] for i in range(8)]
    assert outcomes[:5] == [0] * 5
    assert all(t > 0 for t in outcomes[5:])
    assert r.rates[ADDR].total(100) == 5  # throttled connections were taken back off the rate


def test_the_throttle_is_kafkas_time_to_the_bound_capped_at_one_window() -> None:
    r = rates({(("ip", ADDR),): {"connection_creation_rate": 2}}, samples=11)  # rate measured over >= 10 s
    throttles = [r.record(ADDR, 0)[0] for _ in range(21)]
    assert throttles[:20] == [0] * 20
    assert throttles[20] == 500  # (21/10 - 2) / 2 x 10 s
    r.configure({(("ip", ADDR),): {"connection_creation_rate": 1}}, 11, 1000, 0)  # lowered under the burst
    assert r.record(ADDR, 0)[0] == 1000  # (21/10 - 1) / 1 x 10 s = 11 s, held to quota.window.size.seconds


def test_the_rate_recovers_as_time_passes() -> None:
    r = rates({(("ip", ADDR),): {"connection_creation_rate": 2}})
    assert [r.record(ADDR, 0)[0] for _ in range(3)][-1] > 0
    assert r.record(ADDR, 2500)[0] == 0


def test_a_mapped_ipv4_address_and_an_ipv6_spelling_meet_their_entity() -> None:
    r = rates({(("ip", ADDR),): {"connection_creation_rate": 1}, (("ip", "2001:db8::1"),): {"connection_creation_rate": 2}})
    assert r.bound("::ffff:10.0.0.7") == 1
    assert r.bound("2001:0db8:0:0::1") == 2
    assert canonical("not an address") == "not an address"


def test_a_new_image_without_the_quota_lifts_it() -> None:
    r = rates({(("ip", ADDR),): {"connection_creation_rate": 1}})
    r.record(ADDR, 0)
    assert r.record(ADDR, 0)[0] > 0
    r.configure({}, 2, 1000, 10)
    assert r.record(ADDR, 10)[0] == 0
