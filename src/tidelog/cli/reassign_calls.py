"""The Kafka requests behind the reassignment commands, which librdkafka does not offer.

AlterPartitionReassignments v0, ListPartitionReassignments v0 (to any broker: a tidelog broker writes
the move to etcd itself, Apache Kafka forwards it to its controller), DescribeLogDirs v4 (to each
broker: its log dirs and the replicas in them, future replicas of a log-dir move included) and
AlterReplicaLogDirs v2 (to the broker holding the replica: move it to another of its log dirs). kio
encodes and decodes them; ``cli.wire`` carries them.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.alter_partition_reassignments.v0 import request as alter_req
from kio.schema.alter_partition_reassignments.v0.response import AlterPartitionReassignmentsResponse
from kio.schema.alter_replica_log_dirs.v2 import request as dirs_req
from kio.schema.alter_replica_log_dirs.v2.response import AlterReplicaLogDirsResponse
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.describe_log_dirs.v4.response import DescribeLogDirsResponse
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.list_partition_reassignments.v0.response import ListPartitionReassignmentsResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from tidelog.cli.common import CliError
from tidelog.cli.wire import Wire
from tidelog.common.errors import ErrorCode

TopicPartition = tuple[str, int]
Ongoing = dict[TopicPartition, tuple[list[int], list[int], list[int]]]  # replicas, adding, removing


def _call(wire: Wire, address: tuple[str, int], request: Any, response_type: type[Any]) -> Any:
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(
        request_api_key=i16(request.__api_key__), request_api_version=i16(request.__version__),
        correlation_id=i32(1), client_id="tidelog-cli"))
    entity_writer(type(request))(buffer, request)
    frame = wire.call(address, buffer.getvalue())
    if frame[4] != 0:  # response header v1: correlation id, then tagged fields (none expected)
        raise CliError("the broker's response header carries tagged fields this tool does not read")
    return entity_reader(response_type)(frame, 5)[0]


def error_name(code: int) -> str:
    return ErrorCode.from_wire(code).name


def alter(wire: Wire, plan: Mapping[TopicPartition, list[int] | None]) -> dict[TopicPartition, tuple[str, str | None]]:
    """Start (replicas) or cancel (None) moves; (error name, message) per partition, NONE when accepted."""
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), replicas in sorted(plan.items()):
        by_topic.setdefault(topic, []).append(alter_req.ReassignablePartition(
            partition_index=i32(index),
            replicas=None if replicas is None else tuple(BrokerId(r) for r in replicas)))
    request = alter_req.AlterPartitionReassignmentsRequest(topics=tuple(
        alter_req.ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()))
    response = _call(wire, wire.bootstrap, request, AlterPartitionReassignmentsResponse)
    if int(response.error_code):
        raise CliError(f"the cluster refused the reassignment: {error_name(response.error_code)}"
                       f"{': ' + response.error_message if response.error_message else ''}")
    return {(str(t.name), int(p.partition_index)): (error_name(p.error_code), p.error_message)
            for t in response.responses for p in t.partitions}


def ongoing(wire: Wire) -> Ongoing:
    response = _call(wire, wire.bootstrap, ListPartitionReassignmentsRequest(topics=None),
                     ListPartitionReassignmentsResponse)
    if int(response.error_code):
        raise CliError(f"ListPartitionReassignments failed: {error_name(response.error_code)}")
    return {(str(t.name), int(p.partition_index)): ([int(r) for r in p.replicas], [int(r) for r in p.adding_replicas],
                                                   [int(r) for r in p.removing_replicas])
            for t in response.topics for p in t.partitions}


def replica_sizes(wire: Wire, addresses: Mapping[int, tuple[str, int]]) -> dict[tuple[int, str, int], int]:
    """(broker, topic, partition) → bytes, for every replica of every reachable broker."""
    sizes: dict[tuple[int, str, int], int] = {}
    for broker, address in addresses.items():
        try:
            _, replicas = describe_log_dirs(wire, address)
        except CliError:
            continue  # a broker that does not answer just has no sizes this round
        for r in replicas:
            if not r.future:  # a log-dir move's copy is not a second replica
                key = (broker, r.topic, r.partition)
                sizes[key] = sizes.get(key, 0) + r.size
    return sizes


@dataclass(frozen=True, slots=True)
class LogDir:
    path: str
    error: str          # NONE, or KAFKA_STORAGE_ERROR for an offline dir
    total_bytes: int    # -1 when the broker does not say
    usable_bytes: int


@dataclass(frozen=True, slots=True)
class ReplicaDir:
    log_dir: str
    topic: str
    partition: int
    size: int
    offset_lag: int     # a future replica: offsets it still has to copy
    future: bool        # the copy of a replica moving into this dir (AlterReplicaLogDirs)


def describe_log_dirs(wire: Wire, address: tuple[str, int]) -> tuple[list[LogDir], list[ReplicaDir]]:
    """One broker's log dirs and every replica in them (DescribeLogDirs of all topics)."""
    response = _call(wire, address, DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse)
    if int(response.error_code):
        raise CliError(f"DescribeLogDirs failed: {error_name(response.error_code)}")
    dirs, replicas = [], []
    for result in response.results:
        dirs.append(LogDir(str(result.log_dir), error_name(result.error_code), int(result.total_bytes),
                           int(result.usable_bytes)))
        for topic in result.topics:
            for p in topic.partitions:
                replicas.append(ReplicaDir(str(result.log_dir), str(topic.name), int(p.partition_index),
                                           int(p.partition_size), int(p.offset_lag), bool(p.is_future_key)))
    return dirs, replicas


def alter_log_dirs(wire: Wire, address: tuple[str, int], moves: Mapping[TopicPartition, str]) -> dict[TopicPartition, str]:
    """Ask one broker to move its replicas of ``moves`` to the given log dirs; error name per partition."""
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (topic, index), path in sorted(moves.items()):
        by_dir.setdefault(path, {}).setdefault(topic, []).append(index)
    request = dirs_req.AlterReplicaLogDirsRequest(dirs=tuple(
        dirs_req.AlterReplicaLogDir(path=path, topics=tuple(
            dirs_req.AlterReplicaLogDirTopic(name=TopicName(t), partitions=tuple(i32(i) for i in ps))
            for t, ps in topics.items()))
        for path, topics in by_dir.items()))
    response = _call(wire, address, request, AlterReplicaLogDirsResponse)
    return {(str(t.topic_name), int(p.partition_index)): error_name(p.error_code)
            for t in response.results for p in t.partitions}
