"""Classic consumer groups under churn, with confluent-kafka (librdkafka): a second member joining a
group of one (static and dynamic), and eight members changing their subscriptions in a loop with
eager and cooperative assignors (issue 24). Each scenario settles in seconds on Apache Kafka 4.3:
run the module with ``TIDELOG_TEST_REFERENCE_KAFKA`` set to check the test itself against it."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable

import pytest

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess, module_broker
from helpers.clients import create_topic, unique_topic
from helpers.group_members import Member, disjoint_and_complete, settle

churn_broker = module_broker("churn_broker", GROUP_TEST_BROKER)


@pytest.fixture
def bootstrap(churn_broker: BrokerProcess) -> str:
    return churn_broker.bootstrap


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_a_second_static_member_takes_half_of_the_first_members_partitions(bootstrap: str, strategy: str) -> None:
    topic = create_topic(bootstrap, unique_topic("static"), 2)
    group = new_group()
    config = {"session.timeout.ms": 10_000, "partition.assignment.strategy": strategy}
    first = Member(bootstrap, group, topic, **{"group.instance.id": "first", **config})
    second: Member | None = None
    try:
        settle([first], disjoint_and_complete(2))
        second = Member(bootstrap, group, topic, **{"group.instance.id": "second", **config})
        final = settle([first, second], disjoint_and_complete(2, each=1), timeout=15)
        assert final[0] | final[1] == frozenset({0, 1})
    finally:
        for m in (first, second):
            if m is not None:
                m.close()


def test_a_dynamic_member_sees_its_partitions_revoked_then_reassigned_when_a_second_joins(bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique_topic("dynamic"), 2)
    group = new_group()
    first = Member(bootstrap, group, topic)
    second: Member | None = None
    try:
        settle([first], disjoint_and_complete(2))
        assert first.events == [("assign", frozenset({0, 1}))]
        second = Member(bootstrap, group, topic)
        final = settle([first, second], disjoint_and_complete(2, each=1), timeout=15)
        assert first.events == [
            ("assign", frozenset({0, 1})), ("revoke", frozenset({0, 1})), ("assign", final[0]),
        ]
        assert second.events == [("assign", final[1])]
    finally:
        for m in (first, second):
            if m is not None:
                m.leave()


STORM_MEMBERS = 8
STORM_ROUNDS = 5
ROUND_TIMEOUT_S = 10.0  # Kafka settles each round in one to three seconds


Owned = list[frozenset[tuple[str, int]]]


def settled_for(subscriptions: list[list[str]], partitions: dict[str, int]) -> Callable[[Owned], bool]:
    """Every partition of a subscribed topic owned exactly once, and only by a member subscribed to it."""
    wanted = {(t, p) for subs in subscriptions for t in subs for p in range(partitions[t])}

    def check(owned: Owned) -> bool:
        union = frozenset().union(*owned)
        return (
            union == wanted
            and sum(len(o) for o in owned) == len(wanted)
            and all(t in subs for o, subs in zip(owned, subscriptions, strict=True) for t, _ in o)
        )

    return check


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_eight_members_changing_subscriptions_settle_every_round(bootstrap: str, strategy: str) -> None:
    partitions = {create_topic(bootstrap, unique_topic("storm-a"), 8): 8,
                  create_topic(bootstrap, unique_topic("storm-b"), 8): 8}
    topics = sorted(partitions)
    choices = [topics, topics[:1], topics[1:]]
    rng = random.Random(24)
    group = new_group()
    # librdkafka's default session timeout (45 s): a round that waits for a session to expire fails
    config = {"partition.assignment.strategy": strategy, "session.timeout.ms": 45_000, "heartbeat.interval.ms": 500}
    members = [Member(bootstrap, group, topics, **config) for _ in range(STORM_MEMBERS)]
    try:
        subscriptions = [topics] * STORM_MEMBERS
        check = settled_for(subscriptions, partitions)
        wait_owned(members, check, ROUND_TIMEOUT_S * 2)
        for round_no in range(STORM_ROUNDS):
            subscriptions = [rng.choice(choices) for _ in members]
            for member, subs in zip(members, subscriptions, strict=True):
                member.subscribe(subs)
            started = time.monotonic()
            wait_owned(members, settled_for(subscriptions, partitions), ROUND_TIMEOUT_S, f"round {round_no}")
            assert time.monotonic() - started < ROUND_TIMEOUT_S
    finally:
        for m in members:
            m.leave()


def wait_owned(members: list[Member], check: Callable[[Owned], bool], timeout: float, what: str = "first round") -> None:
    deadline = time.monotonic() + timeout
    good_since: float | None = None
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if check([m.topic_partitions() for m in members]):
            good_since = good_since or time.monotonic()
            if time.monotonic() - good_since >= 0.5:
                return
        else:
            good_since = None
    owned = [sorted(m.topic_partitions()) for m in members]
    raise AssertionError(f"{what} never settled: {[len(o) for o in owned]} partitions per member")
