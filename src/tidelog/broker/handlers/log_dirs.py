"""DescribeLogDirs and AlterReplicaLogDirs: each log dir's health, free space and partitions, and
moves of replicas between the log dirs of this broker (storage/dir_mover.py).

DescribeLogDirs lists, per dir, the partitions whose log lives there and the *future* replicas being
copied into it (``is_future_key`` true, ``offset_lag``: offsets the copy still has to take from the
current log), as Kafka does while a move runs.

AlterReplicaLogDirs answers each partition on its own, as Kafka's ReplicaManager does:
LOG_DIR_NOT_FOUND when the path is not one of ``log.dirs``, KAFKA_STORAGE_ERROR when that dir (or the
replica's) is offline, REPLICA_NOT_AVAILABLE when this broker holds no replica of the partition,
CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster. Success means the move has started (or was
already running, or the replica is already there); the copy and the swap run in the background.
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.authz import Op, authorize_cluster
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode, KafkaError
from tidelog.protocol.headers import RequestHeader

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35


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
        rows = [(key, size, 0, False) for key, size in info.partition_sizes.items()]
        rows += [(key, size, lag, True) for key, (size, lag) in info.futures.items()]
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), size, lag, future in sorted(rows):
            if wanted is not None and partition not in wanted.get(topic, ()):
                continue
            by_topic.setdefault(topic, []).append(b.make(
                "DescribeLogDirsPartition", partition_index=partition, partition_size=size, offset_lag=lag, is_future_key=future,
            ))
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


def _move(ctx: BrokerContext, topic: str, partition: int, path: str) -> ErrorCode:
    try:
        ctx.logs.alter_log_dir(topic, partition, path)
    except KafkaError as exc:  # StorageError included: KAFKA_STORAGE_ERROR
        return exc.code
    return ErrorCode.NONE


async def alter_replica_log_dirs(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(ALTER_REPLICA_LOG_DIRS, header.api_version)
    allowed = authorize_cluster(ctx, conn, Op.ALTER)
    by_topic: dict[str, list[Any]] = {}
    for target in request.dirs:
        for topic in target.topics:
            for index in topic.partitions:
                error = _move(ctx, str(topic.name), int(index), str(target.path)) if allowed else (
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                by_topic.setdefault(str(topic.name), []).append(
                    b.make("AlterReplicaLogDirPartitionResult", partition_index=int(index), error_code=error))
    results = tuple(b.make("AlterReplicaLogDirTopicResult", topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    return b.make("AlterReplicaLogDirsResponse", throttle_time=NO_THROTTLE, results=results)
