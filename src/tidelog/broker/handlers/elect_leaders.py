"""ElectLeaders (43): preferred or unclean leader elections on request (kafka-leader-election.sh).

ALTER on the cluster is required (CLUSTER_AUTHORIZATION_FAILED otherwise). Each partition's answer is
decided by ``controller.elections.requested_election`` from the current image and the live brokers,
and written with a compare-and-set on the partition (a lost race answers NOT_CONTROLLER, retriable).
A null partition list means every partition. On a single node every partition is led by its only,
preferred replica: each answers ELECTION_NOT_NEEDED, as a single-node Kafka does.
"""

from __future__ import annotations

from typing import Any

from tidelog.broker.authz import Op, authorize_cluster
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.errors import ErrorCode
from tidelog.controller.elections import requested_election
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.headers import RequestHeader


def _wanted(ctx: BrokerContext, request: Any) -> list[tuple[str, list[int]]]:
    if request.topic_partitions is None:
        return [(t.name, [p.index for p in t.partitions]) for t in ctx.image.topics.values()]
    return [(str(t.topic), [int(p) for p in t.partitions]) for t in request.topic_partitions]


async def elect_leaders(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(ApiKey.ELECT_LEADERS, header.api_version)
    election_type = int(getattr(request, "election_type", 0))
    allowed = authorize_cluster(ctx, conn, Op.ALTER)
    results = []
    for topic, partitions in _wanted(ctx, request):
        answers = []
        for index in partitions:
            error, message = (await _elect(ctx, topic, index, election_type)) if allowed else (
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
            answers.append(b.make("PartitionResult", partition_id=index, error_code=error, error_message=message))
        results.append(b.make("ReplicaElectionResult", topic=topic, partition_result=tuple(answers)))
    return b.make("ElectLeadersResponse", throttle_time=NO_THROTTLE,
                  error_code=ErrorCode.NONE if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                  replica_election_results=tuple(results))


async def _elect(ctx: BrokerContext, topic: str, index: int, election_type: int) -> tuple[ErrorCode, str | None]:
    image = ctx.image
    known = image.topics.get(topic)
    if known is None or not 0 <= index < len(known.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    current = known.partitions[index]
    live = frozenset(image.brokers) if image.brokers else frozenset({ctx.node_id})
    error, new = requested_election(current, live, election_type)
    if new is None:
        return error, None
    alter = getattr(ctx.store, "alter_partition", None)
    if alter is None or not await alter(topic, index, current, new):
        return ErrorCode.NOT_CONTROLLER, "The partition changed meanwhile; try again."
    return ErrorCode.NONE, None
