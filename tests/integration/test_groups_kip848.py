"""KIP-848 consumer groups with confluent-kafka ``group.protocol=consumer``: server-side assignment,
incremental rebalances, leaving, committed offsets, and a broker restart. One broker for the module,
telling members to heartbeat every 250 ms so that reconciliation takes a fraction of a second."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest as DescribeV0
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest as DescribeV1
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest as HeartbeatV0
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest as HeartbeatV1
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import FAST_CLIENT, create_topic, produce_all, producer, unique_topic
from helpers.raw_client import RawClient

KIP848_BROKER = {
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.heartbeat.interval.ms": 250,
    "group.consumer.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
}


broker = module_broker("broker", KIP848_BROKER)


@pytest.fixture
def topic6(broker: BrokerProcess) -> str:
    return create_topic(broker.bootstrap, unique_topic("kip848"), 6)


class Member:
    """A ``group.protocol=consumer`` consumer recording every assignment change it is told about."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config: object) -> None:
        self.assigned: list[frozenset[int]] = []
        self.revoked: list[frozenset[int]] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
            **FAST_CLIENT, **config,
        })
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned.append(frozenset(p.partition for p in partitions))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoked.append(frozenset(p.partition for p in partitions))

    def partitions(self) -> frozenset[int]:
        return frozenset(p.partition for p in self.consumer.assignment())

    def close(self) -> None:
        self.consumer.close()


def settle(members: list[Member], expected: Callable[[list[frozenset[int]]], bool], timeout: float = 15.0,
           hold: float = 0.7) -> list[frozenset[int]]:
    """Poll every member until their assignments satisfy ``expected`` for ``hold`` seconds in a row."""
    deadline = time.monotonic() + timeout
    good_since: float | None = None
    while time.monotonic() < deadline:
        for m in members:
            m.consumer.poll(0.02)
        current = [m.partitions() for m in members]
        if expected(current):
            good_since = good_since or time.monotonic()
            if time.monotonic() - good_since >= hold:
                return current
        else:
            good_since = None
    raise AssertionError(f"assignments never settled: {[sorted(m.partitions()) for m in members]}")


def balanced(count: int, members: int) -> Callable[[list[frozenset[int]]], bool]:
    """Disjoint, complete, and each member within one partition of the others."""
    def check(assignments: list[frozenset[int]]) -> bool:
        sizes = [len(a) for a in assignments]
        return (
            frozenset().union(*assignments) == frozenset(range(count))
            and sum(sizes) == count
            and len(assignments) == members
            and max(sizes) - min(sizes) <= 1
        )

    return check


def new_group() -> str:
    return f"kip848-{uuid.uuid4().hex[:10]}"


def describe(bootstrap: str, group: str) -> object:
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def test_three_consumers_reach_a_stable_disjoint_complete_assignment(broker: BrokerProcess, topic6: str) -> None:
    group = new_group()
    members = [Member(broker.bootstrap, group, topic6) for _ in range(3)]
    try:
        final = settle(members, balanced(6, 3))
        assert sorted(len(a) for a in final) == [2, 2, 2]
        described = describe(broker.bootstrap, group)
        assert described.type == ConsumerGroupType.CONSUMER  # type: ignore[attr-defined]
        assert str(described.state).upper().endswith("STABLE")  # type: ignore[attr-defined]
        described_parts = sorted(
            tp.partition for m in described.members for tp in m.assignment.topic_partitions  # type: ignore[attr-defined]
        )
        assert described_parts == list(range(6))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **FAST_CLIENT})
        listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
        types = {g.group_id: g.type for g in listed.valid}
        assert types.get(group) == ConsumerGroupType.CONSUMER
    finally:
        for m in members:
            m.close()


def test_a_joining_member_takes_partitions_without_stopping_the_others(broker: BrokerProcess, topic6: str) -> None:
    group = new_group()
    members = [Member(broker.bootstrap, group, topic6) for _ in range(2)]
    try:
        before = settle(members, balanced(6, 2))
        members.append(Member(broker.bootstrap, group, topic6))
        after = settle(members, balanced(6, 3))
        for m, had, has in zip(members, before, after, strict=False):
            # Incremental: a member only ever gives up partitions that leave it; it keeps the rest throughout.
            given_up = frozenset().union(*m.revoked) if m.revoked else frozenset()
            assert not given_up & has, (sorted(given_up), sorted(has))
            assert has <= had and len(had - has) == 1
    finally:
        for m in members:
            m.close()


def test_a_leaving_members_partitions_move_to_the_others(broker: BrokerProcess, topic6: str) -> None:
    group = new_group()
    members = [Member(broker.bootstrap, group, topic6) for _ in range(3)]
    try:
        settle(members, balanced(6, 3))
        leaving = members.pop()
        started = time.monotonic()
        leaving.close()
        settle(members, balanced(6, 2), hold=0.3)
        assert time.monotonic() - started < 5  # the leave heartbeat, not a session timeout (6 s)
    finally:
        for m in members:
            m.close()


def _consume(member: Member, want: int, timeout: float = 15.0) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msg = member.consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            got.append((msg.partition(), msg.offset()))
    return got


def _resume_at_commits(broker: BrokerProcess, group: str, topic: str, committed: dict[int, int]) -> None:
    member = Member(broker.bootstrap, group, topic)
    try:
        first: dict[int, int] = {}
        deadline = time.monotonic() + 20
        while len(first) < len(committed) and time.monotonic() < deadline:
            msg = member.consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                first.setdefault(msg.partition(), msg.offset())
        assert first == committed
    finally:
        member.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_committed_offsets_resume_and_survive_a_broker_restart(broker: BrokerProcess, topic6: str, sig: int) -> None:
    group = new_group()
    prod = producer(broker.bootstrap)
    for p in range(6):
        produce_all(prod, topic6, [f"{p}-{i}".encode() for i in range(10)], partition=p)
    member = Member(broker.bootstrap, group, topic6)
    try:
        consumed = _consume(member, 24)  # (settle() would consume and drop what it polls)
        assert len(consumed) >= 24
        next_offsets: dict[int, int] = {}
        for partition, offset in consumed:
            next_offsets[partition] = max(next_offsets.get(partition, 0), offset + 1)
        member.consumer.commit(offsets=[TopicPartition(topic6, p, o) for p, o in next_offsets.items()],
                               asynchronous=False)
        # Where a new member must start: at the commit, or at the beginning where nothing was committed.
        committed = {p: next_offsets.get(p, 0) for p in range(6) if next_offsets.get(p, 0) < 10}
        epoch_before = describe(broker.bootstrap, group).members  # type: ignore[attr-defined]
        assert len(epoch_before) == 1
    finally:
        member.close()
    _resume_at_commits(broker, group, topic6, committed)

    broker.restart(sig)
    # The group (now empty) and its offsets came back from __consumer_offsets.
    described = describe(broker.bootstrap, group)
    assert described.type == ConsumerGroupType.CONSUMER  # type: ignore[attr-defined]
    _resume_at_commits(broker, group, topic6, committed)


def test_default_protocol_consumers_still_use_classic_groups(broker: BrokerProcess, topic6: str) -> None:
    # ConsumerGroupHeartbeat is advertised; librdkafka must still use JoinGroup unless told otherwise.
    group = new_group()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, **FAST_CLIENT})
    consumer.subscribe([topic6])
    try:
        deadline = time.monotonic() + 15
        while len(consumer.assignment()) < 6 and time.monotonic() < deadline:
            consumer.poll(0.05)
        assert len(consumer.assignment()) == 6
        described = describe(broker.bootstrap, group)
        assert described.type == ConsumerGroupType.CLASSIC  # type: ignore[attr-defined]
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------- on the wire

FENCED_MEMBER_EPOCH, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, GROUP_ID_NOT_FOUND = 110, 112, 42, 69
INVALID_REGULAR_EXPRESSION = 128


def _heartbeat(version: int, group: str, member_id: str, epoch: int, topic: str | None, **fields: Any) -> Any:
    module = HeartbeatV0 if version == 0 else HeartbeatV1
    return module(
        group_id=GroupId(group), member_id=member_id, member_epoch=i32(epoch), instance_id=None, rack_id=None,
        rebalance_timeout=i32Timedelta.parse(timedelta(seconds=5)) if epoch == 0 else i32Timedelta.parse(timedelta(0)),
        subscribed_topic_names=(TopicName(topic),) if topic else None, server_assignor=fields.pop("assignor", None),
        topic_partitions=() if epoch == 0 else None, **fields,
    )


def test_heartbeat_and_describe_versions_on_the_wire(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique_topic("kip848-raw"), 3)
    group = new_group()
    with RawClient(broker.host, broker.port, timeout=15) as c:
        assert c.call(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))).coordinators[0].error_code == 0
        # v0: the coordinator picks the member id; the answer carries the whole assignment.
        joined = c.call(_heartbeat(0, group, "", 0, topic))
        assert (int(joined.error_code), joined.member_epoch) == (0, 1) and joined.member_id
        assert joined.heartbeat_interval == timedelta(milliseconds=250)
        assert sorted(p for tp in joined.assignment.topic_partitions for p in tp.partitions) == [0, 1, 2]
        # v1: the client brings its member id; a regex that is not RE2 or an unknown assignor is refused.
        assert int(c.call(_heartbeat(1, group, "", 0, topic, subscribed_topic_regex=None)).error_code) == INVALID_REQUEST
        regex = c.call(_heartbeat(1, group, "m-x", 0, None, subscribed_topic_regex="kip(.*"))
        assert int(regex.error_code) == INVALID_REGULAR_EXPRESSION and "kip(.*" in regex.error_message
        assignor = c.call(_heartbeat(1, group, "m-x", 0, topic, subscribed_topic_regex=None, assignor="sticky"))
        assert int(assignor.error_code) == UNSUPPORTED_ASSIGNOR
        fenced = c.call(_heartbeat(1, group, joined.member_id, 5, None, subscribed_topic_regex=None))
        assert int(fenced.error_code) == FENCED_MEMBER_EPOCH

        for request in (DescribeV0, DescribeV1):
            described = c.call(request(group_ids=(GroupId(group), GroupId("no-such-group")),
                                       include_authorized_operations=False))
            found, missing = described.groups
            assert (int(found.error_code), found.group_state, found.group_epoch, found.assignor_name) == (
                0, "Stable", 1, "uniform")
            (member,) = found.members
            assert member.member_id == joined.member_id and member.member_epoch == 1
            assert [tp.topic_name for tp in member.assignment.topic_partitions] == [topic]
            assert int(missing.error_code) == GROUP_ID_NOT_FOUND

        left = c.call(_heartbeat(0, group, joined.member_id, -1, None))
        assert (int(left.error_code), left.member_epoch) == (0, -1)
        described = c.call(DescribeV1(group_ids=(GroupId(group),), include_authorized_operations=False))
        assert described.groups[0].group_state == "Empty" and described.groups[0].members == ()


def _group_epoch(broker: BrokerProcess, group: str) -> int:
    with RawClient(broker.host, broker.port, timeout=15) as c:
        described = c.call(DescribeV1(group_ids=(GroupId(group),), include_authorized_operations=False))
    assert int(described.groups[0].error_code) == 0
    return int(described.groups[0].group_epoch)


def test_a_live_group_keeps_its_epoch_and_assignment_across_a_broker_restart(broker: BrokerProcess, topic6: str) -> None:
    group = new_group()
    members = [Member(broker.bootstrap, group, topic6) for _ in range(2)]
    try:
        before = settle(members, balanced(6, 2))
        epoch_before = _group_epoch(broker, group)
        revocations = [len(m.revoked) for m in members]
        broker.restart()
        # The members carry on with the epochs the restarted coordinator rebuilt: no rebalance.
        after = settle(members, lambda a: a == before, timeout=20, hold=2.0)
        assert after == before
        assert _group_epoch(broker, group) == epoch_before
        assert [len(m.revoked) for m in members] == revocations
    finally:
        for m in members:
            m.close()


def test_a_regex_subscription_consumes_every_matching_topic_and_picks_up_new_ones(broker: BrokerProcess) -> None:
    prefix = unique_topic("rx")
    first, second = (create_topic(broker.bootstrap, f"{prefix}-{n}", 2) for n in ("a", "b"))
    other = create_topic(broker.bootstrap, f"x{prefix}-c", 2)  # matches only if the match were partial
    prod = producer(broker.bootstrap)
    for name in (first, second, other):
        produce_all(prod, name, [name.encode()] * 5)
    group = new_group()
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
        **FAST_CLIENT,
    })
    try:
        consumer.subscribe([f"^{prefix}-.*"])
        seen: dict[str, int] = {}

        def read_until(expected: dict[str, int], timeout: float = 30.0) -> None:
            deadline = time.monotonic() + timeout
            while seen != expected and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    seen[message.topic()] = seen.get(message.topic(), 0) + 1
            assert seen == expected

        read_until({first: 5, second: 5})
        with RawClient(broker.host, broker.port, timeout=15) as c:  # the broker resolved the regex: the client sent it
            [described] = c.call(DescribeV1(group_ids=(GroupId(group),), include_authorized_operations=False)).groups
            [member] = described.members
            # librdkafka joins its subscription's regexes as "(r1)|(r2)..."
            assert (member.subscribed_topic_regex, member.subscribed_topic_names) == (f"(^{prefix}-.*)", ())
        third = create_topic(broker.bootstrap, f"{prefix}-c", 1)
        produce_all(prod, third, [b"late"] * 3)
        read_until({first: 5, second: 5, third: 3})
        assert {tp.topic for tp in consumer.assignment()} == {first, second, third}
    finally:
        consumer.close()
