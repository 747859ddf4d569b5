"""Classic consumer groups against Apache Kafka: coordinator lookup, join/sync/heartbeat errors,
rebalances, offset commits and fetches, leave, describe, list and delete.

Runs only when tidelog advertises JoinGroup; until then each scenario is skipped with that reason.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import batch, create_topic, produce
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from helpers.broker_process import BrokerProcess
from helpers.raw_client import RawClient
from tidelog.protocol.apis import ApiKey

COORDINATOR_NOT_AVAILABLE = 15
COORDINATOR_LOAD_IN_PROGRESS = 14
MEMBER_ID_REQUIRED = 79
V_JOIN, V_SYNC, V_HEARTBEAT, V_LEAVE = 9, 5, 4, 5
V_COMMIT, V_FETCH, V_DESCRIBE = 9, 9, 5


def _string(value: str) -> bytes:
    encoded = value.encode()
    return struct.pack(">h", len(encoded)) + encoded


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: one topic, no user data."""
    return struct.pack(">hi", 0, 1) + _string(topic) + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: the partitions of one topic, no user data."""
    return (struct.pack(">hi", 0, 1) + _string(topic) + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def find_coordinator(b: Broker, label: str | None, group: str) -> Any:
    """FindCoordinator v4 for one group; Kafka answers COORDINATOR_NOT_AVAILABLE while it creates
    __consumer_offsets on first use, which clients retry: so does this, quietly."""
    req = request(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=[group])
    for _ in range(100):
        response = b.quiet(req)
        codes = [c.error_code for c in getattr(response, "coordinators", ())]
        if COORDINATOR_NOT_AVAILABLE not in codes:
            break
        time.sleep(0.1)
    # The coordinator may still be loading its __consumer_offsets partition (Kafka answers
    # COORDINATOR_LOAD_IN_PROGRESS meanwhile, which clients retry): wait until a side-effect-free
    # DescribeGroups for this group is answered without it.
    describe_req = request(ApiKey.DESCRIBE_GROUPS, V_DESCRIBE, groups=[group], include_authorized_operations=False)
    for _ in range(100):
        described = b.quiet(describe_req)
        if all(g.error_code != COORDINATOR_LOAD_IN_PROGRESS for g in getattr(described, "groups", ())):
            break
        time.sleep(0.1)
    if label is not None:
        b.record(label, response)
    return response


def join_request(group: str, member_id: str, topic: str) -> Any:
    return request(ApiKey.JOIN_GROUP, V_JOIN, group_id=group, session_timeout=10_000, rebalance_timeout=10_000,
                   member_id=member_id, group_instance_id=None, protocol_type="consumer",
                   protocols=[{"name": "range", "metadata": subscription(topic)}], reason=None)


def join(b: Broker, label: str, group: str, topic: str) -> tuple[str, int]:
    """JoinGroup twice, as clients do: first without a member id (MEMBER_ID_REQUIRED hands one out),
    then with it. Both answers are recorded; returns (member id, generation)."""
    first: Any = b.call(f"{label}: join without member id", join_request(group, "", topic))
    member_id = getattr(first, "member_id", "")
    second: Any = b.call(f"{label}: join with member id", join_request(group, member_id, topic))
    return member_id, int(getattr(second, "generation_id", -1))


def sync(b: Broker, label: str, group: str, member_id: str, generation: int,
         assignments: dict[str, bytes] | None = None) -> Any:
    return b.call(label, request(
        ApiKey.SYNC_GROUP, V_SYNC, group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    ))


def heartbeat(b: Broker, label: str, group: str, member_id: str, generation: int) -> Any:
    return b.call(label, request(ApiKey.HEARTBEAT, V_HEARTBEAT, group_id=group, generation_id=generation,
                                 member_id=member_id, group_instance_id=None))


def commit(b: Broker, label: str, group: str, member_id: str, generation: int, topic: str,
           offsets: dict[int, int]) -> Any:
    return b.call(label, request(
        ApiKey.OFFSET_COMMIT, V_COMMIT, group_id=group, generation_id_or_member_epoch=generation,
        member_id=member_id, group_instance_id=None,
        topics=[{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
            for p, o in offsets.items()
        ]}],
    ))


def fetch_offsets(b: Broker, label: str, group: str, topic: str | None, partitions: list[int]) -> Any:
    topics = None if topic is None else [{"name": topic, "partition_indexes": partitions}]
    return b.call(label, request(ApiKey.OFFSET_FETCH, V_FETCH, require_stable=True, groups=[
        {"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics},
    ]))


def describe(b: Broker, label: str, *groups: str) -> Any:
    return b.call(label, request(ApiKey.DESCRIBE_GROUPS, V_DESCRIBE, groups=list(groups),
                                 include_authorized_operations=False))


def leave(b: Broker, label: str, group: str, *members: str) -> Any:
    return b.call(label, request(ApiKey.LEAVE_GROUP, V_LEAVE, group_id=group, members=[
        {"member_id": m, "group_instance_id": None, "reason": None} for m in members
    ]))


def _topic_with_data(b: Broker, partitions: int = 2) -> str:
    name = b.topic()
    create_topic(b, name, partitions, label=None)
    for p in range(partitions):
        produce(b, None, name, batch([b"a", b"b", b"c"]), partition=p)
    return name


# ---------------------------------------------------------------------------------------------------


def scenario_group_find_coordinator(b: Broker) -> None:
    """FindCoordinator for a group at v0 (oldest), v3 (flexible) and v4 (batched keys: two groups)."""
    find_coordinator(b, None, b.topic("-warm-up"))
    b.call("v0", request(ApiKey.FIND_COORDINATOR, 0, key=b.topic("-g")))
    b.call("v3", request(ApiKey.FIND_COORDINATOR, 3, key=b.topic("-g"), key_type=0))
    find_coordinator(b, "v4 one group", b.topic("-g"))
    b.call("v4 two groups", request(ApiKey.FIND_COORDINATOR, 4, key_type=0,
                                    coordinator_keys=[b.topic("-g1"), b.topic("-g2")]))


def scenario_group_join_sync_heartbeat_errors(b: Broker) -> None:
    """One member: join (MEMBER_ID_REQUIRED, then generation 1 as leader), sync its assignment,
    heartbeat; then the errors clients handle: wrong generation (ILLEGAL_GENERATION), unknown member
    (UNKNOWN_MEMBER_ID) for Heartbeat and SyncGroup; describe the stable group; leave; heartbeat and
    describe after leaving."""
    topic = _topic_with_data(b)
    group = b.topic("-group")
    find_coordinator(b, None, group)
    member, generation = join(b, "member", group, topic)
    sync(b, "sync as leader", group, member, generation, {member: assignment(topic, [0, 1])})
    heartbeat(b, "heartbeat", group, member, generation)
    heartbeat(b, "heartbeat wrong generation", group, member, generation + 5)
    heartbeat(b, "heartbeat unknown member", group, "not-a-member", generation)
    sync(b, "sync wrong generation", group, member, generation + 5)
    sync(b, "sync unknown member", group, "not-a-member", generation)
    describe(b, "describe stable", group)
    leave(b, "leave", group, member)
    heartbeat(b, "heartbeat after leave", group, member, generation)
    describe(b, "describe after leave", group)


def scenario_group_rebalance_in_progress(b: Broker) -> None:
    """A second member joins a stable group: the first member's heartbeat gets REBALANCE_IN_PROGRESS
    until it rejoins (a commit with its current generation is still taken); DescribeGroups shows the
    rebalance; once the first rejoins both get generation 2 with the same leader."""
    topic = _topic_with_data(b)
    group = b.topic("-group")
    find_coordinator(b, None, group)
    first, generation = join(b, "first", group, topic)
    sync(b, "first sync", group, first, generation, {first: assignment(topic, [0, 1])})

    second_wire = b.connection()
    answer: Any = b.call("second: join without member id", join_request(group, "", topic), wire=second_wire)
    second = getattr(answer, "member_id", "")
    pending = second_wire.start(join_request(group, second, topic))  # held until the first rejoins
    b.wait_until("rebalance started", lambda: getattr(b.quiet(request(
        ApiKey.HEARTBEAT, V_HEARTBEAT, group_id=group, generation_id=generation, member_id=first,
        group_instance_id=None)), "error_code", 0) != 0)
    heartbeat(b, "first heartbeat during rebalance", group, first, generation)
    commit(b, "first commit during rebalance", group, first, generation, topic, {0: 1})
    describe(b, "describe during rebalance", group)
    b.call("first rejoins", join_request(group, first, topic))
    b.record("second's join answer", second_wire.finish(pending))
    leave(b, "both leave", group, first, second)


def scenario_group_offsets(b: Broker) -> None:
    """Offsets: a member commits with its generation (then with a wrong one: ILLEGAL_GENERATION);
    fetch by partition and for all topics; a standalone commit (generation -1, no member) to
    another group; an unknown group's offsets are -1; a commit to an unknown topic."""
    topic = _topic_with_data(b)
    group = b.topic("-group")
    find_coordinator(b, None, group)
    member, generation = join(b, "member", group, topic)
    sync(b, "sync", group, member, generation, {member: assignment(topic, [0, 1])})
    commit(b, "commit", group, member, generation, topic, {0: 2, 1: 3})
    commit(b, "commit wrong generation", group, member, generation + 1, topic, {0: 3})
    fetch_offsets(b, "fetch partitions 0, 1, 7", group, topic, [0, 1, 7])
    fetch_offsets(b, "fetch all topics", group, None, [])
    standalone = b.topic("-standalone")
    find_coordinator(b, None, standalone)
    commit(b, "standalone commit", standalone, "", -1, topic, {0: 1})
    fetch_offsets(b, "standalone fetch", standalone, topic, [0, 1])
    fetch_offsets(b, "unknown group fetch", b.topic("-nobody"), topic, [0])
    commit(b, "commit to unknown topic", standalone, "", -1, b.topic("-missing"), {0: 1})
    leave(b, "leave", group, member)


def scenario_group_delete_and_list(b: Broker) -> None:
    """DeleteGroups: a group with a member is NON_EMPTY_GROUP, an unknown group GROUP_ID_NOT_FOUND,
    an empty group with offsets is deleted (its offsets go with it); ListGroups (v5, filtered to
    this scenario's groups) shows state and type; OffsetDelete on an empty group."""
    topic = _topic_with_data(b)
    group = b.topic("-group")
    other = b.topic("-other")
    find_coordinator(b, None, group)
    find_coordinator(b, None, other)
    member, generation = join(b, "member", group, topic)
    sync(b, "sync", group, member, generation, {member: assignment(topic, [0, 1])})
    commit(b, "standalone commit", other, "", -1, topic, {0: 1, 1: 2})
    listed: Any = b.quiet(request(ApiKey.LIST_GROUPS, 5, states_filter=[], types_filter=[]))
    b.note("list groups (this scenario's)", sorted(
        (g.group_id, g.group_state, g.group_type, g.protocol_type)
        for g in getattr(listed, "groups", ()) if g.group_id in (group, other)
    ))
    b.call("delete groups", request(ApiKey.DELETE_GROUPS, 2, groups_names=[group, other, b.topic("-nobody")]))
    fetch_offsets(b, "fetch deleted group's offsets", other, topic, [0, 1])
    leave(b, "leave", group, member)
    commit(b, "commit again", other, "", -1, topic, {0: 1, 1: 2})
    b.call("offset delete partition 0", request(ApiKey.OFFSET_DELETE, 0, group_id=other, topics=[
        {"name": topic, "partitions": [{"partition_index": 0}]}]))
    fetch_offsets(b, "fetch after offset delete", other, topic, [0, 1])


# ---------------------------------------------------------------------------------------------------


def tidelog_serves_groups(broker: BrokerProcess) -> bool:
    with RawClient(broker.host, broker.port) as client:
        response = client.call(ApiVersionsRequest())
    return any(entry.api_key == int(ApiKey.JOIN_GROUP) for entry in response.api_keys)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result],
                       tidelog_broker: BrokerProcess) -> None:
    if not tidelog_serves_groups(tidelog_broker):
        pytest.skip("tidelog does not advertise JoinGroup (11): consumer groups are not served yet")
    compare_with_kafka(scenario)
