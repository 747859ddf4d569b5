"""Committed offsets: group → (topic, partition) → the last commit, changed only by replay.

An OffsetCommit record stores a commit, its tombstone removes it. Nothing else writes here: a commit
request becomes visible when its record has been appended and replayed, and a restart that replays
``__consumer_offsets`` rebuilds exactly this map.

Expiry (``offsets.retention.minutes``, Kafka's rule): an offset expires ``retention`` after a base
time, or at its explicit expire timestamp when the commit carried one (OffsetCommit v2-v4's
``retention_time_ms``). The base time depends on the group: for a group with a protocol type that is
Empty, the moment it became empty (or the commit time for groups written before that was recorded);
for a Stable consumer group, the commit time, and only for topics it no longer subscribes to; for a
group without protocol type (standalone consumers committing with generation -1), the commit time.
Any other group keeps its offsets.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tidelog.coordinator.records import OffsetCommitKey, OffsetCommitRecord, OffsetCommitValue

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1

    @classmethod
    def from_value(cls, value: OffsetCommitValue) -> CommittedOffset:
        return cls(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp)

    def to_value(self) -> OffsetCommitValue:
        return OffsetCommitValue(self.offset, self.metadata, self.commit_timestamp, self.leader_epoch,
                                 self.expire_timestamp)

    def is_expired(self, base_ms: int, now_ms: int, retention_ms: int) -> bool:
        if self.expire_timestamp >= 0:
            return now_ms >= self.expire_timestamp
        return now_ms - base_ms >= retention_ms


class OffsetStore:
    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def replay(self, record: OffsetCommitRecord) -> None:
        key = record.key
        if record.value is None:
            self.remove(key.group, key.topic, key.partition)
        else:
            self._groups.setdefault(key.group, {})[(key.topic, key.partition)] = CommittedOffset.from_value(record.value)

    def remove(self, group: str, topic: str, partition: int) -> None:
        offsets = self._groups.get(group)
        if offsets is None:
            return
        offsets.pop((topic, partition), None)
        if not offsets:
            del self._groups[group]

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        offsets = self._groups.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def of_group(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def has_offsets(self, group: str) -> bool:
        return group in self._groups

    def groups(self) -> Iterator[str]:
        return iter(list(self._groups))

    def tombstones(self, group: str, partitions: list[TopicPartition] | None = None) -> list[OffsetCommitRecord]:
        """Tombstones for ``partitions`` of ``group`` that hold an offset (all of them when None)."""
        held = self._groups.get(group, {})
        wanted = list(held) if partitions is None else [tp for tp in partitions if tp in held]
        return [OffsetCommitRecord(OffsetCommitKey(group, topic, partition), None) for topic, partition in wanted]
