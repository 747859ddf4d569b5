"""The replication throttle's maths (replication/quota.py) and which replicas it applies to (throttle.py)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from tidelog.common.config import TOPIC_SETTINGS, BrokerConfig, split_dynamic, with_dynamic
from tidelog.common.errors import ConfigError
from tidelog.metadata.image import ClusterImage, PartitionImage, TopicImage
from tidelog.observability.registry import Registry
from tidelog.replication.quota import UNLIMITED, ReplicationQuota, ThrottledReplicas
from tidelog.replication.throttle import FOLLOWER, LEADER, ReplicationThrottles


def test_an_unlimited_quota_is_never_exceeded() -> None:
    quota = ReplicationQuota()
    quota.record(10**12, 0.0)
    assert quota.bound == UNLIMITED and not quota.exceeded(0.0)


def test_a_quota_holds_a_steady_copy_to_its_rate() -> None:
    """A copier that sends a 256 KiB chunk whenever the quota is not exceeded moves bound * time bytes."""
    quota = ReplicationQuota(bound=2_000_000)
    sent, now, step = 0, 0.0, 0.01
    while now < 30.0:
        if not quota.exceeded(now):
            quota.record(262_144, now)
            sent += 262_144
        now += step
    assert sent / 30.0 == pytest.approx(2_000_000, rel=0.02)


def test_the_first_second_is_not_a_free_burst() -> None:
    """Kafka measures a new quota over 10 windows and lets 10 s of bytes through at once; this one does not."""
    quota = ReplicationQuota(bound=1_000_000)
    quota.record(1_500_000, 0.0)
    assert quota.exceeded(0.1)
    assert quota.delay(0.1) == pytest.approx(1.4)
    assert not quota.exceeded(1.6)


def test_old_windows_stop_counting() -> None:
    quota = ReplicationQuota(bound=1000, samples=3, window_s=1.0)
    quota.record(10_000, 0.0)
    assert quota.exceeded(2.5)
    assert quota.rate(3.5) == 0.0 and not quota.exceeded(3.5)


@pytest.mark.parametrize(("entries", "broker", "partitions", "every"), [
    (["*"], 1, set(), True),
    (["0:1", "1:2", "2:1"], 1, {0, 2}, False),
    (["0:1", "1:2"], 3, set(), False),
    ([], 1, set(), False),
])
def test_a_throttle_list_counts_the_entries_naming_this_broker(
    entries: list[str], broker: int, partitions: set[int], every: bool,
) -> None:
    parsed = ThrottledReplicas.parse(entries, broker)
    assert (parsed.every, set(parsed.partitions)) == (every, partitions)


@pytest.mark.parametrize("raw", ["0:1,*", "a:1", "0", "0:x", "*,*"])
def test_a_malformed_throttle_list_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match="partitionId"):
        TOPIC_SETTINGS["leader.replication.throttled.replicas"].parse(raw)


def test_a_negative_throttle_rate_is_refused() -> None:
    from tidelog.common.config import BROKER_SETTINGS

    with pytest.raises(ConfigError, match="at least 0"):
        BROKER_SETTINGS["follower.replication.throttled.rate"].parse("-1")


def test_per_broker_dynamic_values_win_over_the_cluster_default() -> None:
    stored = with_dynamic({}, None, {"leader.replication.throttled.rate": 100})
    stored = with_dynamic(stored, 2, {"leader.replication.throttled.rate": 50})
    stored = with_dynamic(stored, 3, {"leader.replication.throttled.rate": 7})
    assert split_dynamic(stored, 2) == ({"leader.replication.throttled.rate": 100}, {"leader.replication.throttled.rate": 50})
    config = BrokerConfig()
    config.load_dynamic(stored, 2)
    assert config.get("leader.replication.throttled.rate") == 50
    config.load_dynamic(with_dynamic(stored, 2, {}), 2)
    assert config.get("leader.replication.throttled.rate") == 100


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _image(configs: dict[str, object]) -> ClusterImage:
    topic = TopicImage("t", __import__("uuid").uuid4(), (PartitionImage(0, 1, 0, (1, 2), (1,)),), MappingProxyType(configs))  # type: ignore[arg-type]
    return ClusterImage("c", topics=MappingProxyType({"t": topic}))


def test_only_listed_partitions_behind_the_isr_are_throttled_and_every_listed_byte_counts() -> None:
    config = BrokerConfig()
    config.per_broker["leader.replication.throttled.rate"] = 1000
    clock = _Clock()
    image = _image({"leader.replication.throttled.replicas": ["0:1"]})
    registry = Registry()
    throttles = ReplicationThrottles(1, config, lambda: image, registry, clock)
    assert not throttles.throttled(LEADER, ("t", 0), in_sync=False)  # nothing recorded yet
    throttles.record(LEADER, 5000)
    assert throttles.throttled(LEADER, ("t", 0), in_sync=False)
    assert not throttles.throttled(LEADER, ("t", 0), in_sync=True)   # an ISR member is spared
    assert not throttles.throttled(FOLLOWER, ("t", 0), in_sync=False)  # not in the follower list
    assert not throttles.throttled(LEADER, ("other", 0), in_sync=False)
    assert throttles.bytes.value((LEADER,)) == 5000
    assert throttles.skipped.value((LEADER,)) == 1
    config.per_broker["leader.replication.throttled.rate"] = 10_000  # a dynamic change applies at once
    assert not throttles.throttled(LEADER, ("t", 0), in_sync=False)
