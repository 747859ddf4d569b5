"""DescribeClientQuotas (48) and AlterClientQuotas (49): Kafka's client quotas in the cluster metadata.

Quotas live in the cluster image (``ClusterImage.client_quotas``), so the local file of a single node
and etcd in a cluster both keep them, and every broker applies them when its image changes
(``broker/quota_runtime.py``). The checks and their error messages are Kafka's
(``quotas/entity.py``); AlterClientQuotas answers per entity, commits every accepted entity in one
new image, and with ``validate_only`` checks without committing. Describe needs DESCRIBE_CONFIGS on
the cluster and alter ALTER_CONFIGS, as in Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from tidelog.broker.authz import Op, authorize_cluster
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.protocol.headers import RequestHeader
from tidelog.quotas.entity import Entity, QuotaError, QuotaFilter, alter, describe, validate_entity

log = logging.getLogger(__name__)

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
NOT_AUTHORIZED = "Cluster authorization failed."
ECHO_ORDER = {"client-id": 0, "user": 1, "ip": 2}


async def describe_client_quotas(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_CLIENT_QUOTAS, header.api_version)

    def answer(error: ErrorCode, message: str | None, entries: tuple[Any, ...] | None) -> Any:
        return b.make("DescribeClientQuotasResponse", throttle_time=NO_THROTTLE, error_code=error,
                      error_message=message, entries=entries)

    if not authorize_cluster(ctx, conn, Op.DESCRIBE_CONFIGS):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED, None)
    try:
        flt = QuotaFilter(((c.entity_type, c.match_type, c.match) for c in request.components), request.strict)
    except QuotaError as exc:
        return answer(exc.code, str(exc), None)
    entries = tuple(
        b.make(
            "EntryData",
            entity=tuple(b.make("EntityData", entity_type=kind, entity_name=name) for kind, name in entity),
            values=tuple(b.make("ValueData", key=key, value=value) for key, value in sorted(values.items())),
        )
        for entity, values in ctx.image.client_quotas.items() if flt.matches(entity)
    )
    return answer(ErrorCode.NONE, "", entries)  # Kafka's success carries an empty message, not null


def _altered(current: dict[Entity, dict[str, float]], entry: Any) -> tuple[Entity, dict[str, float]]:
    """(entity, its values after the entry's ops); raises QuotaError."""
    entity, keys = validate_entity((part.entity_type, part.entity_name) for part in entry.entity)
    return entity, alter(current.get(entity, {}), keys, ((op.key, op.value, op.remove) for op in entry.ops))


async def alter_client_quotas(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(ALTER_CLIENT_QUOTAS, header.api_version)

    def result(entry: Any, error: ErrorCode, message: str | None) -> Any:
        # Kafka echoes the entity from its small HashMap of type to name: client-id, user, ip.
        ordered = sorted(entry.entity, key=lambda p: ECHO_ORDER.get(p.entity_type, len(ECHO_ORDER)))
        parts = tuple(b.make("EntityData", entity_type=p.entity_type, entity_name=p.entity_name) for p in ordered)
        return b.make("EntryData", error_code=error, error_message=message, entity=parts)

    if not authorize_cluster(ctx, conn, Op.ALTER_CONFIGS):
        refused = tuple(result(e, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED) for e in request.entries)
        return b.make("AlterClientQuotasResponse", throttle_time=NO_THROTTLE, entries=refused)
    image = ctx.image
    current = {entity: dict(values) for entity, values in image.client_quotas.items()}
    results: list[Any] = []
    changed: list[Entity] = []
    for entry in request.entries:
        try:
            entity, values = _altered(current, entry)
        except QuotaError as exc:
            results.append(result(entry, exc.code, str(exc)))
            continue
        if values != current.get(entity, {}):
            current[entity] = values
            changed.append(entity)
        results.append(result(entry, ErrorCode.NONE, None))
    if changed and not request.validate_only:
        await ctx.store.commit(image.with_client_quotas(current))
        log.info("%s altered client quotas of %s", conn.principal, "; ".join(describe(e) for e in changed))
    return b.make("AlterClientQuotasResponse", throttle_time=NO_THROTTLE, entries=tuple(results))
