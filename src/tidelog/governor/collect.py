"""From what the cluster answered (``cluster.Snapshot``) and the brokers' metrics to a ``ClusterModel``.

- Brokers: the registered ones, plus any broker a replica list names that is not registered (alive
  False: no new replica goes there; its replicas move once the healing rules exclude it).
- Racks: ``broker.rack`` through the virtual rack mapping (``rack_groups``).
- Disk capacity: the sum of ``total_bytes`` over a broker's online log dirs (DescribeLogDirs v4+), else
  ``default_disk_capacity``.
- A partition's size: the largest size any of its replicas reports (the leader's, unless it lags).
- Load: each broker's per-topic rates split evenly over the partitions of the topic it leads.
- Tenant pools: ``tenants`` maps a tenant to (broker ids, topic prefixes).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field

from tidelog.governor.cluster import Snapshot
from tidelog.governor.metrics import BrokerLoad
from tidelog.governor.model import NO_TENANT, ClusterModel, group_racks


@dataclass(frozen=True)
class ModelSettings:
    default_disk_capacity: int = 1 << 40
    rack_groups: Mapping[str, str] = field(default_factory=dict)
    tenants: Mapping[str, tuple[frozenset[int], tuple[str, ...]]] = field(default_factory=dict)


def build_model(snapshot: Snapshot, loads: Mapping[int, BrokerLoad], settings: ModelSettings,
                excluded: Mapping[int, str]) -> ClusterModel:
    referenced = {b for p in snapshot.partitions.values() for b in p.replicas}
    ids = tuple(sorted(set(snapshot.brokers) | referenced))
    index = {b: i for i, b in enumerate(ids)}
    racks = [(snapshot.brokers[b].rack or "") if b in snapshot.brokers else "" for b in ids]
    rack_of, rack_names = group_racks(racks, settings.rack_groups)
    capacity = array("q")
    sizes: dict[tuple[str, int], int] = {}
    for b in ids:
        online = [d for d in snapshot.log_dirs.get(b, []) if not d.offline]
        total = sum(d.total_bytes for d in online if d.total_bytes > 0)
        capacity.append(total if total > 0 else settings.default_disk_capacity)
        for d in online:
            for k, bytes_ in d.sizes.items():
                sizes[k] = max(sizes.get(k, 0), bytes_)
    keys = sorted(snapshot.partitions)
    topics = tuple(sorted({t for t, _ in keys}))
    topic_index = {t: i for i, t in enumerate(topics)}
    led: dict[tuple[int, str], int] = {}
    for (t, _p), state in snapshot.partitions.items():
        led[(state.leader, t)] = led.get((state.leader, t), 0) + 1
    p_topic, p_index, leader, size = array("i"), array("i"), array("i"), array("q")
    bytes_in, bytes_out, msgs = array("d"), array("d"), array("d")
    replicas = []
    for t, p in keys:
        state = snapshot.partitions[(t, p)]
        p_topic.append(topic_index[t])
        p_index.append(p)
        replicas.append(tuple(index[b] for b in state.replicas))
        leader.append(index.get(state.leader, -1))
        size.append(sizes.get((t, p), 0))
        load = loads.get(state.leader)
        share = led.get((state.leader, t), 1)
        bytes_in.append(load.bytes_in.get(t, 0.0) / share if load else 0.0)
        bytes_out.append(load.bytes_out.get(t, 0.0) / share if load else 0.0)
        msgs.append(load.messages_in.get(t, 0.0) / share if load else 0.0)
    tenant_names = tuple(sorted(settings.tenants))
    topic_tenant = tuple(_tenant(t, tenant_names, settings) for t in topics)
    pools = tuple(frozenset(index[b] for b in settings.tenants[n][0] if b in index) for n in tenant_names)
    model = ClusterModel(
        broker_ids=ids, broker_rack=rack_of, rack_names=rack_names, alive=tuple(b in snapshot.brokers for b in ids),
        excluded=(False,) * len(ids), disk_capacity=capacity, topics=topics, p_topic=p_topic, p_index=p_index,
        replicas=tuple(replicas), leader=leader, size=size, bytes_in=bytes_in, bytes_out=bytes_out,
        messages_in=msgs, topic_tenant=topic_tenant if tenant_names else (), tenant_names=tenant_names,
        tenant_brokers=pools, exclusion_reasons=("",) * len(ids),
    )
    return model.with_excluded(excluded)


def _tenant(topic: str, names: tuple[str, ...], settings: ModelSettings) -> int:
    for i, name in enumerate(names):
        if any(topic.startswith(prefix) for prefix in settings.tenants[name][1]):
            return i
    return NO_TENANT
