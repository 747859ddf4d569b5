"""Where a new partition's replicas go: Kafka's rack-aware round robin.

Pure. Given the live brokers (id → rack) it returns, per new partition, its replica list with the
preferred leader first. The rule is the one Kafka's ``AdminUtils.assignReplicasToBrokers`` applies:

- Brokers are laid out alternating racks: racks in name order, brokers sorted within each rack, one
  broker of each rack in turn (``rack_alternated``). Without racks (or when only some brokers have
  one, Kafka's "safe" mode) the layout is the sorted broker list.
- Partition ``p``'s leader is ``layout[(p + start) % n]``; its followers follow at a shift that grows
  by one every ``n`` partitions, so that leaders and followers spread evenly. With racks, a follower
  is skipped while its rack (or the broker itself) already holds a replica of the partition, unless
  every rack (every broker) already does.
- ``start`` and the first shift are random unless given (``fixed_start``), which is what makes a
  result reproducible for tests and for the comparison with Kafka.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from tidelog.common.errors import ErrorCode, KafkaError


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered one rack at a time (racks by name, brokers by id within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    names = sorted(by_rack)
    layout: list[int] = []
    depth = 0
    while len(layout) < len(racks):
        for name in names:
            if depth < len(by_rack[name]):
                layout.append(by_rack[name][depth])
        depth += 1
    return layout


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas(
    brokers: Mapping[int, str | None], partitions: int, replication_factor: int, *,
    first_partition: int = 0, fixed_start: int | None = None, rng: random.Random | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``first_partition .. first_partition + partitions - 1``.

    Raises KafkaError(INVALID_REPLICATION_FACTOR) when there are fewer brokers than replicas.
    """
    n = len(brokers)
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > n:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {n}.",
        )
    rng = rng or random.Random()
    start = fixed_start if fixed_start is not None else rng.randrange(n)
    shift = fixed_start if fixed_start is not None else rng.randrange(n)
    racks = {b: r for b, r in brokers.items() if r is not None}
    if len(racks) == n and n > 0:
        return _rack_aware(racks, partitions, replication_factor, first_partition, start, shift)
    return _rack_unaware(sorted(brokers), partitions, replication_factor, first_partition, start, shift)


def _rack_unaware(layout: list[int], partitions: int, rf: int, first_partition: int, start: int, shift: int) -> list[tuple[int, ...]]:
    n = len(layout)
    result = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        result.append((layout[first], *(layout[_follower_index(first, shift, j, n)] for j in range(rf - 1))))
    return result


def _rack_aware(racks: Mapping[int, str], partitions: int, rf: int, first_partition: int, start: int, shift: int) -> list[tuple[int, ...]]:
    layout = rack_alternated(racks)
    n, rack_count = len(layout), len(set(racks.values()))
    result = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        chosen = [layout[first]]
        used_racks = {racks[layout[first]]}
        k = 0
        while len(chosen) < rf:
            broker = layout[_follower_index(first, shift * rack_count, k, n)]
            k += 1
            rack_ok = racks[broker] not in used_racks or len(used_racks) == rack_count
            broker_ok = broker not in chosen or len(chosen) == n
            if rack_ok and broker_ok:
                chosen.append(broker)
                used_racks.add(racks[broker])
        result.append(tuple(chosen))
    return result
