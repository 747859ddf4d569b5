"""Group APIs on the wire, version by version, and bad requests: Kafka's error codes, group intact.

A raw protocol client sends what real clients only send by mistake (stale generations, strangers'
member ids, commits for partitions that do not exist, oversized metadata) against a live, Stable
group, then checks the group is exactly as it was.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeGroupsV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeGroupsV6
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindCoordinatorV0
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorV4
from kio.schema.heartbeat.v3.request import HeartbeatRequest
from kio.schema.join_group.v3.request import JoinGroupRequest as JoinGroupV3
from kio.schema.join_group.v3.request import JoinGroupRequestProtocol as JoinProtocolV3
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v0.request import LeaveGroupRequest as LeaveGroupV0
from kio.schema.leave_group.v4.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v4.request import ListGroupsRequest as ListGroupsV4
from kio.schema.list_groups.v5.request import ListGroupsRequest as ListGroupsV5
from kio.schema.offset_commit.v2.request import OffsetCommitRequest as OffsetCommitV2
from kio.schema.offset_commit.v2.request import OffsetCommitRequestPartition as CommitPartitionV2
from kio.schema.offset_commit.v2.request import OffsetCommitRequestTopic as CommitTopicV2
from kio.schema.offset_commit.v7.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_commit.v9.request import OffsetCommitRequest as OffsetCommitV9
from kio.schema.offset_commit.v9.request import OffsetCommitRequestPartition as CommitPartitionV9
from kio.schema.offset_commit.v9.request import OffsetCommitRequestTopic as CommitTopicV9
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest as OffsetFetchV1
from kio.schema.offset_fetch.v1.request import OffsetFetchRequestTopic as FetchTopicV1
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest as OffsetFetchV7
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest as OffsetFetchV8
from kio.schema.offset_fetch.v8.request import OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64, i64Timedelta

from helpers.broker_process import BrokerProcess, register_failure_report
from helpers.clients import create_topic, unique_topic
from helpers.raw_client import RawClient

NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, COORDINATOR_NOT_AVAILABLE = 0, 3, 12, 15
ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT = 22, 23, 25, 26
REBALANCE_IN_PROGRESS, INVALID_REQUEST, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 27, 42, 68, 69
MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID, GROUP_SUBSCRIBED_TO_TOPIC = 79, 81, 82, 86

GROUP_BROKER = {
    # Long enough for the two members of StableGroup, joining on two connections, to land in the
    # same first rebalance.
    "group.initial.rebalance.delay.ms": 300,
    "group.min.session.timeout.ms": 500,
    "group.max.size": 2,
    "offset.metadata.max.bytes": 64,
    "offsets.topic.num.partitions": 3,
}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("groups-protocol"), GROUP_BROKER)
    process.start()
    yield process
    process.close()


@pytest.fixture
def client(group_broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(group_broker.host, group_broker.port, timeout=15) as c:
        find = c.call(FindCoordinatorV4(key_type=i8(0), coordinator_keys=("warm-up",)))
        assert find.coordinators[0].error_code == NONE  # creates __consumer_offsets
        yield c


@pytest.fixture
def topic(group_broker: BrokerProcess) -> str:
    return create_topic(group_broker.bootstrap, unique_topic("grp"), 2)


def ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def join_request(group: str, member_id: str = "", *, topic: str = "t", instance: str | None = None,
                 session: int = 10_000, protocol_type: str = "consumer") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=GroupId(group), session_timeout=ms(session), rebalance_timeout=ms(5_000), member_id=member_id,
        group_instance_id=instance, protocol_type=protocol_type,
        protocols=(JoinGroupRequestProtocol(name="range", metadata=subscription(topic)),),
    )


def code(response: Any) -> int:
    return int(response.error_code)


class StableGroup:
    """Two members, joined and synced over two raw connections; B is static."""

    def __init__(self, broker: BrokerProcess, topic: str) -> None:
        self.group = f"g-{uuid.uuid4().hex[:10]}"
        self.topic = topic
        self.a = RawClient(broker.host, broker.port, timeout=15)
        self.b = RawClient(broker.host, broker.port, timeout=15)
        first = self.a.call(join_request(self.group, topic=topic))
        assert code(first) == MEMBER_ID_REQUIRED
        joined_b = self._join_both(first.member_id)
        self.generation = int(joined_b[0].generation_id)
        self.a_id, self.b_id = joined_b[0].member_id, joined_b[1].member_id
        leader = joined_b[0] if joined_b[0].leader == joined_b[0].member_id else joined_b[1]
        assignments = (SyncGroupRequestAssignment(member_id=self.a_id, assignment=b"A"),
                       SyncGroupRequestAssignment(member_id=self.b_id, assignment=b"B"))
        ids = []
        for conn, member_id in ((self.a, self.a_id), (self.b, self.b_id)):
            ids.append(conn.send_request(SyncGroupRequest(
                group_id=GroupId(self.group), generation_id=i32(self.generation), member_id=member_id,
                group_instance_id=self.instance(member_id),
                assignments=assignments if member_id == leader.member_id else ())))
        synced = [conn.receive_response(_response(SyncGroupRequest), cid) for conn, cid in zip((self.a, self.b), ids, strict=True)]
        assert [(code(s), s.assignment) for s in synced] == [(NONE, b"A"), (NONE, b"B")]

    def _join_both(self, a_id: str) -> list[Any]:
        ids = [self.a.send_request(join_request(self.group, a_id, topic=self.topic)),
               self.b.send_request(join_request(self.group, topic=self.topic, instance="static-b"))]
        joined = [conn.receive_response(_response(JoinGroupRequest), cid) for conn, cid in zip((self.a, self.b), ids, strict=True)]
        assert [code(j) for j in joined] == [NONE, NONE]
        assert joined[0].generation_id == joined[1].generation_id
        return joined

    def instance(self, member_id: str) -> str | None:
        return "static-b" if member_id == self.b_id else None

    def heartbeat(self, member_id: str, generation: int | None = None, instance: str | None = None) -> int:
        response = self.a.call(HeartbeatRequest(
            group_id=GroupId(self.group), generation_id=i32(self.generation if generation is None else generation),
            member_id=member_id, group_instance_id=instance))
        return code(response)

    def describe(self) -> Any:
        (described,) = self.a.call(DescribeGroupsV6(groups=(GroupId(self.group),), include_authorized_operations=False)).groups
        return described

    def close(self) -> None:
        self.a.close()
        self.b.close()


def _response(request_type: type) -> type:
    return load_response_schema(request_type.__api_key__, request_type.__version__)  # type: ignore[attr-defined, no-any-return]


@pytest.fixture
def stable(group_broker: BrokerProcess, topic: str) -> Iterator[StableGroup]:
    group = StableGroup(group_broker, topic)
    yield group
    group.close()


def commit_v7(group: StableGroup, member_id: str, generation: int, offsets: dict[tuple[str, int], int],
              metadata: str = "") -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (t, p), offset in offsets.items():
        by_topic.setdefault(t, []).append(OffsetCommitRequestPartition(
            partition_index=i32(p), committed_offset=i64(offset), committed_leader_epoch=i32(-1),
            committed_metadata=metadata))
    response = group.a.call(OffsetCommitRequest(
        group_id=GroupId(group.group), generation_id_or_member_epoch=i32(generation), member_id=member_id,
        group_instance_id=group.instance(member_id),
        topics=tuple(OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
    return {(t.name, int(p.partition_index)): code(p) for t in response.topics for p in t.partitions}


def fetch_all(client: RawClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    response = client.call(OffsetFetchV7(group_id=GroupId(group), topics=None, require_stable=True))
    assert code(response) == NONE
    return {(t.name, int(p.partition_index)): (int(p.committed_offset), p.metadata)
            for t in response.topics for p in t.partitions}


# ------------------------------------------------------------------------------------------------ tests


def test_find_coordinator_across_versions_and_key_types(client: RawClient, group_broker: BrokerProcess) -> None:
    v0 = client.call(FindCoordinatorV0(key="g1"))
    assert (code(v0), int(v0.node_id), v0.port) == (NONE, 1, group_broker.port)
    v3 = client.call(FindCoordinatorV3(key="g1", key_type=i8(0)))
    assert (code(v3), v3.host, v3.port) == (NONE, group_broker.host, group_broker.port)
    v4 = client.call(FindCoordinatorV4(key_type=i8(0), coordinator_keys=("g1", "g2")))
    assert [(c.key, code(c), c.port) for c in v4.coordinators] == [("g1", NONE, group_broker.port),
                                                                     ("g2", NONE, group_broker.port)]
    txn = client.call(FindCoordinatorV4(key_type=i8(1), coordinator_keys=("txn-1",)))
    assert [(code(c), int(c.node_id), c.port) for c in txn.coordinators] == [(NONE, 1, group_broker.port)]
    other = client.call(FindCoordinatorV3(key="x", key_type=i8(7)))
    assert code(other) == INVALID_REQUEST


def test_a_stable_group_answers_bad_requests_with_kafkas_codes_and_stays_intact(
    stable: StableGroup, client: RawClient, topic: str,
) -> None:
    before = stable.describe()
    assert (before.group_state, len(before.members)) == ("Stable", 2)
    a, b, gen = stable.a_id, stable.b_id, stable.generation

    assert stable.heartbeat(a, gen + 1) == ILLEGAL_GENERATION
    assert stable.heartbeat("stranger") == UNKNOWN_MEMBER_ID
    assert stable.heartbeat(a, instance="static-b") == FENCED_INSTANCE_ID
    stale_sync = stable.a.call(SyncGroupRequest(group_id=GroupId(stable.group), generation_id=i32(gen - 1),
                                                member_id=a, group_instance_id=None, assignments=()))
    assert code(stale_sync) == ILLEGAL_GENERATION
    assert commit_v7(stable, a, gen - 1, {(topic, 0): 5}) == {(topic, 0): ILLEGAL_GENERATION}
    assert commit_v7(stable, "stranger", gen, {(topic, 0): 5}) == {(topic, 0): UNKNOWN_MEMBER_ID}
    mixed = commit_v7(stable, a, gen, {(topic, 0): 7, (topic, 9): 1, ("no-such-topic", 0): 1})
    assert mixed == {(topic, 0): NONE, (topic, 9): UNKNOWN_TOPIC_OR_PARTITION,
                     ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert commit_v7(stable, b, gen, {(topic, 1): 3}, metadata="m" * 65) == {(topic, 1): OFFSET_METADATA_TOO_LARGE}
    assert code(client.call(join_request(stable.group, a, topic=topic, session=100))) == INVALID_SESSION_TIMEOUT
    assert code(client.call(join_request(stable.group, a, topic=topic, protocol_type="connect"))) == INCONSISTENT_GROUP_PROTOCOL
    assert code(client.call(join_request(stable.group, topic=topic))) == GROUP_MAX_SIZE_REACHED
    assert code(client.call(LeaveGroupV0(group_id=GroupId(stable.group), member_id="stranger"))) == UNKNOWN_MEMBER_ID
    deleted = client.call(DeleteGroupsRequest(groups_names=(GroupId(stable.group),)))
    assert [code(r) for r in deleted.results] == [NON_EMPTY_GROUP]
    subscribed = client.call(OffsetDeleteRequest(group_id=GroupId(stable.group), topics=(
        OffsetDeleteRequestTopic(name=TopicName(topic), partitions=(OffsetDeleteRequestPartition(partition_index=i32(0)),)),)))
    assert [code(p) for t in subscribed.topics for p in t.partitions] == [GROUP_SUBSCRIBED_TO_TOPIC]

    after = stable.describe()
    assert (after.group_state, after.protocol_data) == ("Stable", "range")
    assert {(m.member_id, m.member_assignment) for m in after.members} == {(a, b"A"), (b, b"B")}
    assert stable.heartbeat(a) == NONE and stable.heartbeat(b, instance="static-b") == NONE
    assert fetch_all(client, stable.group) == {(topic, 0): (7, "")}


def test_a_member_commit_to_a_group_that_does_not_exist(client: RawClient, topic: str) -> None:
    partition = OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(1),
                                             committed_leader_epoch=i32(-1), committed_metadata=None)
    v7 = client.call(OffsetCommitRequest(group_id=GroupId("ghost"), generation_id_or_member_epoch=i32(4),
                                         member_id="m", group_instance_id=None,
                                         topics=(OffsetCommitRequestTopic(name=TopicName(topic), partitions=(partition,)),)))
    assert code(v7.topics[0].partitions[0]) == ILLEGAL_GENERATION
    v9 = client.call(OffsetCommitV9(group_id=GroupId("ghost"), generation_id_or_member_epoch=i32(4), member_id="m",
                                    group_instance_id=None, topics=(CommitTopicV9(name=TopicName(topic), partitions=(
                                        CommitPartitionV9(partition_index=i32(0), committed_offset=i64(1),
                                                          committed_leader_epoch=i32(-1), committed_metadata=None),)),)))
    assert code(v9.topics[0].partitions[0]) == GROUP_ID_NOT_FOUND


def test_old_and_new_offset_fetch_and_commit_versions_agree(client: RawClient, topic: str) -> None:
    group = f"simple-{uuid.uuid4().hex[:8]}"
    committed = client.call(OffsetCommitV2(
        group_id=GroupId(group), generation_id_or_member_epoch=i32(-1), member_id="", retention_time=i64Timedelta.parse(datetime.timedelta(milliseconds=-1)),
        topics=(CommitTopicV2(name=TopicName(topic), partitions=(
            CommitPartitionV2(partition_index=i32(0), committed_offset=i64(42), committed_metadata="meta"),)),)))
    assert code(committed.topics[0].partitions[0]) == NONE

    v1 = client.call(OffsetFetchV1(group_id=GroupId(group), topics=(
        FetchTopicV1(name=TopicName(topic), partition_indexes=(i32(0), i32(1))),)))
    assert [(int(p.committed_offset), p.metadata, code(p)) for p in v1.topics[0].partitions] == [
        (42, "meta", NONE), (-1, "", NONE)]
    assert fetch_all(client, group) == {(topic, 0): (42, "meta")}
    v8 = client.call(OffsetFetchV8(require_stable=False, groups=(
        OffsetFetchRequestGroup(group_id=GroupId(group), topics=(
            OffsetFetchRequestTopics(name=TopicName(topic), partition_indexes=(i32(0),)),)),
        OffsetFetchRequestGroup(group_id=GroupId("nobody-" + group), topics=None),
    )))
    assert [(g.group_id, code(g)) for g in v8.groups] == [(group, NONE), ("nobody-" + group, NONE)]
    assert int(v8.groups[0].topics[0].partitions[0].committed_offset) == 42
    assert v8.groups[1].topics == ()


def test_describe_list_and_delete_groups(client: RawClient, topic: str) -> None:
    group = f"simple-{uuid.uuid4().hex[:8]}"
    commit = client.call(OffsetCommitV2(
        group_id=GroupId(group), generation_id_or_member_epoch=i32(-1), member_id="", retention_time=i64Timedelta.parse(datetime.timedelta(milliseconds=-1)),
        topics=(CommitTopicV2(name=TopicName(topic), partitions=(
            CommitPartitionV2(partition_index=i32(0), committed_offset=i64(1), committed_metadata=None),)),)))
    assert code(commit.topics[0].partitions[0]) == NONE

    (v5,) = client.call(DescribeGroupsV5(groups=(GroupId("nobody"),), include_authorized_operations=False)).groups
    assert (code(v5), v5.group_state) == (NONE, "Dead")
    (v6,) = client.call(DescribeGroupsV6(groups=(GroupId("nobody"),), include_authorized_operations=True)).groups
    assert (code(v6), v6.group_state) == (GROUP_ID_NOT_FOUND, "Dead")
    (mine,) = client.call(DescribeGroupsV6(groups=(GroupId(group),), include_authorized_operations=True)).groups
    assert (code(mine), mine.group_state, mine.protocol_type, mine.members) == (NONE, "Empty", "", ())
    assert int(mine.authorized_operations) > 0

    empty = client.call(ListGroupsV4(states_filter=("empty",)))
    assert group in {g.group_id for g in empty.groups}
    assert all(g.group_state == "Empty" for g in empty.groups)
    assert client.call(ListGroupsV5(states_filter=(), types_filter=("consumer",))).groups == ()
    assert group in {g.group_id for g in client.call(ListGroupsV5(states_filter=(), types_filter=("classic",))).groups}

    deleted = client.call(DeleteGroupsRequest(groups_names=(GroupId(group), GroupId("nobody"))))
    assert [(r.group_id, code(r)) for r in deleted.results] == [(group, NONE), ("nobody", GROUP_ID_NOT_FOUND)]
    assert group not in {g.group_id for g in client.call(ListGroupsV4(states_filter=())).groups}
    assert fetch_all(client, group) == {}


def test_old_join_versions_need_no_member_id_round_trip(client: RawClient, topic: str) -> None:
    group = f"old-{uuid.uuid4().hex[:8]}"
    joined = client.call(JoinGroupV3(
        group_id=GroupId(group), session_timeout=ms(5_000), rebalance_timeout=ms(5_000), member_id="",
        protocol_type="consumer", protocols=(JoinProtocolV3(name="range", metadata=subscription(topic)),)))
    assert (code(joined), int(joined.generation_id), joined.leader) == (NONE, 1, joined.member_id)
    left = client.call(LeaveGroupRequest(group_id=GroupId(group), members=(
        MemberIdentity(member_id=joined.member_id, group_instance_id=None), MemberIdentity(member_id="x", group_instance_id=None))))
    assert (code(left), [code(m) for m in left.members]) == (NONE, [NONE, UNKNOWN_MEMBER_ID])
    (described,) = client.call(DescribeGroupsV6(groups=(GroupId(group),), include_authorized_operations=False)).groups
    assert described.group_state == "Empty"
