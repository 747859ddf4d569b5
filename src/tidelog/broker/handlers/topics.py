"""CreateTopics, DeleteTopics and CreatePartitions.

Each request is charged to the client's ``controller_mutation_rate`` (KIP-599): the topic admin
charges each topic's partitions once the topic passed every other check (``admit``), refused topics
are answered THROTTLING_QUOTA_EXCEEDED (strict versions), and the charge's throttle time goes into
``conn.throttle_ms``, which the server writes into the response and mutes the connection for.
"""

from __future__ import annotations

import logging
from typing import Any

from tidelog.broker.authz import (
    CLUSTER,
    CLUSTER_NAME,
    TOPIC,
    Action,
    Op,
    authorize,
    authorize_any_of,
    denied_topics,
)
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.handlers.configs import topic_config_entries
from tidelog.broker.quota_runtime import MutationCharge
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.protocol.headers import RequestHeader

log = logging.getLogger(__name__)

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37


def _charge(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader) -> MutationCharge | None:
    if ctx.quotas is None:
        return None
    return ctx.quotas.mutation_charge(ctx.image, header.api_key, header.api_version, conn.principal, conn.client_id)


def _throttle(conn: ConnectionInfo, charge: MutationCharge | None) -> None:
    if charge is not None:
        conn.throttle_ms = max(conn.throttle_ms, charge.finish())


async def create_topics(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(CREATE_TOPICS, header.api_version)
    charge = _charge(ctx, conn, header)
    names = [t.name for t in request.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    results = []
    answered: set[str] = set()
    for topic in request.topics:
        if topic.name in answered:
            continue  # Kafka answers a name given twice once
        answered.add(topic.name)
        if topic.name in duplicates:
            results.append(
                b.make(
                    "CreatableTopicResult", name=topic.name, topic_id=None, error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"Create topics request from client `{conn.client_id}` contains multiple entries "
                    f"for the following topics: {topic.name}", num_partitions=-1, replication_factor=-1, configs=(),
                )
            )
            continue
        # Kafka: CREATE on the cluster, else CREATE on the topic.
        if not authorize_any_of(ctx, conn, Action(Op.CREATE, TOPIC, topic.name), Action(Op.CREATE, CLUSTER, CLUSTER_NAME)):
            results.append(
                b.make(
                    "CreatableTopicResult", name=topic.name, topic_id=None, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message="Authorization failed.", num_partitions=-1, replication_factor=-1, configs=(),
                )
            )
            continue
        outcome = await ctx.topics.create_topic(
            topic.name,
            topic.num_partitions,
            topic.replication_factor,
            [(a.partition_index, a.broker_ids) for a in topic.assignments],
            [(c.name, c.value) for c in topic.configs],
            request.validate_only,
            charge.admit if charge is not None else None,
        )
        created = outcome.topic
        configs: tuple[Any, ...] = ()
        config_error = ErrorCode.NONE
        if created is not None and not authorize(ctx, conn, Op.DESCRIBE_CONFIGS, TOPIC, topic.name, record=False):
            config_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif created is not None and b.has("CreatableTopicResult", "configs"):
            configs = tuple(
                b.make(
                    "CreatableTopicConfigs", name=e.name, value=e.value, read_only=e.read_only,
                    config_source=int(e.source), is_sensitive=e.sensitive,
                )
                for e in topic_config_entries(ctx, created)
            )
        results.append(
            b.make(
                "CreatableTopicResult",
                name=topic.name,
                topic_id=created.topic_id if created is not None else None,
                error_code=outcome.error,
                error_message=outcome.message,
                num_partitions=len(created.partitions) if created is not None else -1,
                replication_factor=len(created.partitions[0].replicas) if created is not None else -1,
                configs=configs,
                topic_config_error_code=config_error,
            )
        )
    _throttle(conn, charge)
    return b.make("CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(results))


async def delete_topics(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DELETE_TOPICS, header.api_version)
    charge = _charge(ctx, conn, header)
    if hasattr(request, "topic_names"):
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    results = []
    denied = denied_topics(ctx, conn, (n for n, _ in wanted if n is not None), Op.DELETE)
    for name, topic_id in wanted:
        error: ErrorCode = ErrorCode.NONE
        message: str | None = None
        by_id = name is None and topic_id is not None
        if name is None and topic_id is not None:
            found = ctx.image.topic_by_id(topic_id)
            if found is None:
                results.append(b.make("DeletableTopicResult", name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID, error_message=None))
                continue
            name = found.name
        if name in denied or (by_id and not authorize(ctx, conn, Op.DELETE, TOPIC, name)):
            results.append(
                b.make(
                    "DeletableTopicResult", name=None if by_id else name, topic_id=topic_id,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None,
                )
            )
            continue
        topic = ctx.image.topics.get(name)
        if topic is not None and topic.is_internal:
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Internal topics cannot be deleted"
        else:
            outcome = await ctx.topics.delete_topic(name, charge.admit if charge is not None else None)
            error, message = outcome.error, outcome.message
            if outcome.ok:
                ctx.purgatory.notify_all()
                ctx.metrics.topic_deleted(name)
        results.append(
            b.make(
                "DeletableTopicResult", name=name, topic_id=topic.topic_id if topic is not None else topic_id,
                error_code=error, error_message=message,
            )
        )
    _throttle(conn, charge)
    return b.make("DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(results))


async def create_partitions(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(CREATE_PARTITIONS, header.api_version)
    charge = _charge(ctx, conn, header)
    results = []
    denied = denied_topics(ctx, conn, (t.name for t in request.topics), Op.ALTER)
    for topic in request.topics:
        bad = [r for a in topic.assignments or () for r in a.broker_ids if r != ctx.node_id]
        message: str | None
        if topic.name in denied:
            error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        elif bad:
            error, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker {bad[0]} in the assignment."
        else:
            outcome = await ctx.topics.create_partitions(topic.name, topic.count, request.validate_only,
                                                         charge.admit if charge is not None else None)
            error, message = outcome.error, outcome.message
        results.append(
            b.make("CreatePartitionsTopicResult", name=topic.name, error_code=error, error_message=message)
        )
    _throttle(conn, charge)
    return b.make("CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(results))
