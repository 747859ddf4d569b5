"""Drive a GroupCoordinator the way the broker's shell does, with a fake clock and an in-memory log.

``Harness`` plays the shell: it appends each queued write to ``MemoryOffsetsLog`` as one encoded
batch, replays the appended records, calls ``on_done``, and collects the answers of parked requests
by waiter id. ``restart()`` builds a fresh coordinator that loads the same log, as a broker restart
does.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.coordinator.coordinator import GroupCoordinator
from tidelog.coordinator.messages import (
    CommitPartition,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    OffsetCommit,
    PartitionErrors,
    Protocol,
    SyncGroup,
    SyncGroupResult,
)
from tidelog.coordinator.persistence import encode_batch, load_partition
from tidelog.coordinator.state import CoordinatorConfig
from tidelog.protocol.records import LOG_OVERHEAD, iter_batches

FAST = CoordinatorConfig(
    min_session_timeout_ms=10,
    max_session_timeout_ms=60_000,
    initial_rebalance_delay_ms=0,
    new_member_join_timeout_ms=5_000,
    offsets_retention_ms=100_000,
    offsets_retention_check_interval_ms=10_000,
)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 naming ``topics`` (no user data)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        data = topic.encode()
        out += struct.pack(">h", len(data)) + data
    return out + struct.pack(">i", -1)


def protocols(*topics: str, names: Iterable[str] = ("range",)) -> tuple[Protocol, ...]:
    return tuple(Protocol(name, subscription(*topics)) for name in names)


class MemoryOffsetsLog:
    """``OffsetsLog`` over lists of batches; appends can be made to fail with a chosen code."""

    def __init__(self, partitions: int) -> None:
        self.batches: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        self.ends: dict[int, int] = dict.fromkeys(range(partitions), 0)
        self.fail_with: ErrorCode | None = None
        self.flushes = 0

    def append(self, partition: int, batch: bytes) -> int:
        if self.fail_with is not None:
            raise KafkaError(self.fail_with)
        (header, _), = iter_batches(batch)
        base = self.ends[partition]
        self.batches[partition].append((base, batch))
        self.ends[partition] = base + header.last_offset_delta + 1
        return self.ends[partition]

    def flush(self, partition: int) -> None:
        self.flushes += 1

    def read(self, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int]:
        out, next_offset = b"", offset
        for base, batch in self.batches[partition]:
            (header, _), = iter_batches(batch)
            end = base + header.last_offset_delta + 1
            if end <= offset:
                continue
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
            next_offset = end
        assert all(len(b) >= LOG_OVERHEAD for _, b in self.batches[partition])
        return out, next_offset

    def start_offset(self, partition: int) -> int:
        return 0

    def end_offset(self, partition: int) -> int:
        return self.ends[partition]


@dataclass
class Harness:
    config: CoordinatorConfig = FAST
    partitions: int = 3
    log: MemoryOffsetsLog | None = None
    partition_exists: Callable[[str, int], bool] = lambda topic, p: not topic.startswith("missing") and p < 100
    now: int = 1_000
    answers: dict[int, JoinGroupResult | SyncGroupResult] = field(default_factory=dict)
    written: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.log is None:
            self.log = MemoryOffsetsLog(self.partitions)
        ids = itertools.count(1)
        self.coord = GroupCoordinator(self.config, self.partition_exists, new_id=lambda: f"id{next(ids)}")
        self._waiters = itertools.count(1)
        self.coord.begin_loading(range(self.partitions), self.partitions)
        for p in range(self.partitions):
            load_partition(self.log, self.coord, p, 1 << 20)
            self.coord.complete_loading(p, self.now)

    # -- the shell ---------------------------------------------------------------------------------

    def pump(self) -> None:
        assert self.log is not None
        while self.coord.has_output():
            for write in self.coord.take_writes():
                try:
                    self.log.append(write.partition, encode_batch(write.records, self.now))
                    error = ErrorCode.NONE
                except KafkaError as exc:
                    error = exc.code
                if error is ErrorCode.NONE:
                    self.written.append(write.partition)
                    for record in write.records:
                        self.coord.replay(record)
                if write.on_done is not None:
                    write.on_done(error)
            for waiter, result in self.coord.take_completions():
                assert waiter not in self.answers, f"waiter {waiter} answered twice"
                self.answers[waiter] = result

    def advance(self, ms: int) -> None:
        """Let ``ms`` pass, firing timers at their own deadlines."""
        target = self.now + ms
        while True:
            deadline = self.coord.next_deadline()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self.coord.tick(self.now)
            self.pump()
        self.now = target
        self.coord.tick(self.now)
        self.pump()

    def restart(self) -> Harness:
        return Harness(self.config, self.partitions, self.log, self.partition_exists, self.now)

    # -- requests ----------------------------------------------------------------------------------

    def join(self, group: str, member_id: str = "", *, instance: str | None = None,
             protos: tuple[Protocol, ...] | None = None, session: int = 1_000, rebalance: int = 2_000,
             protocol_type: str = "consumer", require_known: bool = True, skip: bool = True) -> int:
        waiter = next(self._waiters)
        req = JoinGroup(group, member_id, instance, session, rebalance, protocol_type,
                        protocols("t") if protos is None else protos, client_id="client", client_host="/127.0.0.1",
                        require_known_member_id=require_known, supports_skip_assignment=skip)
        self.coord.join_group(req, waiter, self.now)
        self.pump()
        return waiter

    def join_now(self, group: str, **kwargs: object) -> JoinGroupResult:
        """Join (first asking for a member id, as v4+ clients do) and let the join phase finish."""
        first = self.join_result(self.join(group, **kwargs))  # type: ignore[arg-type]
        if first.error is ErrorCode.MEMBER_ID_REQUIRED:
            waiter = self.join(group, first.member_id, **kwargs)  # type: ignore[arg-type]
            self.advance(0)
            return self.join_result(waiter)
        self.advance(0)
        return first

    def join_result(self, waiter: int) -> JoinGroupResult:
        result = self.answers[waiter]
        assert isinstance(result, JoinGroupResult)
        return result

    def sync(self, group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             instance: str | None = None, protocol_name: str | None = None) -> int:
        waiter = next(self._waiters)
        req = SyncGroup(group, generation, member_id, instance, None, protocol_name,
                        tuple((assignments or {}).items()))
        self.coord.sync_group(req, waiter, self.now)
        self.pump()
        return waiter

    def sync_result(self, waiter: int) -> SyncGroupResult | None:
        result = self.answers.get(waiter)
        assert result is None or isinstance(result, SyncGroupResult)
        return result

    def heartbeat(self, group: str, member_id: str, generation: int, instance: str | None = None) -> ErrorCode:
        error = self.coord.heartbeat(Heartbeat(group, generation, member_id, instance), self.now)
        self.pump()
        return error

    def leave(self, group: str, *members: LeavingMember) -> LeaveGroupResult:
        result = self.coord.leave_group(group, members, self.now)
        self.pump()
        return result

    def commit(self, group: str, offsets: dict[tuple[str, int], int], *, generation: int = -1, member_id: str = "",
               instance: str | None = None, metadata: str = "", v9: bool = False, retention: int = -1) -> PartitionErrors:
        by_topic: dict[str, list[CommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(CommitPartition(partition, offset, 3, metadata))
        req = OffsetCommit(group, generation, member_id, instance,
                           tuple((t, tuple(ps)) for t, ps in by_topic.items()), retention, v9)
        reply = self.coord.commit_offsets(req, self.now)
        self.pump()
        return reply.value

    def committed(self, group: str, topic: str, partition: int) -> int:
        result = self.coord.fetch_offsets(group, [(topic, [partition])], self.now)
        assert result.error is ErrorCode.NONE
        return result.topics[0][1][0].offset

    # -- whole rebalances --------------------------------------------------------------------------

    def stable_group(self, group: str, count: int, **kwargs: object) -> list[JoinGroupResult]:
        """``count`` members join together and sync; the leader assigns each its own id as bytes."""
        firsts = [self.join_result(self.join(group, **kwargs)) for _ in range(count)]  # type: ignore[arg-type]
        waiters = [self.join(group, f.member_id, **kwargs) for f in firsts]  # type: ignore[arg-type]
        self.advance(0)
        joined = [self.join_result(w) for w in waiters]
        self.sync_all(group, joined)
        return joined

    def sync_all(self, group: str, joined: list[JoinGroupResult]) -> dict[str, bytes]:
        leader = next(j for j in joined if j.leader == j.member_id)
        assignments = {m.member_id: m.member_id.encode() for m in leader.members}
        waiters = {j.member_id: self.sync(group, j.member_id, j.generation_id, assignments if j is leader else None)
                   for j in joined if j is not leader}
        waiters[leader.member_id] = self.sync(group, leader.member_id, leader.generation_id, assignments)
        out = {}
        for member_id, waiter in waiters.items():
            result = self.sync_result(waiter)
            assert result is not None and result.error is ErrorCode.NONE, (member_id, result)
            out[member_id] = result.assignment
        return out


__all__ = ["FAST", "Harness", "LeavingMember", "MemoryOffsetsLog", "protocols", "subscription"]
