"""Partition reassignment steps (pure): validation, start, completion, cancellation, codec of a move."""

from __future__ import annotations

import uuid
from dataclasses import replace
from types import MappingProxyType

import pytest

from tidelog.common.errors import ErrorCode
from tidelog.controller import reassignment
from tidelog.metadata import codec
from tidelog.metadata.etcd_layout import KeyTable
from tidelog.metadata.image import ClusterImage, PartitionImage, TopicImage

BROKERS = frozenset({1, 2, 3, 4, 5})


def part(replicas: tuple[int, ...], isr: tuple[int, ...] | None = None, leader: int | None = None,
         adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()) -> PartitionImage:
    return PartitionImage(0, replicas[0] if leader is None else leader, 3, replicas,
                          replicas if isr is None else isr, 7, adding, removing)


@pytest.mark.parametrize(("target", "message"), [
    ([], "empty replica list"),
    ([1, 2, 1], "broker 1 more than once"),
    ([1, 9], "broker 9, but no such broker is registered"),
    ([-1], "broker -1, but no such broker"),
])
def test_a_bad_target_is_refused_with_invalid_replica_assignment_and_nothing_changes(target: list[int], message: str) -> None:
    error, text, new = reassignment.start(part((1, 2, 3)), target, BROKERS, BROKERS)
    assert error is ErrorCode.INVALID_REPLICA_ASSIGNMENT and new is None
    assert text is not None and message in text


def test_a_move_records_target_then_leaving_replicas_and_keeps_leader_and_isr() -> None:
    error, _, new = reassignment.start(part((1, 2, 3)), [4, 2, 5], BROKERS, BROKERS)
    assert error is ErrorCode.NONE and new is not None
    assert new.replicas == (4, 2, 5, 1, 3)
    assert (new.adding_replicas, new.removing_replicas) == ((4, 5), (1, 3))
    assert (new.leader, new.leader_epoch, new.isr) == (1, 3, (1, 2, 3))
    assert new.partition_epoch == 8
    assert new.target_replicas == (4, 2, 5) and new.original_replicas == (2, 1, 3)


def test_the_move_waits_until_every_target_replica_is_in_sync() -> None:
    moving = part((4, 2, 5, 1, 3), isr=(1, 2, 3, 4), adding=(4, 5), removing=(1, 3))
    assert reassignment.advance(moving, BROKERS) is None


def test_completion_drops_leaving_replicas_and_elects_from_the_target_when_the_leader_leaves() -> None:
    moving = part((4, 2, 5, 1, 3), isr=(1, 2, 3, 4, 5), leader=1, adding=(4, 5), removing=(1, 3))
    done = reassignment.advance(moving, BROKERS)
    assert done is not None
    assert (done.replicas, done.isr, done.adding_replicas, done.removing_replicas) == ((4, 2, 5), (2, 4, 5), (), ())
    assert (done.leader, done.leader_epoch, done.partition_epoch) == (4, 4, 8)


def test_completion_keeps_a_leader_that_stays_without_a_new_epoch() -> None:
    moving = part((2, 4, 1), isr=(1, 2, 4), leader=2, adding=(4,), removing=(1,))
    done = reassignment.advance(moving, BROKERS)
    assert done is not None and (done.leader, done.leader_epoch, done.replicas) == (2, 3, (2, 4))


def test_completion_waits_when_no_target_replica_is_alive_to_lead() -> None:
    moving = part((4, 1), isr=(1, 4), leader=1, adding=(4,), removing=(1,))
    assert reassignment.advance(moving, frozenset({1})) is None


def test_a_reorder_or_a_shrink_applies_at_once() -> None:
    _, _, reordered = reassignment.start(part((1, 2, 3)), [3, 1, 2], BROKERS, BROKERS)
    assert reordered is not None and not reordered.reassigning and reordered.replicas == (3, 1, 2)
    assert reordered.leader == 1  # leadership moves later, by a preferred election
    _, _, shrunk = reassignment.start(part((1, 2, 3)), [2, 3], BROKERS, BROKERS)
    assert shrunk is not None and not shrunk.reassigning
    assert (shrunk.replicas, shrunk.isr, shrunk.leader, shrunk.leader_epoch) == ((2, 3), (2, 3), 2, 4)


def test_the_same_assignment_changes_nothing() -> None:
    assert reassignment.start(part((1, 2, 3)), [1, 2, 3], BROKERS, BROKERS) == (ErrorCode.NONE, None, None)


def test_a_new_target_replaces_a_move_in_progress_from_the_original_replicas() -> None:
    moving = part((4, 2, 5, 1, 3), isr=(1, 2, 3, 4), adding=(4, 5), removing=(1, 3))
    _, _, replaced = reassignment.start(moving, [1, 2, 5], BROKERS, BROKERS)
    assert replaced is not None
    assert replaced.replicas == (1, 2, 5, 3)
    assert (replaced.adding_replicas, replaced.removing_replicas) == ((5,), (3,))
    assert replaced.isr == (1, 2, 3)  # 4 is no replica any more


def test_cancel_restores_the_original_replicas_and_drops_adding_ones_from_the_isr() -> None:
    moving = part((4, 2, 5, 1, 3), isr=(1, 2, 3, 4), leader=1, adding=(4, 5), removing=(1, 3))
    error, _, reverted = reassignment.cancel(moving, BROKERS)
    assert error is ErrorCode.NONE and reverted is not None
    # The original set, in the merged order (Kafka's revert keeps it too); the leader stays.
    assert (reverted.replicas, reverted.isr, reverted.leader, reverted.leader_epoch) == ((2, 1, 3), (1, 2, 3), 1, 3)
    assert not reverted.reassigning and reverted.partition_epoch == 8


def test_cancel_hands_leadership_back_to_an_original_replica() -> None:
    moving = part((4, 1), isr=(1, 4), leader=4, adding=(4,), removing=(1,))
    _, _, reverted = reassignment.cancel(moving, BROKERS)
    assert reverted is not None and (reverted.leader, reverted.leader_epoch, reverted.isr) == (1, 4, (1,))


def test_cancel_without_a_move_answers_no_reassignment_in_progress() -> None:
    error, _, new = reassignment.cancel(part((1, 2, 3)), BROKERS)
    assert error is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS and new is None


def test_the_controller_finds_only_moves_ready_to_complete() -> None:
    ready = part((4, 1), isr=(1, 4), adding=(4,), removing=(1,))
    waiting = replace(ready, index=1, isr=(1,))
    image = ClusterImage("c", MappingProxyType({"t": TopicImage("t", uuid.uuid4(), (ready, waiting, replace(part((1,)), index=2)))}))
    changes = list(reassignment.reassignment_changes(image, BROKERS))
    assert [(t, cur.index, new.replicas) for t, cur, new in changes] == [("t", 0, (4,))]
    assert [(t, p.index) for t, p in reassignment.in_progress(image)] == [("t", 0), ("t", 1)]


def test_a_move_survives_the_partition_key_codec_and_an_old_record_has_no_move() -> None:
    moving = part((4, 2, 1), isr=(1, 2), adding=(4,), removing=(1,))
    doc = codec.decode(codec.encode(codec.partition_state_to_json(moving)))
    assert codec.partition_state_from_json(doc, 0, (9, 9)) == moving
    old = {"leader": 1, "leader_epoch": 3, "isr": [1, 2], "partition_epoch": 7}
    restored = codec.partition_state_from_json(old, 0, (1, 2))
    assert restored.replicas == (1, 2) and not restored.reassigning


def test_a_move_that_does_not_fit_its_replicas_is_a_corrupt_value() -> None:
    with pytest.raises(codec.CorruptValueError, match="do not fit"):
        codec.partition_state_from_json(
            {"leader": 1, "leader_epoch": 0, "isr": [1], "replicas": [1], "adding_replicas": [4]}, 0, ())


def test_the_partition_keys_replicas_win_over_the_topic_keys() -> None:
    table = KeyTable()
    topic_id = uuid.uuid4()
    table.put("topics/t", codec.encode({"topic_id": str(topic_id), "configs": {}, "replicas": [[1, 2]]}), 1, 1)
    table.put("partitions/t/0", codec.encode(codec.partition_state_to_json(part((3, 1, 2), adding=(3,)))), 2, 2)
    image = table.image(ClusterImage(cluster_id="c"), 2)
    assert image.topics["t"].partitions[0].replicas == (3, 1, 2)
