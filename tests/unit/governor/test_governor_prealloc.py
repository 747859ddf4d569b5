"""Pre-allocation places a new topic by declared traffic, not by replica count."""

from __future__ import annotations

import pytest

from tidelog.governor.prealloc import NewTopic, NoRoom, preallocate
from tidelog.governor.synthetic import small_cluster

BROKERS = [(1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "b"), (6, "c")]


def test_new_topic_avoids_the_brokers_that_carry_the_traffic() -> None:
    # brokers 1-3 take 1000 B/s each from one partition; 4-6 hold many idle partitions
    parts = [("hot", [1, 2, 3], 10, 1000.0, 0.0)] + [("idle", [4, 5, 6], 10, 0.0, 0.0)] * 10
    model = small_cluster(BROKERS, parts, disk_capacity=10_000)
    assignment = preallocate(model, NewTopic("new", 3, 3, bytes_in_per_s=300.0))
    assert len(assignment) == 3
    assert all(set(replicas) == {4, 5, 6} for replicas in assignment)
    assert sorted(r[0] for r in assignment) == [4, 5, 6]  # leaders spread


def test_new_topic_spreads_replicas_over_racks() -> None:
    model = small_cluster(BROKERS, [("x", [1], 10, 0.0, 0.0)], disk_capacity=10_000)
    for replicas in preallocate(model, NewTopic("new", 6, 3, bytes_in_per_s=600.0)):
        assert len({dict(BROKERS)[b] for b in replicas}) == 3


def test_new_topic_stays_in_its_tenant_pool() -> None:
    model = small_cluster(BROKERS, [("x", [1], 10, 0.0, 0.0)], disk_capacity=10_000)
    topic = NewTopic("acme", 4, 2, bytes_in_per_s=10.0, tenant_brokers=frozenset({2, 3}))
    assert all(set(r) == {2, 3} for r in preallocate(model, topic))


def test_new_topic_that_does_not_fit_on_disk_is_refused_with_the_partition() -> None:
    model = small_cluster(BROKERS[:2], [("x", [1, 2], 700, 0.0, 0.0)], disk_capacity=1000)
    with pytest.raises(NoRoom, match="new-0"):
        preallocate(model, NewTopic("new", 1, 1, bytes_in_per_s=1.0, retention_bytes=200))
