"""Priority tiers: the rules operators and the saturation rule set, and how the broker measures disks."""

from __future__ import annotations

from tidelog.broker.tier_runtime import TierRuntime, io_ticks
from tidelog.common.config import BrokerConfig
from tidelog.observability.registry import Registry
from tidelog.quotas.tiers import HIGH, LOW, MEDIUM, Saturation, combine


def test_high_is_never_held_back_by_tier_rules() -> None:
    rules = combine({HIGH: 10.0, LOW: 100.0}, frozenset({HIGH}), level=3, auto_rate=5.0, auto_reason="x")
    assert rules.rate_of(HIGH) is None
    assert not rules.is_paused(HIGH)


def test_the_tighter_of_the_operator_and_saturation_throttles_wins() -> None:
    rules = combine({MEDIUM: 1000.0, LOW: 10.0}, frozenset(), level=2, auto_rate=500.0, auto_reason="network")
    assert rules.rate_of(MEDIUM) == 500.0
    assert rules.reasons[MEDIUM] == "saturation: network"
    assert rules.rate_of(LOW) == 10.0
    assert rules.reasons[LOW].startswith("operator")


def test_saturation_throttles_low_first_then_medium_then_pauses_low() -> None:
    expected = [
        (1, {LOW}, set()),
        (2, {LOW, MEDIUM}, set()),
        (3, {LOW, MEDIUM}, {LOW}),
    ]
    for level, throttled, paused in expected:
        rules = combine({}, frozenset(), level, 100.0, "disk")
        assert {t for t in (MEDIUM, LOW) if rules.rate_of(t) is not None} == throttled
        assert {t for t in (MEDIUM, LOW) if rules.is_paused(t)} == paused


def test_saturation_steps_up_above_high_holds_between_and_steps_down_below_low() -> None:
    s = Saturation(high=0.9, low=0.7)
    assert s.step(0.95, "network") == "level 1: network utilisation 0.95 above 0.90"
    assert s.reason == "network utilisation 0.95 above 0.90"
    assert s.step(0.99, "disk") and s.step(0.99, "disk") and s.level == 3
    assert s.step(0.99, "disk") is None and s.level == 3  # the top
    assert s.step(0.8, "disk") is None and s.level == 3  # between the thresholds: hold
    assert s.step(0.1, "disk") == "level 2: disk utilisation 0.10 below 0.70"
    assert s.reason == "disk utilisation 0.99 above 0.90"  # still why the tiers are held back
    for level in (1, 0):
        assert s.step(0.1, "disk") and s.level == level
    assert s.reason == ""


def test_disk_busy_time_is_read_from_diskstats() -> None:
    text = ("   8       0 sda 100 0 200 300 400 0 500 600 0 700 800 0 0 0 0\n"
            "   8       1 sda1 1 0 2 3 4 0 5 6 0 7 8 0 0 0 0\n")
    assert io_ticks({"sda"}, text) == {"sda": 700}


def test_the_runtime_throttles_a_tier_and_reports_why() -> None:
    config = BrokerConfig({"log.dirs": "/tmp/x", "quota.tier.low.byte.rate": 1000})
    registry = Registry()
    now = [0]
    tiers = TierRuntime(config, registry, lambda: now[0])
    assert tiers.record(HIGH, "produce", 10**9) == 0
    assert tiers.record(MEDIUM, "produce", 10**9) == 0
    assert tiers.record(LOW, "produce", 5000) == 0  # 5000 B over the 10 s floor: 500 B/s
    assert tiers.record(LOW, "produce", 10_000) > 0
    assert registry.get("tidelog_quota_tier_held") is not None
    assert "operator: throttled to 1000 B/s" in registry.render()


def test_the_saturation_level_follows_utilisation_only_when_enabled() -> None:
    config = BrokerConfig({"log.dirs": "/tmp/x"})
    tiers = TierRuntime(config, Registry(), lambda: 0)
    tiers.observe(network=2.0, disk=0.0)
    assert tiers.saturation.level == 0
    config.dynamic = {"quota.tier.auto.enable": True}
    tiers.observe(network=2.0, disk=0.0)
    assert tiers.saturation.level == 1 and tiers.current_rules().rate_of(LOW) is not None
    tiers.observe(network=0.0, disk=0.0)
    assert tiers.saturation.level == 0 and tiers.current_rules().rate_of(LOW) is None
