"""Admin reads a single-node Kafka serves, against Apache Kafka: DescribeTopicPartitions (cursor
pagination), DescribeProducers, DescribeQuorum, ListConfigResources (issue 24)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import batch, create_topic, init_producer_id, produce

from tidelog.protocol.apis import ApiKey

BROKER, BROKER_LOGGER, CLIENT_METRICS = 4, 8, 16


def _describe(b: Broker, label: str, names: list[str], limit: int, cursor: tuple[str, int] | None = None) -> None:
    b.call(label, request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, topics=[{"name": n} for n in names],
                          response_partition_limit=limit,
                          cursor=None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}))


def scenario_describe_topic_partitions_pages_through_a_cursor(b: Broker) -> None:
    """Two topics of three and two partitions described four partitions at a time: the first page
    ends inside the second topic with a cursor, the next page starts there; a limit that ends exactly
    at a topic's end points the cursor at the next topic's partition 0."""
    first, second = b.topic("-a"), b.topic("-b")
    create_topic(b, first, 3)
    create_topic(b, second, 2)
    _describe(b, "first page", [second, first], 4)
    _describe(b, "second page", [second, first], 4, cursor=(second, 1))
    _describe(b, "limit at a topic's end", [first, second], 3)
    _describe(b, "cursor inside the first topic", [first, second], 2000, cursor=(first, 2))


def scenario_describe_topic_partitions_errors(b: Broker) -> None:
    """An unknown topic, an illegal name, and a cursor naming a topic outside the list."""
    name = b.topic()
    create_topic(b, name, 1)
    _describe(b, "unknown and illegal names", [name, b.topic("-missing"), "bad/name"], 2000)
    _describe(b, "cursor topic not in the list", [name], 2000, cursor=(b.topic("-other"), 0))


def scenario_describe_producers(b: Broker) -> None:
    """An idempotent producer's state on the partition it wrote (epoch, last sequence, timestamp),
    an empty partition, a partition out of range and an unknown topic."""
    name = b.topic()
    create_topic(b, name, 2)
    answer = init_producer_id(b, "init producer id")
    pid, epoch = answer.producer_id, answer.producer_epoch
    produce(b, "idempotent batch", name, batch([b"a", b"b", b"c"], producer_id=pid, producer_epoch=epoch,
                                               base_sequence=0))
    b.call("describe producers", request(ApiKey.DESCRIBE_PRODUCERS, 0, topics=[
        {"name": name, "partition_indexes": [0, 1, 7]}, {"name": b.topic("-missing"), "partition_indexes": [0]},
    ]))


def scenario_describe_quorum(b: Broker) -> None:
    """The metadata quorum of a single node, at every version; any other topic is unknown."""
    partitions = [{"partition_index": 0}]
    for version in (0, 1, 2):
        b.call(f"describe quorum v{version}", request(ApiKey.DESCRIBE_QUORUM, version, topics=[
            {"topic_name": "__cluster_metadata", "partitions": partitions}]))
    b.call("another topic", request(ApiKey.DESCRIBE_QUORUM, 2, topics=[
        {"topic_name": b.topic(), "partitions": partitions}]))


def scenario_list_config_resources(b: Broker) -> None:
    """v1 lists the broker (as BROKER_LOGGER and BROKER) and no client-metrics resource; a type it
    does not list (1, unknown) fails the request; v0 lists client-metrics resources only."""
    b.call("broker and broker logger", request(ApiKey.LIST_CONFIG_RESOURCES, 1,
                                               resource_types=[BROKER, BROKER_LOGGER]))
    b.call("client metrics", request(ApiKey.LIST_CONFIG_RESOURCES, 1, resource_types=[CLIENT_METRICS]))
    b.call("unknown type", request(ApiKey.LIST_CONFIG_RESOURCES, 1, resource_types=[1]))
    b.call("v0", request(ApiKey.LIST_CONFIG_RESOURCES, 0))


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)
