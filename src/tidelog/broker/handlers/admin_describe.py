"""Admin reads a single-node Kafka answers: DescribeTopicPartitions, DescribeProducers, DescribeQuorum,
ListConfigResources.

- DescribeTopicPartitions (KIP-966): the requested topics (all topics when none is named), in name
  order, each with its partitions, until ``min(response_partition_limit,
  max.request.partition.size.limit)`` partitions are in the response; ``next_cursor`` then names the
  topic and partition where the next request starts. A cursor skips the topics before its topic and
  that topic's partitions before its index; a named topic list must include the cursor's topic
  (INVALID_REQUEST). Topics the principal may not DESCRIBE are left out of an all-topics answer and
  answered TOPIC_AUTHORIZATION_FAILED (zero topic id) when named; unknown names get
  UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name). Eligible leader replicas
  (KIP-966's ELR) are empty lists: tidelog keeps none.
- DescribeProducers: the producers the partition's log keeps state for (idempotent and
  transactional), READ on the topic required, as ``kafka-transactions.sh find-hanging`` uses it.
- DescribeQuorum: tidelog's metadata is not a Raft log. A single node describes itself as the only
  voter and leader of ``__cluster_metadata`` (epoch 1, always caught up, high watermark 0); observers
  are none. Asked for anything else, the first partition named is answered UNKNOWN_TOPIC_OR_PARTITION.
- ListConfigResources (KIP-1142): v0 lists client-metrics resources only (tidelog has none); v1 lists
  topics, the broker (as BROKER_LOGGER and BROKER), client-metrics resources and groups (those the
  coordinator knows and those with configs of their own), filtered by
  the requested types (every type when none is named); a type outside these is UNSUPPORTED_VERSION.
  DESCRIBE_CONFIGS on the cluster is required.
"""

from __future__ import annotations

import uuid
from typing import Any

from tidelog.broker.authz import CLUSTER, CLUSTER_NAME, TOPIC, Op, authorize, authorized_operations
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.handlers.common import partition_log
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.common.names import topic_name_problem
from tidelog.metadata.image import TopicImage
from tidelog.protocol.headers import RequestHeader

DESCRIBE_TOPIC_PARTITIONS, DESCRIBE_PRODUCERS, DESCRIBE_QUORUM, LIST_CONFIG_RESOURCES = 75, 61, 55, 74
METADATA_TOPIC = "__cluster_metadata"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ZERO_UUID = uuid.UUID(int=0)
UNAUTHORIZED_OPERATIONS = -2147483648  # the field's default: operations not computed
# ConfigResource types (Kafka's ConfigResource.Type ids)
TOPIC_TYPE, BROKER_TYPE, BROKER_LOGGER_TYPE, CLIENT_METRICS_TYPE, GROUP_TYPE = 2, 4, 8, 16, 32
_V1_TYPES = (TOPIC_TYPE, BROKER_LOGGER_TYPE, BROKER_TYPE, CLIENT_METRICS_TYPE, GROUP_TYPE)


# ----------------------------------------------------------------------------- DescribeTopicPartitions


async def describe_topic_partitions(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader,
                                    request: Any) -> Any:
    b = builder(DESCRIBE_TOPIC_PARTITIONS, header.api_version)
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    every_topic = not request.topics
    if every_topic:
        names = sorted(n for n in ctx.image.topics if n >= start_topic)
    else:
        names = sorted({t.name for t in request.topics if t.name >= start_topic})
        if cursor is not None and cursor.topic_name not in names:
            return b.make("DescribeTopicPartitionsResponse", throttle_time=NO_THROTTLE, topics=tuple(
                _topic_error(b, t.name, ErrorCode.INVALID_REQUEST) for t in request.topics
            ), next_cursor=None)
    denied: list[Any] = []
    allowed: list[str] = []
    for name in names:
        if authorize(ctx, conn, Op.DESCRIBE, TOPIC, name, record=not every_topic):
            allowed.append(name)
        elif not every_topic:
            denied.append(_topic_error(b, name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    remaining = min(ctx.config.get_int("max.request.partition.size.limit"), request.response_partition_limit)
    entries: list[Any] = []
    next_cursor = None
    for name in allowed:
        if remaining <= 0:
            next_cursor = b.make("Cursor", topic_name=name, partition_index=0)
            break
        topic = ctx.image.topics.get(name)
        if topic is None:
            error = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_problem(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            entries.append(_topic_error(b, name, error, is_internal=name in INTERNAL_TOPICS,
                                        operations=authorized_operations(ctx, conn, TOPIC, name)))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        upper = min(len(topic.partitions), first + remaining)
        entries.append(_topic_entry(ctx, conn, b, topic, first, upper))
        if upper < len(topic.partitions):
            next_cursor = b.make("Cursor", topic_name=name, partition_index=upper)
            break
        remaining -= max(upper - first, 0)
    return b.make("DescribeTopicPartitionsResponse", throttle_time=NO_THROTTLE,
                  topics=(*entries, *denied), next_cursor=next_cursor)


def _topic_entry(ctx: BrokerContext, conn: ConnectionInfo, b: Any, topic: TopicImage, first: int, upper: int) -> Any:
    partitions = tuple(
        b.make("DescribeTopicPartitionsResponsePartition", error_code=ErrorCode.NONE, partition_index=p.index,
               leader_id=p.leader, leader_epoch=p.leader_epoch, replica_nodes=p.replicas, isr_nodes=p.isr,
               eligible_leader_replicas=(), last_known_elr=(), offline_replicas=())
        for p in topic.partitions[first:upper]
    )
    return b.make("DescribeTopicPartitionsResponseTopic", error_code=ErrorCode.NONE, name=topic.name,
                  topic_id=topic.topic_id, is_internal=topic.name in INTERNAL_TOPICS, partitions=partitions,
                  topic_authorized_operations=authorized_operations(ctx, conn, TOPIC, topic.name))


def _topic_error(b: Any, name: str, error: ErrorCode, *, is_internal: bool = False,
                 operations: int = UNAUTHORIZED_OPERATIONS) -> Any:
    return b.make("DescribeTopicPartitionsResponseTopic", error_code=error, name=name, topic_id=ZERO_UUID,
                  is_internal=is_internal, partitions=(), topic_authorized_operations=operations)


# ----------------------------------------------------------------------------------- DescribeProducers


async def describe_producers(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_PRODUCERS, header.api_version)
    topics = []
    for wanted in request.topics:
        readable = authorize(ctx, conn, Op.READ, TOPIC, wanted.name)
        topics.append(b.make("TopicResponse", name=wanted.name, partitions=tuple(
            _producers_of(ctx, b, wanted.name, index) if readable
            else _partition_error(b, index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for index in wanted.partition_indexes
        )))
    return b.make("DescribeProducersResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _producers_of(ctx: BrokerContext, b: Any, topic: str, index: int) -> Any:
    try:
        plog = partition_log(ctx, topic, index)
    except KafkaError as exc:
        return _partition_error(b, index, exc.code)
    states = tuple(
        b.make("ProducerState", producer_id=entry.producer_id, producer_epoch=entry.epoch,
               last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
               coordinator_epoch=entry.coordinator_epoch, current_txn_start_offset=entry.txn_first_offset)
        for entry in sorted(plog.producers.producers.values(), key=lambda e: e.producer_id)
    )
    return b.make("PartitionResponse", partition_index=index, error_code=ErrorCode.NONE, error_message=None,
                  active_producers=states)


def _partition_error(b: Any, index: int, error: ErrorCode) -> Any:
    return b.make("PartitionResponse", partition_index=index, error_code=error, error_message=None,
                  active_producers=())


# -------------------------------------------------------------------------------------- DescribeQuorum


async def describe_quorum(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_QUORUM, header.api_version)
    version = header.api_version
    wanted = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
    if wanted != [(METADATA_TOPIC, 0)]:
        # Kafka answers the first partition asked for, as unknown
        topic, index = wanted[0] if wanted else ("", 0)
        unknown = b.make("PartitionData", partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         leader_id=0, leader_epoch=0, high_watermark=0, current_voters=(), observers=(),
                         **({"error_message": None} if version >= 2 else {}))
        return b.make("DescribeQuorumResponse", error_code=ErrorCode.NONE,
                      topics=(b.make("TopicData", topic_name=topic, partitions=(unknown,)),),
                      **({"nodes": (), "error_message": None} if version >= 2 else {}))
    now = ctx.now_ms()
    voter: dict[str, Any] = {"replica_id": ctx.node_id, "log_end_offset": 0}
    if version >= 1:
        voter.update(last_fetch_timestamp=now, last_caught_up_timestamp=now)
    if version >= 2:
        voter["replica_directory_id"] = ZERO_UUID
    partition = b.make("PartitionData", partition_index=0, error_code=ErrorCode.NONE, leader_id=ctx.node_id,
                       leader_epoch=1, high_watermark=0, current_voters=(b.make("ReplicaState", **voter),),
                       observers=(), **({"error_message": None} if version >= 2 else {}))
    fields: dict[str, Any] = {"topics": (b.make("TopicData", topic_name=METADATA_TOPIC, partitions=(partition,)),)}
    if version >= 2:
        endpoint = ctx.endpoint_for(conn.listener)
        listener = b.make("Listener", name=endpoint.name, host=endpoint.host, port=endpoint.port)
        fields.update(error_message=None, nodes=(b.make("Node", node_id=ctx.node_id, listeners=(listener,)),))
    return b.make("DescribeQuorumResponse", error_code=ErrorCode.NONE, **fields)


# --------------------------------------------------------------------------------- ListConfigResources


async def list_config_resources(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader,
                                request: Any) -> Any:
    b = builder(LIST_CONFIG_RESOURCES, header.api_version)
    version = header.api_version

    def answer(error: ErrorCode, resources: list[tuple[str, int]]) -> Any:
        made = tuple(
            b.make("ConfigResource", resource_name=name, **({"resource_type": kind} if version >= 1 else {}))
            for name, kind in resources
        )
        return b.make("ListConfigResourcesResponse", throttle_time=NO_THROTTLE, error_code=error,
                      config_resources=made)

    if not authorize(ctx, conn, Op.DESCRIBE_CONFIGS, CLUSTER, CLUSTER_NAME):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    requested = list(getattr(request, "resource_types", ()) or ()) if version >= 1 else [CLIENT_METRICS_TYPE]
    supported = _V1_TYPES if version >= 1 else (CLIENT_METRICS_TYPE,)
    if any(t not in supported for t in requested):
        return answer(ErrorCode.UNSUPPORTED_VERSION, [])
    wanted = set(requested or supported)
    resources: list[tuple[str, int]] = []
    if TOPIC_TYPE in wanted:
        resources += [(name, TOPIC_TYPE) for name in sorted(ctx.image.topics)]
    for kind in (BROKER_LOGGER_TYPE, BROKER_TYPE):
        if kind in wanted:
            resources.append((str(ctx.node_id), kind))
    if GROUP_TYPE in wanted and ctx.groups is not None and ctx.groups.running:
        _, listed = ctx.groups.list_groups([], [])
        names = {g.group_id for g in listed} | set(ctx.groups.configs.groups)
        resources += [(name, GROUP_TYPE) for name in sorted(names)]
    return answer(ErrorCode.NONE, resources)
