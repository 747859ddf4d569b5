"""Choosing a placement policy: ``rack-aware`` (Kafka's) or ``consistent-hash`` (a weighted ring).

Pure. ``place`` takes the live brokers as :class:`PlacementBroker` (id, rack, rack group, weight),
the topic, which partitions to place and the replication factor, and returns each partition's replica
list, preferred leader first.

Failure groups: both policies spread a partition's replicas over *failure groups*, not raw racks. A
broker's group is its ``broker.rack.group`` when set, else its ``broker.rack``, so a cluster with
one physical rack can still be cut into power or switch domains, and racks can be pooled into larger
zones, without changing ``broker.rack`` (which clients match ``client.rack`` against). With
``rack-aware``, Kafka's rule holds for groups as for racks: unless every broker has a group the
layout ignores them. ``consistent-hash`` uses the groups of the brokers that have one.

Weights (``broker.weight``) shape ``consistent-hash`` only; Kafka's round robin gives every broker the
same share.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.controller.hash_ring import assign_consistent_hash
from tidelog.controller.placement import assign_replicas

RACK_AWARE = "rack-aware"
CONSISTENT_HASH = "consistent-hash"
POLICIES = (RACK_AWARE, CONSISTENT_HASH)


@dataclass(frozen=True, slots=True)
class PlacementBroker:
    node_id: int
    rack: str | None = None
    rack_group: str | None = None
    weight: float = 1.0

    @property
    def failure_group(self) -> str | None:
        return self.rack_group if self.rack_group is not None else self.rack


def place(
    policy: str, brokers: Sequence[PlacementBroker], topic: str, first_partition: int, count: int,
    replication_factor: int, *, rng: random.Random | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``first_partition .. first_partition + count - 1`` of ``topic``.

    Raises KafkaError: INVALID_REPLICATION_FACTOR (too few brokers), INVALID_CONFIG (unknown policy).
    """
    groups = {b.node_id: b.failure_group for b in brokers}
    if policy == RACK_AWARE:
        return assign_replicas(groups, count, replication_factor, first_partition=first_partition, rng=rng)
    if policy == CONSISTENT_HASH:
        weights = {b.node_id: b.weight for b in brokers}
        partitions = range(first_partition, first_partition + count)
        return assign_consistent_hash(weights, groups, topic, partitions, replication_factor)
    raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown placement.policy {policy!r}; expected one of {', '.join(POLICIES)}")
