"""DescribeGroups, ListGroups, DeleteGroups, and what the coordinator answers while it loads."""

from __future__ import annotations

import ast
import pathlib

import pytest
from coordinator_harness import FAST, Harness, LeavingMember, MemoryOffsetsLog

import tidelog.coordinator
from tidelog.common.errors import ErrorCode
from tidelog.coordinator.coordinator import GroupCoordinator
from tidelog.coordinator.messages import Heartbeat
from tidelog.coordinator.persistence import load_partition


def test_describe_shows_members_with_assignments_once_stable() -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    (described,) = h.coord.describe_groups(["g"], h.now, unknown_is_error=True)
    assert (described.error, described.state, described.protocol_type, described.protocol_data) == (
        ErrorCode.NONE, "Stable", "consumer", "range")
    assert {m.member_id: m.assignment for m in described.members} == {j.member_id: j.member_id.encode() for j in joined}
    assert all(m.client_host == "/127.0.0.1" and m.metadata for m in described.members)


def test_describe_hides_metadata_but_keeps_assignments_during_a_rebalance() -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    (before,) = h.coord.describe_groups(["g"], h.now, unknown_is_error=False)
    h.join("g", next(j for j in joined if j.members).member_id)
    (described,) = h.coord.describe_groups(["g"], h.now, unknown_is_error=False)
    assert described.state == "PreparingRebalance" and described.protocol_data == ""
    assert all(m.metadata == b"" for m in described.members)
    # As Kafka 4: the members' current assignments stay visible while the group rebalances.
    assert {m.member_id: m.assignment for m in described.members} == {
        m.member_id: m.assignment for m in before.members
    }


@pytest.mark.parametrize(
    "unknown_is_error, expected",
    [(False, (ErrorCode.NONE, "Dead")), (True, (ErrorCode.GROUP_ID_NOT_FOUND, "Dead"))],
)
def test_describing_an_unknown_group(unknown_is_error: bool, expected: tuple[ErrorCode, str]) -> None:
    h = Harness()
    (described,) = h.coord.describe_groups(["nope"], h.now, unknown_is_error=unknown_is_error)
    assert (described.error, described.state) == expected


def test_list_groups_filters_by_state_and_type() -> None:
    h = Harness()
    h.stable_group("live", 1)
    h.commit("solo", {("t", 0): 1})
    error, everything = h.coord.list_groups([], [], h.now)
    assert error is ErrorCode.NONE
    assert [(g.group_id, g.state, g.protocol_type, g.group_type) for g in everything] == [
        ("live", "Stable", "consumer", "classic"), ("solo", "Empty", "", "classic")]
    assert [g.group_id for g in h.coord.list_groups(["EMPTY"], [], h.now)[1]] == ["solo"]
    assert h.coord.list_groups([], ["consumer"], h.now)[1] == []
    assert len(h.coord.list_groups([], ["Classic"], h.now)[1]) == 2


def test_delete_groups() -> None:
    h = Harness()
    h.stable_group("live", 1)
    (gone,) = h.stable_group("emptied", 1)
    h.commit("emptied", {("t", 0): 4}, generation=1, member_id=gone.member_id)
    h.leave("emptied", LeavingMember(gone.member_id))
    reply = h.coord.delete_groups(["live", "emptied", "nope", ""], h.now)
    h.pump()
    assert reply.value == [("live", ErrorCode.NON_EMPTY_GROUP), ("emptied", ErrorCode.NONE),
                           ("nope", ErrorCode.GROUP_ID_NOT_FOUND), ("", ErrorCode.INVALID_GROUP_ID)]
    assert "emptied" not in h.coord.groups and h.committed("emptied", "t", 0) == -1
    restarted = h.restart()
    assert "emptied" not in restarted.coord.groups and "live" in restarted.coord.groups


def test_a_failed_delete_reports_the_error_and_keeps_the_group() -> None:
    h = Harness()
    h.commit("solo", {("t", 0): 1})
    assert h.log is not None
    h.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    reply = h.coord.delete_groups(["solo"], h.now)
    h.pump()
    assert reply.value == [("solo", ErrorCode.NOT_COORDINATOR)]
    assert "solo" in h.coord.groups


# ------------------------------------------------------------------------------------------ loading


def test_while_loading_requests_are_told_to_wait_and_heartbeats_pass() -> None:
    h = Harness()
    (only,) = h.stable_group("g", 1)
    assert h.log is not None
    coord = GroupCoordinator(FAST)
    coord.begin_loading(range(h.partitions), h.partitions)
    assert coord.status("g") is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert coord.heartbeat(Heartbeat("g", 1, only.member_id), h.now) is ErrorCode.NONE
    assert coord.list_groups([], [], h.now)[0] is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for p in range(h.partitions):
        load_partition(h.log, coord, p, 64)  # tiny reads: many chunks
        coord.complete_loading(p, h.now)
    assert coord.status("g") is ErrorCode.NONE
    assert coord.heartbeat(Heartbeat("g", 1, only.member_id), h.now) is ErrorCode.NONE


def test_a_coordinator_without_partitions_is_not_the_coordinator() -> None:
    coord = GroupCoordinator(FAST)
    assert coord.status("g") is ErrorCode.NOT_COORDINATOR


def test_loaded_members_must_heartbeat_within_their_session() -> None:
    h = Harness()
    joined = h.stable_group("g", 2, session=1_000)
    restarted = h.restart()
    restarted.advance(600)
    assert restarted.heartbeat("g", joined[0].member_id, 1) is ErrorCode.NONE
    restarted.advance(600)
    group = restarted.coord.groups["g"]
    assert set(group.members) == {joined[0].member_id}
    assert group.state.value == "PreparingRebalance"


def test_shutdown_answers_parked_requests() -> None:
    h = Harness()
    waiter = h.join("g", require_known=False)
    h.coord.shutdown()
    h.pump()
    assert h.join_result(waiter).error is ErrorCode.NOT_COORDINATOR
    assert h.coord.status("g") is ErrorCode.NOT_COORDINATOR


def test_the_coordinator_package_stays_pure() -> None:
    """No I/O, no event loop, nothing from the broker or storage layers."""
    allowed = ("tidelog.common", "tidelog.protocol", "tidelog.coordinator")
    forbidden_stdlib = {"asyncio", "socket", "os", "threading", "time", "selectors", "subprocess"}
    root = pathlib.Path(tidelog.coordinator.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                assert top not in forbidden_stdlib, f"{path.name} imports {name}"
                if top == "tidelog":
                    assert name.startswith(allowed), f"{path.name} imports {name}"


def test_memory_log_reads_respect_batch_boundaries() -> None:
    log = MemoryOffsetsLog(1)
    h = Harness(partitions=1, log=log)
    for i in range(5):
        h.commit("solo", {("t", i): i})
    data, next_offset = log.read(0, 2, 1)
    assert next_offset == 3 and data  # at least one whole batch even when it exceeds max_bytes


def test_an_unloaded_partition_forgets_its_groups_and_a_new_leader_rebuilds_them_from_the_log() -> None:
    h = Harness()
    joined = h.stable_group("moving", 2)
    h.commit("moving", {("t", 0): 42}, generation=joined[0].generation_id, member_id=joined[0].member_id)
    partition = h.coord.partition_of("moving")
    parked = h.join("moving", joined[0].member_id)  # a rebalance: this JoinGroup waits for the other member
    assert parked not in h.answers
    assert h.coord.unload(partition) >= 1
    h.pump()
    assert h.answers[parked].error is ErrorCode.NOT_COORDINATOR
    assert h.coord.status("moving") is ErrorCode.NOT_COORDINATOR
    assert "moving" not in h.coord.groups and not h.coord.state.offsets.has_offsets("moving")
    h.coord.begin_loading([partition], h.partitions)  # leadership comes back: replay the partition
    assert h.log is not None
    load_partition(h.log, h.coord, partition, 1 << 20)
    h.coord.complete_loading(partition, h.now)
    assert h.committed("moving", "t", 0) == 42
