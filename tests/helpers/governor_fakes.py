"""In-memory stand-ins for the governor's own seams (``tidelog.governor.cluster.Cluster`` and
``tidelog.governor.store.Store``), for the engine's and the API's unit tests."""

from __future__ import annotations

from typing import Any

from tidelog.governor.cluster import Broker, LogDir, PartitionState, Reassignment, Snapshot
from tidelog.governor.execution import Throttles


class FakeCluster:
    """Brokers, partitions and reassignments in memory. A started move completes after ``rounds``
    snapshots (copying ``copy_per_round`` bytes each), unless ``stuck``. With ``refuse_rates`` the
    brokers refuse the throttle rate keys as tidelog before replication throttles does (INVALID_CONFIG)."""

    def __init__(self, brokers: dict[int, str], partitions: dict[tuple[str, int], tuple[int, ...]], *,
                 size: int = 1000, rounds: int = 1, stuck: bool = False) -> None:
        self.brokers = {b: Broker(b, "127.0.0.1", 9000 + b, rack) for b, rack in brokers.items()}
        self.partitions = {k: PartitionState(r, frozenset(r), r[0]) for k, r in partitions.items()}
        self.size, self.rounds, self.stuck = size, rounds, stuck
        self.moving: dict[tuple[str, int], tuple[tuple[int, ...], int]] = {}
        self.throttles = Throttles({}, frozenset())
        self.throttle_history: list[Throttles] = []
        self.elected: list[tuple[str, int]] = []
        self.cancelled: list[tuple[str, int]] = []
        self.urp: set[tuple[str, int]] = set()
        self.refuse_rates = False

    async def snapshot(self) -> Snapshot:
        for k, (target, left) in list(self.moving.items()):
            if self.stuck:
                continue
            if left <= 1:
                del self.moving[k]
                leader = self.partitions[k].leader
                self.partitions[k] = PartitionState(target, frozenset(target), leader if leader in target else target[0])
            else:
                self.moving[k] = (target, left - 1)
        parts = {k: PartitionState(p.replicas, p.isr - ({p.replicas[-1]} if k in self.urp else set()), p.leader)
                 for k, p in self.partitions.items()}
        dirs = {b: [LogDir("/data", 0, 10_000_000, 5_000_000,
                           {k: self.size for k, p in self.partitions.items() if b in p.replicas})] for b in self.brokers}
        reassigning = {k: Reassignment(t, (), ()) for k, (t, _) in self.moving.items()}
        return Snapshot(dict(self.brokers), min(self.brokers), parts, dirs, reassigning)

    async def supports_reassignment(self) -> bool:
        return True

    async def alter_reassignments(self, targets: dict[tuple[str, int], tuple[int, ...] | None]) -> dict[tuple[str, int], str]:
        out = {}
        for k, target in targets.items():
            if target is None:
                self.moving.pop(k, None)
                self.cancelled.append(k)
            else:
                self.moving[k] = (target, self.rounds)
            out[k] = ""
        return out

    async def elect_preferred(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
        for k in partitions:
            p = self.partitions[k]
            self.partitions[k] = PartitionState(p.replicas, p.isr, p.replicas[0])
            self.elected.append(k)
        return dict.fromkeys(partitions, "")

    async def apply_throttles(self, rate: int, wanted: Throttles, previous: Throttles) -> list[str]:
        if self.refuse_rates:
            self.throttles = Throttles(wanted.topics, frozenset())
            self.throttle_history.append(self.throttles)
            return [f"IncrementalAlterConfigs {b}: INVALID_CONFIG (Unknown config name: leader.replication.throttled.rate)"
                    for b in sorted(wanted.brokers ^ previous.brokers)]
        self.throttles = wanted
        self.throttle_history.append(wanted)
        return []


class FakeStore:
    def __init__(self) -> None:
        self.records: dict[str, Any] = {}

    def read(self) -> dict[str, Any]:
        return dict(self.records)

    def write(self, key: str, value: object | None) -> None:
        if value is None:
            self.records.pop(key, None)
        else:
            self.records[key] = value
