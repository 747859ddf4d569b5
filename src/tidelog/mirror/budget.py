"""One byte budget per link, shared by all its partitions, fair between them (pure).

What the mirror holds *in flight* (records read and not yet committed) is bounded by
``budget.bytes`` whatever the number of partitions (the fixed cost per partition of each librdkafka
client is apart from it: docs/mirror.md, "Bounded memory"):

- a quarter of it is the source consumer's prefetch (librdkafka ``queued.max.messages.kbytes``,
  a single total over every partition of the consumer, not a per-partition buffer);
- the rest bounds the bytes copied into the open destination transactions and not yet committed
  (``FairBudget``). When it is used up, the transactions are committed, which frees it.

Fairness: a partition may hold at most its share of the transaction budget, ``max(MIN_SHARE,
budget // partitions with bytes in flight)``. A partition over its share is paused on the source
consumer until the next commit, so the fetches of a hot partition cannot fill the budget while
others wait; librdkafka's fetcher serves the partitions still running in turn. No memory is set
aside per partition: one counter per partition that has bytes in flight, dropped at commit.

``offsets = "preserve"`` has no transactions and no librdkafka consumer: it fetches raw batches in
rounds and writes them before fetching again, so what it holds is one round's answers.
``fetch_plan`` shares ``budget.bytes`` over a round, with the same rule for fairness:

- each partition that has a backlog (``busy``: the source's end beyond its position, or not known
  yet) may bring at most ``share = max(MIN_SHARE, budget // busy)`` bytes (capped at
  ``MAX_PARTITION_FETCH``), as ``partition_max_bytes``;
- each source leader's request may bring ``max(MIN_SHARE, budget * its busy / all busy)`` bytes, as
  ``max_bytes``: the answers of one round add up to the budget (plus at most ``MIN_SHARE`` per
  leader, and one batch per leader larger than its limit, which Kafka's fetch returns whole);
- a broker fills an answer in the order the partitions were asked, so each leader's partitions are
  asked least recently served first (``served``: the round in which a partition last brought data).
  With more busy partitions than one round can serve, those left out go first in the next, so a hot
  partition cannot keep the others waiting.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

Key = tuple[str, int]  # (source topic, partition)
L = TypeVar("L", bound=Hashable)  # a source leader
MIN_SHARE = 256 * 1024
MAX_PARTITION_FETCH = 8 << 20
PREFETCH_PART = 4  # budget // PREFETCH_PART goes to the consumer's prefetch


@dataclass
class FairBudget:
    total: int
    in_flight: int = 0
    per_partition: dict[Key, int] = field(default_factory=dict)
    paused: set[Key] = field(default_factory=set)

    @staticmethod
    def for_link(budget_bytes: int) -> FairBudget:
        return FairBudget(budget_bytes - budget_bytes // PREFETCH_PART)

    @property
    def prefetch_kbytes(self) -> int:
        return max(1024, self.total // (PREFETCH_PART - 1) // 1024)

    def share(self) -> int:
        return max(MIN_SHARE, self.total // max(1, len(self.per_partition)))

    def add(self, key: Key, size: int) -> bool:
        """Count ``size`` bytes of ``key`` into the open transactions; True when ``key`` has just gone
        over its share and is to be paused."""
        self.in_flight += size
        held = self.per_partition.get(key, 0) + size
        self.per_partition[key] = held
        if held > self.share() and key not in self.paused:
            self.paused.add(key)
            return True
        return False

    def full(self) -> bool:
        return self.in_flight >= self.total

    def release(self, keys: set[Key] | None = None) -> set[Key]:
        """The transactions holding ``keys`` (all when None) ended: free their bytes; return the keys to
        resume."""
        chosen = set(self.per_partition) if keys is None else keys & set(self.per_partition)
        for key in chosen:
            self.in_flight -= self.per_partition.pop(key)
        resumed = self.paused & chosen if keys is not None else set(self.paused)
        self.paused -= resumed
        return resumed


@dataclass(frozen=True)
class LeaderFetch:
    order: list[Key]  # the partitions to ask, in this order
    max_bytes: int
    partition_max_bytes: int


def fetch_plan(budget: int, leaders: Mapping[L, Sequence[Key]], busy: Collection[Key],
               served: Mapping[Key, int]) -> dict[L, LeaderFetch]:
    """One preserve-mode round's fetches: ``budget`` shared over the ``busy`` partitions of ``leaders``."""
    busy_count = max(1, len(busy))
    share = min(MAX_PARTITION_FETCH, max(MIN_SHARE, budget // busy_count))
    plan: dict[L, LeaderFetch] = {}
    for leader, keys in leaders.items():
        mine = sum(1 for key in keys if key in busy)
        order = sorted(keys, key=lambda key: (served.get(key, -1), key))
        plan[leader] = LeaderFetch(order, max(MIN_SHARE, budget * mine // busy_count), share)
    return plan
