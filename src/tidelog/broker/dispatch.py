"""API key → handler. Only keys with a handler are advertised in ApiVersions.

PROTOCOL_NOTES: never advertise what is not served (librdkafka starts using an API as soon as it is
advertised), and advertise the ranges older clients look for (Produce from 0, handled by
``protocol.apis.advertised_range``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import tidelog.broker.handlers.consumer_groups as consumer_group_handlers
import tidelog.broker.handlers.security as security_handlers
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.handlers import (
    admin_describe,
    client_quotas,
    cluster,
    configs,
    elect_leaders,
    fetch,
    groups,
    log_dirs,
    mirror_produce,
    offsets,
    produce,
    reassignments,
    topics,
    transactions,
    txn_markers,
)
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.protocol import apis
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.headers import RequestHeader

Handler = Callable[[BrokerContext, ConnectionInfo, RequestHeader, Any], Awaitable[Any]]


async def api_versions(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    """ApiVersions: the table below is what is advertised (served here, so no handler module imports
    this one back)."""
    b = builder(ApiKey.API_VERSIONS, header.api_version)
    keys = tuple(
        b.make("ApiVersion", api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(advertised_ranges().items())
    )
    return b.make("ApiVersionsResponse", error_code=ErrorCode.NONE, api_keys=keys, throttle_time=NO_THROTTLE)


HANDLERS: dict[int, Handler] = {
    ApiKey.API_VERSIONS: api_versions,
    ApiKey.METADATA: cluster.metadata,
    ApiKey.DESCRIBE_CLUSTER: cluster.describe_cluster,
    ApiKey.PRODUCE: produce.produce,
    ApiKey.INIT_PRODUCER_ID: produce.init_producer_id,
    ApiKey.FETCH: fetch.fetch,
    ApiKey.LIST_OFFSETS: offsets.list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offsets.offset_for_leader_epoch,
    ApiKey.DELETE_RECORDS: offsets.delete_records,
    ApiKey.CREATE_TOPICS: topics.create_topics,
    ApiKey.DELETE_TOPICS: topics.delete_topics,
    ApiKey.CREATE_PARTITIONS: topics.create_partitions,
    ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
    ApiKey.ALTER_CONFIGS: configs.alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: log_dirs.alter_replica_log_dirs,
    ApiKey.ELECT_LEADERS: elect_leaders.elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: reassignments.alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: reassignments.list_partition_reassignments,
    ApiKey.SASL_HANDSHAKE: security_handlers.sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: security_handlers.sasl_authenticate,
    ApiKey.DESCRIBE_ACLS: security_handlers.describe_acls,
    ApiKey.CREATE_ACLS: security_handlers.create_acls,
    ApiKey.DELETE_ACLS: security_handlers.delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: security_handlers.describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: security_handlers.alter_user_scram_credentials,
    ApiKey.FIND_COORDINATOR: groups.find_coordinator,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.OFFSET_COMMIT: groups.offset_commit,
    ApiKey.OFFSET_FETCH: groups.offset_fetch,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.LIST_GROUPS: groups.list_groups,
    ApiKey.DELETE_GROUPS: groups.delete_groups,
    ApiKey.OFFSET_DELETE: groups.offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_group_handlers.consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group_handlers.consumer_group_describe,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.add_offsets_to_txn,
    ApiKey.END_TXN: transactions.end_txn,
    ApiKey.TXN_OFFSET_COMMIT: transactions.txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: txn_markers.write_txn_markers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.list_transactions,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: admin_describe.describe_topic_partitions,
    ApiKey.DESCRIBE_PRODUCERS: admin_describe.describe_producers,
    ApiKey.DESCRIBE_QUORUM: admin_describe.describe_quorum,
    ApiKey.LIST_CONFIG_RESOURCES: admin_describe.list_config_resources,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quotas.describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: client_quotas.alter_client_quotas,
    ApiKey.MIRROR_PRODUCE: mirror_produce.mirror_produce,  # tidelog's own key (protocol/mirror_produce.py)
}


def advertised_ranges() -> dict[int, tuple[int, int]]:
    return {int(key): apis.advertised_range(key) for key in HANDLERS}


def handler_for(api_key: int) -> Handler | None:
    return HANDLERS.get(api_key)
