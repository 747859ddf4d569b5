"""WriteTxnMarkers (API 27, v1-2): a transaction coordinator asks this broker, as the leader of some
partitions, to end a producer's transaction in them with a COMMIT or ABORT control batch.

Served by every broker; sent by other brokers' transaction coordinators (``broker/txn_markers.py``),
never by clients. Kafka's ACL: CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED for every
partition otherwise). Each marker of the request is written by ``MarkerWriter`` (leader check, the
coordinator-epoch fence, offsets handed to the group coordinator for ``__consumer_offsets``, the
answer after the high watermark passes the marker); the markers of one request are written
concurrently and answered one error code per partition. v2's ``transaction_version`` is read and
ignored: every marker is written the same way (transactions v2 are not served).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tidelog.broker.authz import Op, authorize_cluster
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.handlers.transactions import runtime_of
from tidelog.broker.responses import builder
from tidelog.broker.txn_markers import Marker
from tidelog.common.errors import ErrorCode
from tidelog.protocol.headers import RequestHeader

WRITE_TXN_MARKERS = 27
TopicPartition = tuple[str, int]


def _marker(entry: Any) -> Marker:
    return Marker(
        int(entry.producer_id), int(entry.producer_epoch), bool(entry.transaction_result), int(entry.coordinator_epoch),
        tuple((str(topic.name), int(p)) for topic in entry.topics for p in topic.partition_indexes),
    )


async def write_txn_markers(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(WRITE_TXN_MARKERS, header.api_version)
    markers = [_marker(entry) for entry in request.markers]
    runtime = runtime_of(ctx)
    answers: list[dict[TopicPartition, ErrorCode]]
    if not authorize_cluster(ctx, conn, Op.CLUSTER_ACTION):
        answers = [dict.fromkeys(m.partitions, ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for m in markers]
    elif runtime is None:
        answers = [dict.fromkeys(m.partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE) for m in markers]
    else:
        answers = list(await asyncio.gather(*(runtime.writer.write(m) for m in markers)))
    results = []
    for marker, errors in zip(markers, answers, strict=True):
        by_topic: dict[str, list[Any]] = {}
        for topic, index in marker.partitions:
            by_topic.setdefault(topic, []).append(b.make(
                "WritableTxnMarkerPartitionResult", partition_index=index,
                error_code=errors.get((topic, index), ErrorCode.UNKNOWN_SERVER_ERROR)))
        results.append(b.make(
            "WritableTxnMarkerResult", producer_id=marker.producer_id,
            topics=tuple(b.make("WritableTxnMarkerTopicResult", name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        ))
    return b.make("WriteTxnMarkersResponse", markers=tuple(results))
