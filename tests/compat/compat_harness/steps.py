"""Requests the scenarios share, at the versions modern clients send unless a scenario says otherwise.

Each helper sends one request through ``Broker.call`` (recorded under ``label``) and returns the
outcome; ``label=None`` sends it quietly (not recorded). ``create_topic`` and ``delete_topic`` then
wait, quietly, until Metadata shows the change: Kafka applies them asynchronously (the controller
commits, then the broker's metadata cache catches up), tidelog at once, and the scenarios compare
behaviour after the change, not how long it took.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from compat_harness.entities import request
from compat_harness.scenario import Broker, plain_outcome
from helpers.raw_client import record_batch
from tidelog.protocol.apis import ApiKey

# 2023-11-14T22:13:20Z: a fixed past time, so that timestamps in answers are the same on both sides.
BASE_TS = 1_700_000_000_000

V_METADATA = 12
V_PRODUCE = 9
V_FETCH = 12
V_LIST_OFFSETS = 9
V_CREATE_TOPICS = 7
V_DELETE_TOPICS = 6
V_DESCRIBE_CONFIGS = 4
V_ALTER_CONFIGS = 2
V_INCREMENTAL_ALTER_CONFIGS = 1
V_DELETE_RECORDS = 2
V_CREATE_PARTITIONS = 3
V_INIT_PRODUCER_ID = 5

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


def _send(b: Broker, label: str | None, req: Any) -> Any:
    return b.quiet(req) if label is None else b.call(label, req)


def batch(values: Sequence[bytes | None], *, timestamp_ms: int = BASE_TS, keys: Sequence[bytes | None] | None = None,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    return record_batch(values, keys=keys, timestamp_ms=timestamp_ms, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence)


def metadata_request(topics: Sequence[str] | None, *, auto_create: bool = False, version: int = V_METADATA) -> Any:
    entry: dict[str, Any] = {"topic_id": None} if version >= 10 else {}
    entries = None if topics is None else [{"name": name, **entry} for name in topics]
    fields: dict[str, Any] = {"topics": entries}
    if version >= 4:
        fields["allow_auto_topic_creation"] = auto_create
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = False
    return request(ApiKey.METADATA, version, **fields)


def metadata(b: Broker, label: str | None, topics: Sequence[str] | None, *, auto_create: bool = False,
             version: int = V_METADATA) -> Any:
    return _send(b, label, metadata_request(topics, auto_create=auto_create, version=version))


def topic_ready(b: Broker, name: str, partitions: int) -> bool:
    """Metadata shows every partition with a leader, and each partition answers ListOffsets.

    The second check matters for Kafka: its metadata cache can name this broker as leader a moment
    before the partition itself is ready, when Produce and Fetch still get NOT_LEADER_OR_FOLLOWER.
    """
    response = metadata(b, None, [name])
    topics = getattr(response, "topics", ())
    if not (
        len(topics) == 1 and topics[0].error_code == 0 and len(topics[0].partitions) == partitions
        and all(p.leader_id >= 0 and p.error_code == 0 for p in topics[0].partitions)
    ):
        return False
    for partition in range(partitions):
        answer = list_offsets(b, None, name, -1, partition=partition)
        if answer.topics[0].partitions[0].error_code != 0:
            return False
    return True


def topic_gone(b: Broker, name: str) -> bool:
    response = metadata(b, None, [name])
    topics = getattr(response, "topics", ())
    return len(topics) == 1 and topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def create_topics(b: Broker, label: str | None, topics: Sequence[Mapping[str, Any]], *,
                  validate_only: bool = False, version: int = V_CREATE_TOPICS, timeout_ms: int = 30_000) -> Any:
    """``topics``: dicts with name, and optionally num_partitions, replication_factor, configs
    (a mapping), assignments."""
    entries = [
        {
            "name": t["name"],
            "num_partitions": t.get("num_partitions", 1),
            "replication_factor": t.get("replication_factor", 1),
            "assignments": t.get("assignments", []),
            "configs": [{"name": k, "value": v} for k, v in t.get("configs", {}).items()],
        }
        for t in topics
    ]
    return _send(b, label, request(ApiKey.CREATE_TOPICS, version, topics=entries, timeout=timeout_ms,
                                   validate_only=validate_only))


def create_topic(b: Broker, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None,
                 *, label: str | None = "create topic") -> Any:
    """Create ``name`` and wait until every partition has a leader.

    What is recorded leaves out the list of the topic's effective configs that CreateTopics v5+
    returns: scenarios that create a topic as a set-up step compare what they are about, and
    ``test_diff_topics`` compares that list on its own.
    """
    response = create_topics(b, None, [{"name": name, "num_partitions": partitions, "configs": configs or {}}])
    if label is not None:
        recorded = plain_outcome(response)
        for topic in recorded.get("topics", []) if isinstance(recorded, dict) else []:
            topic.pop("configs", None)
        b.note(label, recorded)
    b.wait_until(f"topic {name} ready", lambda: topic_ready(b, name, partitions))
    return response


def delete_topic(b: Broker, name: str, *, label: str | None = "delete topic",
                 version: int = V_DELETE_TOPICS) -> Any:
    response = _send(b, label, request(ApiKey.DELETE_TOPICS, version, topics=[{"name": name, "topic_id": None}],
                                       timeout=30_000))
    b.wait_until(f"topic {name} gone", lambda: topic_gone(b, name))
    return response


def produce(b: Broker, label: str | None, topic: str, records: bytes | None, *, partition: int = 0,
            acks: int = -1, version: int = V_PRODUCE) -> Any:
    return _send(b, label, request(ApiKey.PRODUCE, version, acks=acks, timeout=10_000, topic_data=[
        {"name": topic, "partition_data": [{"index": partition, "records": records}]},
    ]))


def fetch(b: Broker, label: str | None, topic: str, offset: int, *, partition: int = 0,
          max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20, max_wait_ms: int = 0,
          min_bytes: int = 1, version: int = V_FETCH, isolation_level: int = 0) -> Any:
    return _send(b, label, request(
        ApiKey.FETCH, version, max_wait=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level, session_id=0, session_epoch=-1,
        topics=[{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes},
        ]}],
        forgotten_topics_data=[],
    ))


def list_offsets(b: Broker, label: str | None, topic: str, timestamp: int, *, partition: int = 0,
                 version: int = V_LIST_OFFSETS, isolation_level: int = 0) -> Any:
    return _send(b, label, request(ApiKey.LIST_OFFSETS, version, replica_id=-1, isolation_level=isolation_level,
                                   topics=[{"name": topic, "partitions": [
                                       {"partition_index": partition, "timestamp": timestamp},
                                   ]}]))


def describe_configs(b: Broker, label: str | None, resource_type: int, name: str,
                     keys: Sequence[str] | None = None, *, synonyms: bool = False, documentation: bool = False,
                     version: int = V_DESCRIBE_CONFIGS) -> Any:
    fields: dict[str, Any] = {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configuration_keys": None if keys is None else list(keys)},
    ]}
    if version >= 1:
        fields["include_synonyms"] = synonyms
    if version >= 3:
        fields["include_documentation"] = documentation
    return _send(b, label, request(ApiKey.DESCRIBE_CONFIGS, version, **fields))


def alter_configs(b: Broker, label: str | None, resource_type: int, name: str, configs: Mapping[str, str | None],
                  *, validate_only: bool = False, version: int = V_ALTER_CONFIGS) -> Any:
    return _send(b, label, request(ApiKey.ALTER_CONFIGS, version, validate_only=validate_only, resources=[
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]},
    ]))


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental_alter_configs(b: Broker, label: str | None, resource_type: int, name: str,
                              operations: Sequence[tuple[str, int, str | None]], *, validate_only: bool = False,
                              version: int = V_INCREMENTAL_ALTER_CONFIGS) -> Any:
    return _send(b, label, request(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, validate_only=validate_only, resources=[
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in operations]},
    ]))


def delete_records(b: Broker, label: str | None, topic: str, offset: int, *, partition: int = 0,
                   version: int = V_DELETE_RECORDS) -> Any:
    return _send(b, label, request(ApiKey.DELETE_RECORDS, version, timeout=10_000, topics=[
        {"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]},
    ]))


def create_partitions(b: Broker, label: str | None, topic: str, count: int, *, validate_only: bool = False,
                      version: int = V_CREATE_PARTITIONS) -> Any:
    return _send(b, label, request(ApiKey.CREATE_PARTITIONS, version, timeout=10_000, validate_only=validate_only,
                                   topics=[{"name": topic, "count": count, "assignments": None}]))


COORDINATOR_LOAD_IN_PROGRESS = 14


def init_producer_id(b: Broker, label: str | None, *, producer_id: int = -1, producer_epoch: int = -1,
                     version: int = V_INIT_PRODUCER_ID) -> Any:
    """InitProducerId for an idempotent (non-transactional) producer.

    Right after start-up Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its broker has been given
    a block of producer ids by the controller; clients retry that error, and so does this helper,
    quietly, so that what is recorded is the answer once the broker is ready.
    """
    fields: dict[str, Any] = {"transactional_id": None, "transaction_timeout": 60_000}
    if version >= 3:
        fields.update(producer_id=producer_id, producer_epoch=producer_epoch)
    req = request(ApiKey.INIT_PRODUCER_ID, version, **fields)
    for _ in range(100):
        response = b.quiet(req)
        if getattr(response, "error_code", None) != COORDINATOR_LOAD_IN_PROGRESS:
            break
        time.sleep(0.1)
    if label is not None:
        b.record(label, response)
    return response
