"""Partition reassignments against Apache Kafka, one broker each: AlterPartitionReassignments and
ListPartitionReassignments answers and error codes for requests a single node can judge (unknown
broker, duplicate or empty replica lists, unknown partitions, a cancel with no move, a target that
changes nothing), and nothing in progress afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import create_topic, metadata

from tidelog.protocol.apis import ApiKey

BROKER = 1  # node.id of both reference brokers (COMMON_CONFIG)


def alter(b: Broker, label: str, topic: str, partitions: list[tuple[int, list[int] | None]], version: int = 0) -> Any:
    fields: dict[str, Any] = {"timeout": 30_000, "topics": [
        {"name": topic, "partitions": [{"partition_index": index, "replicas": replicas}
                                       for index, replicas in partitions]}]}
    if version >= 1:
        fields["allow_replication_factor_change"] = True
    return b.call(label, request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, **fields))


def list_moves(b: Broker, label: str, topics: list[tuple[str, list[int]]] | None) -> Any:
    wanted = None if topics is None else [{"name": name, "partition_indexes": indexes} for name, indexes in topics]
    return b.call(label, request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=30_000, topics=wanted))


def scenario_reassignment_refused_targets(b: Broker) -> None:
    """Targets Kafka refuses with INVALID_REPLICA_ASSIGNMENT (a broker that is not registered, a broker
    named twice, an empty list), each partition judged on its own in one request; the replicas are
    unchanged afterwards."""
    name = b.topic()
    create_topic(b, name, 3)
    alter(b, "unknown broker, duplicate, empty", name, [(0, [BROKER, 99]), (1, [BROKER, BROKER]), (2, [])])
    alter(b, "only an unknown broker", name, [(0, [42])])
    metadata(b, "replicas unchanged", [name])


def scenario_reassignment_of_unknown_partitions(b: Broker) -> None:
    """A partition index the topic does not have, and a topic that does not exist:
    UNKNOWN_TOPIC_OR_PARTITION for each."""
    name = b.topic()
    create_topic(b, name, 1)
    alter(b, "index out of range", name, [(5, [BROKER])])
    alter(b, "unknown topic", b.topic("-missing"), [(0, [BROKER])])


def scenario_reassignment_cancel_without_a_move(b: Broker) -> None:
    """Cancelling (null replicas) a partition that is not moving: NO_REASSIGNMENT_IN_PROGRESS; then
    ListPartitionReassignments for that topic lists nothing."""
    name = b.topic()
    create_topic(b, name, 2)
    alter(b, "cancel", name, [(0, None), (1, None)])
    list_moves(b, "list the topic", [(name, [0, 1])])


def scenario_reassignment_to_the_current_replicas(b: Broker) -> None:
    """A target equal to the current replicas (v0 and v1 with allow_replication_factor_change) is
    accepted and completes at once: nothing is listed in progress."""
    name = b.topic()
    create_topic(b, name, 1)
    alter(b, "same replicas v0", name, [(0, [BROKER])])
    alter(b, "same replicas v1", name, [(0, [BROKER])], version=1)
    list_moves(b, "list the topic", [(name, [0])])
    metadata(b, "replicas", [name])


def scenario_list_reassignments_of_unknown_partitions(b: Broker) -> None:
    """ListPartitionReassignments naming a topic that does not exist and an index out of range: no
    error, no entries (Kafka lists only the moves it knows)."""
    name = b.topic()
    create_topic(b, name, 1)
    list_moves(b, "unknown topic and index", [(b.topic("-missing"), [0]), (name, [3])])


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)
