"""The classic membership protocol against a fake clock: joins, syncs, heartbeats, leaves, timeouts."""

from __future__ import annotations

import dataclasses

import pytest
from coordinator_harness import FAST, Harness, LeavingMember, protocols

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.group import GroupState
from tidelog.coordinator.messages import JoinGroupResult

# ------------------------------------------------------------------------------------------ joining


def test_first_join_asks_for_a_member_id_then_the_member_leads_generation_1() -> None:
    h = Harness()
    first = h.join_result(h.join("g"))
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    waiter = h.join("g", first.member_id)
    assert waiter not in h.answers  # parked until the (zero) initial delay passes
    h.advance(0)
    joined = h.join_result(waiter)
    assert (joined.error, joined.generation_id, joined.leader, joined.protocol_name) == (
        ErrorCode.NONE, 1, first.member_id, "range")
    assert [m.member_id for m in joined.members] == [first.member_id]
    assert h.coord.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_old_clients_join_without_the_member_id_round_trip() -> None:
    h = Harness()
    waiter = h.join("g", require_known=False)
    h.advance(0)
    assert h.join_result(waiter).error is ErrorCode.NONE


def test_three_members_share_one_generation_and_only_the_leader_gets_the_member_list() -> None:
    h = Harness()
    joined = h.stable_group("g", 3)
    assert {j.generation_id for j in joined} == {1}
    leaders = [j for j in joined if j.members]
    assert len(leaders) == 1 and leaders[0].member_id == leaders[0].leader
    assert {m.member_id for m in leaders[0].members} == {j.member_id for j in joined}
    group = h.coord.groups["g"]
    assert group.state is GroupState.STABLE
    assert {mid: m.assignment for mid, m in group.members.items()} == {j.member_id: j.member_id.encode() for j in joined}


def test_initial_delay_collects_members_that_arrive_while_it_runs() -> None:
    h = Harness(dataclasses.replace(FAST, initial_rebalance_delay_ms=100))
    a = h.join_result(h.join("g")).member_id
    wa = h.join("g", a)
    h.advance(60)
    b = h.join_result(h.join("g")).member_id
    wb = h.join("g", b)
    h.advance(60)  # the first delay ended with a newcomer: extended by another delay
    assert wa not in h.answers
    h.advance(100)
    assert h.join_result(wa).generation_id == h.join_result(wb).generation_id == 1


def test_protocol_is_voted_among_those_every_member_supports() -> None:
    h = Harness()
    a = h.join_now("g", protos=protocols("t", names=("cooperative-sticky", "range")))
    h.sync_all("g", [a])
    b = h.join_result(h.join("g", protos=protocols("t", names=("range", "roundrobin")))).member_id
    wb = h.join("g", b, protos=protocols("t", names=("range", "roundrobin")))
    wa = h.join("g", a.member_id, protos=protocols("t", names=("cooperative-sticky", "range")))
    h.advance(0)
    assert h.join_result(wa).protocol_name == h.join_result(wb).protocol_name == "range"


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"session": 5}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"session": 70_000}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"protocol_type": "connect"}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"protos": protocols("t", names=("roundrobin",))}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"member_id": "nobody"}, ErrorCode.UNKNOWN_MEMBER_ID),
    ],
)
def test_bad_joins_get_kafkas_errors_and_leave_the_group_alone(change: dict[str, object], expected: ErrorCode) -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    result = h.join_result(h.join("g", **change))  # type: ignore[arg-type]
    assert result.error is expected
    group = h.coord.groups["g"]
    assert (group.state, group.generation, set(group.members)) == (
        GroupState.STABLE, 1, {j.member_id for j in joined})


def test_empty_group_id_is_invalid() -> None:
    h = Harness()
    assert h.join_result(h.join("")).error is ErrorCode.INVALID_GROUP_ID


def test_joining_an_unknown_group_with_a_member_id_is_unknown_member() -> None:
    h = Harness()
    assert h.join_result(h.join("nope", "client-x")).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert "nope" not in h.coord.groups


def test_group_max_size_refuses_the_member_too_many() -> None:
    h = Harness(dataclasses.replace(FAST, max_group_size=2))
    h.stable_group("g", 2)
    result = h.join_result(h.join("g"))
    assert (result.error, result.member_id) == (ErrorCode.GROUP_MAX_SIZE_REACHED, "")
    assert len(h.coord.groups["g"].members) == 2


def test_a_follower_rejoining_unchanged_in_stable_gets_the_current_generation_without_rebalance() -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    follower = next(j for j in joined if not j.members)
    again = h.join_result(h.join("g", follower.member_id))
    assert (again.error, again.generation_id, again.members) == (ErrorCode.NONE, 1, ())
    assert h.coord.groups["g"].state is GroupState.STABLE


def test_the_leader_rejoining_triggers_a_rebalance() -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    leader = next(j for j in joined if j.members)
    h.join("g", leader.member_id)
    group = h.coord.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    follower = next(j for j in joined if not j.members)
    assert h.heartbeat("g", follower.member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS


def test_a_rejoin_that_replaces_a_parked_join_releases_the_old_request() -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    leader = next(j for j in joined if j.members)
    old = h.join("g", leader.member_id)
    new = h.join("g", leader.member_id)
    assert h.join_result(old).error is ErrorCode.REBALANCE_IN_PROGRESS
    assert new not in h.answers


# ------------------------------------------------------------------------------------------ syncing


def test_followers_wait_for_the_leaders_assignment() -> None:
    h = Harness()
    a = h.join_result(h.join("g")).member_id
    b = h.join_result(h.join("g")).member_id
    wa, wb = h.join("g", a), h.join("g", b)
    h.advance(0)
    ja, jb = h.join_result(wa), h.join_result(wb)
    leader, follower = (ja, jb) if ja.members else (jb, ja)
    parked = h.sync("g", follower.member_id, 1)
    assert h.sync_result(parked) is None
    written_before = len(h.written)
    done = h.sync("g", leader.member_id, 1, {follower.member_id: b"F", leader.member_id: b"L"})
    assert len(h.written) == written_before + 1  # the assignment is written before anyone hears it
    assert h.sync_result(parked).assignment == b"F"  # type: ignore[union-attr]
    assert h.sync_result(done).assignment == b"L"  # type: ignore[union-attr]
    assert h.coord.groups["g"].state is GroupState.STABLE


@pytest.mark.parametrize(
    "member, generation, instance, protocol_name, expected",
    [
        ("stranger", 1, None, None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("MEMBER", 7, None, None, ErrorCode.ILLEGAL_GENERATION),
        ("MEMBER", 1, "someone-else", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("MEMBER", 1, None, "roundrobin", ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ],
)
def test_bad_syncs(member: str, generation: int, instance: str | None, protocol_name: str | None,
                   expected: ErrorCode) -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    member_id = joined[0].member_id if member == "MEMBER" else member
    result = h.sync_result(h.sync("g", member_id, generation, instance=instance, protocol_name=protocol_name))
    assert result is not None and result.error is expected
    assert h.coord.groups["g"].state is GroupState.STABLE


def test_sync_during_a_rebalance_says_rebalance_in_progress() -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    leader = next(j for j in joined if j.members)
    h.join("g", leader.member_id)
    follower = next(j for j in joined if not j.members)
    assert h.sync_result(h.sync("g", follower.member_id, 1)).error is ErrorCode.REBALANCE_IN_PROGRESS  # type: ignore[union-attr]


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    a = h.join_result(h.join("g")).member_id
    b = h.join_result(h.join("g")).member_id
    wa, wb = h.join("g", a), h.join("g", b)
    h.advance(0)
    leader = h.join_result(wa) if h.join_result(wa).members else h.join_result(wb)
    other = b if leader.member_id == a else a
    h.sync("g", leader.member_id, 1, {a: b"x", b: b"y"})
    assert h.coord.groups["g"].state is GroupState.STABLE
    for _ in range(3):  # both keep their sessions alive; the other never sends SyncGroup
        h.advance(700)
        for member_id in (leader.member_id, other):
            h.heartbeat("g", member_id, 1)
    group = h.coord.groups["g"]
    assert other not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_a_failed_assignment_write_fails_the_syncs_and_rebalances() -> None:
    h = Harness()
    a = h.join_result(h.join("g")).member_id
    b = h.join_result(h.join("g")).member_id
    wa, wb = h.join("g", a), h.join("g", b)
    h.advance(0)
    leader = h.join_result(wa) if h.join_result(wa).members else h.join_result(wb)
    follower = b if leader.member_id == a else a
    parked = h.sync("g", follower, 1)
    assert h.log is not None
    h.log.fail_with = ErrorCode.KAFKA_STORAGE_ERROR
    done = h.sync("g", leader.member_id, 1, {a: b"x", b: b"y"})
    assert h.sync_result(parked).error is ErrorCode.NOT_COORDINATOR  # type: ignore[union-attr]
    assert h.sync_result(done).error is ErrorCode.NOT_COORDINATOR  # type: ignore[union-attr]
    assert h.coord.groups["g"].state is GroupState.PREPARING_REBALANCE


# ---------------------------------------------------------------------------------------- heartbeats


@pytest.mark.parametrize(
    "group, member, generation, instance, expected",
    [
        ("g", "MEMBER", 1, None, ErrorCode.NONE),
        ("g", "MEMBER", 0, None, ErrorCode.ILLEGAL_GENERATION),
        ("g", "stranger", 1, None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("g", "MEMBER", 1, "not-mine", ErrorCode.UNKNOWN_MEMBER_ID),
        ("other", "MEMBER", 1, None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("", "MEMBER", 1, None, ErrorCode.INVALID_GROUP_ID),
    ],
)
def test_heartbeat_answers(group: str, member: str, generation: int, instance: str | None, expected: ErrorCode) -> None:
    h = Harness()
    joined = h.stable_group("g", 2)
    member_id = joined[0].member_id if member == "MEMBER" else member
    assert h.heartbeat(group, member_id, generation, instance) is expected
    assert h.coord.groups["g"].state is GroupState.STABLE


def test_a_silent_member_is_removed_after_its_session_timeout_and_the_rest_rebalance() -> None:
    h = Harness()
    joined = h.stable_group("g", 3, session=1_000)
    alive, silent = joined[:2], joined[2]
    h.advance(600)
    for j in alive:
        assert h.heartbeat("g", j.member_id, 1) is ErrorCode.NONE
    h.advance(500)  # silent's session (1000 ms since the sync) is over
    group = h.coord.groups["g"]
    assert silent.member_id not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", alive[0].member_id, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    waiters = [h.join("g", j.member_id) for j in alive]
    rejoined = [h.join_result(w) for w in waiters]
    assert {r.generation_id for r in rejoined} == {2}
    assert set(group.members) == {j.member_id for j in alive}


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() -> None:
    h = Harness()
    joined = h.stable_group("g", 2, session=5_000, rebalance=2_000)
    stays, gone = joined
    waiter = h.join("g", stays.member_id)
    h.advance(1_999)
    assert waiter not in h.answers
    h.advance(1)
    result = h.join_result(waiter)
    assert (result.error, result.generation_id, result.leader) == (ErrorCode.NONE, 2, stays.member_id)
    assert gone.member_id not in h.coord.groups["g"].members


def test_a_pending_member_that_never_rejoins_expires() -> None:
    h = Harness()
    h.stable_group("g", 1)
    pending = h.join_result(h.join("g", session=500)).member_id
    assert h.coord.groups["g"].is_pending(pending)
    h.advance(500)
    assert not h.coord.groups["g"].is_pending(pending)


def test_offset_commits_keep_a_members_session_alive() -> None:
    h = Harness()
    (only,) = h.stable_group("g", 1, session=1_000)
    for _ in range(3):
        h.advance(700)
        assert h.commit("g", {("t", 0): 1}, generation=1, member_id=only.member_id).topics[0][1][0][1] is ErrorCode.NONE
    assert only.member_id in h.coord.groups["g"].members


# ----------------------------------------------------------------------------------------- leaving


def test_leave_triggers_a_rebalance_and_the_rest_get_a_new_generation() -> None:
    h = Harness()
    joined = h.stable_group("g", 3)
    result = h.leave("g", LeavingMember(joined[0].member_id))
    assert result.members[0][1] is ErrorCode.NONE
    group = h.coord.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    waiters = [h.join("g", j.member_id) for j in joined[1:]]
    assert all(h.join_result(w).generation_id == 2 for w in waiters)


def test_the_last_member_leaving_empties_the_group_and_writes_it() -> None:
    h = Harness()
    (only,) = h.stable_group("g", 1)
    written = len(h.written)
    h.leave("g", LeavingMember(only.member_id))
    group = h.coord.groups["g"]
    assert (group.state, group.generation, group.protocol_name) == (GroupState.EMPTY, 2, None)
    assert len(h.written) == written + 1


def test_batch_leave_reports_each_member() -> None:
    h = Harness()
    joined = h.stable_group("g", 3, instance=None)
    result = h.leave("g", LeavingMember(joined[0].member_id), LeavingMember("ghost"),
                     LeavingMember(joined[1].member_id, "wrong-instance"))
    assert [e for _, e in result.members] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID]


def test_leaving_an_unknown_group_reports_unknown_members() -> None:
    h = Harness()
    result = h.leave("nope", LeavingMember("a"))
    assert result.error is ErrorCode.NONE and result.members[0][1] is ErrorCode.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------------------------ static members


def _static_group(h: Harness, *instances: str) -> list[JoinGroupResult]:
    waiters = [h.join("g", instance=i, session=1_000) for i in instances]
    h.advance(0)
    joined = [h.join_result(w) for w in waiters]
    h.sync_all("g", joined)
    return joined


def test_static_members_join_without_the_member_id_round_trip() -> None:
    h = Harness()
    joined = _static_group(h, "i-1", "i-2")
    assert [j.member_id.split("-")[:2] for j in joined] == [["i", "1"], ["i", "2"]]
    assert h.coord.groups["g"].state is GroupState.STABLE


def test_a_static_member_restarting_keeps_its_assignment_without_a_rebalance() -> None:
    h = Harness()
    joined = _static_group(h, "i-1", "i-2")
    follower = next(j for j in joined if not j.members)
    instance = "i-2" if follower.member_id.startswith("i-2") else "i-1"
    written = len(h.written)
    again = h.join_result(h.join("g", instance=instance, session=1_000))
    assert again.error is ErrorCode.NONE and again.generation_id == 1
    assert again.member_id != follower.member_id
    assert len(h.written) == written + 1  # the new member id is persisted
    group = h.coord.groups["g"]
    assert group.state is GroupState.STABLE
    sync = h.sync_result(h.sync("g", again.member_id, 1, instance=instance))
    assert sync is not None and sync.assignment == follower.member_id.encode()
    # The old incarnation is fenced.
    assert h.heartbeat("g", follower.member_id, 1, instance) is ErrorCode.FENCED_INSTANCE_ID


def test_a_restarted_static_leader_is_told_to_skip_assignment() -> None:
    h = Harness()
    joined = _static_group(h, "i-1", "i-2")
    leader = next(j for j in joined if j.members)
    instance = "i-1" if leader.member_id.startswith("i-1") else "i-2"
    again = h.join_result(h.join("g", instance=instance, session=1_000))
    assert again.skip_assignment and again.leader == again.member_id and len(again.members) == 2


def test_a_restarted_static_leader_on_an_old_client_is_named_follower() -> None:
    h = Harness()
    joined = _static_group(h, "i-1", "i-2")
    leader = next(j for j in joined if j.members)
    instance = "i-1" if leader.member_id.startswith("i-1") else "i-2"
    again = h.join_result(h.join("g", instance=instance, session=1_000, skip=False))
    assert not again.skip_assignment and again.leader == leader.member_id and again.members == ()


def test_a_static_member_that_stays_away_is_removed_after_its_session() -> None:
    h = Harness()
    joined = _static_group(h, "i-1", "i-2")
    h.advance(600)
    h.heartbeat("g", joined[0].member_id, 1, "i-1")
    h.advance(600)
    group = h.coord.groups["g"]
    assert joined[1].member_id not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_an_admin_can_remove_a_static_member_by_instance_id() -> None:
    h = Harness()
    _static_group(h, "i-1", "i-2")
    result = h.leave("g", LeavingMember("", "i-2"))
    assert result.members[0][1] is ErrorCode.NONE
    assert "i-2" not in h.coord.groups["g"].static_members


def test_a_static_member_rejoining_with_another_ones_member_id_is_fenced() -> None:
    h = Harness()
    joined = _static_group(h, "i-1", "i-2")
    other = joined[0].member_id
    assert h.join_result(h.join("g", other, instance="i-2")).error is ErrorCode.FENCED_INSTANCE_ID
