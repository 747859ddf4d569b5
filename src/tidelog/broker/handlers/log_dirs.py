"""DescribeLogDirs: each log dir's health, free space and partition sizes."""

from __future__ import annotations

from typing import Any

from tidelog.broker.authz import Op, authorize_cluster
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.protocol.headers import RequestHeader

DESCRIBE_LOG_DIRS = 35


async def describe_log_dirs(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_LOG_DIRS, header.api_version)
    if not authorize_cluster(ctx, conn, Op.DESCRIBE):
        # v3+ carries the error; older versions get an empty answer, as from Kafka.
        return b.make(
            "DescribeLogDirsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=()
        )
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    results = []
    for info in ctx.logs.describe_log_dirs():
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), size in sorted(info.partition_sizes.items()):
            if wanted is not None and partition not in wanted.get(topic, ()):
                continue
            by_topic.setdefault(topic, []).append(
                b.make("DescribeLogDirsPartition", partition_index=partition, partition_size=size, offset_lag=0, is_future_key=False)
            )
        results.append(
            b.make(
                "DescribeLogDirsResult",
                error_code=ErrorCode.KAFKA_STORAGE_ERROR if info.offline else ErrorCode.NONE,
                log_dir=str(info.path),
                topics=tuple(b.make("DescribeLogDirsTopic", name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                total_bytes=info.total_bytes,
                usable_bytes=info.usable_bytes,
            )
        )
    return b.make("DescribeLogDirsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.NONE, results=tuple(results))
