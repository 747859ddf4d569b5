"""The controller's election rules (controller/elections.py)."""

from __future__ import annotations

import uuid
from types import MappingProxyType

from tidelog.controller.elections import NO_LEADER, elect, hand_over, preferred_leader_changes
from tidelog.metadata.image import ClusterImage, PartitionImage, TopicImage


def part(leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3), epoch: int = 4) -> PartitionImage:
    return PartitionImage(0, leader, epoch, replicas, isr, partition_epoch=10)


def test_the_first_live_isr_replica_in_replica_order_is_elected() -> None:
    new = elect(part(1, (1, 3, 2)), frozenset({2, 3}), unclean_allowed=False)
    assert new is not None
    assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (2, 5, (3, 2), 11)


def test_a_dead_follower_leaves_the_isr_without_a_new_leader_epoch() -> None:
    new = elect(part(1, (1, 2, 3)), frozenset({1, 2}), unclean_allowed=False)
    assert new is not None
    assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (1, 4, (1, 2), 11)


def test_nothing_changes_when_the_leader_and_isr_are_alive() -> None:
    assert elect(part(1, (1, 2)), frozenset({1, 2}), unclean_allowed=False) is None


def test_with_the_whole_isr_dead_the_partition_goes_offline_and_keeps_its_isr() -> None:
    new = elect(part(1, (1,)), frozenset({2, 3}), unclean_allowed=False)
    assert new is not None
    assert (new.leader, new.isr, new.leader_epoch) == (NO_LEADER, (1,), 5)
    assert elect(new, frozenset({2, 3}), unclean_allowed=False) is None  # stays offline, no epoch churn


def test_a_returning_isr_member_is_elected_for_an_offline_partition() -> None:
    offline = part(NO_LEADER, (1,))
    new = elect(offline, frozenset({1, 2, 3}), unclean_allowed=False)
    assert new is not None and new.leader == 1 and new.isr == (1,)


def test_unclean_election_takes_a_live_out_of_sync_replica() -> None:
    new = elect(part(1, (1,)), frozenset({3}), unclean_allowed=True)
    assert new is not None and (new.leader, new.isr) == (3, (3,))


def _image(partitions: list[PartitionImage]) -> ClusterImage:
    return ClusterImage("c").with_topic(TopicImage("t", uuid.uuid4(), tuple(partitions), MappingProxyType({})))


def test_leadership_goes_back_to_the_preferred_replica_past_the_imbalance_threshold() -> None:
    parts = [PartitionImage(i, 2, 4, (1, 2, 3), (1, 2, 3)) for i in range(3)]
    parts.append(PartitionImage(3, 2, 4, (2, 1, 3), (2, 1, 3)))
    changes = preferred_leader_changes(_image(parts), frozenset({1, 2, 3}), 10)
    assert [(c[0], c[1].index, c[2].leader, c[2].leader_epoch) for c in changes] == [("t", i, 1, 5) for i in range(3)]


def test_no_preferred_election_for_a_dead_or_out_of_sync_preferred_replica_or_below_the_threshold() -> None:
    lagging = [PartitionImage(0, 2, 4, (1, 2), (2,))]
    assert preferred_leader_changes(_image(lagging), frozenset({1, 2}), 10) == []
    dead = [PartitionImage(0, 2, 4, (1, 2), (1, 2))]
    assert preferred_leader_changes(_image(dead), frozenset({2}), 10) == []
    mostly_balanced = [PartitionImage(i, 1, 4, (1, 2), (1, 2)) for i in range(19)] + [PartitionImage(19, 2, 4, (1, 2), (1, 2))]
    assert preferred_leader_changes(_image(mostly_balanced), frozenset({1, 2}), 10) == []


def test_requested_elections_answer_as_kafka_does() -> None:
    from tidelog.common.errors import ErrorCode
    from tidelog.controller.elections import PREFERRED, UNCLEAN, requested_election

    led_by_second = PartitionImage(0, 2, 4, (1, 2, 3), (1, 2, 3))
    error, new = requested_election(led_by_second, frozenset({1, 2, 3}), PREFERRED)
    assert error is ErrorCode.NONE and new is not None and (new.leader, new.leader_epoch) == (1, 5)
    assert requested_election(part(1, (1, 2)), frozenset({1, 2}), PREFERRED)[0] is ErrorCode.ELECTION_NOT_NEEDED
    assert requested_election(led_by_second, frozenset({2, 3}), PREFERRED)[0] is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert requested_election(led_by_second, frozenset({1, 2, 3}), UNCLEAN)[0] is ErrorCode.ELECTION_NOT_NEEDED
    error, new = requested_election(part(NO_LEADER, (1,)), frozenset({3}), UNCLEAN)
    assert error is ErrorCode.NONE and new is not None and new.leader == 3
    assert requested_election(part(NO_LEADER, (1,)), frozenset(), UNCLEAN)[0] is ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_a_damaged_leader_hands_over_to_the_first_eligible_isr_replica_and_leaves_the_isr() -> None:
    new = hand_over(part(1, (1, 3, 2)), leaving=1, eligible={2, 3})
    assert new is not None
    assert (new.leader, new.leader_epoch, new.isr, new.partition_epoch) == (2, 5, (3, 2), 11)
    only_three = hand_over(part(1, (1, 3, 2)), leaving=1, eligible={3})
    assert only_three is not None and (only_three.leader, only_three.isr) == (3, (3, 2))


def test_a_damaged_leader_never_hands_over_to_a_replica_outside_the_isr() -> None:
    # Broker 2 is alive and fetching, but out of the ISR: it may lack acknowledged records.
    assert hand_over(part(1, (1, 3)), leaving=1, eligible={2}) is None
    assert hand_over(part(1, (1,)), leaving=1, eligible={2, 3}) is None  # the only in-sync replica
    assert hand_over(part(1, (1,), replicas=(1,)), leaving=1, eligible=set()) is None  # RF 1
    assert hand_over(part(2, (1, 2)), leaving=1, eligible={2}) is None  # broker 1 does not lead it
