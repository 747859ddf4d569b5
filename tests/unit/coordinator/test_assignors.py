"""Server-side assignors: complete and disjoint, balanced, deterministic; uniform is sticky."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.coordinator.assignors import MemberSubscription, UnknownAssignor, assign, range_, uniform

T = [uuid.UUID(int=i + 1) for i in range(4)]


def flat(assignment: dict[uuid.UUID, frozenset[int]]) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def check_complete_and_disjoint(result: dict[str, dict[uuid.UUID, frozenset[int]]],
                                members: dict[str, MemberSubscription], topics: dict[uuid.UUID, int]) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for member_id, assignment in result.items():
        for tp in flat(assignment):
            assert tp not in seen, f"{tp} assigned twice"
            assert tp[0] in members[member_id].subscribed, f"{member_id} got {tp} it does not subscribe to"
            seen.add(tp)
    wanted = {(t, p) for t, n in topics.items() if any(t in s.subscribed for s in members.values()) for p in range(n)}
    assert seen == wanted


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_three_members_six_partitions_get_two_each(name: str) -> None:
    members = {m: MemberSubscription(frozenset({T[0]})) for m in ("a", "b", "c")}
    result = assign(name, members, {T[0]: 6})
    check_complete_and_disjoint(result, members, {T[0]: 6})
    assert sorted(len(flat(a)) for a in result.values()) == [2, 2, 2]


def test_range_gives_contiguous_ranges_and_the_first_members_the_extra() -> None:
    members = {m: MemberSubscription(frozenset({T[0], T[1]})) for m in ("b", "a")}
    result = range_(members, {T[0]: 5, T[1]: 2})
    assert result["a"] == {T[0]: frozenset({0, 1, 2}), T[1]: frozenset({0})}
    assert result["b"] == {T[0]: frozenset({3, 4}), T[1]: frozenset({1})}


def test_uniform_moves_only_what_a_new_member_needs() -> None:
    before = uniform({m: MemberSubscription(frozenset({T[0]})) for m in ("a", "b")}, {T[0]: 6})
    members = {m: MemberSubscription(frozenset({T[0]}), before.get(m, {})) for m in ("a", "b", "c")}
    after = uniform(members, {T[0]: 6})
    for m in ("a", "b"):
        assert flat(after[m]) <= flat(before[m]) and len(flat(after[m])) == 2
    assert len(flat(after["c"])) == 2


def test_uniform_keeps_everything_when_a_member_leaves_and_spreads_its_partitions() -> None:
    before = uniform({m: MemberSubscription(frozenset({T[0]})) for m in ("a", "b", "c")}, {T[0]: 9})
    members = {m: MemberSubscription(frozenset({T[0]}), before[m]) for m in ("a", "b")}
    after = uniform(members, {T[0]: 9})
    for m in ("a", "b"):
        assert flat(before[m]) <= flat(after[m])
    assert sorted(len(flat(a)) for a in after.values()) == [4, 5]


def test_uniform_with_different_subscriptions_only_assigns_subscribed_topics() -> None:
    members = {"a": MemberSubscription(frozenset({T[0]})), "b": MemberSubscription(frozenset({T[0], T[1]}))}
    topics = {T[0]: 4, T[1]: 4}
    result = uniform(members, topics)
    check_complete_and_disjoint(result, members, topics)
    assert len(flat(result["a"])) == 4 and flat(result["b"]) >= {(T[1], p) for p in range(4)}


def test_partitions_that_no_longer_exist_are_dropped() -> None:
    current = {T[0]: frozenset({0, 1, 2, 3})}
    result = uniform({"a": MemberSubscription(frozenset({T[0]}), current)}, {T[0]: 2})
    assert result["a"] == {T[0]: frozenset({0, 1})}


def test_unknown_assignor_is_refused() -> None:
    with pytest.raises(UnknownAssignor):
        assign("sticky", {}, {})


subscriptions = st.dictionaries(
    st.sampled_from(["m1", "m2", "m3", "m4", "m5"]),
    st.frozensets(st.sampled_from(T), min_size=1),
    min_size=1,
)
partition_counts = st.fixed_dictionaries({t: st.integers(0, 12) for t in T})


@settings(max_examples=200, deadline=None)
@given(subscriptions, partition_counts, st.sampled_from(["uniform", "range"]))
def test_any_group_gets_a_complete_disjoint_deterministic_assignment(
    subs: dict[str, frozenset[uuid.UUID]], topics: dict[uuid.UUID, int], name: str
) -> None:
    members = {m: MemberSubscription(s) for m, s in subs.items()}
    result = assign(name, members, topics)
    check_complete_and_disjoint(result, members, topics)
    assert assign(name, dict(reversed(list(members.items()))), topics) == result


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(0, 30), st.integers(1, 6))
def test_uniform_with_identical_subscriptions_is_balanced_even_after_churn(before: int, count: int, after: int) -> None:
    ids = [f"m{i}" for i in range(max(before, after))]
    first = uniform({m: MemberSubscription(frozenset({T[0]})) for m in ids[:before]}, {T[0]: count})
    members = {m: MemberSubscription(frozenset({T[0]}), first.get(m, {})) for m in ids[:after]}
    second = uniform(members, {T[0]: count})
    sizes = [len(flat(a)) for a in second.values()]
    assert max(sizes) - min(sizes) <= 1
    # Sticky: a member that stays keeps min(what it had, its fair share) of its partitions.
    floor = count // after
    for m in ids[: min(before, after)]:
        assert len(flat(second[m]) & flat(first[m])) >= min(len(flat(first[m])), floor)
