"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): Kafka's partition moves.

Alter needs ALTER on the cluster, List DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED at the top
level otherwise, every partition answered with it). Each partition is decided on its own by
``controller.reassignment`` (start, or cancel for null replicas) from the current image and written
with a compare-and-set on that partition's key: a partition with an error is not touched, and a
partition whose key changed meanwhile answers NOT_CONTROLLER (retriable; Kafka's clients retry it).
With ``allow_replication_factor_change`` false (v1), a target of another size than the original
replicas answers INVALID_REPLICATION_FACTOR. The controller completes the moves (controller/service.py).

A single node (local metadata store: no registered brokers) answers as a single-node Kafka: the only
valid target is ``[this broker]``, which changes nothing; nothing is ever in progress, so a cancel
answers NO_REASSIGNMENT_IN_PROGRESS and List answers no partitions.
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.authz import Op, authorize_cluster
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.controller import reassignment
from tidelog.metadata.image import ClusterImage, PartitionImage
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.headers import RequestHeader

Decision = tuple[ErrorCode, str | None]


def _registered(ctx: BrokerContext, image: ClusterImage) -> frozenset[int]:
    return frozenset(image.brokers) if image.brokers else frozenset({ctx.node_id})


async def alter_partition_reassignments(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader,
                                        request: Any) -> Any:
    b = builder(ApiKey.ALTER_PARTITION_REASSIGNMENTS, header.api_version)
    allowed = authorize_cluster(ctx, conn, Op.ALTER)
    allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
    topics = []
    for topic in request.topics:
        answers = []
        for p in topic.partitions:
            replicas = None if p.replicas is None else [int(r) for r in p.replicas]
            error, message = (await _alter(ctx, str(topic.name), int(p.partition_index), replicas, allow_rf_change)
                              if allowed else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None))
            answers.append(b.make("ReassignablePartitionResponse", partition_index=p.partition_index,
                                  error_code=error, error_message=message))
        topics.append(b.make("ReassignableTopicResponse", name=topic.name, partitions=tuple(answers)))
    return b.make("AlterPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                  allow_replication_factor_change=allow_rf_change,
                  error_code=ErrorCode.NONE if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                  error_message=None, responses=tuple(topics))


async def _alter(ctx: BrokerContext, topic: str, index: int, target: list[int] | None,
                 allow_rf_change: bool) -> Decision:
    image = ctx.image
    known = image.topics.get(topic)
    if known is None or not 0 <= index < len(known.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    current = known.partitions[index]
    live = _registered(ctx, image)
    if target is None:
        error, message, new = reassignment.cancel(current, live)
    else:
        original = current.original_replicas
        if not allow_rf_change and len(set(target)) != len(original) and target:
            return (ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"The replication factor is changed from {len(original)} to {len(target)}")
        error, message, new = reassignment.start(current, target, live, live)
    if error is not ErrorCode.NONE or new is None:
        return error, message
    return await _write(ctx, topic, current, new)


async def _write(ctx: BrokerContext, topic: str, current: PartitionImage, new: PartitionImage) -> Decision:
    alter = getattr(ctx.store, "alter_partition", None)
    if alter is None:  # a single node never has anything to change (its only valid target is itself)
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "This broker runs without a cluster: replicas cannot move."
    if not await alter(topic, current.index, current, new):
        return ErrorCode.NOT_CONTROLLER, "The partition changed meanwhile; try again."
    return ErrorCode.NONE, None


async def list_partition_reassignments(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader,
                                       request: Any) -> Any:
    b = builder(ApiKey.LIST_PARTITION_REASSIGNMENTS, header.api_version)
    if not authorize_cluster(ctx, conn, Op.DESCRIBE):
        return b.make("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                      error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, topics=())
    image = ctx.image
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(str(t.name), set()).update(int(i) for i in t.partition_indexes)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in reassignment.in_progress(image):
        if wanted is not None and partition.index not in wanted.get(topic, ()):
            continue
        by_topic.setdefault(topic, []).append(b.make(
            "OngoingPartitionReassignment", partition_index=partition.index, replicas=partition.replicas,
            adding_replicas=partition.adding_replicas, removing_replicas=partition.removing_replicas))
    topics = tuple(b.make("OngoingTopicReassignment", name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return b.make("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.NONE,
                  error_message=None, topics=topics)
