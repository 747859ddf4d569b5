"""Transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn (0-3),
AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions and ListTransactions.

Each handler asks the runtime (``broker/txn_runtime.py``) and answers in the request's version.
Version differences: PRODUCER_FENCED (KIP-588) exists from InitProducerId v4, AddPartitionsToTxn v2,
AddOffsetsToTxn v2, EndTxn v2 and TxnOffsetCommit v3; older versions get INVALID_PRODUCER_EPOCH,
as Kafka answers them. InitProducerId v3+ may name the producer's current id and epoch (KIP-360), to
bump its epoch after an abortable error instead of being fenced.

ACLs, as Kafka checks them: WRITE on the transactional id for every API here; AddPartitionsToTxn
WRITE on each topic (the others then answer OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn and
TxnOffsetCommit READ on the group, TxnOffsetCommit READ on each topic. DescribeTransactions and
ListTransactions need DESCRIBE on the transactional id (ListTransactions leaves the others out).
"""

from __future__ import annotations

import datetime
from typing import Any

from tidelog.broker.authz import GROUP, TOPIC, TRANSACTIONAL_ID, Op, authorize
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.broker.txn_runtime import TxnRuntime
from tidelog.common.errors import ErrorCode
from tidelog.coordinator.messages import CommitPartition, OffsetCommit
from tidelog.coordinator.txn_coordinator import DescribedTxn
from tidelog.coordinator.txn_records import TxnState
from tidelog.protocol.headers import RequestHeader

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
# The first version of each API that knows PRODUCER_FENCED.
FENCED_FROM = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2, END_TXN: 2, TXN_OFFSET_COMMIT: 3}


def _ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def for_version(error: ErrorCode, api_key: int, version: int) -> ErrorCode:
    if error is ErrorCode.PRODUCER_FENCED and version < FENCED_FROM[api_key]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def runtime_of(ctx: BrokerContext) -> TxnRuntime | None:
    txns = ctx.transactions
    return txns if isinstance(txns, TxnRuntime) else None


# ---------------------------------------------------------------------------------- InitProducerId


async def init_producer_id(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    """InitProducerId for a transactional id (the idempotent case stays in handlers/produce.py)."""
    b = builder(INIT_PRODUCER_ID, header.api_version)
    runtime = runtime_of(ctx)
    pid, epoch = -1, -1
    if not authorize(ctx, conn, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif runtime is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        decision = await runtime.init_producer_id(
            request.transactional_id, _ms(request.transaction_timeout),
            getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1),
        )
        error = decision.error
        if error is ErrorCode.NONE:
            pid, epoch = decision.producer_id, decision.producer_epoch
    return b.make("InitProducerIdResponse", throttle_time=NO_THROTTLE,
                  error_code=for_version(error, INIT_PRODUCER_ID, header.api_version),
                  producer_id=pid, producer_epoch=epoch)


# ------------------------------------------------------------------------------ AddPartitionsToTxn


async def add_partitions_to_txn(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(ADD_PARTITIONS_TO_TXN, header.api_version)
    version = header.api_version
    txn_id = request.v3_and_below_transactional_id
    wanted = [(t.name, list(t.partitions)) for t in request.v3_and_below_topics]
    errors: dict[tuple[str, int], ErrorCode] = {}
    runtime = runtime_of(ctx)
    if not authorize(ctx, conn, Op.WRITE, TRANSACTIONAL_ID, txn_id):
        errors = {(t, p): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t, ps in wanted for p in ps}
    else:
        for topic, partitions in wanted:
            known = ctx.image.topics.get(topic)
            for p in partitions:
                if not authorize(ctx, conn, Op.WRITE, TOPIC, topic):
                    errors[(topic, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif known is None or not 0 <= p < len(known.partitions):
                    errors[(topic, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if errors:
            for topic, partitions in wanted:
                for p in partitions:
                    errors.setdefault((topic, p), ErrorCode.OPERATION_NOT_ATTEMPTED)
        else:
            flat = [(t, p) for t, ps in wanted for p in ps]
            if runtime is None:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                error = await runtime.add_partitions(txn_id, request.v3_and_below_producer_id,
                                                     request.v3_and_below_producer_epoch, flat)
            error = for_version(error, ADD_PARTITIONS_TO_TXN, version)
            errors = dict.fromkeys(flat, error)
    return b.make("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=tuple(
        b.make("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=tuple(
            b.make("AddPartitionsToTxnPartitionResult", partition_index=p, partition_error_code=errors[(topic, p)])
            for p in partitions
        ))
        for topic, partitions in wanted
    ))


# -------------------------------------------------------------------------------- AddOffsetsToTxn


async def add_offsets_to_txn(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(ADD_OFFSETS_TO_TXN, header.api_version)
    runtime = runtime_of(ctx)
    if not authorize(ctx, conn, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(ctx, conn, Op.READ, GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif runtime is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = await runtime.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                          request.group_id)
    return b.make("AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE,
                  error_code=for_version(error, ADD_OFFSETS_TO_TXN, header.api_version))


# ----------------------------------------------------------------------------------------- EndTxn


async def end_txn(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(END_TXN, header.api_version)
    runtime = runtime_of(ctx)
    if not authorize(ctx, conn, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif runtime is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        decision = await runtime.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                          request.committed)
        error = decision.error
    return b.make("EndTxnResponse", throttle_time=NO_THROTTLE, error_code=for_version(error, END_TXN, header.api_version),
                  producer_id=-1, producer_epoch=-1)


# -------------------------------------------------------------------------------- TxnOffsetCommit


async def txn_offset_commit(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(TXN_OFFSET_COMMIT, header.api_version)
    runtime = runtime_of(ctx)
    groups = ctx.groups
    req = OffsetCommit(
        group_id=request.group_id,
        generation_id=getattr(request, "generation_id", -1),
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        topics=tuple(
            (t.name, tuple(
                CommitPartition(p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                p.committed_metadata)
                for p in t.partitions
            ))
            for t in request.topics
        ),
    )
    if not authorize(ctx, conn, Op.WRITE, TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(ctx, conn, Op.READ, GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif runtime is None or groups is None or not groups.running:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = await runtime.check_offsets_producer(request.transactional_id, request.producer_id, request.producer_epoch)
    error = for_version(error, TXN_OFFSET_COMMIT, header.api_version)
    if error is ErrorCode.NONE and runtime is not None:
        refused = {t for t, _ in req.topics if not authorize(ctx, conn, Op.READ, TOPIC, t)}
        allowed = OffsetCommit(req.group_id, req.generation_id, req.member_id, req.group_instance_id,
                               tuple((t, ps) for t, ps in req.topics if t not in refused))
        result = await runtime.txn_offset_commit(request.producer_id, request.producer_epoch, allowed)
        topics = tuple(result.topics) + tuple(
            (t, tuple((p.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in ps)) for t, ps in req.topics if t in refused
        )
    else:
        topics = tuple((t, tuple((p.partition, error) for p in ps)) for t, ps in req.topics)
    return b.make("TxnOffsetCommitResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b.make("TxnOffsetCommitResponseTopic", name=topic, partitions=tuple(
            b.make("TxnOffsetCommitResponsePartition", partition_index=p, error_code=e) for p, e in parts
        ))
        for topic, parts in topics
    ))


# ------------------------------------------------------------------ DescribeTransactions, ListTransactions


async def describe_transactions(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    """DESCRIBE on each transactional id; topics the principal may not describe are left out."""
    b = builder(DESCRIBE_TRANSACTIONS, header.api_version)
    runtime = runtime_of(ctx)
    ids = list(request.transactional_ids)
    allowed = [t for t in ids if authorize(ctx, conn, Op.DESCRIBE, TRANSACTIONAL_ID, t)]
    described = {d.transactional_id: d for d in (await runtime.describe(allowed) if runtime is not None else
                                                 [DescribedTxn(t, ErrorCode.COORDINATOR_NOT_AVAILABLE) for t in allowed])}
    states = []
    for txn_id in ids:
        found = described.get(txn_id, DescribedTxn(txn_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        value = found.value
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(value.partitions if value is not None else ()):
            if authorize(ctx, conn, Op.DESCRIBE, TOPIC, topic, record=False):
                by_topic.setdefault(topic, []).append(partition)
        states.append(b.make(
            "TransactionState", error_code=found.error, transactional_id=txn_id,
            transaction_state=value.state.display if value is not None else "",
            transaction_timeout=datetime.timedelta(milliseconds=value.timeout_ms if value is not None else 0),
            transaction_start_time=_time(value.start_ms if value is not None else -1),
            producer_id=value.producer_id if value is not None else -1,
            producer_epoch=value.producer_epoch if value is not None else -1,
            topics=tuple(b.make("TopicData", topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        ))
    return b.make("DescribeTransactionsResponse", throttle_time=NO_THROTTLE, transaction_states=tuple(states))


async def list_transactions(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    """Every transaction the principal may DESCRIBE, filtered by state, producer id and (v1) age."""
    b = builder(LIST_TRANSACTIONS, header.api_version)
    runtime = runtime_of(ctx)
    states = list(request.state_filters)
    unknown = tuple(s for s in states if TxnState.from_display(s) is None)
    duration = int(getattr(request, "duration_filter", -1))
    listed: list[DescribedTxn] = []
    error = ErrorCode.NONE
    if runtime is not None:
        error, listed = runtime.list(states, list(request.producer_id_filters), duration)
    listed = [d for d in listed if authorize(ctx, conn, Op.DESCRIBE, TRANSACTIONAL_ID, d.transactional_id, record=False)]
    return b.make("ListTransactionsResponse", throttle_time=NO_THROTTLE, error_code=error,
                  unknown_state_filters=unknown, transaction_states=tuple(
                      b.make("TransactionState", transactional_id=d.transactional_id,
                             producer_id=d.value.producer_id if d.value is not None else -1,
                             transaction_state=d.value.state.display if d.value is not None else "")
                      for d in listed
                  ))


def _time(ms: int) -> datetime.datetime:
    """A timestamp for the wire; -1 (none) as Kafka sends it, the epoch minus one millisecond."""
    return datetime.datetime.fromtimestamp(0, datetime.UTC) + datetime.timedelta(milliseconds=ms)
