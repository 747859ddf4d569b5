"""Wake-ups for delayed fetches: a fetch that found too few bytes waits here until an append.

A waiting fetch registers one ``asyncio.Event`` on each partition it reads; an append to a partition
sets the events registered on it. The fetch then reads again and either answers or waits for the
rest of its ``max_wait_ms``. No polling: a waiter costs nothing until an append touches its partitions.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class FetchPurgatory:
    def __init__(self) -> None:
        self._watchers: defaultdict[TopicPartition, set[asyncio.Event]] = defaultdict(set)
        self.closed = False

    def close(self) -> None:
        """Shutdown: wake every waiter and make fetches answer at once from now on."""
        self.closed = True
        self.notify_all()

    def watch(self, partitions: Iterable[TopicPartition], event: asyncio.Event) -> None:
        for tp in partitions:
            self._watchers[tp].add(event)

    def unwatch(self, partitions: Iterable[TopicPartition], event: asyncio.Event) -> None:
        for tp in partitions:
            events = self._watchers.get(tp)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._watchers[tp]

    def notify(self, tp: TopicPartition) -> None:
        events = self._watchers.get(tp)
        if events:
            for event in events:
                event.set()

    def notify_all(self) -> None:
        """Wake every waiter (shutdown, topic deletion)."""
        for events in self._watchers.values():
            for event in events:
                event.set()

    @property
    def waiting(self) -> int:
        return len({id(e) for events in self._watchers.values() for e in events})
