"""``tidelog mirror status``: where every mirrored partition stands, read from the two clusters.

Nothing is asked of the mirror processes: the committed checkpoints are read from the link topic on
the destination (read_committed, so they are exactly what is there), the source's high watermarks
from the source, and the link group's members and their shards from the destination. A process
that died is visible as shards with no owner; a stalled one as a growing lag.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tidelog.clients.transactional import read_to_end, shared_settings
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.position import Checkpoint, shard_of
from tidelog.mirror.topics import TIMEOUT_S, TopicSync


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    destination: str
    shard: int
    owner: str
    source_end: int
    mirrored_to: int
    destination_end: int
    last_commit_ms: int

    @property
    def lag(self) -> int:
        return max(0, self.source_end - self.mirrored_to)


def checkpoints(config: MirrorConfig) -> dict[tuple[str, int], Checkpoint]:
    found: dict[tuple[str, int], Checkpoint] = {}

    def take(message: Message) -> None:
        try:
            checkpoint = Checkpoint.decode(message.value() or b"")
        except ValueError:
            return
        found[(checkpoint.topic, checkpoint.partition)] = checkpoint

    read_to_end(shared_settings(config.destination), config.link_topic, None, take, TIMEOUT_S)
    return found


def owners(config: MirrorConfig) -> dict[int, str]:
    admin = AdminClient(shared_settings(config.destination))
    described = admin.describe_consumer_groups([config.group_id], request_timeout=TIMEOUT_S)[config.group_id]
    out: dict[int, str] = {}
    try:
        group = described.result(timeout=TIMEOUT_S)
    except KafkaException:
        return out
    for member in group.members:
        for tp in member.assignment.topic_partitions if member.assignment else []:
            out[tp.partition] = f"{member.client_id} ({member.host})"
    return out


def end_offsets(settings: dict[str, Any], keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """High watermarks of many partitions in one ListOffsets round per broker; -1 where unknown."""
    admin = AdminClient(settings)
    out = dict.fromkeys(keys, -1)
    if not keys:
        return out
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({TopicPartition(t, p): latest for t, p in keys},
                                 request_timeout=TIMEOUT_S)
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result(timeout=TIMEOUT_S).offset
        except KafkaException:
            pass
    return out


def status(config: MirrorConfig) -> list[PartitionStatus]:
    saved = checkpoints(config)
    owned = owners(config)
    sync = TopicSync(config, AdminClient(shared_settings(config.source)), AdminClient(shared_settings(config.destination)))
    keys = sorted({(t, p) for t, n in sync.source_topics().items() for p in range(n)} | set(saved))
    source_ends = end_offsets(shared_settings(config.source), keys)
    dest_ends = end_offsets(shared_settings(config.destination), [(config.topics.destination(t), p) for t, p in keys])
    rows = []
    for topic, partition in keys:
        shard = shard_of(topic, partition, config.shards)
        checkpoint = saved.get((topic, partition))
        destination = config.topics.destination(topic)
        rows.append(PartitionStatus(topic, partition, destination, shard, owned.get(shard, "-"),
                                    source_ends[(topic, partition)], checkpoint.next if checkpoint else 0,
                                    dest_ends[(destination, partition)], checkpoint.at if checkpoint else 0))
    return rows


def age(ms: int, now: float | None = None) -> str:
    if ms <= 0:
        return "never"
    seconds = (now if now is not None else time.time()) - ms / 1000
    return f"{seconds:.1f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"
