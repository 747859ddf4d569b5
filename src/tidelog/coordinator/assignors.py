"""Server-side assignors of KIP-848 consumer groups: ``uniform`` (the default) and ``range``.

An assignor gets every member's subscription (topic ids) and the target assignment it had, plus each
subscribed topic's partition count, and returns the new target assignment: member id → topic id →
partitions. Both are deterministic (same input, same output: members and topics are walked in sorted
order) and complete (every partition of a topic someone subscribes to goes to exactly one member
subscribed to it).

``uniform``: balanced and sticky. A member keeps the partitions it had as long as it still subscribes
to their topic and keeping them does not leave it more than one partition above the members it could
share with; the partitions left over go one by one to the eligible member holding the fewest. Then,
while some member holds two or more partitions more than another member that could take one of
them, one partition moves from the first to the second. With identical subscriptions this ends with
every member holding ``N // M`` or ``N // M + 1`` partitions and the fewest possible moves from the
previous assignment.

``range``: per topic, the members subscribed to it, sorted by member id, get contiguous ranges of
partitions: each ``P // M``, the first ``P % M`` members one more. Members subscribed to the same
topics with the same partition counts get the same partition numbers of each (co-partitioning).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    subscribed: frozenset[uuid.UUID]
    current: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)


class UnknownAssignor(ValueError):
    """No assignor by that name."""


UNIFORM = "uniform"
RANGE = "range"


def assign(
    name: str, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    """The target assignment by assignor ``name``; ``topics`` maps each existing topic id to its partition count."""
    if name == UNIFORM:
        return uniform(members, topics)
    if name == RANGE:
        return range_(members, topics)
    raise UnknownAssignor(name)


def _result(owned: Mapping[str, set[tuple[uuid.UUID, int]]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member_id, partitions in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, p in partitions:
            by_topic.setdefault(topic_id, set()).add(p)
        out[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def range_(members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in members}
    for topic_id in sorted(topics):
        subscribers = sorted(m for m, s in members.items() if topic_id in s.subscribed)
        if not subscribers:
            continue
        count = topics[topic_id]
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            size = share + (1 if i < extra else 0)
            owned[member_id].update((topic_id, p) for p in range(start, start + size))
            start += size
    return _result(owned)


def uniform(members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    order = sorted(members)
    owned: dict[str, set[tuple[uuid.UUID, int]]] = {m: set() for m in order}
    eligible: dict[uuid.UUID, list[str]] = {
        t: [m for m in order if t in members[m].subscribed] for t in sorted(topics)
    }
    all_partitions = [(t, p) for t in sorted(topics) for p in range(topics[t]) if eligible[t]]
    ceiling = _ceilings(members, eligible, topics)
    taken: set[tuple[uuid.UUID, int]] = set()
    # Stickiness: keep what is still valid, up to the member's fair share.
    for member_id in order:
        sub = members[member_id]
        kept = sorted(
            (t, p) for t, ps in sub.current.items() if t in sub.subscribed and t in topics for p in ps if p < topics[t]
        )
        for tp in kept:
            if tp not in taken and len(owned[member_id]) < ceiling[member_id]:
                owned[member_id].add(tp)
                taken.add(tp)
    for tp in all_partitions:
        if tp not in taken:
            target = min(eligible[tp[0]], key=lambda m: (len(owned[m]), m))
            owned[target].add(tp)
            taken.add(tp)
    _balance(owned, eligible, members, len(all_partitions))
    return _result(owned)


def _ceilings(
    members: Mapping[str, MemberSubscription], eligible: Mapping[uuid.UUID, list[str]], topics: Mapping[uuid.UUID, int]
) -> dict[str, int]:
    """How many partitions a member may keep: its share of the topics it subscribes to, rounded up.

    For identical subscriptions this is ``ceil(N / M)``; for different ones a member's share is
    the sum over its topics of that topic's partitions divided among the topic's subscribers.
    """
    ceiling = {}
    for member_id, sub in members.items():
        share = sum(topics[t] / len(eligible[t]) for t in sub.subscribed if t in topics and eligible.get(t))
        ceiling[member_id] = int(-(-share // 1))
    return ceiling


def _balance(
    owned: dict[str, set[tuple[uuid.UUID, int]]],
    eligible: Mapping[uuid.UUID, list[str]],
    members: Mapping[str, MemberSubscription],
    total: int,
) -> None:
    """Move one partition at a time from a member to one holding two fewer, while one can."""
    for _ in range(total * max(1, len(owned))):
        move = _find_move(owned, eligible, members)
        if move is None:
            return
        source, target, tp = move
        owned[source].discard(tp)
        owned[target].add(tp)


def _find_move(
    owned: dict[str, set[tuple[uuid.UUID, int]]],
    eligible: Mapping[uuid.UUID, list[str]],
    members: Mapping[str, MemberSubscription],
) -> tuple[str, str, tuple[uuid.UUID, int]] | None:
    for source in sorted(owned, key=lambda m: (-len(owned[m]), m)):
        # Prefer moving a partition the source did not have before (it has not started on it).
        candidates = sorted(owned[source], key=lambda tp: (tp[1] in members[source].current.get(tp[0], ()), tp))
        for tp in candidates:
            takers = [m for m in eligible[tp[0]] if len(owned[m]) < len(owned[source]) - 1]
            if takers:
                return source, min(takers, key=lambda m: (len(owned[m]), m)), tp
    return None
