"""Nearest-replica reads (replication/read_replica.py, LeaderState.in_sync_followers): Kafka's
RackAwareReplicaSelector rules."""

from __future__ import annotations

import pytest

from tidelog.replication.leader_state import LeaderState
from tidelog.replication.read_replica import LEADER, ReplicaView, select_read_replica

LEADER_R1 = ReplicaView(1, "r1", 100, 0)


@pytest.mark.parametrize(("client_rack", "followers", "fetch_offset", "expected"), [
    (None, [ReplicaView(2, "r2", 100, 0)], 0, LEADER),                       # no client.rack
    ("", [ReplicaView(2, "r2", 100, 0)], 0, LEADER),
    ("r1", [ReplicaView(2, "r1", 100, 0)], 0, LEADER),                       # the leader shares the rack
    ("r9", [ReplicaView(2, "r2", 100, 0)], 0, LEADER),                       # nobody in the rack
    ("r2", [ReplicaView(2, "r2", 100, 0), ReplicaView(3, "r3", 100, 0)], 50, 2),
    ("r2", [ReplicaView(2, "r2", 40, 0)], 50, LEADER),                       # behind the fetch offset
    ("r2", [ReplicaView(2, "r2", 90, 0), ReplicaView(3, "r2", 100, 0)], 50, 3),  # most caught up
    ("r2", [ReplicaView(2, "r2", 100, 900), ReplicaView(3, "r2", 100, 10)], 50, 3),  # caught up latest
    ("r2", [ReplicaView(3, "r2", 100, 0), ReplicaView(2, "r2", 100, 0)], 50, 2),  # tie: lowest id
    ("r2", [ReplicaView(2, "r2", 100, 0, log_start_offset=60)], 50, LEADER),  # starts above the fetch offset
    ("r2", [ReplicaView(2, "r2", 100, 0, log_start_offset=50)], 50, 2),       # starts at it
    ("r2", [ReplicaView(2, "r2", 100, 0, log_start_offset=60), ReplicaView(3, "r2", 90, 0, log_start_offset=0)], 50, 3),
    ("r2", [ReplicaView(2, "r2", 100, 0, log_start_offset=-1)], 50, 2),       # log start not known yet
])
def test_rack_aware_selector_picks_like_kafka(
    client_rack: str | None, followers: list[ReplicaView], fetch_offset: int, expected: int,
) -> None:
    assert select_read_replica(client_rack, LEADER_R1, followers, fetch_offset) == expected


def test_only_committed_isr_followers_heard_from_are_candidates() -> None:
    state = LeaderState.become_leader(1, 0, 0, (1, 2, 3, 4), (1, 2, 3), 0, 0, now_ms=1000, lag_time_max_ms=30_000)
    state.on_follower_fetch(2, 10, 10, now_ms=1500)   # caught up at 1500
    state.on_follower_fetch(4, 10, 10, now_ms=1500)   # fetching, but not in the ISR
    # 3 is in the ISR but has not fetched in this leadership: its log end is unknown
    assert state.in_sync_followers(now_ms=2000) == [(2, 10, 500, -1)]


def test_the_leader_learns_each_followers_log_start_from_its_fetch() -> None:
    state = LeaderState.become_leader(1, 0, 0, (1, 2, 3), (1, 2, 3), 0, 0, now_ms=1000, lag_time_max_ms=30_000)
    state.on_follower_fetch(2, 10, 10, now_ms=1500, log_start=4)
    state.on_follower_fetch(3, 10, 10, now_ms=1500, log_start=0)
    state.on_follower_fetch(2, 10, 10, now_ms=1600, log_start=8)  # retention moved 2's start on
    assert state.in_sync_followers(now_ms=2000) == [(2, 10, 400, 8), (3, 10, 500, 0)]
