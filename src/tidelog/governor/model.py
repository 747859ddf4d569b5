"""The cluster model: what the planner knows of a cluster, as compact immutable data.

Brokers and partitions are numbered by position (a broker's *index*, not its id); everything per
broker or per partition is one ``array`` or tuple indexed by that number. There is no object per
replica: a partition's replicas are one tuple of broker indexes (small ints are shared by CPython),
so 100,000 partitions of replication factor 3 cost a few tens of bytes each (``bench/governor_bench.py``
measures it).

Units: sizes in bytes; ``bytes_in``/``bytes_out``/``messages_in`` are per-second rates of the
partition's *leader* traffic from clients (replication traffic is derived by the planner: every
follower receives ``bytes_in``; the leader sends it once per follower).

Racks: ``rack`` is the failure group the rack-awareness goal spreads over: a broker's ``broker.rack``
or, when a virtual rack mapping is given, the virtual rack group it maps to (``group_racks``).

Brokers that are dead (in a replica list but not registered), draining, or that have an offline log
dir are ``excluded``: hard goals move every replica off them.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

NO_TENANT = -1


@dataclass(frozen=True, slots=True)
class ClusterModel:
    broker_ids: tuple[int, ...]
    broker_rack: tuple[int, ...]          # index into rack_names
    rack_names: tuple[str, ...]
    alive: tuple[bool, ...]
    excluded: tuple[bool, ...]            # dead past the grace period, draining, or an offline log dir
    disk_capacity: array[int]             # bytes usable for logs, per broker
    topics: tuple[str, ...]
    p_topic: array[int]                   # topic index per partition
    p_index: array[int]                   # partition number within its topic
    replicas: tuple[tuple[int, ...], ...]  # broker indexes, preferred leader first
    leader: array[int]                    # broker index, -1 when offline
    size: array[int]
    bytes_in: array[float]
    bytes_out: array[float]
    messages_in: array[float]
    topic_tenant: tuple[int, ...] = ()    # tenant index per topic, NO_TENANT when the topic has none
    tenant_names: tuple[str, ...] = ()
    tenant_brokers: tuple[frozenset[int], ...] = ()  # broker indexes of each tenant's pool
    exclusion_reasons: tuple[str, ...] = field(default=())  # per broker, "" when not excluded

    def __post_init__(self) -> None:
        n, m = len(self.broker_ids), len(self.replicas)
        per_broker = (self.broker_rack, self.alive, self.excluded, self.disk_capacity)
        per_partition = (self.p_topic, self.p_index, self.leader, self.size, self.bytes_in, self.bytes_out,
                         self.messages_in)
        if any(len(column) != n for column in per_broker):
            raise ValueError("every per-broker column needs one value per broker")
        if any(len(column) != m for column in per_partition):
            raise ValueError("every per-partition column needs one value per partition")

    @property
    def broker_count(self) -> int:
        return len(self.broker_ids)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    def broker_index(self) -> dict[int, int]:
        return {b: i for i, b in enumerate(self.broker_ids)}

    def name(self, p: int) -> str:
        return f"{self.topics[self.p_topic[p]]}-{self.p_index[p]}"

    def tenant_of(self, p: int) -> int:
        return self.topic_tenant[self.p_topic[p]] if self.topic_tenant else NO_TENANT

    def with_placement(self, replicas: Sequence[tuple[int, ...]], leader: Sequence[int]) -> ClusterModel:
        """The same cluster with other replica lists and leaders (a plan executed)."""
        return replace(self, replicas=tuple(replicas), leader=array("i", leader))

    def with_excluded(self, excluded: Mapping[int, str]) -> ClusterModel:
        """Brokers (by id) to empty, with the reason each one is excluded (draining, dead, offline dir)."""
        reasons = tuple(excluded.get(b, "") for b in self.broker_ids)
        return replace(self, excluded=tuple(bool(r) for r in reasons), exclusion_reasons=reasons)


def group_racks(racks: Sequence[str], mapping: Mapping[str, str] | None) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Rack index per broker and the rack names, after mapping physical racks onto virtual rack groups.
    A broker without a rack is its own failure group (named after its position)."""
    names: list[str] = []
    index: dict[str, int] = {}
    out = []
    for i, rack in enumerate(racks):
        group = (mapping or {}).get(rack, rack) if rack else f"(no rack {i})"
        if group not in index:
            index[group] = len(names)
            names.append(group)
        out.append(index[group])
    return tuple(out), tuple(names)
