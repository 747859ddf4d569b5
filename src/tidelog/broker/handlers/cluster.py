"""Metadata and DescribeCluster: what a client asks first, after ApiVersions (dispatch.py).

A Metadata request naming a missing topic creates it when ``auto.create.topics.enable`` is on and
the client allows it (CREATE on the topic or the cluster needed). The partitions are charged to the
client's ``controller_mutation_rate`` (KIP-599), strictly, as Kafka 4 does; a topic the quota refuses
is answered UNKNOWN_TOPIC_OR_PARTITION, like one just created, and the Metadata response itself is
never throttled (``broker/quota_runtime.py``).
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
    authorized_operations,
    cluster_authorized_operations,
)
from tidelog.broker.context import BrokerContext, ConnectionInfo, Endpoint
from tidelog.broker.quota_runtime import MutationCharge
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.common.names import topic_name_problem
from tidelog.metadata.image import TopicImage
from tidelog.protocol.headers import RequestHeader

log = logging.getLogger(__name__)

METADATA, DESCRIBE_CLUSTER = 3, 60
UNAUTHORIZED_OPERATIONS = -2147483648


def live_brokers(ctx: BrokerContext, listener: Endpoint) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of every live broker, as reached on ``listener``'s name.

    A single node is its own only broker; in a cluster the image's registrations (a broker without a
    listener of that name is left out, as Kafka does)."""
    if not ctx.image.brokers:
        endpoint = ctx.endpoint_for(listener)
        return [(ctx.node_id, endpoint.host, endpoint.port, ctx.rack)]
    found = []
    for broker in ctx.image.live_brokers():
        registered = broker.endpoint(listener.name)
        if registered is not None:
            found.append((broker.node_id, registered.host, registered.port, broker.rack))
    return found


def controller_id(ctx: BrokerContext) -> int:
    return ctx.node_id if not ctx.image.brokers else ctx.image.controller_id


def _leader_shown(ctx: BrokerContext, leader: int, fenced: bool) -> int:
    """The leader as this broker may vouch for it: a fenced broker (its metadata session in doubt)
    does not name itself, so that clients ask a broker whose image is current."""
    return -1 if fenced and leader == ctx.node_id else leader


def _topic_entry(ctx: BrokerContext, b: Any, topic: TopicImage, operations: int = UNAUTHORIZED_OPERATIONS) -> Any:
    live = ctx.image.brokers
    fenced = ctx.replicas is not None and ctx.replicas.fenced
    partitions = tuple(
        b.make(
            "MetadataResponsePartition",
            # Kafka: a partition with no leader is LEADER_NOT_AVAILABLE, listed with its replicas and ISR.
            error_code=ErrorCode.LEADER_NOT_AVAILABLE if _leader_shown(ctx, p.leader, fenced) < 0 else ErrorCode.NONE,
            partition_index=p.index,
            leader_id=_leader_shown(ctx, p.leader, fenced),
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas,
            isr_nodes=p.isr,
            offline_replicas=tuple(r for r in p.replicas if r not in live) if live else (),
        )
        for p in topic.partitions
    )
    return b.make(
        "MetadataResponseTopic",
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=partitions,
        topic_authorized_operations=operations,
    )


def _error_entry(b: Any, name: str | None, topic_id: Any, code: ErrorCode) -> Any:
    return b.make(
        "MetadataResponseTopic",
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=UNAUTHORIZED_OPERATIONS,
    )


async def metadata(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(METADATA, header.api_version)
    image = ctx.image
    entries = []
    with_operations = getattr(request, "include_topic_authorized_operations", False)

    def described(topic: TopicImage) -> Any:
        if not with_operations:
            return _topic_entry(ctx, b, topic)
        return _topic_entry(ctx, b, topic, authorized_operations(ctx, conn, TOPIC, topic.name))

    def denied(name: str) -> Any:
        return _error_entry(b, name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    if request.topics is None:
        # Topics the principal may not describe are left out, silently (Kafka neither logs nor audits this).
        visible = image.topics.values() if ctx.authorizer is None else [
            t for t in image.topics.values() if authorize(ctx, conn, Op.DESCRIBE, TOPIC, t.name, record=False)
        ]
        entries = [described(t) for t in visible]
    else:
        auto_create = bool(ctx.config.get("auto.create.topics.enable")) and getattr(
            request, "allow_auto_topic_creation", True
        )
        charge: MutationCharge | None = None  # the request's controller_mutation_rate charge, made on first use
        charged = False
        for wanted in request.topics:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id is not None:
                found = image.topic_by_id(topic_id)
                if found is None:
                    entries.append(_error_entry(b, None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
                elif not authorize(ctx, conn, Op.DESCRIBE, TOPIC, found.name):
                    entries.append(_error_entry(b, None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                else:
                    entries.append(described(found))
                continue
            if name is not None and not authorize(ctx, conn, Op.DESCRIBE, TOPIC, name):
                # Whether the topic exists is not disclosed.
                entries.append(denied(name))
                continue
            topic = image.topics.get(name) if name is not None else None
            if topic is not None:
                entries.append(described(topic))
            elif name is None or topic_name_problem(name):
                entries.append(_error_entry(b, name, None, ErrorCode.INVALID_TOPIC_EXCEPTION))
            elif auto_create and not authorize_any_of(
                ctx, conn, Action(Op.CREATE, TOPIC, name), Action(Op.CREATE, CLUSTER, CLUSTER_NAME)
            ):
                entries.append(denied(name))
            elif auto_create:
                if not charged and ctx.quotas is not None:
                    charge = ctx.quotas.auto_create_charge(ctx.image, conn.principal, conn.client_id)
                charged = True
                entries.append(await _auto_create(ctx, b, name, charge))
            else:
                entries.append(_error_entry(b, name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    brokers = tuple(
        b.make("MetadataResponseBroker", node_id=node, host=host, port=port, rack=rack)
        for node, host, port, rack in live_brokers(ctx, conn.listener)
    )
    return b.make(
        "MetadataResponse",
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=ctx.cluster_id,
        controller_id=controller_id(ctx),
        topics=tuple(entries),
        cluster_authorized_operations=cluster_authorized_operations(ctx, conn)
        if getattr(request, "include_cluster_authorized_operations", False)
        else UNAUTHORIZED_OPERATIONS,
        error_code=ErrorCode.NONE,
    )


async def _auto_create(ctx: BrokerContext, b: Any, name: str, charge: MutationCharge | None) -> Any:
    outcome = await ctx.topics.create_topic(name, -1, -1, admit=charge.admit if charge is not None else None)
    if outcome.error is ErrorCode.THROTTLING_QUOTA_EXCEEDED:
        # Kafka 4: the controller refuses the forwarded creation; the broker only logs it, and the
        # client, told the topic is unknown, asks again (and gets it once the bucket has refilled).
        log.warning("auto topic creation of %s refused: THROTTLING_QUOTA_EXCEEDED (controller_mutation_rate)", name)
        return _error_entry(b, name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if outcome.error is ErrorCode.TOPIC_ALREADY_EXISTS:
        existing = ctx.image.topics.get(name)
        if existing is not None:
            return _topic_entry(ctx, b, existing)
    if not outcome.ok or outcome.topic is None:
        log.info("auto-creating topic %s failed: %s", name, outcome.message)
        return _error_entry(b, name, None, outcome.error)
    # Kafka 4 answers the request that creates the topic with UNKNOWN_TOPIC_OR_PARTITION (no id, no
    # partitions) and the client asks again; the topic is there by then. Answered the same way here so
    # that clients and their tests see Kafka's sequence.
    return _error_entry(b, name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


async def describe_cluster(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_CLUSTER, header.api_version)
    endpoint_type = getattr(request, "endpoint_type", 1)
    if endpoint_type != 1:
        return b.make(
            "DescribeClusterResponse",
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="The broker only serves endpoint type 1 (brokers).",
            endpoint_type=endpoint_type,
            cluster_id=ctx.cluster_id,
            controller_id=-1,
            brokers=(),
        )
    brokers = tuple(
        b.make("DescribeClusterBroker", broker_id=node, host=host, port=port, rack=rack, is_fenced=False)
        for node, host, port, rack in live_brokers(ctx, conn.listener)
    )
    return b.make(
        "DescribeClusterResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.NONE,
        error_message=None,
        endpoint_type=1,
        cluster_id=ctx.cluster_id,
        controller_id=controller_id(ctx),
        brokers=brokers,
        cluster_authorized_operations=cluster_authorized_operations(ctx, conn)
        if getattr(request, "include_cluster_authorized_operations", False)
        else UNAUTHORIZED_OPERATIONS,
    )
