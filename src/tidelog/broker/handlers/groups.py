"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete.

Each handler translates the request version it got into the coordinator's own values
(``tidelog.coordinator.messages``), asks the runtime (``broker/group_runtime.py``), and builds the
response for that version. Version differences handled here:

- JoinGroup: v0 has no rebalance timeout (the session timeout serves); from v4 a new dynamic member
  must first get its id (MEMBER_ID_REQUIRED); v9 can tell a restarted static leader to skip
  assignment; before v7 the protocol name is not nullable.
- LeaveGroup: v0-2 name one member and carry its error at the top; v3+ leave in batches.
- OffsetCommit: v2-4 carry a retention time; v9 answers GROUP_ID_NOT_FOUND where older versions
  answer ILLEGAL_GENERATION.
- OffsetFetch: v1 has no top-level error (it goes on every partition); v2+ may ask for all topics;
  v8+ asks for several groups.
- DescribeGroups: v6 answers GROUP_ID_NOT_FOUND for unknown groups (older versions: state Dead).
- FindCoordinator: v4+ batches keys. Key type 1 finds the transaction coordinator
  (``broker/txn_runtime.py``; creates ``__transaction_state`` on first use).
- OffsetFetch v7+ with ``require_stable``: a partition whose offset an open transaction holds
  (TxnOffsetCommit) answers UNSTABLE_OFFSET_COMMIT, which clients retry.

ACLs (broker/authz.py), as Kafka checks them: FindCoordinator DESCRIBE on the group (or the
transactional id); JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit READ on the group;
OffsetFetch and DescribeGroups DESCRIBE on the group; DeleteGroups and OffsetDelete DELETE on it.
Topics: OffsetCommit and OffsetDelete need READ, OffsetFetch DESCRIBE (an all-topics fetch leaves the
others out); ListGroups lists every group to DESCRIBE on the cluster, else the groups one may describe.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from tidelog.broker.authz import (
    CLUSTER,
    CLUSTER_NAME,
    GROUP,
    TOPIC,
    TRANSACTIONAL_ID,
    Op,
    authorize,
    authorized_operations,
    denied_topics,
)
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.group_runtime import GroupRuntime
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.coordinator.messages import (
    CommitPartition,
    DescribedGroup,
    FetchedOffset,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeavingMember,
    OffsetCommit,
    OffsetDeleteResult,
    OffsetFetchResult,
    Protocol,
    SyncGroup,
)
from tidelog.protocol.headers import RequestHeader

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
GROUP_KEY, TRANSACTION_KEY = 0, 1
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


# ---------------------------------------------------------------------------------- FindCoordinator


async def find_coordinator(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(FIND_COORDINATOR, header.api_version)
    endpoint = ctx.endpoint_for(conn.listener)
    key_type = getattr(request, "key_type", GROUP_KEY)
    keys = list(request.coordinator_keys) if header.api_version >= 4 else [request.key]

    async def answer(key: str) -> tuple[ErrorCode, str | None]:
        if key_type == GROUP_KEY and not authorize(ctx, conn, Op.DESCRIBE, GROUP, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
        if key_type == TRANSACTION_KEY and not authorize(ctx, conn, Op.DESCRIBE, TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if key_type == TRANSACTION_KEY:
            txns = ctx.transactions
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE if txns is None else await txns.status()
            return error, None if error is ErrorCode.NONE else "The coordinator is not available."
        if key_type != GROUP_KEY:
            return ErrorCode.INVALID_REQUEST, f"Unsupported key type {key_type}."
        runtime = _runtime(ctx)
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE if runtime is None else await runtime.ensure_topic()
        return error, None if error is ErrorCode.NONE else "The coordinator is not available."

    found = []
    for key in keys:
        error, message = await answer(key)
        node, host, port = ctx.node_id, endpoint.host, endpoint.port
        if error is ErrorCode.NONE and ctx.replicas is not None:
            error, message, node, host, port = _cluster_coordinator(ctx, conn, key_type, key)
        ok = error is ErrorCode.NONE
        found.append((key, error, message, node if ok else -1, host if ok else "", port if ok else -1))
    if header.api_version >= 4:
        return b.make("FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=tuple(
            b.make("Coordinator", key=key, node_id=node, host=host, port=port, error_code=error, error_message=message)
            for key, error, message, node, host, port in found
        ))
    _, error, message, node, host, port = found[0]
    return b.make("FindCoordinatorResponse", throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                  node_id=node, host=host, port=port)


def _cluster_coordinator(
    ctx: BrokerContext, conn: ConnectionInfo, key_type: int, key: str,
) -> tuple[ErrorCode, str | None, int, str, int]:
    """In a cluster the coordinator is the leader of the key's internal-topic partition."""
    runtime: Any = _runtime(ctx) if key_type == GROUP_KEY else ctx.transactions
    node = runtime.coordinator_node(key) if runtime is not None else -1
    broker = ctx.image.brokers.get(node)
    registered = broker.endpoint(conn.listener.name) if broker is not None else None
    if registered is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
    return ErrorCode.NONE, None, node, registered.host, registered.port


# ----------------------------------------------------------------------------------------- JoinGroup


async def join_group(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(JOIN_GROUP, header.api_version)
    version = header.api_version
    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(request.rebalance_timeout) if version >= 1 else session_ms
    req = JoinGroup(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=request.protocol_type,
        protocols=tuple(Protocol(p.name, bytes(p.metadata)) for p in request.protocols),
        client_id=conn.client_id or "",
        client_host="/" + conn.peer.rsplit(":", 1)[0],
        reason=getattr(request, "reason", None),
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    runtime = _runtime(ctx)
    if not authorize(ctx, conn, Op.READ, GROUP, request.group_id):
        result = JoinGroupResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, req.member_id)
    elif runtime is None:
        result = JoinGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
    else:
        result = await runtime.join_group(req)
    members = tuple(
        b.make("JoinGroupResponseMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
               metadata=m.metadata)
        for m in result.members
    )
    return b.make(
        "JoinGroupResponse", throttle_time=NO_THROTTLE, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id, members=members,
    )


# ----------------------------------------------------------------------------------------- SyncGroup


async def sync_group(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(SYNC_GROUP, header.api_version)
    req = SyncGroup(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
    )
    runtime = _runtime(ctx)
    refused = not authorize(ctx, conn, Op.READ, GROUP, request.group_id)
    if refused or runtime is None:
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED if refused else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return b.make("SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=error,
                      protocol_type=None, protocol_name=None, assignment=b"")
    result = await runtime.sync_group(req)
    return b.make("SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=result.error,
                  protocol_type=result.protocol_type, protocol_name=result.protocol_name, assignment=result.assignment)


# ----------------------------------------------------------------------------------------- Heartbeat


async def heartbeat(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(HEARTBEAT, header.api_version)
    runtime = _runtime(ctx)
    req = Heartbeat(request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None))
    if not authorize(ctx, conn, Op.READ, GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE if runtime is None else await runtime.heartbeat(req)
    return b.make("HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=error)


# ---------------------------------------------------------------------------------------- LeaveGroup


async def leave_group(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(LEAVE_GROUP, header.api_version)
    if header.api_version >= 3:
        leaving = tuple(LeavingMember(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in request.members)
    else:
        leaving = (LeavingMember(request.member_id),)
    runtime = _runtime(ctx)
    refused = not authorize(ctx, conn, Op.READ, GROUP, request.group_id)
    if refused or runtime is None:
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED if refused else ErrorCode.COORDINATOR_NOT_AVAILABLE
        return b.make("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=error, members=())
    result = await runtime.leave_group(request.group_id, leaving)
    if header.api_version < 3:
        # One member per request: its own error is the answer.
        error = result.error
        if error is ErrorCode.NONE and result.members:
            error = result.members[0][1]
        return b.make("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=error)
    members = tuple(
        b.make("MemberResponse", member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=e)
        for m, e in result.members
    )
    return b.make("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=result.error, members=members)


# -------------------------------------------------------------------------------------- OffsetCommit


async def offset_commit(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(OFFSET_COMMIT, header.api_version)
    retention = getattr(request, "retention_time", -1)
    req = OffsetCommit(
        group_id=request.group_id,
        generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        topics=tuple(
            (t.name, tuple(
                CommitPartition(p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                p.committed_metadata)
                for p in t.partitions
            ))
            for t in request.topics
        ),
        retention_ms=_ms(retention) if _ms(retention) >= 0 else -1,
        group_id_not_found_error=header.api_version >= 9,
    )
    runtime = _runtime(ctx)
    denied = denied_topics(ctx, conn, (t for t, _ in req.topics), Op.READ)
    refused = tuple(
        (t, tuple((p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in ps)) for t, ps in req.topics if t in denied
    )
    if denied:
        req = dataclasses.replace(req, topics=tuple((t, ps) for t, ps in req.topics if t not in denied))
    if not authorize(ctx, conn, Op.READ, GROUP, request.group_id):
        topics = tuple((t, tuple((p.partition, ErrorCode.GROUP_AUTHORIZATION_FAILED) for p in ps)) for t, ps in req.topics)
        refused = ()
    elif runtime is None:
        topics = tuple((t, tuple((p.partition, ErrorCode.COORDINATOR_NOT_AVAILABLE) for p in ps)) for t, ps in req.topics)
    else:
        topics = (await runtime.commit_offsets(req)).topics
    topics = tuple(topics) + refused
    return b.make("OffsetCommitResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b.make("OffsetCommitResponseTopic", name=topic, partitions=tuple(
            b.make("OffsetCommitResponsePartition", partition_index=p, error_code=e) for p, e in parts
        ))
        for topic, parts in topics
    ))


# --------------------------------------------------------------------------------------- OffsetFetch


async def offset_fetch(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(OFFSET_FETCH, header.api_version)
    version = header.api_version
    runtime = _runtime(ctx)
    require_stable = bool(getattr(request, "require_stable", False))

    def fetch(group_id: str, topics: Any) -> Any:
        wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
        if not authorize(ctx, conn, Op.DESCRIBE, GROUP, group_id):
            return OffsetFetchResult(ErrorCode.GROUP_AUTHORIZATION_FAILED), wanted
        if runtime is None:
            return OffsetFetchResult(ErrorCode.COORDINATOR_NOT_AVAILABLE), wanted
        result = _describable(ctx, conn, runtime.fetch_offsets(group_id, wanted), all_topics=wanted is None)
        return (_stable(runtime, group_id, result) if require_stable else result), wanted

    if version >= 8:
        groups = []
        for group in request.groups:
            result, _ = fetch(group.group_id, group.topics)
            groups.append(b.make("OffsetFetchResponseGroup", group_id=group.group_id, error_code=result.error,
                                 topics=_fetched_topics(b, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions",
                                                        result.topics)))
        return b.make("OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=tuple(groups))
    result, wanted = fetch(request.group_id, request.topics)
    topics = result.topics
    if version < 2 and result.error is not ErrorCode.NONE:
        # v0-1 have no top-level error: every partition asked for carries it.
        topics = tuple((t, tuple(FetchedOffset(p, error=result.error) for p in ps)) for t, ps in wanted or [])
    return b.make("OffsetFetchResponse", throttle_time=NO_THROTTLE, error_code=result.error,
                  topics=_fetched_topics(b, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition", topics))


def _stable(runtime: GroupRuntime, group_id: str, result: OffsetFetchResult) -> OffsetFetchResult:
    """Partitions whose offset an open transaction holds answer UNSTABLE_OFFSET_COMMIT (require_stable)."""
    pending = runtime.core.offset_manager.has_pending
    return dataclasses.replace(result, topics=tuple(
        (topic, tuple(FetchedOffset(p.partition, error=ErrorCode.UNSTABLE_OFFSET_COMMIT)
                      if p.error is ErrorCode.NONE and pending(group_id, topic, p.partition) else p for p in parts))
        for topic, parts in result.topics
    ))


def _describable(ctx: BrokerContext, conn: ConnectionInfo, result: OffsetFetchResult, all_topics: bool) -> OffsetFetchResult:
    """Offsets of topics the principal may not describe: left out of an all-topics fetch, refused otherwise."""
    if ctx.authorizer is None:
        return result
    topics = []
    for topic, parts in result.topics:
        if all_topics:
            if authorize(ctx, conn, Op.DESCRIBE, TOPIC, topic, record=False):
                topics.append((topic, parts))
        elif authorize(ctx, conn, Op.DESCRIBE, TOPIC, topic):
            topics.append((topic, parts))
        else:
            topics.append((topic, tuple(FetchedOffset(p.partition, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in parts)))
    return dataclasses.replace(result, topics=tuple(topics))


def _fetched_topics(b: Any, topic_class: str, partition_class: str, topics: Any) -> tuple[Any, ...]:
    return tuple(
        b.make(topic_class, name=topic, partitions=tuple(
            b.make(partition_class, partition_index=p.partition, committed_offset=p.offset,
                   committed_leader_epoch=p.leader_epoch, metadata=p.metadata, error_code=p.error)
            for p in parts
        ))
        for topic, parts in topics
    )


# ---------------------------------------------------------------------------- admin: describe, list


async def describe_groups(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_GROUPS, header.api_version)
    runtime = _runtime(ctx)
    ids = list(request.groups)
    refused = {g for g in ids if not authorize(ctx, conn, Op.DESCRIBE, GROUP, g)} if ctx.authorizer is not None else set()
    allowed = [g for g in ids if g not in refused]
    if runtime is None:
        described = [DescribedGroup(g, ErrorCode.COORDINATOR_NOT_AVAILABLE, "") for g in allowed]
    else:
        described = runtime.describe_groups(allowed, unknown_is_error=header.api_version >= 6)
    if refused:
        by_id = {g.group_id: g for g in described}
        described = [by_id[g] if g in by_id else DescribedGroup(g, ErrorCode.GROUP_AUTHORIZATION_FAILED, "") for g in ids]
    with_operations = getattr(request, "include_authorized_operations", False)

    def operations(group_id: str) -> int:
        if not with_operations:
            return UNAUTHORIZED_OPERATIONS
        return GROUP_OPERATIONS if ctx.authorizer is None else authorized_operations(ctx, conn, GROUP, group_id)

    return b.make("DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=tuple(
        b.make(
            "DescribedGroup", error_code=g.error, error_message=g.error_message, group_id=g.group_id,
            group_state=g.state, protocol_type=g.protocol_type, protocol_data=g.protocol_data,
            authorized_operations=operations(g.group_id) if g.error is ErrorCode.NONE else UNAUTHORIZED_OPERATIONS,
            members=tuple(
                b.make("DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                       client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                       member_assignment=m.assignment)
                for m in g.members
            ),
        )
        for g in described
    ))


async def list_groups(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(LIST_GROUPS, header.api_version)
    runtime = _runtime(ctx)
    states = list(getattr(request, "states_filter", ()) or ())
    types = list(getattr(request, "types_filter", ()) or ())
    # No __consumer_offsets yet means no group at all, not an unavailable coordinator.
    error, listed = (ErrorCode.NONE, []) if runtime is None else runtime.list_groups(states, types)
    if ctx.authorizer is not None and not authorize(ctx, conn, Op.DESCRIBE, CLUSTER, CLUSTER_NAME, record=False):
        listed = [g for g in listed if authorize(ctx, conn, Op.DESCRIBE, GROUP, g.group_id, record=False)]
    return b.make("ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=error, groups=tuple(
        b.make("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
               group_type=g.group_type)
        for g in listed
    ))


# ----------------------------------------------------------------------- admin: delete groups, offsets


async def delete_groups(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DELETE_GROUPS, header.api_version)
    runtime = _runtime(ctx)
    ids = list(request.groups_names)
    refused = [g for g in ids if not authorize(ctx, conn, Op.DELETE, GROUP, g)] if ctx.authorizer is not None else []
    allowed = [g for g in ids if g not in refused]
    if runtime is None:
        results = [(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in allowed]
    else:
        results = list(await runtime.delete_groups(allowed)) if allowed else []
    results += [(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in refused]
    return b.make("DeleteGroupsResponse", throttle_time=NO_THROTTLE, results=tuple(
        b.make("DeletableGroupResult", group_id=g, error_code=e) for g, e in results
    ))


async def offset_delete(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(OFFSET_DELETE, header.api_version)
    runtime = _runtime(ctx)
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics]
    denied = denied_topics(ctx, conn, (t for t, _ in topics), Op.READ)
    if not authorize(ctx, conn, Op.DELETE, GROUP, request.group_id):
        result = OffsetDeleteResult(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif runtime is None:
        result = OffsetDeleteResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await runtime.delete_offsets(request.group_id, [(t, ps) for t, ps in topics if t not in denied])
        refused = tuple((t, tuple((p, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in ps)) for t, ps in topics if t in denied)
        result = dataclasses.replace(result, topics=tuple(result.topics) + refused)
    return b.make("OffsetDeleteResponse", throttle_time=NO_THROTTLE, error_code=result.error, topics=tuple(
        b.make("OffsetDeleteResponseTopic", name=topic, partitions=tuple(
            b.make("OffsetDeleteResponsePartition", partition_index=p, error_code=e) for p, e in parts
        ))
        for topic, parts in result.topics
    ))
