"""Wake-ups for delayed fetches: a fetch that found too few bytes waits here until an append.

A waiting fetch registers one future on each partition it reads; an append to a partition resolves
the futures registered on it. The fetch then reads again and either answers or waits for the rest of
its ``max_wait_ms``. No polling: a waiter costs nothing until an append touches its partitions.
A bare future (not an ``asyncio.Event`` under ``wait_for``, which wraps the wait in a task of its
own) wakes the fetch in one step of the event loop.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

TopicPartition = tuple[str, int]
Waiter = asyncio.Future[None]


def wake(waiter: Waiter) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FetchPurgatory:
    def __init__(self) -> None:
        self._watchers: defaultdict[TopicPartition, set[Waiter]] = defaultdict(set)
        self.closed = False

    def close(self) -> None:
        """Shutdown: wake every waiter and make fetches answer at once from now on."""
        self.closed = True
        self.notify_all()

    def watch(self, partitions: Iterable[TopicPartition], waiter: Waiter) -> None:
        for tp in partitions:
            self._watchers[tp].add(waiter)

    def unwatch(self, partitions: Iterable[TopicPartition], waiter: Waiter) -> None:
        for tp in partitions:
            waiters = self._watchers.get(tp)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._watchers[tp]

    def notify(self, tp: TopicPartition) -> bool:
        """Wake the fetches waiting on ``tp``; True if there were any."""
        waiters = self._watchers.get(tp)
        if not waiters:
            return False
        for waiter in waiters:
            wake(waiter)
        return True

    def notify_all(self) -> None:
        """Wake every waiter (shutdown, topic deletion)."""
        for waiters in self._watchers.values():
            for waiter in waiters:
                wake(waiter)

    @property
    def waiting(self) -> int:
        return len({id(e) for events in self._watchers.values() for e in events})
