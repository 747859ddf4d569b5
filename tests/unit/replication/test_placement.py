"""Kafka's rack-aware round-robin placement (controller/placement.py)."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.common.errors import KafkaError
from tidelog.controller.placement import assign_replicas, rack_alternated


def test_racks_alternate_in_the_layout() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "c", 4: "b", 5: "c"}
    assert rack_alternated(racks) == [0, 2, 3, 1, 4, 5]


def test_rack_unaware_assignment_matches_kafkas_published_example() -> None:
    # Kafka's AdminUtils documentation example: 5 brokers, 10 partitions, RF 3, start index 0.
    got = assign_replicas({b: None for b in range(5)}, 10, 3, fixed_start=0)
    assert got[:5] == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1)]
    assert got[5:] == [(0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]


def test_rack_aware_assignment_matches_kafkas_published_vector() -> None:
    # Kafka's AdminRackAwareTest: six brokers on three racks, 7 partitions, RF 3, start index 0 from partition 0.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(racks, 7, 3, fixed_start=0) == [
        (0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3), (0, 4, 2),
    ]


def test_added_partitions_keep_kafkas_leader_rotation() -> None:
    # Kafka places added partitions with startPartitionId = the current count: partition p is led by
    # layout[(p + start) % n], so leaders keep rotating where the first partitions stopped.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    layout = rack_alternated(racks)
    added = assign_replicas(racks, 6, 3, fixed_start=2, first_partition=7)
    assert [r[0] for r in added] == [layout[(p + 2) % 6] for p in range(7, 13)]


def test_rack_alternated_list_matches_kafkas_documented_example() -> None:
    # getRackAlternatedBrokerList's documented example: rack1 0,1,2; rack2 3,4,5; rack3 6,7,8.
    racks = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_aware_assignment_puts_each_partition_on_three_racks_and_spreads_leaders() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack2", 3: "rack2", 4: "rack1", 5: "rack3"}
    got = assign_replicas(racks, 6, 3, fixed_start=0)
    for replicas in got:
        assert len({racks[b] for b in replicas}) == 3
    assert [r[0] for r in got] == rack_alternated(racks)


def test_too_few_brokers_is_invalid_replication_factor() -> None:
    with pytest.raises(KafkaError) as raised:
        assign_replicas({1: None, 2: None}, 1, 3)
    assert "larger than available brokers: 2" in str(raised.value)


@given(
    st.integers(1, 9), st.integers(1, 3), st.integers(1, 40), st.integers(0, 1000),
)
def test_every_partition_gets_distinct_brokers_on_as_many_racks_as_possible(
    brokers: int, rack_count: int, partitions: int, seed: int,
) -> None:
    racks = {b: f"r{b % rack_count}" for b in range(brokers)}
    rf = min(3, brokers)
    got = assign_replicas(racks, partitions, rf, rng=random.Random(seed))
    assert len(got) == partitions
    for replicas in got:
        assert len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, len(set(racks.values())))
    leaders = collections.Counter(r[0] for r in got)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1 or partitions < brokers
