"""Deadlines keyed by name, with no clock of their own.

A key has at most one deadline: scheduling it again replaces the previous one (a heartbeat pushes its
member's session expiry back), cancelling forgets it. ``run_expired(now_ms)`` runs, in deadline
order, every action whose deadline is at or before ``now_ms``, including ones those actions schedule
for a time already past. The owner asks ``next_deadline()`` to know when to call again.

Cancelled and replaced entries stay in the heap and are skipped when they surface (each entry
carries a sequence number that must match the key's current one).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._current: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}
        self._seq = itertools.count()

    def schedule(self, key: Hashable, deadline_ms: int, action: Callable[[], None]) -> None:
        seq = next(self._seq)
        self._current[key] = (deadline_ms, seq, action)
        heapq.heappush(self._heap, (deadline_ms, seq, key))

    def cancel(self, key: Hashable) -> None:
        self._current.pop(key, None)

    def deadline(self, key: Hashable) -> int | None:
        entry = self._current.get(key)
        return None if entry is None else entry[0]

    def __len__(self) -> int:
        return len(self._current)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def run_expired(self, now_ms: int) -> int:
        """Run every action due at ``now_ms``; return how many ran."""
        ran = 0
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                return ran
            _, _, key = heapq.heappop(self._heap)
            _, _, action = self._current.pop(key)
            action()
            ran += 1

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            _, seq, key = heap[0]
            entry = self._current.get(key)
            if entry is not None and entry[1] == seq:
                return
            heapq.heappop(heap)
