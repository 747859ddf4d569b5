"""What the coordinator's parts share: settings, groups, offsets, timers, and the output queues.

:class:`CoordinatorState` plays the part of Kafka's coordinator shard context: the classic
membership protocol (``classic``), the offsets (``offset_manager``) and the facade
(``coordinator``) all read and change it, one call at a time. ``now`` is the time of the call being
handled, set by the facade; nothing here reads a clock.

Outputs: ``out.writes`` are batches of records to append (each to one ``__consumer_offsets``
partition, atomically, then replayed, then ``on_done(error)``); ``out.completions`` are answers to
parked JoinGroup/SyncGroup requests, by waiter id, to deliver once the writes queued before them are
durable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.consumer_group import ConsumerGroup
from tidelog.coordinator.group import ClassicGroup, GroupState
from tidelog.coordinator.messages import JoinGroupResult, SyncGroupResult
from tidelog.coordinator.offsets import OffsetStore
from tidelog.coordinator.records import CoordinatorRecord, partition_for
from tidelog.coordinator.timers import Timers

T = TypeVar("T")
Completion = tuple[int, JoinGroupResult | SyncGroupResult]
PartitionExists = Callable[[str, int], bool]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Kafka's group coordinator settings (broker config keys in the comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_group_size: int = 2**31 - 1  # group.max.size
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    new_member_join_timeout_ms: int = 300_000  # Kafka's fixed classic new-member join timeout
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


@dataclass(slots=True)
class Write:
    """Records to append, as one batch, to ``__consumer_offsets`` partition ``partition``."""

    partition: int
    records: list[CoordinatorRecord]
    on_done: Callable[[ErrorCode], None] | None = None


class Reply(Generic[T]):
    """An answer that may still change if the write it depends on fails."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


@dataclass
class Outputs:
    writes: list[Write] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)


def append_error_to_response_error(error: ErrorCode) -> ErrorCode:
    """What a client is told when the coordinator's append failed with ``error`` (Kafka's mapping)."""
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error


def _random_member_suffix() -> str:
    return str(uuid.uuid4())


def _every_partition_exists(_topic: str, _partition: int) -> bool:
    return True


class CoordinatorState:
    def __init__(
        self,
        config: CoordinatorConfig,
        partition_exists: PartitionExists = _every_partition_exists,
        new_id: Callable[[], str] = _random_member_suffix,
    ) -> None:
        self.config = config
        # Whether a topic partition exists in the cluster: commits to others are refused, and the
        # expiry pass deletes offsets of partitions that are gone.
        self.partition_exists = partition_exists
        self.new_id = new_id
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-848 groups (consumer_group.py). A group id names a classic group or a consumer group, never both.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.offsets = OffsetStore()
        self.timers = Timers()
        self.out = Outputs()
        self.now = 0
        self.num_partitions = 0
        self.loading: set[int] = set()
        self.active: set[int] = set()

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def status(self, group_id: str | None) -> ErrorCode:
        """Whether this coordinator serves ``group_id`` now (NONE), or Kafka's reason why not."""
        if group_id is None:
            return ErrorCode.INVALID_GROUP_ID
        if self.num_partitions == 0:
            return ErrorCode.NOT_COORDINATOR
        partition = self.partition_of(group_id)
        if partition in self.active:
            return ErrorCode.NONE
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def check(self, group_id: str | None) -> ErrorCode:
        """``status`` for the APIs that refuse an empty group id (all but the offset APIs)."""
        return ErrorCode.INVALID_GROUP_ID if not group_id else self.status(group_id)

    def write(self, group_id: str, records: list[CoordinatorRecord], on_done: Callable[[ErrorCode], None] | None) -> None:
        self.out.writes.append(Write(self.partition_of(group_id), records, on_done))

    def remove_group(self, group_id: str) -> None:
        """Forget a group (its tombstone was replayed): it is Dead and its timers are cancelled."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        for member_id in list(group.members) + list(group.pending_join):
            self.timers.cancel(("heartbeat", group_id, member_id))
        self.timers.cancel(("join", group_id))
        self.timers.cancel(("sync", group_id))
        if group.state is not GroupState.DEAD:
            group.transition_to(GroupState.DEAD, self.now)
