"""The planner's working placement: replica lists and leaders that moves change, with every
per-broker aggregate a goal reads kept up to date incrementally (a move costs O(replication factor)).

Load each replica puts on its broker (per second, from the partition's client traffic):

- every replica: ``size`` bytes of disk and ``bytes_in`` of network in (followers copy what the leader
  takes in);
- the leader also: ``bytes_out`` to consumers plus ``bytes_in`` once per follower (network out), one
  leader count and ``bytes_in`` of leader bytes-in.

A replica move keeps the moved replica's position in the list; if it was the leader, the new replica
becomes leader (Kafka elects the first live in-sync replica of the new assignment, which is it once
the move completes). A leader move swaps the new leader to the front (the preferred position).
An ``Exchange`` is moves of distinct partitions applied together (the balance goals' 2-for-1 replica
exchanges and their leadership exchanges and swaps): the planner asks the higher goals about their
sum, not about each step.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.governor.model import ClusterModel


@dataclass(frozen=True, slots=True)
class ReplicaMove:
    partition: int
    source: int        # broker index
    destination: int   # broker index


@dataclass(frozen=True, slots=True)
class LeaderMove:
    partition: int
    source: int
    destination: int


Move = ReplicaMove | LeaderMove


@dataclass(frozen=True, slots=True)
class Exchange:
    """Moves (replica or leadership) of distinct partitions, judged and applied as one."""

    moves: tuple[Move, ...]


class State:
    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        n = model.broker_count
        self.replicas: list[tuple[int, ...]] = list(model.replicas)
        self.leader: list[int] = list(model.leader)
        self.disk = [0.0] * n
        self.nw_in = [0.0] * n
        self.nw_out = [0.0] * n
        self.replica_count = [0] * n
        self.leader_count = [0] * n
        self.leader_in = [0.0] * n
        self.on_broker: list[set[int]] = [set() for _ in range(n)]
        self.cache: dict[str, tuple[float, float, float]] = {}  # goals' bounds (totals never change by a move)
        for p, replicas in enumerate(self.replicas):
            for b in replicas:
                self._add_replica(p, b)
            if self.leader[p] >= 0:
                self._add_leader(p, self.leader[p], len(replicas))

    # -- aggregates ---------------------------------------------------------------------------

    def _add_replica(self, p: int, b: int, sign: int = 1) -> None:
        m = self.model
        self.disk[b] += sign * m.size[p]
        self.nw_in[b] += sign * m.bytes_in[p]
        self.replica_count[b] += sign
        if sign > 0:
            self.on_broker[b].add(p)
        else:
            self.on_broker[b].discard(p)

    def _add_leader(self, p: int, b: int, rf: int, sign: int = 1) -> None:
        m = self.model
        self.nw_out[b] += sign * (m.bytes_out[p] + m.bytes_in[p] * (rf - 1))
        self.leader_count[b] += sign
        self.leader_in[b] += sign * m.bytes_in[p]

    def leader_out(self, p: int) -> float:
        """Network out the leader of ``p`` carries."""
        m = self.model
        return m.bytes_out[p] + m.bytes_in[p] * (len(self.replicas[p]) - 1)

    def disk_ratio(self, b: int) -> float:
        capacity = self.model.disk_capacity[b]
        return self.disk[b] / capacity if capacity > 0 else float("inf")

    # -- moves --------------------------------------------------------------------------------

    def apply(self, move: Move) -> None:
        p, src, dst = move.partition, move.source, move.destination
        replicas = self.replicas[p]
        rf = len(replicas)
        if isinstance(move, ReplicaMove):
            if src not in replicas or dst in replicas:
                raise ValueError(f"cannot move {self.model.name(p)} from {src} to {dst}: replicas {replicas}")
            was_leader = self.leader[p] == src
            if was_leader:
                self._add_leader(p, src, rf, -1)
            self._add_replica(p, src, -1)
            self.replicas[p] = tuple(dst if b == src else b for b in replicas)
            self._add_replica(p, dst)
            if was_leader:
                self.leader[p] = dst
                self._add_leader(p, dst, rf)
        else:
            if self.leader[p] != src or dst not in replicas:
                raise ValueError(f"cannot move leadership of {self.model.name(p)} from {src} to {dst}")
            self._add_leader(p, src, rf, -1)
            self.leader[p] = dst
            self._add_leader(p, dst, rf)
            self.replicas[p] = (dst, *(b for b in replicas if b != dst))

    def apply_exchange(self, exchange: Exchange) -> None:
        if len({m.partition for m in exchange.moves}) != len(exchange.moves):
            raise ValueError("an exchange moves distinct partitions")
        for m in exchange.moves:
            self.apply(m)

    def to_model(self) -> ClusterModel:
        return self.model.with_placement(self.replicas, self.leader)

    def brokers(self) -> range:
        return range(self.model.broker_count)

    def usable(self, b: int) -> bool:
        """A broker that may receive replicas."""
        return self.model.alive[b] and not self.model.excluded[b]
