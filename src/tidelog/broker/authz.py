"""ACL checks for handlers: one call per check, and one attribute test when no authorizer is set.

Handlers call ``authorize`` where Kafka checks, with Kafka's operation and resource, and answer
Kafka's error code when it says no (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Where Kafka accepts either of
two permissions ("CREATE on the cluster, else CREATE on the topic") they are listed in one
``authorize_any_of`` call, narrowest first: in audit mode that first one is what gets recorded.

With ``authorizer.class.name`` empty, ``ctx.authorizer`` is None and every check passes.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.common.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclBinding, AclOperation, ResourceType
from tidelog.common.acl_authorizer import operations_bitfield
from tidelog.metadata.image import AclEntry
from tidelog.security.access import Action

__all__ = [
    "CLUSTER",
    "CLUSTER_NAME",
    "GROUP",
    "TOPIC",
    "TRANSACTIONAL_ID",
    "Action",
    "Op",
    "acl_entry",
    "authorize",
    "authorize_any_of",
    "authorize_cluster",
    "authorized_operations",
    "cluster_authorized_operations",
    "denied_topics",
]

Op = AclOperation
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (
    ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
)


def authorize(
    ctx: BrokerContext, conn: ConnectionInfo, operation: AclOperation, resource_type: ResourceType, name: str,
    *, record: bool = True,
) -> bool:
    """May this connection perform ``operation`` on the resource? ``record=False`` for checks that
    only filter what the client sees (nothing is logged or audited when they fail)."""
    gate = ctx.authorizer
    if gate is None:
        return True
    return gate.check(
        conn.principal, conn.host, conn.listener.name, conn.client_id, (Action(operation, resource_type, name),), record=record
    )


def authorize_cluster(ctx: BrokerContext, conn: ConnectionInfo, operation: AclOperation) -> bool:
    return authorize(ctx, conn, operation, CLUSTER, CLUSTER_NAME)


_NOTHING: frozenset[str] = frozenset()


def denied_topics(ctx: BrokerContext, conn: ConnectionInfo, names: Iterable[str], operation: AclOperation) -> frozenset[str]:
    """The topics among ``names`` this connection may not ``operation`` (each checked once)."""
    if ctx.authorizer is None:
        return _NOTHING
    return frozenset(name for name in set(names) if not authorize(ctx, conn, operation, TOPIC, name))


def authorize_any_of(ctx: BrokerContext, conn: ConnectionInfo, *actions: Action) -> bool:
    """Allowed if any of ``actions`` is; the first is the one audited. ``Action(op, type, None)``
    means "on at least one resource of the type" (Kafka's authorizeByResourceType)."""
    gate = ctx.authorizer
    if gate is None:
        return True
    return gate.check(conn.principal, conn.host, conn.listener.name, conn.client_id, actions)


def authorized_operations(ctx: BrokerContext, conn: ConnectionInfo, resource_type: ResourceType, name: str) -> int:
    """The ``*_authorized_operations`` bit field of a resource for this connection (every operation
    of the type when there is no authorizer, as Kafka answers)."""
    gate = ctx.authorizer
    if gate is None:
        return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
    return operations_bitfield(gate.current().authorized_operations(conn.principal, conn.host, resource_type, name))


def cluster_authorized_operations(ctx: BrokerContext, conn: ConnectionInfo) -> int:
    """Kafka's cluster_authorized_operations: the cluster's operations if DESCRIBE is allowed, else 0."""
    if not authorize_cluster(ctx, conn, Op.DESCRIBE):
        return 0
    return authorized_operations(ctx, conn, CLUSTER, CLUSTER_NAME)


def acl_entry(binding: AclBinding) -> AclEntry:
    """The metadata image's form of a binding."""
    return AclEntry(
        int(binding.resource_type), binding.resource_name, int(binding.pattern_type), binding.principal,
        binding.host, int(binding.operation), int(binding.permission_type),
    )
