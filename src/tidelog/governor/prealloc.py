"""Pre-allocation: where to put a new topic whose traffic is declared up front.

Each partition gets ``bytes_in / partitions`` bytes/s in (and ``bytes_out`` likewise). Replicas are
chosen one partition at a time, greedily, on the current model plus what was already placed for the
topic: for each replica slot, the usable broker (not excluded, in the tenant's pool if any, rack not
yet used by this partition while unused racks remain, under the replica cap and the disk threshold
for the expected ``retention_bytes``) with the lowest projected network-in, then disk usage ratio.
The first replica is the preferred leader, chosen among the slots by lowest projected network out.
The answer is a replica assignment CreateTopics takes as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.governor.model import ClusterModel
from tidelog.governor.state import State


@dataclass(frozen=True)
class NewTopic:
    name: str
    partitions: int
    replication_factor: int
    bytes_in_per_s: float
    bytes_out_per_s: float = 0.0
    retention_bytes: int = 0          # expected bytes per partition on disk
    tenant_brokers: frozenset[int] | None = None  # broker ids


class NoRoom(Exception):
    """The cluster cannot hold the topic under the hard constraints; the message says which partition."""


def preallocate(model: ClusterModel, topic: NewTopic, *, disk_threshold: float = 0.8,
                max_replicas: int = 10_000) -> list[list[int]]:
    if topic.partitions < 1 or topic.replication_factor < 1:
        raise ValueError("a topic needs at least one partition and one replica")
    s = State(model)
    rack = model.broker_rack
    pool = None if topic.tenant_brokers is None else {model.broker_index()[b] for b in topic.tenant_brokers
                                                      if b in model.broker_index()}
    usable = [b for b in s.brokers() if s.usable(b) and (pool is None or b in pool)]
    racks = {rack[b] for b in usable}
    rate_in = topic.bytes_in_per_s / topic.partitions
    rate_out = topic.bytes_out_per_s / topic.partitions
    rf = topic.replication_factor
    assignment = []
    for p in range(topic.partitions):
        chosen: list[int] = []
        for _ in range(rf):
            used = {rack[b] for b in chosen}
            fits = [b for b in usable if b not in chosen and s.replica_count[b] < max_replicas
                    and s.disk[b] + topic.retention_bytes <= disk_threshold * model.disk_capacity[b]]
            spread = [b for b in fits if rack[b] not in used] if len(used) < len(racks) else fits
            if not spread:
                raise NoRoom(f"no broker can take replica {len(chosen) + 1} of {topic.name}-{p} "
                             f"({len(usable)} usable brokers, {len(racks)} racks)")
            best = min(spread, key=lambda b: (s.nw_in[b], s.disk_ratio(b), model.broker_ids[b]))
            chosen.append(best)
            s.nw_in[best] += rate_in
            s.disk[best] += topic.retention_bytes
            s.replica_count[best] += 1
        leader = min(chosen, key=lambda b: (s.nw_out[b], s.leader_count[b], model.broker_ids[b]))
        s.nw_out[leader] += rate_out + rate_in * (rf - 1)
        s.leader_count[leader] += 1
        ordered = [leader, *(b for b in chosen if b != leader)]
        assignment.append([model.broker_ids[b] for b in ordered])
    return assignment
