"""Which partitions of a finishing transaction still need a marker, and where they go."""

from __future__ import annotations

import pytest

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.txn_markers import NO_LEADER, Outcome, PendingMarkers, outcome


@pytest.mark.parametrize(("error", "expected"), [
    (ErrorCode.NONE, Outcome.DONE),
    (ErrorCode.INVALID_PRODUCER_EPOCH, Outcome.DONE),  # a newer epoch wrote there: nothing of ours is open
    (ErrorCode.TRANSACTION_COORDINATOR_FENCED, Outcome.FENCED),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, Outcome.RETRY),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, Outcome.RETRY),
    (ErrorCode.NOT_ENOUGH_REPLICAS, Outcome.RETRY),
    (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Outcome.RETRY),
    (ErrorCode.REQUEST_TIMED_OUT, Outcome.RETRY),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, Outcome.RETRY),
    (ErrorCode.NETWORK_EXCEPTION, Outcome.RETRY),
    (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, Outcome.RETRY),  # never ends a transaction half-written
])
def test_each_answer_is_done_retried_or_fencing(error: ErrorCode, expected: Outcome) -> None:
    assert outcome(error) is expected


def test_partitions_go_to_their_current_leaders_and_retry_where_the_leader_moved() -> None:
    leaders = {("a", 0): 1, ("a", 1): 2, ("b", 0): 1}
    pending = PendingMarkers(leaders)
    assert pending.destinations(leaders.get) == {1: [("a", 0), ("b", 0)], 2: [("a", 1)]}
    pending.record(("a", 0), ErrorCode.NONE)
    pending.record(("b", 0), ErrorCode.NONE)
    pending.record(("a", 1), ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert not pending.finished and pending.last_errors == {("a", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER}
    leaders[("a", 1)] = 3  # the metadata moved the partition
    assert pending.destinations(leaders.get) == {3: [("a", 1)]}
    pending.record(("a", 1), ErrorCode.NONE)
    assert pending.finished and not pending.fenced


def test_a_partition_without_a_leader_waits_and_a_deleted_one_is_dropped() -> None:
    leaders: dict[tuple[str, int], int] = {("a", 0): NO_LEADER}
    pending = PendingMarkers([("a", 0), ("gone", 0)])
    assert pending.destinations(leaders.get) == {}
    assert pending.pending == {("a", 0)}  # "gone" left the metadata: no one will read a marker there
    leaders[("a", 0)] = 2
    assert pending.destinations(leaders.get) == {2: [("a", 0)]}


def test_a_fenced_coordinator_stops_at_once() -> None:
    pending = PendingMarkers([("a", 0), ("a", 1)])
    pending.record(("a", 0), ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    assert pending.finished and pending.fenced
