"""Synthetic clusters for tests, property tests and the bench (pure, seeded).

``synthetic_cluster`` places ``partitions`` partitions of ``topics`` topics on ``brokers`` brokers in
``racks`` racks with a rack-aware round robin, then skews it: the first ``hot_brokers`` brokers get
``skew`` times their share of the leaders' traffic and of the bytes (what happens when a few topics
grow on old brokers, or brokers are added empty: ``empty_brokers`` brokers at the end get nothing).
"""

from __future__ import annotations

import random
from array import array

from tidelog.governor.model import ClusterModel


def synthetic_cluster(*, brokers: int = 6, racks: int = 3, topics: int = 4, partitions: int = 48, rf: int = 3,
                      seed: int = 1, disk_capacity: int = 10 * 2**30, mean_size: int = 50 * 2**20,
                      hot_brokers: int = 1, skew: float = 3.0, empty_brokers: int = 0,
                      max_size_spread: float = 0.5) -> ClusterModel:
    if rf > brokers - empty_brokers:
        raise ValueError("replication factor larger than the brokers that hold replicas")
    rng = random.Random(seed)
    rack_of = tuple(b % racks for b in range(brokers))
    placed = brokers - empty_brokers
    # brokers interleaved by rack, so consecutive positions are on distinct racks when racks >= rf
    order = sorted(range(placed), key=lambda b: (b // racks, b % racks))
    replicas: list[tuple[int, ...]] = []
    p_topic, p_index = array("i"), array("i")
    sizes, bytes_in, bytes_out, msgs = array("q"), array("d"), array("d"), array("d")
    per_topic = max(1, partitions // topics)
    for p in range(partitions):
        start = rng.randrange(placed)
        chosen = tuple(order[(start + k * max(1, placed // rf)) % placed] for k in range(rf))
        if len(set(chosen)) < rf:
            chosen = tuple(order[(start + k) % placed] for k in range(rf))
        replicas.append(chosen)
        p_topic.append(min(p // per_topic, topics - 1))
        p_index.append(p - p_topic[-1] * per_topic)
        hot = chosen[0] < hot_brokers
        factor = skew if hot else 1.0
        size = int(mean_size * factor * (1 + rng.uniform(-max_size_spread, max_size_spread)))
        sizes.append(size)
        rate = size / 3600.0
        bytes_in.append(rate)
        bytes_out.append(rate * rng.choice((1.0, 2.0)))
        msgs.append(rate / 512)
    n = brokers
    return ClusterModel(
        broker_ids=tuple(range(1, n + 1)), broker_rack=rack_of, rack_names=tuple(f"rack-{r}" for r in range(racks)),
        alive=(True,) * n, excluded=(False,) * n, disk_capacity=array("q", [disk_capacity] * n),
        topics=tuple(f"topic-{t}" for t in range(topics)), p_topic=p_topic, p_index=p_index,
        replicas=tuple(replicas), leader=array("i", [r[0] for r in replicas]), size=sizes, bytes_in=bytes_in,
        bytes_out=bytes_out, messages_in=msgs, exclusion_reasons=("",) * n,
    )
