"""``tidelog mirror translate-offsets``: a consumer group's source offsets as destination offsets.

For each partition where the group has committed source offset ``o`` (the next record it will
read), the equivalent destination offset is that of the first copy of a source record at or after
``o``, or the end of the mirrored data when every record before ``o`` is copied and none after yet.

How it is found: the checkpoint's translation pairs (position.py) give the destination offset
``d`` of the last transaction boundary at or below ``o``; from ``d`` the destination partition is
read (read_committed) and each copy's ``offset.header`` compared with ``o``, so the answer is exact
and the scan is at most one transaction long while ``o`` is within the pairs kept (older offsets
scan from the start of the destination partition). With ``offset.header`` off, the pair's ``d`` is
the answer: a safe lower bound (records between the boundary and ``o`` are read again, none
skipped).

``--execute`` writes the answers as the group's committed offsets on the destination
(AlterConsumerGroupOffsets; the group must have no members there, as Kafka requires).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tidelog.clients.transactional import shared_settings
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.position import Checkpoint, decode_offset, start_of_scan
from tidelog.mirror.status import checkpoints
from tidelog.mirror.topics import TIMEOUT_S

SCAN_TIMEOUT_S = 30.0


class TranslateError(Exception):
    """The group's offsets could not be read, translated or written."""


@dataclass(frozen=True)
class Translation:
    topic: str
    partition: int
    destination: str
    source_offset: int
    destination_offset: int
    how: str  # exact | end | lower-bound | not-mirrored


def committed(config: MirrorConfig, group: str) -> list[TopicPartition]:
    admin = AdminClient(shared_settings(config.source))
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                               request_timeout=TIMEOUT_S)[group]
    try:
        result = future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise TranslateError(f"group {group} on the source: {exc.args[0].str()}") from None
    return [tp for tp in result.topic_partitions or [] if tp.offset >= 0 and tp.error is None]


def translate_group(config: MirrorConfig, group: str) -> list[Translation]:
    saved = checkpoints(config)
    consumer = Consumer({**shared_settings(config.destination), "group.id": "tidelog-mirror-translate",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        out = []
        for tp in sorted(committed(config, group), key=lambda t: (t.topic, t.partition)):
            if not config.topics.selects(tp.topic):
                continue
            checkpoint = saved.get((tp.topic, tp.partition))
            out.append(_one(config, consumer, tp.topic, tp.partition, tp.offset, checkpoint))
        return out
    finally:
        consumer.close()


def _one(config: MirrorConfig, consumer: Consumer, topic: str, partition: int, offset: int,
         checkpoint: Checkpoint | None) -> Translation:
    destination = config.topics.destination(topic)
    if checkpoint is None:
        return Translation(topic, partition, destination, offset, 0, "not-mirrored")
    if offset >= checkpoint.next:
        return Translation(topic, partition, destination, offset, checkpoint.dest_next, "end")
    start = start_of_scan(checkpoint.syncs, offset)
    if not config.offset_header:
        return Translation(topic, partition, destination, offset, start or 0, "lower-bound")
    found = _scan(consumer, config.offset_header, TopicPartition(destination, partition), start, offset)
    return Translation(topic, partition, destination, offset, found if found is not None else checkpoint.dest_next,
                       "exact")


def _scan(consumer: Consumer, header: str, tp: TopicPartition, start: int | None, offset: int) -> int | None:
    """The destination offset of the first copy whose source offset is >= ``offset``."""
    low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
    consumer.assign([TopicPartition(tp.topic, tp.partition, max(low, start if start is not None else low))])
    deadline = time.monotonic() + SCAN_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                if message.error() is not None:
                    continue
                source = decode_offset(message.headers(), header)  # type: ignore[arg-type]
                if source is not None and source >= offset:
                    return message.offset()
            position = consumer.position([TopicPartition(tp.topic, tp.partition)])[0].offset
            if position >= high:
                return None
        raise TranslateError(f"{tp.topic} [{tp.partition}]: not scanned to offset {offset} in {SCAN_TIMEOUT_S:.0f} s")
    finally:
        consumer.unassign()


def execute(config: MirrorConfig, group: str, translations: list[Translation]) -> None:
    partitions = [TopicPartition(t.destination, t.partition, t.destination_offset) for t in translations
                  if t.how != "not-mirrored"]
    if not partitions:
        raise TranslateError(f"group {group}: no mirrored partition to move")
    admin = AdminClient(shared_settings(config.destination))
    future = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)],
                                                request_timeout=TIMEOUT_S)[group]
    try:
        result = future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise TranslateError(f"group {group} on the destination: {exc.args[0].str()}") from None
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        raise TranslateError(f"group {group}: {failed[0].topic} [{failed[0].partition}]: {failed[0].error}")
