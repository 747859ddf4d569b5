"""Partition reassignments (KIP-455), as pure steps on one partition's state.

A move is recorded in the partition itself, so a controller that takes over finds it where the last
one left it: during a move ``replicas`` is the target followed by the replicas leaving,
``adding_replicas`` = target - original and ``removing_replicas`` = original - target. Each step
below returns the partition's next state (the caller writes it with a compare-and-set on the
partition's key) and bumps the partition epoch once; none touches anything but that partition.

1. ``start`` (AlterPartitionReassignments with a replica list): the target is checked
   (``validate_target``: not empty, no duplicates, every broker registered: Kafka's
   INVALID_REPLICA_ASSIGNMENT); then replicas = target + leaving, the ISR keeps what stays a replica.
   A move that replaces a move in progress starts again from the *original* replicas (Kafka's rule:
   a new target is not an error). A target that only reorders the replicas is applied at once.
2. The new replicas fetch from the leader and join the ISR through the leader's ordinary ISR
   expansion (``replication.leader_state``).
3. ``advance`` (the controller, on every image change): once every target replica is in the ISR the
   move completes in one write: replicas = target, the ISR keeps only target replicas, the move
   fields are cleared and, when the leader is leaving (or dead), the first live in-sync target
   replica leads one leader epoch up. A leaving replica then no longer sees itself in the replica
   list: its broker stops fetching and deletes its log (Kafka's StopReplica with delete).
   No live in-sync target replica to lead: the move waits.
4. ``cancel`` (AlterPartitionReassignments with null replicas): back to the original replicas, the
   adding replicas leave the ISR; a leader that was an adding replica hands over to the first live
   in-sync original replica (offline when none). If that leaves the ISR empty (only adding replicas
   were in sync: the original ones all fell behind), the ISR becomes the original replicas, as
   Kafka's revert does: an unclean outcome, but the only one that keeps the partition's replicas.
   NO_REASSIGNMENT_IN_PROGRESS when there is no move to cancel.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace

from tidelog.common.errors import ErrorCode
from tidelog.metadata.image import ClusterImage, PartitionImage

NO_LEADER = -1
Answer = tuple[ErrorCode, str | None, PartitionImage | None]


def validate_target(target: Sequence[int], registered: Collection[int]) -> tuple[ErrorCode, str | None]:
    """Kafka's checks of a requested replica list (INVALID_REPLICA_ASSIGNMENT, with its messages)."""
    if not target:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    seen: set[int] = set()
    for broker in target:
        if broker in seen:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker} more than once.")
        seen.add(broker)
        if broker not in registered:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker}, but no such broker is registered.")
    return ErrorCode.NONE, None


def start(partition: PartitionImage, target: Sequence[int], registered: Collection[int],
          live: Collection[int]) -> Answer:
    """The partition with a move to ``target`` recorded (or applied, when nothing has to be copied)."""
    error, message = validate_target(target, registered)
    if error is not ErrorCode.NONE:
        return error, message, None
    original = partition.original_replicas
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    replicas = tuple(target) + removing
    moving = replace(partition, replicas=replicas, adding_replicas=adding, removing_replicas=removing,
                     isr=tuple(r for r in partition.isr if r in replicas),
                     partition_epoch=partition.partition_epoch + 1)
    if moving.leader not in replicas:  # led by an adding replica of the move this one replaces
        moving = _elect_from(moving, moving.original_replicas, live)
    if not adding:
        # Nothing to copy: complete now (a reorder, a shrink, or a move replaced by its own original).
        moving = advance(moving, live) or moving
    if _same(moving, partition):
        return ErrorCode.NONE, None, None
    return ErrorCode.NONE, None, moving


def advance(partition: PartitionImage, live: Collection[int]) -> PartitionImage | None:
    """The completed move once every target replica is in sync; None while it must wait (or no move)."""
    if not partition.reassigning:
        return None
    target = partition.target_replicas
    if any(r not in partition.isr for r in target):
        return None
    leader, leader_epoch = partition.leader, partition.leader_epoch
    if leader not in target or leader not in live:
        candidates = [r for r in target if r in live and r in partition.isr]
        if not candidates:
            return None
        leader, leader_epoch = candidates[0], leader_epoch + 1
    return replace(partition, replicas=target, isr=tuple(r for r in partition.isr if r in target),
                   adding_replicas=(), removing_replicas=(), leader=leader, leader_epoch=leader_epoch,
                   partition_epoch=partition.partition_epoch + 1)


def cancel(partition: PartitionImage, live: Collection[int]) -> Answer:
    """The partition back on its original replicas; NO_REASSIGNMENT_IN_PROGRESS when it is not moving."""
    if not partition.reassigning:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment is in progress for this partition.", None
    original = partition.original_replicas
    isr = tuple(r for r in partition.isr if r in original) or original
    reverted = replace(partition, replicas=original, isr=isr, adding_replicas=(), removing_replicas=(),
                       partition_epoch=partition.partition_epoch + 1)
    if reverted.leader not in isr:
        reverted = _elect_from(reverted, original, live)
    return ErrorCode.NONE, None, reverted


def _elect_from(partition: PartitionImage, choices: Sequence[int], live: Collection[int]) -> PartitionImage:
    candidates = [r for r in choices if r in live and r in partition.isr]
    return replace(partition, leader=candidates[0] if candidates else NO_LEADER,
                   leader_epoch=partition.leader_epoch + 1)


def _same(a: PartitionImage, b: PartitionImage) -> bool:
    return replace(a, partition_epoch=b.partition_epoch) == b


def reassignment_changes(image: ClusterImage, live: Collection[int]) -> Iterator[tuple[str, PartitionImage, PartitionImage]]:
    """(topic, current, completed) for every move whose target replicas are all in sync."""
    for topic in image.topics.values():
        for partition in topic.partitions:
            if partition.reassigning:
                new = advance(partition, live)
                if new is not None:
                    yield topic.name, partition, new


def in_progress(image: ClusterImage) -> Iterator[tuple[str, PartitionImage]]:
    """Every partition being moved, by topic name then index."""
    for name in sorted(image.topics):
        for partition in image.topics[name].partitions:
            if partition.reassigning:
                yield name, partition
