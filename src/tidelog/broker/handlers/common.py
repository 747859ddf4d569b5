"""Helpers shared by handlers: partition lookup with Kafka's error codes."""

from __future__ import annotations

from tidelog.broker.context import BrokerContext
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.storage.log import PartitionLog


def partition_log(ctx: BrokerContext, topic: str, partition: int) -> PartitionLog:
    """The local log of ``topic``/``partition``; raises KafkaError with the code Kafka would answer.

    In a cluster only the partition's leader serves it: NOT_LEADER_OR_FOLLOWER elsewhere."""
    image = ctx.image.topics.get(topic)
    if image is None or not 0 <= partition < len(image.partitions):
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if ctx.replicas is not None:
        ctx.replicas.leader_state((topic, partition))
    log: PartitionLog | None = ctx.logs.get_log(topic, partition)
    if log is None:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    return log


def check_leader_epoch(ctx: BrokerContext, topic: str, partition: int, requested_epoch: int) -> None:
    """Kafka's current-leader-epoch check (KIP-320): -1 skips it."""
    if requested_epoch < 0:
        return
    image = ctx.image.topics[topic].partitions[partition]
    if requested_epoch < image.leader_epoch:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
    if requested_epoch > image.leader_epoch:
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
