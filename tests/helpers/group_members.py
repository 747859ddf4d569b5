"""Subscribed confluent-kafka consumers that record the rebalance callbacks they get, and a poller
that waits for a group's assignments to settle. Shared by the classic-group integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from helpers.clients import FAST_CLIENT, leave_and_close

Assignments = list[frozenset[int]]


class Member:
    """A subscribed consumer that records every assignment change it is told about, in order."""

    def __init__(self, bootstrap: str, group: str, topics: str | list[str], **config: object) -> None:
        self.events: list[tuple[str, frozenset[int]]] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
            "fetch.wait.max.ms": 100, **FAST_CLIENT, **config,
        })
        self.subscribe([topics] if isinstance(topics, str) else topics)

    def subscribe(self, topics: list[str]) -> None:
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("assign", frozenset(p.partition for p in partitions)))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", frozenset(p.partition for p in partitions)))

    def partitions(self) -> frozenset[int]:
        return frozenset(p.partition for p in self.consumer.assignment())

    def topic_partitions(self) -> frozenset[tuple[str, int]]:
        return frozenset((p.topic, p.partition) for p in self.consumer.assignment())

    def poll(self) -> None:
        self.consumer.poll(0.05)

    def close(self) -> None:
        self.consumer.close()

    def leave(self) -> None:
        leave_and_close(self.consumer)


def settle(members: list[Member], expected: Callable[[Assignments], bool], timeout: float = 20.0,
           hold: float = 0.5) -> Assignments:
    """Poll every member until their assignments satisfy ``expected`` for ``hold`` seconds in a row."""
    deadline = time.monotonic() + timeout
    good_since: float | None = None
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        current = [m.partitions() for m in members]
        if expected(current):
            good_since = good_since or time.monotonic()
            if time.monotonic() - good_since >= hold:
                return current
        else:
            good_since = None
    raise AssertionError(f"assignments never settled: {[m.partitions() for m in members]}")


def disjoint_and_complete(count: int, each: int | None = None) -> Callable[[Assignments], bool]:
    def check(assignments: Assignments) -> bool:
        union = frozenset().union(*assignments)
        return (
            union == frozenset(range(count))
            and sum(len(a) for a in assignments) == count
            and all(a if each is None else len(a) == each for a in assignments)
        )

    return check
