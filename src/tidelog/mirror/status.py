"""``tidelog mirror status``: where every mirrored partition stands, read from the two clusters.

Nothing is asked of the mirror processes: the committed checkpoints are read from the link topic on
the destination (read_committed, so they are exactly what is there), the source's high watermarks
from the source, and the link group's members and their shards from the destination. A process
that died is visible as shards with no owner; a stalled one as a growing lag.

With ``offsets = "preserve"`` the position *is* the destination's log end offset, so
``preserved_status`` reads that from each destination leader with the mode's own probe
(MirrorProduce with null records, over the link's secured connections, wire.py; nothing written),
next to the source's log start and high watermark (ListOffsets; the mode copies read_uncommitted up
to the high watermark). Lag = source end - max(destination end, source start): offsets the source
still has that the destination lacks. A probe refused (the topic not created yet, marked for another
link) is shown as the partition's note; a refused authentication fails the whole command.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.errors import ErrorCode

from tidelog.clients.security import SaslAuthenticationError
from tidelog.clients.transactional import read_to_end, shared_settings
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.position import Checkpoint, shard_of
from tidelog.mirror.topics import TIMEOUT_S, LinkError, TopicSync, link_shards
from tidelog.mirror.wire import Address, LogEnd, Wire, leader_of, require_mirror_produce
from tidelog.net.kafka_connection import BrokerUnreachable


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


def end_offsets(settings: dict[str, Any], keys: list[tuple[str, int]], *,
                earliest: bool = False) -> dict[tuple[str, int], int]:
    """High watermarks (log starts with ``earliest``) of many partitions in one ListOffsets round per
    broker; -1 where unknown."""
    admin = AdminClient(settings)
    out = dict.fromkeys(keys, -1)
    if not keys:
        return out
    spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in keys},
                                 request_timeout=TIMEOUT_S)
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result(timeout=TIMEOUT_S).offset
        except KafkaException:
            pass
    return out


def status(config: MirrorConfig) -> list[PartitionStatus]:
    config = link_shards(config, AdminClient(shared_settings(config.destination)))
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


@dataclass(frozen=True)
class PreservedStatus:
    """One partition of an ``offsets = "preserve"`` link; offsets are the same numbers on both sides."""

    topic: str
    partition: int
    destination: str
    source_start: int
    source_end: int
    destination_start: int
    destination_end: int  # the link's position: where it goes on copying (-1: unknown, see note)
    shard: int
    owner: str  # the link group member copying it ("-": none)
    note: str

    @property
    def lag(self) -> int:
        if self.source_end < 0:
            return 0
        return max(0, self.source_end - max(self.destination_end, self.source_start, 0))


def preserved_status(config: MirrorConfig) -> list[PreservedStatus]:
    wire = Wire(config, timeout_s=TIMEOUT_S)
    asyncio.run(_reach_both(wire))  # a refused password or certificate: said now, not as a librdkafka timeout
    source_settings, dest_settings = shared_settings(config.source), shared_settings(config.destination)
    dest_admin = AdminClient(dest_settings)
    config = link_shards(config, dest_admin)
    sync = TopicSync(config, AdminClient(source_settings), dest_admin)
    keys = sorted((t, p) for t, n in sync.source_topics().items() for p in range(n))
    starts = end_offsets(source_settings, keys, earliest=True)
    ends = end_offsets(source_settings, keys)
    metadata = dest_admin.list_topics(timeout=TIMEOUT_S)
    targets = {key: (config.topics.destination(key[0]), key[1]) for key in keys}
    by_leader: dict[Address, list[tuple[str, int]]] = {}
    notes: dict[tuple[str, int], str] = {}
    for target in targets.values():
        leader = leader_of(metadata, *target)
        if leader is None:
            described = metadata.topics.get(target[0])
            notes[target] = ("not created yet" if described is None or described.error is not None
                             else "partition not created yet" if target[1] not in described.partitions
                             else "no leader on the destination")
        else:
            by_leader.setdefault(leader, []).append(target)
    probed = asyncio.run(_probe(wire, by_leader, notes))
    owned = owners(config)
    rows = []
    for key in keys:
        target = targets[key]
        shard = shard_of(key[0], key[1], config.shards)
        found = probed.get(target)
        note = notes.get(target, "")
        if found is not None and found.error_code != 0:
            note = f"{_error_name(found.error_code)}: {found.error_message}".rstrip(": ")
        rows.append(PreservedStatus(
            key[0], key[1], target[0], starts[key], ends[key],
            found.log_start if found is not None and found.error_code == 0 else -1,
            found.log_end if found is not None and found.error_code == 0 else -1, shard,
            owned.get(shard, "-"), note))
    return rows


async def _reach_both(wire: Wire) -> None:
    try:
        await wire.reach("source")
        require_mirror_produce(*await wire.reach("destination"))
    finally:
        await wire.close()


async def _probe(wire: Wire, by_leader: dict[Address, list[tuple[str, int]]],
                 notes: dict[tuple[str, int], str]) -> dict[tuple[str, int], LogEnd]:
    out: dict[tuple[str, int], LogEnd] = {}

    async def one(leader: Address, partitions: list[tuple[str, int]]) -> None:
        try:
            out.update(await wire.log_ends(leader, partitions))
        except BrokerUnreachable as exc:
            notes.update(dict.fromkeys(partitions, f"destination leader unreachable: {exc}"))

    try:
        await asyncio.gather(*(one(leader, partitions) for leader, partitions in by_leader.items()))
    except SaslAuthenticationError as exc:
        raise LinkError(f"the destination refused the link's credentials: {exc}") from None
    finally:
        await wire.close()
    return out


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"
