"""The group coordinator: one object every group API goes through, plus replay and loading.

Contract with the shell that runs it (``tidelog.broker.group_runtime``)::

    shell                                             GroupCoordinator
    ─────                                             ────────────────
    call an API with now_ms (and a waiter id     ──▶  validate, change membership, queue Writes,
      for JoinGroup/SyncGroup)                         queue (waiter, result) completions
    take_writes(): for each Write, append its     ◀──
      records to __consumer_offsets partition
      ``write.partition`` (one batch, atomic)
    replay(record) for each appended record       ──▶  offsets and group existence change here
    write.on_done(error) (NONE, or why the append      finish what waited on the write (a group
      failed)                                          becomes Stable, a commit fails, ...)
    flush the partition, then deliver
      take_completions() to the parked requests
    call tick(now_ms) at next_deadline()          ──▶  session / rebalance / sync timeouts, expiry

Durable state changes only by replay: committed offsets, and the existence of groups (a group
tombstone removes one, an offset commit for an unknown group creates it). A GroupMetadata value
written during a rebalance records the group as the handler left it (generation, protocol, leader,
members and assignments); replaying it on a partition being loaded rebuilds that group, Stable with
its members or Empty, while on a live partition it changes nothing because the handler already did.
Kafka's classic groups work the same way (membership lives in memory; the record is its snapshot).
So a restart that replays the topic rebuilds every group as of its last write, and every committed
offset exactly.

Availability, per ``__consumer_offsets`` partition (groups map to partitions as in Kafka): a
partition being replayed answers COORDINATOR_LOAD_IN_PROGRESS (Heartbeat answers NONE, as Kafka
does, so sessions survive a restart), a partition not loaded at all NOT_COORDINATOR.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.classic import ClassicGroupManager
from tidelog.coordinator.consumer_group import (
    CONSUMER_GROUP_TYPE,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    ConsumerGroupManager,
    TopicsView,
)
from tidelog.coordinator.consumer_group_records import CONSUMER_GROUP_METADATA, ConsumerGroupRecord
from tidelog.coordinator.group import ClassicGroup, GroupState
from tidelog.coordinator.messages import (
    DescribedGroup,
    DescribedMember,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    ListedGroup,
    OffsetCommit,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionErrors,
    SyncGroup,
    SyncGroupResult,
)
from tidelog.coordinator.offset_manager import CLEANUP_TIMER, OffsetManager
from tidelog.coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    OffsetCommitRecord,
)
from tidelog.coordinator.state import (
    Completion,
    CoordinatorConfig,
    CoordinatorState,
    PartitionExists,
    Reply,
    Write,
    append_error_to_response_error,
)
from tidelog.coordinator.timers import Timers

log = logging.getLogger(__name__)

CLASSIC_GROUP_TYPE = "classic"


class GroupCoordinator:
    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        partition_exists: PartitionExists | None = None,
        new_id: Callable[[], str] | None = None,
        consumer_config: ConsumerGroupConfig | None = None,
        topics: TopicsView | None = None,
    ) -> None:
        self.state = CoordinatorState(config or CoordinatorConfig())
        if partition_exists is not None:
            self.state.partition_exists = partition_exists
        if new_id is not None:
            self.state.new_id = new_id
        self.classic = ClassicGroupManager(self.state)
        self.consumer = ConsumerGroupManager(self.state, consumer_config)
        self.offset_manager = OffsetManager(self.state, self.classic, self.consumer)
        if topics is not None:
            self.consumer.topics = topics

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.state.groups

    def _at(self, now_ms: int) -> None:
        self.state.now = now_ms

    # ================================================================================ shell interface

    def take_writes(self) -> list[Write]:
        writes, self.state.out.writes = self.state.out.writes, []
        return writes

    def take_completions(self) -> list[Completion]:
        done, self.state.out.completions = self.state.out.completions, []
        return done

    def has_output(self) -> bool:
        return bool(self.state.out.writes or self.state.out.completions)

    def next_deadline(self) -> int | None:
        return self.state.timers.next_deadline()

    def tick(self, now_ms: int) -> int:
        """Fire every timer due at ``now_ms``; return how many fired."""
        self._at(now_ms)
        return self.state.timers.run_expired(now_ms)

    # ----------------------------------------------------------------------------------- partitions

    def partition_of(self, group_id: str) -> int:
        return self.state.partition_of(group_id)

    @property
    def num_partitions(self) -> int:
        return self.state.num_partitions

    def status(self, group_id: str | None) -> ErrorCode:
        return self.state.status(group_id)

    def is_loading(self) -> bool:
        return bool(self.state.loading)

    def begin_loading(self, partitions: Iterable[int], num_partitions: int) -> None:
        """``__consumer_offsets`` has ``num_partitions``; ``partitions`` are about to be replayed."""
        self.state.num_partitions = num_partitions
        for p in partitions:
            self.state.active.discard(p)
            self.state.loading.add(p)

    def complete_loading(self, partition: int, now_ms: int) -> None:
        """The partition is replayed: start its members' session timers and serve it."""
        self._at(now_ms)
        self.state.loading.discard(partition)
        self.state.active.add(partition)
        limit = self.state.config.max_group_size
        for group_id, group in list(self.state.groups.items()):
            if self.state.partition_of(group_id) != partition:
                continue
            for member in group.members.values():
                self.classic.schedule_heartbeat(group, member)
            if len(group.members) > limit:
                log.info("group %s has %d members, over group.max.size %d: rebalancing",
                         group_id, len(group.members), limit)
                self.classic.prepare_rebalance(group)
        self.consumer.start_sessions(partition)
        if self.state.timers.deadline(CLEANUP_TIMER) is None:
            self.offset_manager.schedule_cleanup()

    def unload(self, partition: int) -> int:
        """This broker no longer leads ``partition`` of ``__consumer_offsets`` (a cluster moved it):
        forget its groups and committed offsets, answer its parked requests NOT_COORDINATOR, cancel
        its timers. The new leader rebuilds all of it by replaying the partition. Returns the number of
        groups dropped."""
        self.state.loading.discard(partition)
        self.state.active.discard(partition)
        dropped = 0
        for group_id, group in list(self.state.groups.items()):
            if self.state.partition_of(group_id) != partition:
                continue
            for member in group.members.values():
                self.classic.complete_join(member, JoinGroupResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                self.classic.complete_sync(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
            self.state.remove_group(group_id)
            dropped += 1
        for group_id, consumer_group in list(self.consumer.groups.items()):
            if self.state.partition_of(group_id) != partition:
                continue
            for member_id in consumer_group.members:
                self.state.timers.cancel(("consumer-session", group_id, member_id))
                self.state.timers.cancel(("consumer-revocation", group_id, member_id))
            del self.consumer.groups[group_id]
            dropped += 1
        for group_id in list(self.state.offsets.groups()):
            if self.state.partition_of(group_id) == partition:
                for topic, index in self.state.offsets.of_group(group_id):
                    self.state.offsets.remove(group_id, topic, index)
        # Offsets held for open transactions are replayed from the log by whoever leads the partition next.
        for producer_id, held in list(self.offset_manager.pending_txn.items()):
            for key in [k for k in held if self.state.partition_of(k.group) == partition]:
                del held[key]
            if not held:
                del self.offset_manager.pending_txn[producer_id]
        return dropped

    def shutdown(self) -> None:
        """Answer every parked request with NOT_COORDINATOR and stop serving."""
        for group in self.state.groups.values():
            for member in group.members.values():
                self.classic.complete_join(member, JoinGroupResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                self.classic.complete_sync(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
        self.state.active.clear()
        self.state.loading.clear()
        self.state.timers = Timers()

    # ----------------------------------------------------------------------------------------- replay

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record read from (or just appended to) ``__consumer_offsets``."""
        state = self.state
        group_id = record.key.group
        if isinstance(record, ConsumerGroupRecord):
            self._replay_consumer_group(record)
            return
        if isinstance(record, OffsetCommitRecord):
            if record.value is not None and group_id not in state.groups and group_id not in state.consumer_groups:
                # Offsets committed without membership (generation -1): a "simple" group, Empty,
                # with no protocol type, as Kafka creates it.
                state.groups[group_id] = ClassicGroup(group_id)
            state.offsets.replay(record)
            return
        if record.value is None:
            state.remove_group(group_id)
            return
        if state.partition_of(group_id) in state.active and group_id in state.groups:
            return  # a live group's snapshot: the handler that wrote it already changed the group
        state.remove_group(group_id)
        state.groups[group_id] = ClassicGroup.from_value(group_id, record.value)

    def _replay_consumer_group(self, record: ConsumerGroupRecord) -> None:
        group_id = record.key.group
        deleted = record.value is None and record.key.kind == CONSUMER_GROUP_METADATA
        if self.state.partition_of(group_id) in self.state.active and not deleted:
            return  # written by a heartbeat of this coordinator, which applied it already
        if record.value is not None and group_id in self.state.groups:
            self.state.remove_group(group_id)  # an empty classic group (offsets only) became a consumer group
        self.consumer.replay(record)

    # ============================================================================ membership APIs

    def join_group(self, req: JoinGroup, waiter: int, now_ms: int) -> None:
        """JoinGroup; its answer, now or after the rebalance, is a completion for ``waiter``."""
        self._at(now_ms)
        consumer_group = self.state.consumer_groups.get(req.group_id)
        if consumer_group is not None and self.state.status(req.group_id) is ErrorCode.NONE:
            if consumer_group.members:
                # No classic members inside consumer groups (Kafka's upgrade path is not implemented).
                result = JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
                self.state.out.completions.append((waiter, result))
                return
            # An empty consumer group becomes a classic one; its offsets stay.
            self.state.write(req.group_id, list(self.consumer.tombstones(consumer_group)), None)
            del self.state.consumer_groups[req.group_id]
        self.classic.join_group(req, waiter)

    def sync_group(self, req: SyncGroup, waiter: int, now_ms: int) -> None:
        """SyncGroup; its answer, now or once the leader's assignment is written, goes to ``waiter``."""
        self._at(now_ms)
        self.classic.sync_group(req, waiter)

    def heartbeat(self, req: Heartbeat, now_ms: int) -> ErrorCode:
        self._at(now_ms)
        return self.classic.heartbeat(req)

    def leave_group(self, group_id: str, leaving: tuple[LeavingMember, ...], now_ms: int) -> LeaveGroupResult:
        self._at(now_ms)
        return self.classic.leave_group(group_id, leaving)

    def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeat, now_ms: int) -> ConsumerGroupHeartbeatResult:
        """ConsumerGroupHeartbeat (KIP-848): join, heartbeat, reconcile or leave."""
        self._at(now_ms)
        return self.consumer.heartbeat(req)

    def consumer_group_describe(self, group_ids: list[str], now_ms: int) -> list[tuple[str, ErrorCode, ConsumerGroup | None]]:
        """ConsumerGroupDescribe: each group, or why not (a classic group is GROUP_ID_NOT_FOUND, as in Kafka)."""
        self._at(now_ms)
        out: list[tuple[str, ErrorCode, ConsumerGroup | None]] = []
        for group_id in group_ids:
            error = self.state.check(group_id)
            group = self.state.consumer_groups.get(group_id)
            if error is ErrorCode.NONE and group is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            out.append((group_id, error, group if error is ErrorCode.NONE else None))
        return out

    # ================================================================================ offset APIs

    def commit_offsets(self, req: OffsetCommit, now_ms: int) -> Reply[PartitionErrors]:
        self._at(now_ms)
        consumer_group = self.state.consumer_groups.get(req.group_id)
        if consumer_group is not None and self.state.status(req.group_id) is ErrorCode.NONE:
            # A consumer group checks member id and member epoch (its "generation") itself; what it
            # accepts is then written like a commit made without membership.
            error = self.consumer.validate_commit(consumer_group, req.member_id, req.generation_id)
            if error is not ErrorCode.NONE:
                return Reply(PartitionErrors(tuple(
                    (topic, tuple((p.partition, error) for p in parts)) for topic, parts in req.topics
                )))
            req = dataclasses.replace(req, generation_id=-1, member_id="", group_instance_id=None)
        return self.offset_manager.commit_offsets(req)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None, now_ms: int) -> OffsetFetchResult:
        self._at(now_ms)
        return self.offset_manager.fetch_offsets(group_id, topics)

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]], now_ms: int) -> Reply[OffsetDeleteResult]:
        self._at(now_ms)
        return self.offset_manager.delete_offsets(group_id, topics)

    def cleanup(self, now_ms: int) -> int:
        """An expiry pass now (the timer runs one every ``offsets.retention.check.interval.ms``)."""
        self._at(now_ms)
        return self.offset_manager.cleanup_now()

    # ================================================================================= admin APIs

    def describe_groups(self, group_ids: list[str], now_ms: int, *, unknown_is_error: bool) -> list[DescribedGroup]:
        """DescribeGroups; ``unknown_is_error`` (v6+) answers GROUP_ID_NOT_FOUND for unknown groups."""
        self._at(now_ms)
        return [self._describe(group_id, unknown_is_error) for group_id in group_ids]

    def _describe(self, group_id: str, unknown_is_error: bool) -> DescribedGroup:
        error = self.state.check(group_id)
        if error is not ErrorCode.NONE:
            return DescribedGroup(group_id, error, "")
        group = self.state.groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            if unknown_is_error:
                # A consumer group is answered as Kafka does: it is not a classic group.
                message = (f"Group {group_id} is not a classic group." if group_id in self.state.consumer_groups
                           else f"Group {group_id} not found.")
                return DescribedGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, GroupState.DEAD.value,
                                      error_message=message)
            return DescribedGroup(group_id, ErrorCode.NONE, GroupState.DEAD.value)
        # Member metadata is shown only once the group is Stable; the current assignment always
        # (Kafka 4's describeNoMetadata keeps it during a rebalance).
        stable = group.is_state(GroupState.STABLE)
        members = tuple(
            DescribedMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.metadata(group.protocol_name) if stable else b"", m.assignment,
            )
            for m in group.members.values()
        )
        return DescribedGroup(group_id, ErrorCode.NONE, group.state.value, group.protocol_type or "",
                              (group.protocol_name or "") if stable else "", members)

    def list_groups(self, states: Iterable[str], types: Iterable[str], now_ms: int) -> tuple[ErrorCode, list[ListedGroup]]:
        """ListGroups with Kafka's filters (state names and group types, case-insensitive)."""
        self._at(now_ms)
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listed = []
        if not wanted_types or CLASSIC_GROUP_TYPE in wanted_types:
            for group_id, group in sorted(self.state.groups.items()):
                if self.state.partition_of(group_id) not in self.state.active:
                    continue
                if wanted_states and group.state.value.lower() not in wanted_states:
                    continue
                listed.append(ListedGroup(group_id, group.protocol_type or "", group.state.value, CLASSIC_GROUP_TYPE))
        if not wanted_types or CONSUMER_GROUP_TYPE in wanted_types:
            for group_id, cgroup in self.state.consumer_groups.items():
                if self.state.partition_of(group_id) not in self.state.active:
                    continue
                if wanted_states and cgroup.state.lower() not in wanted_states:
                    continue
                listed.append(ListedGroup(group_id, CONSUMER_GROUP_TYPE, cgroup.state, CONSUMER_GROUP_TYPE))
            listed.sort(key=lambda g: g.group_id)
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.state.loading else ErrorCode.NONE
        return error, listed

    def delete_groups(self, group_ids: list[str], now_ms: int) -> Reply[list[tuple[str, ErrorCode]]]:
        """DeleteGroups: only Empty groups; their offsets and the group itself get tombstones."""
        self._at(now_ms)
        answers: list[tuple[str, ErrorCode]] = []
        by_partition: dict[int, list[CoordinatorRecord]] = {}
        for group_id in group_ids:
            error = self._deletable(group_id)
            answers.append((group_id, error))
            if error is ErrorCode.NONE:
                records = by_partition.setdefault(self.state.partition_of(group_id), [])
                records.extend(self.state.offsets.tombstones(group_id))
                consumer_group = self.state.consumer_groups.get(group_id)
                if consumer_group is not None:
                    records.extend(self.consumer.tombstones(consumer_group))
                else:
                    records.append(GroupMetadataRecord(GroupMetadataKey(group_id), None))
        reply: Reply[list[tuple[str, ErrorCode]]] = Reply(answers)
        for partition, records in by_partition.items():
            self.state.out.writes.append(Write(partition, records, _fail_deleted(reply, self.state, partition)))
        return reply

    def _deletable(self, group_id: str) -> ErrorCode:
        error = self.state.check(group_id)
        if error is not ErrorCode.NONE:
            return error
        consumer_group = self.state.consumer_groups.get(group_id)
        if consumer_group is not None:
            return ErrorCode.NON_EMPTY_GROUP if consumer_group.members else ErrorCode.NONE
        group = self.state.groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        return ErrorCode.NONE if group.is_empty else ErrorCode.NON_EMPTY_GROUP


def _fail_deleted(
    reply: Reply[list[tuple[str, ErrorCode]]], state: CoordinatorState, partition: int
) -> Callable[[ErrorCode], None]:
    def done(error: ErrorCode) -> None:
        if error is not ErrorCode.NONE:
            mapped = append_error_to_response_error(error)
            reply.value = [
                (gid, mapped if e is ErrorCode.NONE and state.partition_of(gid) == partition else e)
                for gid, e in reply.value
            ]

    return done
