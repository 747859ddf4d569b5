"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), v0-1.

Each handler turns the request into the coordinator's values (``coordinator/consumer_group.py``),
asks the runtime (``broker/group_runtime.py``) and builds the response. Version differences:

- ConsumerGroupHeartbeat v0 lets a joining member send an empty member id (the coordinator picks
  one); from v1 the client generates it and an empty one is INVALID_REQUEST (KIP-1082).
  ``SubscribedTopicRegex`` is resolved by the coordinator (``coordinator/topic_regex.py``), which
  leaves out the matched topics the member may not DESCRIBE.
- ConsumerGroupDescribe v1 adds each member's type (1: consumer protocol).

ACLs, as Kafka checks them: the heartbeat needs READ on the group and DESCRIBE on every subscribed
topic (TOPIC_AUTHORIZATION_FAILED otherwise); describe needs DESCRIBE on the group.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any

from tidelog.broker.authz import GROUP, TOPIC, Op, authorize, authorized_operations
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.group_runtime import GroupRuntime
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    to_topic_partitions,
)
from tidelog.coordinator.consumer_group_records import TopicPartitions
from tidelog.protocol.headers import RequestHeader

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1: 0 classic member, 1 consumer-protocol member
UNAUTHORIZED_OPERATIONS = -(2**31)
# READ (3), DELETE (6), DESCRIBE (8): what a group allows when no authorizer restricts it.
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def _runtime(ctx: BrokerContext) -> GroupRuntime | None:
    groups = ctx.groups
    return groups if groups is not None and groups.running else None


def _owned(request: Any) -> TopicPartitions | None:
    if request.topic_partitions is None:
        return None
    return tuple((tp.topic_id, tuple(int(p) for p in tp.partitions)) for tp in request.topic_partitions
                 if tp.topic_id is not None)


async def consumer_group_heartbeat(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(CONSUMER_GROUP_HEARTBEAT, header.api_version)
    names = request.subscribed_topic_names
    req = ConsumerGroupHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(str(n) for n in names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=_owned(request),
        client_id=conn.client_id or "",
        client_host="/" + conn.peer.rsplit(":", 1)[0],
        generates_member_id=header.api_version == 0,
        # Regex matches are filtered by the member's DESCRIBE permission, quietly (as Metadata filters).
        topic_visible=None if ctx.authorizer is None else (
            lambda name: authorize(ctx, conn, Op.DESCRIBE, TOPIC, name, record=False)),
    )
    runtime = _runtime(ctx)
    if not authorize(ctx, conn, Op.READ, GROUP, request.group_id):
        result = ConsumerGroupHeartbeatResult(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif names and ctx.authorizer is not None and not all(authorize(ctx, conn, Op.DESCRIBE, TOPIC, n) for n in names):
        result = ConsumerGroupHeartbeatResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    elif runtime is None:
        result = ConsumerGroupHeartbeatResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await runtime.consumer_group_heartbeat(req)
    assignment = None
    if result.assignment is not None:
        assignment = b.make("Assignment", topic_partitions=tuple(
            b.make("TopicPartitions", topic_id=topic_id, partitions=partitions)
            for topic_id, partitions in result.assignment
        ))
    return b.make(
        "ConsumerGroupHeartbeatResponse", throttle_time=NO_THROTTLE, error_code=result.error,
        error_message=result.error_message, member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_interval_ms), assignment=assignment,
    )


async def consumer_group_describe(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(CONSUMER_GROUP_DESCRIBE, header.api_version)
    runtime = _runtime(ctx)
    ids = [str(g) for g in request.group_ids]
    allowed = [g for g in ids if authorize(ctx, conn, Op.DESCRIBE, GROUP, g)]
    if runtime is None:
        found: dict[str, tuple[ErrorCode, ConsumerGroup | None]] = {g: (ErrorCode.COORDINATOR_NOT_AVAILABLE, None) for g in allowed}
    else:
        found = {g: (e, grp) for g, e, grp in runtime.consumer_group_describe(allowed)}
    names = {t.topic_id: name for name, t in ctx.image.topics.items()}

    def assignment(value: Mapping[uuid.UUID, frozenset[int]]) -> Any:
        return b.make("Assignment", topic_partitions=tuple(
            b.make("TopicPartitions", topic_id=t, topic_name=names.get(t, ""), partitions=ps)
            for t, ps in to_topic_partitions(value)
        ))

    def described(group_id: str) -> Any:
        error, group = found.get(group_id, (ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
        if group is None:
            message = None
            if error is ErrorCode.GROUP_ID_NOT_FOUND:
                classic = runtime is not None and group_id in runtime.core.groups
                message = f"Group {group_id} is not a consumer group." if classic else f"Group {group_id} not found."
            return b.make("DescribedGroup", error_code=error, error_message=message, group_id=group_id, group_state="",
                          group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                          authorized_operations=UNAUTHORIZED_OPERATIONS)
        operations = UNAUTHORIZED_OPERATIONS
        if request.include_authorized_operations:
            operations = GROUP_OPERATIONS if ctx.authorizer is None else authorized_operations(ctx, conn, GROUP, group_id)
        members = tuple(
            b.make("Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                   member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                   subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
                   assignment=assignment(m.assigned), target_assignment=assignment(group.target.get(m.member_id, {})),
                   member_type=CONSUMER_MEMBER_TYPE)
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        )
        return b.make("DescribedGroup", error_code=ErrorCode.NONE, error_message=None, group_id=group_id,
                      group_state=group.state, group_epoch=group.epoch, assignment_epoch=group.assignment_epoch,
                      assignor_name=group.preferred_assignor(runtime.core.consumer.config.assignors[0]) if runtime else "",
                      members=members, authorized_operations=operations)

    return b.make("ConsumerGroupDescribeResponse", throttle_time=NO_THROTTLE, groups=tuple(described(g) for g in ids))
