"""What the controller changes when brokers come and go: leaders and ISRs. Pure.

``partition_changes(image, live, unclean_allowed)`` looks at every partition against the set of live
brokers and returns the partitions to rewrite, each as the state it should have:

- Leader gone (or no leader): the first replica, in replica order, that is live and in the ISR becomes
  leader; the leader epoch and the partition epoch go up by one and the ISR keeps its live members.
  No such replica: with unclean election allowed for the topic, the first live replica leads with an
  ISR of itself (data may be lost: Kafka's rule); otherwise the partition goes offline (leader -1, the
  epoch bumped once) and its ISR is left as it was, so that a former ISR member that comes back is
  elected and nothing acknowledged is lost.
- Leader alive, a dead follower in the ISR: it leaves the ISR at once (the partition epoch goes up,
  the leader epoch does not), so that acks=all writes do not wait ``replica.lag.time.max.ms`` for it.

``preferred_leader_changes`` is Kafka's auto leader rebalance: a broker whose share of partitions led
by someone other than their preferred replica (the first in the replica list) is above
``leader.imbalance.per.broker.percentage`` gets those partitions back, one epoch up, wherever the
preferred replica is alive and in the ISR (so it holds every committed record).

``hand_over`` is written by a leader itself (compare-and-set on the partition's state, the path of its
ISR changes) when the scrubber found damage in its copy: an in-sync follower takes over, the damaged
leader leaves the ISR and repairs its copy as a follower.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import replace

from tidelog.common.errors import ErrorCode
from tidelog.metadata.image import ClusterImage, PartitionImage

NO_LEADER = -1


def elect(partition: PartitionImage, live: frozenset[int], unclean_allowed: bool) -> PartitionImage | None:
    """The partition's new state, or None when it needs no change."""
    if partition.leader in live:
        isr = tuple(r for r in partition.isr if r in live)
        if isr == partition.isr:
            return None
        return replace(partition, isr=isr, partition_epoch=partition.partition_epoch + 1)
    candidates = [r for r in partition.replicas if r in live and r in partition.isr]
    if candidates:
        isr = tuple(r for r in partition.isr if r in live)
        return _lead(partition, candidates[0], isr)
    if unclean_allowed:
        live_replicas = [r for r in partition.replicas if r in live]
        if live_replicas:
            return _lead(partition, live_replicas[0], (live_replicas[0],))
    if partition.leader == NO_LEADER:
        return None  # already offline; waiting for an ISR member to return
    return replace(partition, leader=NO_LEADER, leader_epoch=partition.leader_epoch + 1,
                   partition_epoch=partition.partition_epoch + 1)


def _lead(partition: PartitionImage, leader: int, isr: tuple[int, ...]) -> PartitionImage:
    return replace(partition, leader=leader, leader_epoch=partition.leader_epoch + 1, isr=isr,
                   partition_epoch=partition.partition_epoch + 1)


def partition_changes(
    image: ClusterImage, live: frozenset[int], unclean_allowed: Callable[[str], bool],
) -> Iterator[tuple[str, PartitionImage, PartitionImage]]:
    """(topic, current, new) for every partition whose leader or ISR must change."""
    for topic in image.topics.values():
        allowed = None
        for partition in topic.partitions:
            if partition.leader in live and all(r in live for r in partition.isr):
                continue
            if allowed is None:
                allowed = unclean_allowed(topic.name)
            new = elect(partition, live, allowed)
            if new is not None:
                yield topic.name, partition, new


def preferred_leader_changes(
    image: ClusterImage, live: frozenset[int], imbalance_percentage: int,
) -> list[tuple[str, PartitionImage, PartitionImage]]:
    """Partitions to hand back to their preferred replica, for brokers over the imbalance threshold."""
    preferred_count: dict[int, int] = {}
    not_led: dict[int, list[tuple[str, PartitionImage]]] = {}
    for topic in image.topics.values():
        for partition in topic.partitions:
            if not partition.replicas:
                continue
            preferred = partition.replicas[0]
            preferred_count[preferred] = preferred_count.get(preferred, 0) + 1
            if partition.leader != preferred:
                not_led.setdefault(preferred, []).append((topic.name, partition))
    changes = []
    for broker, partitions in not_led.items():
        if broker not in live or 100 * len(partitions) <= imbalance_percentage * preferred_count[broker]:
            continue
        for topic_name, partition in partitions:
            if broker in partition.isr:
                changes.append((topic_name, partition, _lead(partition, broker, partition.isr)))
    return changes


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types


def requested_election(
    partition: PartitionImage, live: frozenset[int], election_type: int,
) -> tuple[ErrorCode, PartitionImage | None]:
    """ElectLeaders for one partition: (error, the new state to write or None), Kafka's answers.

    Preferred: the first replica must be alive and in the ISR (PREFERRED_LEADER_NOT_AVAILABLE), and
    already leading it needs no election (ELECTION_NOT_NEEDED). Unclean: only a partition without a
    live leader is elected, from the live ISR first, else any live replica (ELIGIBLE_LEADERS_NOT_AVAILABLE
    when none is alive)."""
    if election_type == PREFERRED:
        preferred = partition.replicas[0] if partition.replicas else NO_LEADER
        if partition.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED, None
        if preferred not in live or preferred not in partition.isr:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
        return ErrorCode.NONE, _lead(partition, preferred, partition.isr)
    if partition.leader in live:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    elected = elect(partition, live, unclean_allowed=True)
    if elected is None or elected.leader == NO_LEADER:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    return ErrorCode.NONE, elected


def hand_over(partition: PartitionImage, leaving: int, eligible: Collection[int]) -> PartitionImage | None:
    """Leadership given up by ``leaving``, the partition's leader, whose copy is damaged: the first other
    replica, in replica order, that is in the ISR and ``eligible`` (alive and caught up, as the leader
    sees it) leads, one leader epoch up; ``leaving`` leaves the ISR, since its copy lacks committed
    records until it is repaired (it rejoins the usual way, once caught up). Only ISR members are ever
    chosen, so every acknowledged record survives. None when ``leaving`` does not lead or no replica
    qualifies (the damaged leader then keeps leading and answers CORRUPT_MESSAGE for the range)."""
    if partition.leader != leaving:
        return None
    candidates = [r for r in partition.replicas if r != leaving and r in partition.isr and r in eligible]
    if not candidates:
        return None
    return _lead(partition, candidates[0], tuple(r for r in partition.isr if r != leaving))
