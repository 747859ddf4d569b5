"""One byte budget per link, shared by all its partitions, fair between them (pure).

What the mirror holds in memory is bounded by ``budget.bytes`` whatever the number of partitions:

- a quarter of it is the source consumer's prefetch (librdkafka ``queued.max.messages.kbytes``,
  a single total over every partition of the consumer, not a per-partition buffer);
- the rest bounds the bytes copied into the open destination transactions and not yet committed
  (``FairBudget``). When it is used up, the transactions are committed, which frees it.

Fairness: a partition may hold at most its share of the transaction budget, ``max(MIN_SHARE,
budget // partitions with bytes in flight)``. A partition over its share is paused on the source
consumer until the next commit, so the fetches of a hot partition cannot fill the budget while
others wait; librdkafka's fetcher serves the partitions still running in turn. No memory is set
aside per partition: one counter per partition that has bytes in flight, dropped at commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Key = tuple[str, int]  # (source topic, partition)
MIN_SHARE = 256 * 1024
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
