"""This broker's replication throttles: its two quotas, the topics' throttle lists, and their metrics.

The leader side (``broker/handlers/fetch.py``) and the follower fetchers (``fetcher.py``) ask
:class:`ReplicationThrottles` whether a partition is throttled now and record the bytes they move;
the rules are those of ``quota.py``. Rates are read from the broker config on every check, so a
dynamic change (IncrementalAlterConfigs, on this broker or as the cluster default) applies at the
next fetch; throttle lists are read from the image's topic configs and parsed once per version.

Metrics (Prometheus names; Kafka's LeaderReplication / FollowerReplication byte-rate):

- ``tidelog_replication_throttled_bytes_total{side}``: bytes of partitions in a throttle list, served
  (leader) or copied (follower);
- ``tidelog_replication_throttled_partitions_total{side}``: partitions left out of a fetch because the
  quota was exceeded;
- ``tidelog_replication_throttle_rate_bytes{side}``: the measured rate at the last record.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tidelog.common.config import BrokerConfig, Value
from tidelog.metadata.image import ClusterImage
from tidelog.observability.registry import Registry
from tidelog.replication.quota import NOTHING, ReplicationQuota, ThrottledReplicas

TopicPartition = tuple[str, int]
LEADER, FOLLOWER = "leader", "follower"
_RATE_KEY = {LEADER: "leader.replication.throttled.rate", FOLLOWER: "follower.replication.throttled.rate"}
_LIST_KEY = {LEADER: "leader.replication.throttled.replicas", FOLLOWER: "follower.replication.throttled.replicas"}


class ReplicationThrottles:
    def __init__(
        self, node_id: int, config: BrokerConfig, image: Callable[[], ClusterImage], registry: Registry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.image = image
        self.clock = clock
        samples = config.get_int("replication.quota.window.num")
        window = float(config.get_int("replication.quota.window.size.seconds"))
        self.quotas = {side: ReplicationQuota(samples=samples, window_s=window) for side in (LEADER, FOLLOWER)}
        self._lists: dict[tuple[str, str], tuple[Value, ThrottledReplicas]] = {}
        registry = registry or Registry()
        self.bytes = registry.counter(
            "tidelog_replication_throttled_bytes_total",
            "Bytes of replicas in a replication throttle list, served to followers (leader) or copied (follower).", ("side",))
        self.skipped = registry.counter(
            "tidelog_replication_throttled_partitions_total",
            "Partitions left out of a replica fetch because the replication throttle's rate was exceeded.", ("side",))
        self.rate = registry.gauge(
            "tidelog_replication_throttle_rate_bytes", "Measured rate of throttled replication, bytes/s.", ("side",))

    def listed(self, side: str, tp: TopicPartition) -> bool:
        """The partition is in this broker's throttle list for ``side``."""
        topic = self.image().topics.get(tp[0])
        if topic is None:
            return False
        raw = topic.configs.get(_LIST_KEY[side])
        if not raw:
            return False
        cached = self._lists.get((side, tp[0]))
        if cached is None or cached[0] is not raw:
            assert isinstance(raw, list)
            parsed = ThrottledReplicas.parse(raw, self.node_id) if raw else NOTHING
            self._lists[(side, tp[0])] = cached = (raw, parsed)
        return tp[1] in cached[1]

    def exceeded(self, side: str) -> bool:
        """The side's quota is over its rate now (False when unlimited)."""
        quota = self.quotas[side]
        quota.set_bound(self.config.get_int(_RATE_KEY[side]))
        return quota.exceeded(self.clock())

    def delay(self, side: str) -> float:
        """Seconds until the side's rate is back under its bound."""
        return self.quotas[side].delay(self.clock())

    def throttled(self, side: str, tp: TopicPartition, in_sync: bool) -> bool:
        """Leave the partition out of this fetch: listed, not in sync, and the quota exceeded (Kafka's rule)."""
        if in_sync or not self.listed(side, tp) or not self.exceeded(side):
            return False
        self.skipped.inc((side,))
        return True

    def record(self, side: str, nbytes: int) -> None:
        if nbytes <= 0:
            return
        now = self.clock()
        quota = self.quotas[side]
        quota.record(nbytes, now)
        labels = (side,)
        self.bytes.inc(labels, nbytes)
        self.rate.set(labels, quota.rate(now))
