"""Offset APIs and expiry: OffsetCommit, OffsetFetch, OffsetDelete, and the retention pass
(Kafka's ``OffsetMetadataManager``), for classic and KIP-848 groups.

Every change is a record: a commit writes one OffsetCommit record per partition, OffsetDelete and
expiry write tombstones. The store (``offsets.OffsetStore``) changes when those records are
replayed, so an answer never shows a commit that did not reach the log.

Commit validation (Kafka's, for classic groups): a group that does not exist accepts commits only
with generation -1 (a standalone consumer or an admin tool: the group appears, empty, when the record
is replayed), otherwise ILLEGAL_GENERATION (GROUP_ID_NOT_FOUND from OffsetCommit v9). An existing
group checks member id, instance id and generation, refuses commits while CompletingRebalance
(REBALANCE_IN_PROGRESS), and accepts generation -1 only while Empty.
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.classic import ClassicGroupManager
from tidelog.coordinator.consumer_group import ConsumerGroup, ConsumerGroupManager
from tidelog.coordinator.group import ClassicGroup, GroupState
from tidelog.coordinator.messages import (
    FetchedOffset,
    OffsetCommit,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionErrors,
)
from tidelog.coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from tidelog.coordinator.state import CoordinatorState, Reply, Write, append_error_to_response_error

CLEANUP_TIMER = "offsets-cleanup"


def _java_length(text: str) -> int:
    """``String.length()`` in Java: UTF-16 code units (what offset.metadata.max.bytes counts)."""
    return len(text.encode("utf-16-le")) // 2


class OffsetManager:
    def __init__(self, state: CoordinatorState, classic: ClassicGroupManager, consumer: ConsumerGroupManager) -> None:
        self.state = state
        self.classic = classic
        self.consumer = consumer
        # TxnOffsetCommit: offsets a producer sent inside its open transaction, keyed by producer id,
        # held until the transaction's marker (written as commits on COMMIT, dropped on ABORT).
        self.pending_txn: dict[int, dict[OffsetCommitKey, OffsetCommitValue]] = {}

    # ================================================================================ OffsetCommit

    def commit_offsets(self, req: OffsetCommit) -> Reply[PartitionErrors]:
        error = self.state.status(req.group_id)
        if error is ErrorCode.NONE:
            error = self._validate_commit(req)
        if error is not ErrorCode.NONE:
            return Reply(PartitionErrors(tuple(
                (topic, tuple((p.partition, error) for p in parts)) for topic, parts in req.topics
            )))
        group = self.state.groups.get(req.group_id)
        if group is not None and group.is_state(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            member = group.members.get(req.member_id)
            if member is not None:
                self.classic.schedule_heartbeat(group, member)  # classic commits keep the session alive
        now_ms = self.state.now
        expire = now_ms + req.retention_ms if req.retention_ms >= 0 else -1
        records: list[CoordinatorRecord] = []
        topics = []
        for topic, parts in req.topics:
            answers = []
            for p in parts:
                if not self.state.partition_exists(topic, p.partition):
                    answers.append((p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                elif p.metadata is not None and _java_length(p.metadata) > self.state.config.offset_metadata_max_bytes:
                    answers.append((p.partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                else:
                    answers.append((p.partition, ErrorCode.NONE))
                    value = OffsetCommitValue(p.offset, p.metadata or "", now_ms, p.leader_epoch, expire)
                    records.append(OffsetCommitRecord(OffsetCommitKey(req.group_id, topic, p.partition), value))
            topics.append((topic, tuple(answers)))
        reply = Reply(PartitionErrors(tuple(topics)))
        if records:
            def done(error: ErrorCode) -> None:
                if error is not ErrorCode.NONE:
                    reply.value = reply.value.with_error(append_error_to_response_error(error))

            self.state.write(req.group_id, records, done)
        return reply

    def _validate_commit(self, req: OffsetCommit) -> ErrorCode:
        group = self.state.groups.get(req.group_id)
        if group is None:
            if req.generation_id < 0:
                return ErrorCode.NONE  # a standalone consumer or an admin: the group appears on replay
            return ErrorCode.GROUP_ID_NOT_FOUND if req.group_id_not_found_error else ErrorCode.ILLEGAL_GENERATION
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and group.is_empty:
            return ErrorCode.NONE
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            error = group.validate_member(req.member_id, req.group_instance_id)
            if error is not ErrorCode.NONE:
                return error
            if req.generation_id != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
        elif not group.is_empty:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ================================================================================= OffsetFetch

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> OffsetFetchResult:
        """Committed offsets of ``topics`` (all of the group's when None); -1 where there is none.

        ``require_stable`` is answered by the caller with :meth:`has_pending`.
        """
        error = self.state.status(group_id)
        if error is not ErrorCode.NONE:
            return OffsetFetchResult(error)
        group = self.state.groups.get(group_id)
        known = (group is not None and not group.is_state(GroupState.DEAD)) or group_id in self.state.consumer_groups
        if topics is None:
            held = self.state.offsets.of_group(group_id) if known else {}
            by_topic: dict[str, list[FetchedOffset]] = {}
            for (topic, partition), held_offset in sorted(held.items()):
                by_topic.setdefault(topic, []).append(
                    FetchedOffset(partition, held_offset.offset, held_offset.leader_epoch, held_offset.metadata))
            return OffsetFetchResult(ErrorCode.NONE, tuple((t, tuple(ps)) for t, ps in by_topic.items()))
        answers = []
        for topic, partitions in topics:
            fetched = []
            for partition in partitions:
                c = self.state.offsets.get(group_id, topic, partition) if known else None
                fetched.append(FetchedOffset(partition) if c is None else
                               FetchedOffset(partition, c.offset, c.leader_epoch, c.metadata))
            answers.append((topic, tuple(fetched)))
        return OffsetFetchResult(ErrorCode.NONE, tuple(answers))

    # ======================================================================= transactional commits

    def txn_commit_offsets(self, producer_id: int, req: OffsetCommit, now_ms: int) -> PartitionErrors:
        """TxnOffsetCommit: hold the offsets until the transaction ends (:meth:`complete_txn`).

        Validated like OffsetCommit when the request names a generation (KIP-447 clients do), and
        without member checks otherwise (older clients send only the group id).
        """
        self.state.now = now_ms
        error = self.state.status(req.group_id)
        if error is ErrorCode.NONE and (req.generation_id >= 0 or req.member_id) and req.group_id in self.state.groups:
            error = self._validate_commit(req)
        topics = []
        held = self.pending_txn.setdefault(producer_id, {})
        for topic, parts in req.topics:
            answers: list[tuple[int, ErrorCode]] = []
            for p in parts:
                if error is not ErrorCode.NONE:
                    answers.append((p.partition, error))
                elif not self.state.partition_exists(topic, p.partition):
                    answers.append((p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                elif p.metadata is not None and _java_length(p.metadata) > self.state.config.offset_metadata_max_bytes:
                    answers.append((p.partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                else:
                    answers.append((p.partition, ErrorCode.NONE))
                    key = OffsetCommitKey(req.group_id, topic, p.partition)
                    held[key] = OffsetCommitValue(p.offset, p.metadata or "", now_ms, p.leader_epoch, -1)
            topics.append((topic, tuple(answers)))
        if not held:
            del self.pending_txn[producer_id]
        return PartitionErrors(tuple(topics))

    def complete_txn(self, producer_id: int, commit: bool, now_ms: int) -> None:
        """The transaction of ``producer_id`` ended: write its offsets as commits, or forget them."""
        self.state.now = now_ms
        held = self.pending_txn.pop(producer_id, {})
        if not commit:
            return
        by_group: dict[str, list[CoordinatorRecord]] = {}
        for key, value in held.items():
            by_group.setdefault(key.group, []).append(OffsetCommitRecord(key, value))
        for group_id, records in by_group.items():
            if self.state.status(group_id) is ErrorCode.NONE:
                self.state.write(group_id, records, None)

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset of this group and partition (UNSTABLE_OFFSET_COMMIT)."""
        key = OffsetCommitKey(group_id, topic, partition)
        return any(key in held for held in self.pending_txn.values())

    # ================================================================================ OffsetDelete

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]) -> Reply[OffsetDeleteResult]:
        error = self.state.check(group_id)
        group = self.state.groups.get(group_id) if error is ErrorCode.NONE else None
        if error is ErrorCode.NONE and (group is None or group.is_state(GroupState.DEAD)):
            error = ErrorCode.GROUP_ID_NOT_FOUND
        if error is ErrorCode.NONE and group is not None and not group.is_empty and not group.uses_consumer_protocol:
            error = ErrorCode.NON_EMPTY_GROUP
        if error is not ErrorCode.NONE or group is None:
            return Reply(OffsetDeleteResult(error))
        doomed: list[tuple[str, int]] = []
        answers = []
        for topic, partitions in topics:
            if group.is_subscribed_to(topic):
                answers.append((topic, tuple((p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC) for p in partitions)))
                continue
            row = []
            for p in partitions:
                if self.state.partition_exists(topic, p):
                    row.append((p, ErrorCode.NONE))
                    doomed.append((topic, p))
                else:
                    row.append((p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            answers.append((topic, tuple(row)))
        reply = Reply(OffsetDeleteResult(ErrorCode.NONE, tuple(answers)))
        tombstones: list[CoordinatorRecord] = list(self.state.offsets.tombstones(group_id, doomed))
        if tombstones:
            def done(error: ErrorCode) -> None:
                if error is not ErrorCode.NONE:
                    reply.value = OffsetDeleteResult(append_error_to_response_error(error))

            self.state.write(group_id, tombstones, done)
        return reply

    # ===================================================================================== expiry

    def schedule_cleanup(self) -> None:
        interval = self.state.config.offsets_retention_check_interval_ms
        self.state.timers.schedule(CLEANUP_TIMER, self.state.now + interval, self._cleanup)

    def _cleanup(self) -> None:
        """Expire offsets (``offsets.retention.minutes``) and delete empty groups with none left."""
        self.schedule_cleanup()
        self.cleanup_now()

    def cleanup_now(self) -> int:
        """One expiry pass; offsets of partitions that no longer exist go too. Returns tombstones queued."""
        by_partition: dict[int, list[CoordinatorRecord]] = {}
        for group_id, group in list(self.state.groups.items()):
            partition = self.state.partition_of(group_id)
            if partition not in self.state.active:
                continue
            records = by_partition.setdefault(partition, [])
            if self._expire_offsets(group, records) and group.is_empty:
                records.append(GroupMetadataRecord(GroupMetadataKey(group_id), None))
        for group_id, consumer_group in list(self.state.consumer_groups.items()):
            partition = self.state.partition_of(group_id)
            if partition not in self.state.active:
                continue
            records = by_partition.setdefault(partition, [])
            if self._expire_consumer_group_offsets(consumer_group, records) and not consumer_group.members:
                records.extend(self.consumer.tombstones(consumer_group))
        count = 0
        for partition, records in by_partition.items():
            if records:
                count += len(records)
                self.state.out.writes.append(Write(partition, records, None))
        return count

    def _expire_offsets(self, group: ClassicGroup, records: list[CoordinatorRecord]) -> bool:
        """Tombstones for the classic group's expired offsets; True when it has none left."""
        base = self._expiry_base(group)
        return self._expire(group.group_id, records, lambda topic, commit_ts: (
            None if base is None or group.is_subscribed_to(topic) else base(commit_ts)))

    def _expire_consumer_group_offsets(self, group: ConsumerGroup, records: list[CoordinatorRecord]) -> bool:
        """Kafka's rule for KIP-848 groups: an offset of a topic no member subscribes to expires
        ``offsets.retention.minutes`` after its commit (or at its explicit expiry); the subscribed
        topics' offsets stay. True when the group has none left."""
        subscribed = self.consumer.subscribed_topics(group)
        return self._expire(group.group_id, records, lambda topic, commit_ts: None if topic in subscribed else commit_ts)

    def _expire(self, group_id: str, records: list[CoordinatorRecord],
                expiry_base: Callable[[str, int], int | None]) -> bool:
        """Tombstones for ``group_id``'s offsets that expired or whose partition is gone; True when
        none is left. ``expiry_base(topic, commit_ts)`` is when an offset's retention starts (None:
        it does not expire)."""
        held = self.state.offsets.of_group(group_id)
        retention = self.state.config.offsets_retention_ms
        all_gone = True
        for (topic, partition), committed in held.items():
            gone = not self.state.partition_exists(topic, partition)
            if not gone:
                base = expiry_base(topic, committed.commit_timestamp)
                gone = base is not None and committed.is_expired(base, self.state.now, retention)
            if gone:
                records.append(OffsetCommitRecord(OffsetCommitKey(group_id, topic, partition), None))
            else:
                all_gone = False
        return all_gone

    @staticmethod
    def _expiry_base(group: ClassicGroup) -> Callable[[int], int] | None:
        if group.protocol_type is None:
            return lambda commit_ts: commit_ts
        if group.is_empty:
            empty_since = group.current_state_timestamp
            return lambda commit_ts: commit_ts if empty_since is None else empty_since
        if group.uses_consumer_protocol and group.subscribed_topics is not None and group.is_state(GroupState.STABLE):
            return lambda commit_ts: commit_ts
        return None
