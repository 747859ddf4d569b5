"""Consistent-hash placement: a weighted MD5 ring, stable as brokers come and go.

Pure. The ring holds ``round(VNODES_PER_WEIGHT * weight)`` points (at least one) per broker, each at
``md5(f"{node_id}#{i}")`` read as a 64-bit big-endian number. A partition hashes to
``md5(f"{topic}/{partition}")``; its replicas are the distinct brokers met walking the ring clockwise
from there, the first met being the preferred leader. A broker whose failure group (rack or virtual
rack group) already holds a replica of the partition is passed over; when the walk has gone all the way
round and there are fewer groups than replicas wanted, a second walk fills the remaining places with
any broker not yet chosen (Kafka's rule when racks run out).

Why it is stable: a partition's replicas depend only on the ring points between its hash and the
replicas found, so adding a broker changes only the partitions one of whose new points falls in that
stretch, about ``weight / total weight`` of them (1/N for N equal brokers), and removing one moves
only the replicas it held. Rack skipping can shift one more replica of a touched partition, never an
untouched partition's.

Weights: a broker's share of ring points, hence of leaders and of replicas when the replication factor
is 1, is its weight over the total. With more replicas a broker holds at most one replica of each
partition, which caps how far a heavy weight can pull replicas towards it.

The point positions are part of the placement's contract: changing the hash input format or
``VNODES_PER_WEIGHT`` would move existing topics' future partitions. Nothing is stored: a partition
already created keeps the replicas the image records.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from tidelog.common.errors import ErrorCode, KafkaError

VNODES_PER_WEIGHT = 128


def _position(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:8], "big")


@dataclass(frozen=True, slots=True)
class HashRing:
    """Sorted ring points and the broker owning each (parallel tuples)."""

    points: tuple[int, ...]
    owners: tuple[int, ...]
    brokers: int

    @classmethod
    def build(cls, weights: Mapping[int, float]) -> HashRing:
        ring: list[tuple[int, int]] = []
        for node_id, weight in weights.items():
            if weight <= 0:
                raise ValueError(f"broker {node_id}: weight must be positive, not {weight}")
            count = max(1, round(VNODES_PER_WEIGHT * weight))
            ring.extend((_position(f"{node_id}#{i}"), node_id) for i in range(count))
        ring.sort()
        return cls(tuple(p for p, _ in ring), tuple(o for _, o in ring), len(weights))

    def walk(self, key: str) -> Iterator[int]:
        """Every broker once, in the order first met clockwise from ``key``'s position (lazily: a
        placement usually stops after a few points)."""
        start = bisect.bisect_right(self.points, _position(key))
        seen: set[int] = set()
        n = len(self.owners)
        for i in range(n):
            owner = self.owners[(start + i) % n]
            if owner not in seen:
                seen.add(owner)
                yield owner
                if len(seen) == self.brokers:
                    return


def ring_replicas(ring: HashRing, groups: Mapping[int, str | None], key: str, replication_factor: int) -> tuple[int, ...]:
    """One partition's replicas: distinct brokers clockwise, one per failure group while groups last."""
    chosen: list[int] = []
    used: set[str] = set()
    for broker in ring.walk(key):
        group = groups.get(broker)
        if group is not None and group in used:
            continue
        chosen.append(broker)
        if group is not None:
            used.add(group)
        if len(chosen) == replication_factor:
            return tuple(chosen)
    for broker in ring.walk(key):  # fewer groups than replicas: any broker not yet chosen
        if broker not in chosen:
            chosen.append(broker)
            if len(chosen) == replication_factor:
                break
    return tuple(chosen)


def assign_consistent_hash(
    weights: Mapping[int, float], groups: Mapping[int, str | None], topic: str, partitions: Sequence[int],
    replication_factor: int,
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for ``partitions`` of ``topic``.

    ``weights``: every live broker with its ``broker.weight``; ``groups``: its failure group (None: no
    rack). Raises KafkaError(INVALID_REPLICATION_FACTOR) when there are fewer brokers than replicas.
    """
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(weights):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(weights)}.",
        )
    ring = HashRing.build(weights)
    return [ring_replicas(ring, groups, f"{topic}/{p}", replication_factor) for p in partitions]
