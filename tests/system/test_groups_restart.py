"""Committed offsets and groups survive a broker restart, graceful (SIGTERM) or not (SIGKILL).

Before the restart one group commits offsets and leaves; another keeps a member subscribed right
through the restart. After it: a new member of the first group resumes exactly at the committed
offsets, and the member that stayed keeps its partitions (its generation is still valid, it sees no
rebalance) and can commit again.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from helpers.broker_process import BrokerProcess
from helpers.clients import FAST_CLIENT, create_topic, produce_all, producer, unique_topic

PARTITIONS = 3
PER_PARTITION = 20


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, session_ms: int = 6000) -> None:
        self.events: list[tuple[str, frozenset[int]]] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": session_ms, "heartbeat.interval.ms": 300,
            "fetch.wait.max.ms": 100, **FAST_CLIENT,
        })
        self.consumer.subscribe([topic], on_assign=lambda _c, ps: self._note("assign", ps),
                                on_revoke=lambda _c, ps: self._note("revoke", ps))

    def _note(self, kind: str, partitions: list[TopicPartition]) -> None:
        self.events.append((kind, frozenset(p.partition for p in partitions)))

    def consume_until(self, done: Callable[[dict[int, list[int]]], bool], timeout: float = 20.0) -> dict[int, list[int]]:
        seen: dict[int, list[int]] = {}
        deadline = time.monotonic() + timeout
        while not done(seen):
            assert time.monotonic() < deadline, f"consumed only {seen}"
            message = self.consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen.setdefault(message.partition(), []).append(message.offset())
        return seen

    def commit(self, topic: str, offsets: dict[int, int]) -> None:
        result = self.consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                                      asynchronous=False)
        assert result is not None and all(tp.error is None for tp in result), result

    def committed(self, topic: str) -> dict[int, int]:
        found = self.consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
        return {tp.partition: tp.offset for tp in found}


@pytest.mark.parametrize(
    "sig, overrides",
    [(signal.SIGTERM, {}), (signal.SIGKILL, {"log.flush.interval.messages": 1})],
    ids=["sigterm", "sigkill"],
)
def test_commits_and_members_survive_a_restart(fresh_broker: Callable[..., BrokerProcess], sig: int,
                                               overrides: dict[str, object]) -> None:
    broker = fresh_broker({"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500,
                           "offsets.topic.num.partitions": 3, **overrides})
    topic = create_topic(broker.bootstrap, unique_topic("restart"), PARTITIONS)
    prod = producer(broker.bootstrap)
    for p in range(PARTITIONS):
        produce_all(prod, topic, [f"p{p}-{i}".encode() for i in range(PER_PARTITION)], partition=p)

    leaving_group, staying_group = f"leaves-{uuid.uuid4().hex[:6]}", f"stays-{uuid.uuid4().hex[:6]}"
    commits = {0: 3, 1: 11, 2: 19}
    leaver = Member(broker.bootstrap, leaving_group, topic)
    leaver.consume_until(lambda seen: all(len(seen.get(p, [])) > commits[p] for p in range(PARTITIONS)))
    leaver.commit(topic, commits)
    leaver.consumer.close()

    stayer = Member(broker.bootstrap, staying_group, topic, session_ms=20_000)
    stayer.consume_until(lambda seen: len(seen) == PARTITIONS)
    stayer.commit(topic, {0: 5, 1: 5, 2: 5})
    events_before = list(stayer.events)

    broker.restart(sig)

    resumed = Member(broker.bootstrap, leaving_group, topic)
    try:
        assert resumed.committed(topic) == commits
        first = resumed.consume_until(lambda seen: len(seen) == PARTITIONS)
        assert {p: offsets[0] for p, offsets in first.items()} == commits
    finally:
        resumed.consumer.close()

    # The member that stayed: same partitions, no rebalance, and its generation still commits.
    deadline = time.monotonic() + 15
    while True:
        stayer.consumer.poll(0.1)
        try:
            stayer.commit(topic, {0: 7, 1: 8, 2: 9})
            break
        except Exception:
            assert time.monotonic() < deadline, "the surviving member could not commit after the restart"
            time.sleep(0.2)
    assert stayer.events == events_before
    assert {tp.partition for tp in stayer.consumer.assignment()} == set(range(PARTITIONS))
    assert stayer.committed(topic) == {0: 7, 1: 8, 2: 9}
    stayer.consumer.close()
