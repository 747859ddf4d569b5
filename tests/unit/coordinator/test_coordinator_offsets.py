"""Committed offsets: validation, visibility after the write, deletion, expiry, failed writes."""

from __future__ import annotations

import dataclasses

import pytest
from coordinator_harness import FAST, Harness, LeavingMember, protocols

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.group import GroupState


def _errors(h: Harness, group: str, **kwargs: object) -> list[ErrorCode]:
    result = h.commit(group, {("t", 0): 10, ("t", 1): 11}, **kwargs)  # type: ignore[arg-type]
    return [e for _, parts in result.topics for _, e in parts]


def test_a_standalone_commit_creates_a_simple_group() -> None:
    h = Harness()
    assert _errors(h, "solo") == [ErrorCode.NONE, ErrorCode.NONE]
    assert (h.committed("solo", "t", 0), h.committed("solo", "t", 1)) == (10, 11)
    group = h.coord.groups["solo"]
    assert (group.state, group.protocol_type) == (GroupState.EMPTY, None)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"generation": 1, "member_id": "MEMBER"}, ErrorCode.NONE),
        ({"generation": 0, "member_id": "MEMBER"}, ErrorCode.ILLEGAL_GENERATION),
        ({"generation": 1, "member_id": "stranger"}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"generation": 1, "member_id": "MEMBER", "instance": "not-mine"}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"generation": -1, "member_id": ""}, ErrorCode.UNKNOWN_MEMBER_ID),  # admin commit on a live group
    ],
)
def test_commit_validation_on_a_stable_group(kwargs: dict[str, object], expected: ErrorCode) -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    if kwargs.get("member_id") == "MEMBER":
        kwargs = {**kwargs, "member_id": joined[0].member_id}
    assert _errors(h, "g", **kwargs) == [expected, expected]
    expected_offset = 10 if expected is ErrorCode.NONE else -1
    assert h.committed("g", "t", 0) == expected_offset
    group = h.coord.groups["g"]
    assert (group.state, group.generation, len(group.members)) == (GroupState.STABLE, 1, 2)


@pytest.mark.parametrize("v9, expected", [(False, ErrorCode.ILLEGAL_GENERATION), (True, ErrorCode.GROUP_ID_NOT_FOUND)])
def test_a_member_commit_to_an_unknown_group(v9: bool, expected: ErrorCode) -> None:
    h = Harness()
    assert _errors(h, "ghost", generation=3, member_id="m", v9=v9) == [expected, expected]
    assert "ghost" not in h.coord.groups


def test_commits_are_refused_while_the_assignment_is_pending() -> None:
    h = Harness()
    joined = h.join_now("g")
    assert h.coord.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert _errors(h, "g", generation=1, member_id=joined.member_id) == [ErrorCode.REBALANCE_IN_PROGRESS] * 2


def test_commits_of_the_current_generation_are_accepted_during_a_rebalance() -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    h.join("g", next(j for j in joined if j.members).member_id)
    assert h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert _errors(h, "g", generation=1, member_id=joined[0].member_id) == [ErrorCode.NONE] * 2


def test_unknown_partitions_and_oversized_metadata_fail_alone() -> None:
    h = Harness(dataclasses.replace(FAST, offset_metadata_max_bytes=8))
    result = h.commit("solo", {("t", 0): 1, ("missing-topic", 0): 2, ("t", 500): 3})
    assert [e for _, parts in result.topics for _, e in parts] == [
        ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    big = h.commit("solo", {("t", 1): 5}, metadata="x" * 9)
    assert big.topics[0][1][0][1] is ErrorCode.OFFSET_METADATA_TOO_LARGE
    ok = h.commit("solo", {("t", 1): 6}, metadata="é" * 8)  # counted in UTF-16 units, like Java
    assert ok.topics[0][1][0][1] is ErrorCode.NONE
    assert (h.committed("solo", "t", 0), h.committed("solo", "t", 1)) == (1, 6)


def test_fetch_returns_metadata_and_leader_epoch_and_minus_one_when_absent() -> None:
    h = Harness()
    h.commit("solo", {("t", 0): 7}, metadata="hello")
    result = h.coord.fetch_offsets("solo", [("t", [0, 1])], h.now)
    (_, (p0, p1)), = result.topics
    assert (p0.offset, p0.leader_epoch, p0.metadata) == (7, 3, "hello")
    assert (p1.offset, p1.metadata) == (-1, "")
    everything = h.coord.fetch_offsets("solo", None, h.now)
    assert [(t, [p.partition for p in ps]) for t, ps in everything.topics] == [("t", [0])]
    assert h.coord.fetch_offsets("nobody", None, h.now).topics == ()


def test_a_failed_write_is_reported_and_nothing_is_committed() -> None:
    h = Harness()
    assert h.log is not None
    h.log.fail_with = ErrorCode.KAFKA_STORAGE_ERROR
    assert _errors(h, "solo") == [ErrorCode.NOT_COORDINATOR] * 2
    h.log.fail_with = None
    assert h.committed("solo", "t", 0) == -1


# ------------------------------------------------------------------------------------- OffsetDelete


def test_offset_delete_removes_offsets_of_an_empty_group() -> None:
    h = Harness()
    h.commit("solo", {("t", 0): 1, ("u", 0): 2})
    result = h.coord.delete_offsets("solo", [("t", [0, 1])], h.now).value
    h.pump()
    assert result.error is ErrorCode.NONE
    assert [e for _, ps in result.topics for _, e in ps] == [ErrorCode.NONE, ErrorCode.NONE]
    assert (h.committed("solo", "t", 0), h.committed("solo", "u", 0)) == (-1, 2)


def test_offset_delete_refuses_topics_a_live_consumer_group_subscribes_to() -> None:
    h = Harness()
    joined = h.stable_group("g", 1, protos=protocols("t"))
    h.commit("g", {("t", 0): 1, ("u", 0): 2}, generation=1, member_id=joined[0].member_id)
    result = h.coord.delete_offsets("g", [("t", [0]), ("u", [0])], h.now).value
    h.pump()
    assert [(t, ps[0][1]) for t, ps in result.topics] == [
        ("t", ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), ("u", ErrorCode.NONE)]
    assert (h.committed("g", "t", 0), h.committed("g", "u", 0)) == (1, -1)


@pytest.mark.parametrize(
    "group, protocol_type, expected",
    [("nobody", "consumer", ErrorCode.GROUP_ID_NOT_FOUND), ("g", "connect", ErrorCode.NON_EMPTY_GROUP),
     ("", "consumer", ErrorCode.INVALID_GROUP_ID)],
)
def test_offset_delete_group_errors(group: str, protocol_type: str, expected: ErrorCode) -> None:
    h = Harness()
    h.stable_group("g", 1, protocol_type=protocol_type)
    assert h.coord.delete_offsets(group, [("t", [0])], h.now).value.error is expected


# ------------------------------------------------------------------------------------------ expiry


def test_offsets_of_an_empty_group_expire_after_retention_and_the_group_goes() -> None:
    h = Harness()
    (only,) = h.stable_group("g", 1)
    h.commit("g", {("t", 0): 5}, generation=1, member_id=only.member_id)
    h.leave("g", LeavingMember(only.member_id))
    assert h.coord.groups["g"].state is GroupState.EMPTY
    h.advance(FAST.offsets_retention_ms - 20_000)
    assert h.committed("g", "t", 0) == 5
    h.advance(20_000 + FAST.offsets_retention_check_interval_ms)
    assert h.committed("g", "t", 0) == -1
    assert "g" not in h.coord.groups
    assert "g" not in h.restart().coord.groups  # the deletion was written, not just forgotten


def test_a_stable_group_keeps_offsets_of_subscribed_topics_only() -> None:
    h = Harness()
    (only,) = h.stable_group("g", 1, protos=protocols("t"), session=60_000)
    h.commit("g", {("t", 0): 1, ("old", 0): 2}, generation=1, member_id=only.member_id)
    for _ in range(12):
        h.advance(FAST.offsets_retention_check_interval_ms)
        h.heartbeat("g", only.member_id, 1)
        h.commit("g", {("t", 0): 1}, generation=1, member_id=only.member_id)
    assert (h.committed("g", "t", 0), h.committed("g", "old", 0)) == (1, -1)
    assert h.coord.groups["g"].state is GroupState.STABLE


def test_simple_group_offsets_expire_from_their_commit_time() -> None:
    h = Harness()
    h.commit("solo", {("t", 0): 1})
    h.advance(FAST.offsets_retention_ms // 2)
    h.commit("solo", {("t", 1): 2})
    h.advance(FAST.offsets_retention_ms // 2 + FAST.offsets_retention_check_interval_ms)
    assert (h.committed("solo", "t", 0), h.committed("solo", "t", 1)) == (-1, 2)


def test_an_explicit_retention_time_wins() -> None:
    h = Harness()
    h.commit("solo", {("t", 0): 1}, retention=5_000)
    h.advance(FAST.offsets_retention_check_interval_ms)
    assert h.committed("solo", "t", 0) == -1


def test_offsets_of_deleted_partitions_are_removed_by_the_expiry_pass() -> None:
    existing = {("t", 0)}
    h = Harness(partition_exists=lambda topic, p: (topic, p) in existing)
    h.commit("solo", {("t", 0): 1})
    existing.clear()
    assert h.coord.cleanup(h.now) == 2  # the offset, then the now-empty group
    h.pump()
    assert "solo" not in h.coord.groups
