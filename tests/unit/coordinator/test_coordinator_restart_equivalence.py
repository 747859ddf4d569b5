"""Replaying the log rebuilds what was committed: offsets exactly, settled groups exactly.

Random sequences of joins, syncs, heartbeats, leaves, commits and time passing run against one
coordinator; a second one then loads the log those operations wrote. Every committed offset must be
the same, every group that is settled (Stable or Empty) must come back with the same generation,
protocol, leader, members and assignments, and no group may come back that is not there.
"""

from __future__ import annotations

from coordinator_harness import Harness, LeavingMember
from hypothesis import given
from hypothesis import strategies as st

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.group import ClassicGroup, GroupState
from tidelog.coordinator.messages import JoinGroupResult

GROUPS = ("a", "b")
SLOTS = 4

operation = st.tuples(
    st.sampled_from(["join", "join", "sync", "heartbeat", "leave", "commit", "simple-commit", "advance", "static-join"]),
    st.sampled_from(GROUPS),
    st.integers(0, SLOTS - 1),
    st.sampled_from([0, 100, 400, 900, 1_500]),
)


def _settled_view(group: ClassicGroup) -> tuple[object, ...]:
    members = sorted((m.member_id, m.group_instance_id, m.assignment) for m in group.members.values())
    return group.state, group.generation, group.protocol_type, group.protocol_name, group.leader_id, members


class Run:
    def __init__(self) -> None:
        self.h = Harness()
        self.joined: dict[tuple[str, int], JoinGroupResult] = {}
        self.member_ids: dict[tuple[str, int], str] = {}
        self.join_waiters: dict[tuple[str, int], int] = {}

    def step(self, kind: str, group: str, slot: int, ms: int) -> None:
        h, key = self.h, (group, slot)
        self._collect()
        if kind == "join":
            waiter = h.join(group, self.member_ids.get(key, ""), session=1_000, rebalance=800)
            first = h.answers.get(waiter)
            if isinstance(first, JoinGroupResult) and first.error is ErrorCode.MEMBER_ID_REQUIRED:
                waiter = h.join(group, first.member_id, session=1_000, rebalance=800)
            self.join_waiters[key] = waiter
        elif kind == "static-join":
            self.join_waiters[key] = h.join(group, instance=f"inst-{slot}", session=1_000, rebalance=800)
        elif kind == "sync":
            # Every member that got a JoinGroup answer syncs, the slot's own first (leader or not).
            for other in sorted(self.joined, key=lambda k: k != key):
                if other[0] == group:
                    joined = self.joined[other]
                    assignments = {m.member_id: m.member_id.encode()[-4:] for m in joined.members}
                    h.sync(group, joined.member_id, joined.generation_id, assignments)
        elif kind == "heartbeat" and key in self.joined:
            h.heartbeat(group, self.joined[key].member_id, self.joined[key].generation_id)
        elif kind == "leave" and key in self.member_ids:
            h.leave(group, LeavingMember(self.member_ids.pop(key)))
            self.joined.pop(key, None)
        elif kind == "commit" and key in self.joined:
            joined = self.joined[key]
            h.commit(group, {("t", slot): ms}, generation=joined.generation_id, member_id=joined.member_id)
        elif kind == "simple-commit":
            h.commit(f"simple-{group}", {("t", slot): ms})
        elif kind == "advance":
            h.advance(ms)
        h.advance(0)  # timers due now fire at once, as the broker's timer task does
        self._collect()

    def _collect(self) -> None:
        for key, waiter in list(self.join_waiters.items()):
            result = self.h.answers.get(waiter)
            if not isinstance(result, JoinGroupResult):
                continue
            del self.join_waiters[key]
            if result.member_id:
                self.member_ids[key] = result.member_id
            if result.error is ErrorCode.NONE:
                self.joined[key] = result


@given(st.lists(operation, max_size=60))
def test_a_restart_rebuilds_offsets_and_settled_groups(ops: list[tuple[str, str, int, int]]) -> None:
    run = Run()
    for op in ops:
        run.step(*op)
    before = run.h.coord
    after = run.h.restart().coord
    assert set(after.groups) == set(before.groups)
    for group_id, group in before.groups.items():
        if group.state in (GroupState.STABLE, GroupState.EMPTY):
            assert _settled_view(after.groups[group_id]) == _settled_view(group), group_id
        for topic_partition in before.state.offsets.of_group(group_id):
            assert after.state.offsets.get(group_id, *topic_partition) == before.state.offsets.get(group_id, *topic_partition)
        assert after.state.offsets.of_group(group_id).keys() == before.state.offsets.of_group(group_id).keys()
