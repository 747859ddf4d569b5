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


def small_cluster(brokers: list[tuple[int, str]], partitions: list[tuple[str, list[int], int, float, float]], *,
                  disk_capacity: int = 1000, leaders: list[int] | None = None,
                  tenants: dict[str, tuple[str, set[int]]] | None = None) -> ClusterModel:
    """A hand-written cluster for unit tests: brokers as (id, rack); partitions as (topic, replica ids,
    size, bytes in/s, bytes out/s), numbered per topic in order; ``tenants``: topic -> (tenant, broker ids)."""
    from tidelog.governor.model import NO_TENANT, group_racks

    ids = tuple(b for b, _ in brokers)
    index = {b: i for i, b in enumerate(ids)}
    rack_of, rack_names = group_racks([r for _, r in brokers], None)
    topics: list[str] = []
    p_topic, p_index = array("i"), array("i")
    counts: dict[str, int] = {}
    for topic, *_ in partitions:
        if topic not in topics:
            topics.append(topic)
        p_topic.append(topics.index(topic))
        p_index.append(counts.get(topic, 0))
        counts[topic] = counts.get(topic, 0) + 1
    replicas = tuple(tuple(index[b] for b in r) for _, r, *_ in partitions)
    tenant_names: list[str] = []
    pools: list[frozenset[int]] = []
    topic_tenant = [NO_TENANT] * len(topics)
    for topic, (tenant, pool) in (tenants or {}).items():
        if tenant not in tenant_names:
            tenant_names.append(tenant)
            pools.append(frozenset(index[b] for b in pool))
        if topic in topics:
            topic_tenant[topics.index(topic)] = tenant_names.index(tenant)
    n = len(ids)
    return ClusterModel(
        broker_ids=ids, broker_rack=rack_of, rack_names=rack_names, alive=(True,) * n, excluded=(False,) * n,
        disk_capacity=array("q", [disk_capacity] * n), topics=tuple(topics), p_topic=p_topic, p_index=p_index,
        replicas=replicas, leader=array("i", [index[b] for b in leaders] if leaders else [r[0] for r in replicas]),
        size=array("q", [p[2] for p in partitions]), bytes_in=array("d", [p[3] for p in partitions]),
        bytes_out=array("d", [p[4] for p in partitions]), messages_in=array("d", [0.0] * len(partitions)),
        topic_tenant=tuple(topic_tenant) if tenants else (), tenant_names=tuple(tenant_names),
        tenant_brokers=tuple(pools), exclusion_reasons=("",) * n,
    )
