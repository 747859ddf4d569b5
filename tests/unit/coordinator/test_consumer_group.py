"""KIP-848 consumer groups as a pure state machine: join, reconcile, leave, expire, fence, restart.

The invariant checked after every step: no partition is owned (assigned or pending revocation) by
two members at once.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping

import pytest
from coordinator_harness import MemoryOffsetsLog, protocols

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.consumer_group import (
    STABLE,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
)
from tidelog.coordinator.consumer_group_records import TopicPartitions
from tidelog.coordinator.coordinator import GroupCoordinator
from tidelog.coordinator.messages import CommitPartition, JoinGroup, JoinGroupResult, OffsetCommit
from tidelog.coordinator.persistence import encode_batch, load_partition
from tidelog.coordinator.state import CoordinatorConfig

T = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
U = uuid.UUID("00000000-0000-0000-0000-0000000000bb")
CONFIG = ConsumerGroupConfig(session_timeout_ms=1_000, heartbeat_interval_ms=100, max_size=3)


class KipHarness:
    """A coordinator over an in-memory ``__consumer_offsets`` with a hand-moved clock."""

    def __init__(self, log: MemoryOffsetsLog | None = None, topics: dict[str, tuple[uuid.UUID, int]] | None = None,
                 now: int = 1_000) -> None:
        self.log = log or MemoryOffsetsLog(3)
        self.topics = topics if topics is not None else {"t": (T, 6)}
        self.now = now
        ids = itertools.count(1)
        self.coord = GroupCoordinator(CoordinatorConfig(), new_id=lambda: f"gen{next(ids)}",
                                      consumer_config=CONFIG, topics=lambda: self.topics)
        self.coord.begin_loading(range(3), 3)
        for p in range(3):
            load_partition(self.log, self.coord, p, 1 << 20)
            self.coord.complete_loading(p, self.now)

    def pump(self) -> None:
        for write in self.coord.take_writes():
            self.log.append(write.partition, encode_batch(write.records, self.now))
            for record in write.records:
                self.coord.replay(record)
            if write.on_done is not None:
                write.on_done(ErrorCode.NONE)
        self.check_exclusive()

    def hb(self, member: str, epoch: int, *, topics: tuple[str, ...] | None = None, owned: TopicPartitions | None = None,
           group: str = "g", **kwargs: object) -> ConsumerGroupHeartbeatResult:
        if epoch == 0:
            topics = topics if topics is not None else ("t",)
            owned = owned if owned is not None else ()
        req = ConsumerGroupHeartbeat(group, member, epoch, rebalance_timeout_ms=kwargs.pop("rebalance", 500),  # type: ignore[arg-type]
                                     subscribed_topic_names=topics, owned=owned, **kwargs)  # type: ignore[arg-type]
        result = self.coord.consumer_group_heartbeat(req, self.now)
        self.pump()
        return result

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while (deadline := self.coord.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self.coord.tick(self.now)
            self.pump()
        self.now = target

    def group(self, group_id: str = "g") -> ConsumerGroup:
        return self.coord.state.consumer_groups[group_id]

    def check_exclusive(self) -> None:
        for group in self.coord.state.consumer_groups.values():
            seen: dict[tuple[uuid.UUID, int], str] = {}
            for m in group.members.values():
                for t, ps in list(m.assigned.items()) + list(m.pending_revocation.items()):
                    for p in ps:
                        assert (t, p) not in seen, f"{(t, p)} owned by {seen[(t, p)]} and {m.member_id}"
                        seen[(t, p)] = m.member_id

    def restart(self) -> KipHarness:
        return KipHarness(self.log, self.topics, self.now)


def parts(result: ConsumerGroupHeartbeatResult | TopicPartitions | None) -> set[int]:
    value = result.assignment if isinstance(result, ConsumerGroupHeartbeatResult) else result
    assert value is not None
    return {p for _, ps in value for p in ps}


def owned(partitions: set[int], topic: uuid.UUID = T) -> TopicPartitions:
    return ((topic, tuple(sorted(partitions))),) if partitions else ()


def converge(h: KipHarness, members: Mapping[str, int], rounds: int = 6) -> dict[str, set[int]]:
    """Heartbeat every member, reporting what it owns, until nothing changes; return assignments."""
    epochs = dict(members)
    have: dict[str, set[int]] = {m: set() for m in members}
    for _ in range(rounds):
        for m in sorted(epochs):
            r = h.hb(m, epochs[m], owned=owned(have[m]))
            assert r.error is ErrorCode.NONE, (m, r)
            epochs[m] = r.member_epoch
            if r.assignment is not None:
                have[m] = parts(r)
    return have


def test_first_member_gets_every_partition_and_the_group_is_stable() -> None:
    h = KipHarness()
    r = h.hb("m1", 0)
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (ErrorCode.NONE, "m1", 1, 100)
    assert parts(r) == set(range(6))
    assert h.group().state == "Stable"
    assert (h.group().epoch, h.group().assignment_epoch) == (1, 1)


def test_v0_join_without_member_id_gets_one_from_the_coordinator() -> None:
    h = KipHarness()
    r = h.hb("", 0)
    assert r.error is ErrorCode.NONE and r.member_id == "gen1"


def test_a_joining_member_waits_until_the_owner_revokes() -> None:
    h = KipHarness()
    h.hb("m1", 0)
    r2 = h.hb("m2", 0)
    # Group epoch 2; m2 is at epoch 2 but every partition is still m1's: it gets nothing yet.
    assert r2.member_epoch == 2 and parts(r2) == set()
    assert h.group().members["m2"].state == UNRELEASED_PARTITIONS
    r1 = h.hb("m1", 1)
    m1 = h.group().members["m1"]
    assert m1.state == UNREVOKED_PARTITIONS and r1.member_epoch == 1
    kept = parts(r1)
    assert len(kept) == 3 and h.group().state == "Reconciling"
    # m1 has not yet confirmed: m2 still gets nothing.
    assert parts(h.hb("m2", 2, owned=())) == set() if h.hb("m2", 2).assignment is not None else True
    r1 = h.hb("m1", 1, owned=owned(kept))
    assert r1.member_epoch == 2 and h.group().members["m1"].state == STABLE
    r2 = h.hb("m2", 2, owned=())
    assert parts(r2) == set(range(6)) - kept
    assert h.group().state == "Stable"


def test_three_members_reach_a_disjoint_complete_balanced_assignment() -> None:
    h = KipHarness()
    for m in ("a", "b", "c"):
        h.hb(m, 0)
    epochs = {m: h.group().members[m].member_epoch for m in ("a", "b", "c")}
    have = converge(h, epochs)
    assert sorted(len(v) for v in have.values()) == [2, 2, 2]
    assert set().union(*have.values()) == set(range(6))
    assert h.group().state == "Stable"


def test_a_leaving_members_partitions_move_to_the_others() -> None:
    h = KipHarness()
    h.hb("a", 0)
    h.hb("b", 0)
    have = converge(h, {"a": 1, "b": 2})
    r = h.hb("b", -1)
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -1)
    assert "b" not in h.group().members
    r = h.hb("a", h.group().members["a"].member_epoch, owned=owned(have["a"]))
    assert parts(r) == set(range(6)) and r.member_epoch == 3


def test_session_timeout_removes_a_silent_member() -> None:
    h = KipHarness()
    h.hb("a", 0)
    h.hb("b", 0)
    converge(h, {"a": 1, "b": 2})
    for _ in range(3):
        h.advance(400)
        h.hb("a", h.group().members["a"].member_epoch)
    assert "b" not in h.group().members
    r = h.hb("a", h.group().members["a"].member_epoch, owned=())
    assert parts(r) == set(range(6))


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed() -> None:
    h = KipHarness()
    h.hb("a", 0, rebalance=300)
    h.hb("b", 0)
    h.hb("a", 1, rebalance=300)  # told to revoke
    assert h.group().members["a"].state == UNREVOKED_PARTITIONS
    h.advance(200)
    h.hb("b", 2)
    h.advance(200)
    assert "a" not in h.group().members
    assert parts(h.hb("b", h.group().members["b"].member_epoch, owned=())) == set(range(6))


def test_stale_epochs_are_fenced_but_a_lost_answer_is_forgiven() -> None:
    h = KipHarness()
    h.hb("a", 0)
    assert h.hb("a", 7).error is ErrorCode.FENCED_MEMBER_EPOCH
    h.hb("b", 0)
    r = h.hb("a", 1)
    converge(h, {"a": 1, "b": 2})
    a = h.group().members["a"]
    assert (a.member_epoch, a.previous_member_epoch) == (2, 1)
    # The answer moving a to epoch 2 was lost: epoch 1 with owned partitions inside its assignment is fine.
    assert h.hb("a", 1, owned=owned(parts(r))).error is ErrorCode.NONE
    # Epoch 1 claiming a partition it no longer has is not.
    assert h.hb("a", 1, owned=owned(set(range(6)))).error is ErrorCode.FENCED_MEMBER_EPOCH


def test_unknown_members_and_groups_are_told_so() -> None:
    h = KipHarness()
    assert h.hb("ghost", 3).error is ErrorCode.UNKNOWN_MEMBER_ID
    h.hb("a", 0)
    assert h.hb("ghost", 1).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("ghost", -1).error is ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"subscribed_topic_regex": "t(.*"}, ErrorCode.INVALID_REGULAR_EXPRESSION),
        ({"subscribed_topic_regex": "(t)\\1"}, ErrorCode.INVALID_REGULAR_EXPRESSION),  # backreferences: not RE2
        ({"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        ({"rebalance": 0}, ErrorCode.INVALID_REQUEST),
        ({"owned": owned({1})}, ErrorCode.INVALID_REQUEST),
        ({"instance_id": ""}, ErrorCode.INVALID_REQUEST),
        ({"group": ""}, ErrorCode.INVALID_GROUP_ID),
    ],
)
def test_bad_joins_are_refused_and_change_nothing(kwargs: dict[str, object], error: ErrorCode) -> None:
    h = KipHarness()
    r = h.hb("a", 0, **kwargs)
    assert r.error is error and r.error_message
    assert h.coord.state.consumer_groups == {} and h.log.ends == {0: 0, 1: 0, 2: 0}


def test_group_max_size_is_enforced() -> None:
    h = KipHarness()
    for m in ("a", "b", "c"):
        assert h.hb(m, 0).error is ErrorCode.NONE
    assert h.hb("d", 0).error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_range_assignor_when_asked() -> None:
    h = KipHarness()
    h.hb("a", 0, server_assignor="range")
    h.hb("b", 0, server_assignor="range")
    converge(h, {"a": 1, "b": 2})
    target = h.group().target
    assert target["a"] == {T: frozenset({0, 1, 2})} and target["b"] == {T: frozenset({3, 4, 5})}


def test_more_partitions_bump_the_group_epoch_and_are_assigned() -> None:
    h = KipHarness()
    h.hb("a", 0)
    h.topics["t"] = (T, 8)
    r = h.hb("a", 1, owned=owned(set(range(6))))
    assert r.member_epoch == 2 and parts(r) == set(range(8))


def test_subscription_change_moves_assignment_to_the_new_topic() -> None:
    h = KipHarness(topics={"t": (T, 2), "u": (U, 2)})
    h.hb("a", 0)
    r = h.hb("a", 1, topics=("u",))
    assert r.member_epoch == 1 and h.group().members["a"].state == UNREVOKED_PARTITIONS
    r = h.hb("a", 1, owned=())
    assert r.assignment == ((U, (0, 1)),) and r.member_epoch == 2


def test_restart_rebuilds_the_same_groups_from_the_log() -> None:
    h = KipHarness()
    for m in ("a", "b", "c"):
        h.hb(m, 0, instance_id=None if m != "c" else "inst-c")
    converge(h, {m: h.group().members[m].member_epoch for m in ("a", "b", "c")})
    h.hb("b", -1)
    before = h.group()
    after = h.restart().group()
    assert (after.epoch, after.assignment_epoch, after.metadata_hash) == (before.epoch, before.assignment_epoch, before.metadata_hash)
    assert after.target == before.target
    assert {m: vars(x) for m, x in after.members.items()} == {m: vars(x) for m, x in before.members.items()}


def test_members_rebuilt_at_restart_get_a_fresh_session() -> None:
    h = KipHarness()
    h.hb("a", 0)
    h2 = h.restart()
    h2.advance(900)
    assert h2.hb("a", 1).error is ErrorCode.NONE
    h2.advance(1_100)
    assert "a" not in h2.group().members


def test_a_classic_group_with_members_keeps_its_id() -> None:
    from coordinator_harness import Harness

    h = Harness()
    h.stable_group("g", 1)
    result = h.coord.consumer_group_heartbeat(
        ConsumerGroupHeartbeat("g", "m", 0, rebalance_timeout_ms=100, subscribed_topic_names=("t",), owned=()), h.now)
    assert result.error is ErrorCode.GROUP_ID_NOT_FOUND


def test_an_offsets_only_group_becomes_a_consumer_group_and_keeps_its_offsets() -> None:
    h = KipHarness()
    commit = OffsetCommit("g", -1, "", None, (("t", (CommitPartition(0, 42),)),))
    h.coord.commit_offsets(commit, h.now)
    h.pump()
    assert "g" in h.coord.state.groups
    assert h.hb("a", 0).error is ErrorCode.NONE
    assert "g" not in h.coord.state.groups
    h2 = h.restart()
    assert "g" not in h2.coord.state.groups and "a" in h2.group().members
    assert h2.coord.fetch_offsets("g", [("t", [0])], h2.now).topics[0][1][0].offset == 42


def test_commits_check_member_and_member_epoch() -> None:
    h = KipHarness()
    h.hb("a", 0)

    def commit(member: str, epoch: int) -> ErrorCode:
        req = OffsetCommit("g", epoch, member, None, (("t", (CommitPartition(0, 7),)),))
        reply = h.coord.commit_offsets(req, h.now)
        h.pump()
        return reply.value.topics[0][1][0][1]

    assert commit("a", 0) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit("ghost", 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit("", -1) is ErrorCode.UNKNOWN_MEMBER_ID  # an admin commit while the group has members
    assert commit("a", 1) is ErrorCode.NONE
    assert h.coord.fetch_offsets("g", [("t", [0])], h.now).topics[0][1][0].offset == 7
    assert "g" not in h.coord.state.groups  # no classic group appeared beside it


def test_a_static_member_rejoining_takes_its_place_without_a_rebalance() -> None:
    h = KipHarness()
    h.hb("a1", 0, instance_id="i")
    h.hb("b", 0)
    have = converge(h, {"a1": 1, "b": 2})
    epoch = h.group().epoch
    assert h.hb("a2", 0, instance_id="i").error is ErrorCode.UNRELEASED_INSTANCE_ID
    assert h.hb("a1", h.group().members["a1"].member_epoch, instance_id="i").error is ErrorCode.NONE
    assert h.hb("a1", -2, instance_id="i").member_epoch == -2
    r = h.hb("a2", 0, instance_id="i")
    assert r.error is ErrorCode.NONE and parts(r) == have["a1"]
    assert h.group().epoch == epoch and "a1" not in h.group().members


def test_deleting_an_empty_consumer_group_tombstones_it() -> None:
    h = KipHarness()
    h.hb("a", 0)
    assert h.coord.delete_groups(["g"], h.now).value == [("g", ErrorCode.NON_EMPTY_GROUP)]
    h.hb("a", -1)
    reply = h.coord.delete_groups(["g"], h.now)
    h.pump()
    assert reply.value == [("g", ErrorCode.NONE)]
    assert "g" not in h.coord.state.consumer_groups
    assert "g" not in h.restart().coord.state.consumer_groups


def test_list_groups_shows_consumer_groups_with_their_type() -> None:
    h = KipHarness()
    h.hb("a", 0)
    error, listed = h.coord.list_groups([], ["consumer"], h.now)
    assert error is ErrorCode.NONE
    assert [(g.group_id, g.group_type, g.state, g.protocol_type) for g in listed] == [("g", "consumer", "Stable", "consumer")]
    assert h.coord.list_groups([], ["classic"], h.now)[1] == []
    assert h.coord.list_groups(["empty"], [], h.now)[1] == []


def test_an_empty_regex_means_no_regex() -> None:
    h = KipHarness()
    assert h.hb("a", 0, subscribed_topic_regex="").error is ErrorCode.NONE


V = uuid.UUID("00000000-0000-0000-0000-0000000000cc")


def test_a_regex_subscribes_to_every_topic_it_matches_whole_and_follows_new_topics() -> None:
    h = KipHarness(topics={"orders-eu": (T, 2), "orders-us": (U, 2), "xorders-eu": (V, 2)})
    r = h.hb("a", 0, topics=(), subscribed_topic_regex="orders-.*")
    assert r.error is ErrorCode.NONE
    assert {(t, ps) for t, ps in r.assignment or ()} == {(T, (0, 1)), (U, (0, 1))}
    assert h.group().members["a"].subscribed_topic_regex == "orders-.*"
    epoch = h.group().epoch

    w = uuid.UUID("00000000-0000-0000-0000-0000000000dd")
    h.topics["orders-apac"] = (w, 1)  # created later: the next heartbeat picks it up
    r = h.hb("a", r.member_epoch, owned=((T, (0, 1)), (U, (0, 1))))
    assert h.group().epoch == epoch + 1
    assert {(t, ps) for t, ps in r.assignment or ()} == {(T, (0, 1)), (U, (0, 1)), (w, (0,))}

    del h.topics["orders-us"]  # deleted: it leaves the subscription
    converge(h, {"a": r.member_epoch})
    assert set(h.group().members["a"].assigned) == {T, w}


def test_a_regex_and_names_add_up_and_null_keeps_the_regex_while_empty_clears_it() -> None:
    h = KipHarness(topics={"t": (T, 2), "logs-1": (U, 2)})
    r = h.hb("a", 0, topics=("t",), subscribed_topic_regex="logs-[0-9]+")
    assert {t for t, _ in r.assignment or ()} == {T, U}
    r = h.hb("a", r.member_epoch, owned=((T, (0, 1)), (U, (0, 1))))  # regex null: unchanged
    assert h.group().members["a"].subscribed_topic_regex == "logs-[0-9]+"
    epoch = h.group().epoch
    r = h.hb("a", r.member_epoch, owned=((T, (0, 1)), (U, (0, 1))), subscribed_topic_regex="")
    assert h.group().members["a"].subscribed_topic_regex is None and h.group().epoch == epoch + 1
    converge(h, {"a": r.member_epoch})
    assert {t for t in h.group().members["a"].assigned} == {T}


def test_regex_matches_the_member_may_not_describe_are_left_out_and_the_filter_outlives_the_heartbeat() -> None:
    h = KipHarness(topics={"app-a": (T, 2), "app-b": (U, 2), "secret": (V, 2)})
    allowed = {"app-a", "app-b"}

    def visible(name: str) -> bool:
        return name in allowed

    r = h.hb("a", 0, topics=(), subscribed_topic_regex=".*", topic_visible=visible)
    assert {t for t, _ in r.assignment or ()} == {T, U}
    allowed.discard("app-b")  # an ACL removed: the next heartbeat drops the topic
    r = h.hb("a", r.member_epoch, owned=((T, (0, 1)), (U, (0, 1))), topic_visible=visible)
    converge(h, {"a": r.member_epoch})
    assert set(h.group().members["a"].assigned) == {T}
    # A heartbeat that brings no filter (as a timer's resolution) uses the last one given.
    h.topics["secret-2"] = (uuid.uuid4(), 1)
    h.hb("a", h.group().members["a"].member_epoch, owned=((T, (0, 1)),))
    assert set(h.group().members["a"].assigned) == {T}


def test_a_regex_subscription_survives_a_coordinator_restart() -> None:
    h = KipHarness(topics={"orders-eu": (T, 2), "other": (U, 2)})
    h.hb("a", 0, topics=(), subscribed_topic_regex="orders-.*")
    again = h.restart()
    member = again.group().members["a"]
    assert member.subscribed_topic_regex == "orders-.*" and set(member.assigned) == {T}


def test_a_classic_member_cannot_join_a_consumer_group_with_members() -> None:
    h = KipHarness()
    h.hb("a", 0)
    h.coord.join_group(JoinGroup("g", "", None, 10_000, 10_000, "consumer", protocols("t")), 1, h.now)
    assert h.coord.take_completions() == [(1, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ""))]
    assert "a" in h.group().members and "g" not in h.coord.state.groups


def test_an_empty_consumer_group_becomes_classic_when_a_classic_member_joins() -> None:
    h = KipHarness()
    h.hb("a", 0)
    commit = OffsetCommit("g", 1, "a", None, (("t", (CommitPartition(0, 5),)),))
    h.coord.commit_offsets(commit, h.now)
    h.hb("a", -1)
    h.coord.join_group(JoinGroup("g", "", None, 10_000, 10_000, "consumer", protocols("t")), 1, h.now)
    h.pump()
    assert "g" not in h.coord.state.consumer_groups and "g" in h.coord.state.groups
    h2 = h.restart()
    assert "g" not in h2.coord.state.consumer_groups
    assert h2.coord.fetch_offsets("g", [("t", [0])], h2.now).topics[0][1][0].offset == 5


def test_describe_groups_says_a_consumer_group_is_not_classic() -> None:
    h = KipHarness()
    h.hb("a", 0)
    (v6,) = h.coord.describe_groups(["g"], h.now, unknown_is_error=True)
    assert (v6.error, v6.state, v6.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead", "Group g is not a classic group.")
    (v5,) = h.coord.describe_groups(["g"], h.now, unknown_is_error=False)
    assert (v5.error, v5.state) == (ErrorCode.NONE, "Dead")


def test_a_heartbeat_that_is_not_a_join_leaves_an_empty_classic_group_alone() -> None:
    h = KipHarness()
    h.coord.commit_offsets(OffsetCommit("g", -1, "", None, (("t", (CommitPartition(0, 1),)),)), h.now)
    h.pump()
    assert h.hb("a", 3).error is ErrorCode.GROUP_ID_NOT_FOUND
    assert "g" in h.coord.state.groups and "g" not in h.coord.state.consumer_groups


def test_a_topic_created_after_subscribing_is_assigned() -> None:
    h = KipHarness(topics={})
    r = h.hb("a", 0)
    assert r.member_epoch == 1 and r.assignment == ()
    assert h.hb("a", 1).assignment is None  # nothing changed: no assignment in the answer
    h.topics["t"] = (T, 2)
    r = h.hb("a", 1)
    assert r.member_epoch == 2 and r.assignment == ((T, (0, 1)),)


def test_consumer_group_describe_finds_only_consumer_groups() -> None:
    h = KipHarness()
    h.hb("a", 0)
    h.coord.commit_offsets(OffsetCommit("simple", -1, "", None, (("t", (CommitPartition(0, 1),)),)), h.now)
    h.pump()
    answers = h.coord.consumer_group_describe(["g", "simple", "nope", ""], h.now)
    assert [(g, e) for g, e, _ in answers] == [
        ("g", ErrorCode.NONE), ("simple", ErrorCode.GROUP_ID_NOT_FOUND), ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
        ("", ErrorCode.INVALID_GROUP_ID),
    ]
    assert answers[0][2] is h.group()


WEEK_MS = 7 * 24 * 3_600_000  # offsets.retention.minutes' default


def test_offsets_of_topics_no_member_subscribes_to_expire_and_an_empty_group_goes_with_its_last() -> None:
    h = KipHarness(topics={"t": (T, 6), "u": (U, 2)})
    h.hb("a", 0)  # subscribes to t only
    committed_at = h.now
    h.coord.commit_offsets(OffsetCommit("g", 1, "a", None, (
        ("t", (CommitPartition(0, 5),)), ("u", (CommitPartition(0, 9),)))), h.now)
    h.pump()
    assert h.coord.cleanup(committed_at + WEEK_MS - 1) == 0
    assert h.coord.cleanup(committed_at + WEEK_MS) == 1  # u's: nobody subscribes to it
    h.pump()
    fetched = h.coord.fetch_offsets("g", [("t", [0]), ("u", [0])], h.now).topics
    assert [(topic, parts[0].offset) for topic, parts in fetched] == [("t", 5), ("u", -1)]
    assert h.coord.cleanup(committed_at + 3 * WEEK_MS) == 0  # t's stays while a member subscribes to it

    h.hb("a", -1)  # the last member leaves: nothing is subscribed any more
    assert h.coord.cleanup(committed_at + 3 * WEEK_MS) > 1  # t's offset, then the group itself
    h.pump()
    assert "g" not in h.coord.state.consumer_groups
    again = h.restart()
    assert "g" not in again.coord.state.consumer_groups
    assert again.coord.fetch_offsets("g", [("t", [0])], again.now).topics[0][1][0].offset == -1


def test_regex_subscribed_topics_keep_their_offsets() -> None:
    h = KipHarness(topics={"logs-1": (T, 1), "other": (U, 1)})
    h.hb("a", 0, topics=(), subscribed_topic_regex="logs-.*")
    h.coord.commit_offsets(OffsetCommit("g", 1, "a", None, (
        ("logs-1", (CommitPartition(0, 3),)), ("other", (CommitPartition(0, 4),)))), h.now)
    h.pump()
    assert h.coord.cleanup(h.now + WEEK_MS) == 1
    h.pump()
    fetched = h.coord.fetch_offsets("g", [("logs-1", [0]), ("other", [0])], h.now).topics
    assert [(topic, parts[0].offset) for topic, parts in fetched] == [("logs-1", 3), ("other", -1)]


def test_a_groups_own_session_timeout_and_heartbeat_interval_apply_from_the_next_heartbeat() -> None:
    h = KipHarness()
    h.coord.consumer.set_group_timeouts("g", 3_000, 250)
    r = h.hb("a", 0)
    assert r.heartbeat_interval_ms == 250
    h.hb("b", 0, group="other")
    h.advance(2_000)  # past the broker's 1 s session timeout, within the group's 3 s
    assert "a" in h.group().members
    assert "b" not in h.group("other").members
    h.advance(1_100)
    assert "a" not in h.group().members
    h.coord.consumer.set_group_timeouts("g", None, None)
    assert h.hb("c", 0).heartbeat_interval_ms == 100
