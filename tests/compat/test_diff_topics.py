"""CreateTopics, DeleteTopics and CreatePartitions against Apache Kafka, with their error cases."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import (
    create_partitions,
    create_topic,
    create_topics,
    delete_topic,
    metadata,
    topic_ready,
)

from tidelog.protocol.apis import ApiKey


def scenario_create_topics_invalid_names(b: Broker) -> None:
    """Names Kafka refuses with INVALID_TOPIC_EXCEPTION: empty, '.', '..', 250 characters, a space, a
    slash, a non-ASCII letter; 249 characters is the longest legal name."""
    names = ["", ".", "..", "x" * 250, "has space", "a/b", "caf\u00e9", b.topic("-" + "y" * 200)[:249]]
    create_topics(b, "create", [{"name": n} for n in names])


def scenario_create_topics_bad_partitions_and_replication(b: Broker) -> None:
    """0 partitions, -2 partitions, replication factor 3 on one broker, replication factor 0, and
    -1/-1 (the broker defaults: num.partitions=1, default.replication.factor=1)."""
    create_topics(b, "create", [
        {"name": b.topic("-p0"), "num_partitions": 0},
        {"name": b.topic("-pm2"), "num_partitions": -2},
        {"name": b.topic("-rf3"), "replication_factor": 3},
        {"name": b.topic("-rf0"), "replication_factor": 0},
        {"name": b.topic("-defaults"), "num_partitions": -1, "replication_factor": -1},
    ])
    b.wait_until("defaults topic ready", lambda: topic_ready(b, b.topic("-defaults"), 1))
    metadata(b, "metadata", [b.topic("-p0"), b.topic("-rf3"), b.topic("-defaults")])


def scenario_create_topics_bad_configs(b: Broker) -> None:
    """Unknown config key, a value of the wrong type, a value out of range, a bad enum value, a null
    value: each refused per topic with INVALID_CONFIG (and not created)."""
    cases = {
        "-unknown": {"no.such.config": "1"},
        "-type": {"retention.ms": "ten"},
        "-range": {"min.insync.replicas": "0"},
        "-enum": {"cleanup.policy": "shred"},
        "-null": {"retention.ms": None},
        "-ok": {"retention.ms": "60000", "cleanup.policy": "compact,delete"},
    }
    create_topics(b, "create", [{"name": b.topic(suffix), "configs": configs} for suffix, configs in cases.items()])
    b.wait_until("ok topic ready", lambda: topic_ready(b, b.topic("-ok"), 1))
    metadata(b, "metadata", [b.topic(suffix) for suffix in cases])


def scenario_create_topics_existing_and_duplicate(b: Broker) -> None:
    """Creating a topic that exists is TOPIC_ALREADY_EXISTS; naming the same topic twice in one
    request is INVALID_REQUEST for it."""
    name = b.topic()
    create_topic(b, name, 1)
    create_topics(b, "create again", [{"name": name}])
    create_topics(b, "same name twice", [{"name": b.topic("-twice")}, {"name": b.topic("-twice")}])


def scenario_create_topics_validate_only(b: Broker) -> None:
    """validate_only=true: the answer as if created (partitions, replication factor), nothing
    created; errors are still reported."""
    create_topics(b, "validate", [{"name": b.topic(), "num_partitions": 3},
                                  {"name": b.topic("-bad"), "configs": {"retention.ms": "x"}}],
                  validate_only=True)
    metadata(b, "metadata", [b.topic()])


def scenario_create_topics_response_configs(b: Broker) -> None:
    """CreateTopics v5+ returns the new topic's effective configs: names, values, sources,
    read-only and sensitive flags."""
    create_topics(b, "create", [{"name": b.topic(), "configs": {"retention.ms": "86400000"}}])


def scenario_create_topics_assignments(b: Broker) -> None:
    """Manual replica assignment: onto broker 1 works; onto a broker that does not exist is
    refused; assignments together with a partition count are INVALID_REQUEST."""
    create_topics(b, "assign to broker 1", [{"name": b.topic("-ok"), "num_partitions": -1, "replication_factor": -1,
                                             "assignments": [{"partition_index": 0, "broker_ids": [1]},
                                                             {"partition_index": 1, "broker_ids": [1]}]}])
    create_topics(b, "assign to broker 7", [{"name": b.topic("-b7"), "num_partitions": -1, "replication_factor": -1,
                                             "assignments": [{"partition_index": 0, "broker_ids": [7]}]}])
    create_topics(b, "assignments and count", [{"name": b.topic("-both"), "num_partitions": 2,
                                                "assignments": [{"partition_index": 0, "broker_ids": [1]}]}])
    b.wait_until("assigned topic ready", lambda: topic_ready(b, b.topic("-ok"), 2))
    metadata(b, "metadata", [b.topic("-ok")])


def scenario_create_topics_versions(b: Broker) -> None:
    """CreateTopics v2 (oldest accepted), v4 and v5 (first flexible, returns configs)."""
    for version in (2, 4):
        create_topics(b, f"v{version}", [{"name": b.topic(f"-v{version}"), "num_partitions": 2}], version=version)
    result = create_topics(b, None, [{"name": b.topic("-v5"), "num_partitions": 2}], version=5)
    b.note("v5 error and counts", [(t.error_code.name, t.num_partitions, t.replication_factor)
                                   for t in getattr(result, "topics", ())])


def scenario_delete_topics(b: Broker) -> None:
    """Delete an existing topic (then Metadata says unknown), a missing one, and (v6) an unknown
    topic id; re-creating the deleted name gives a new topic id."""
    name = b.topic()
    create_topic(b, name, 2)
    before = metadata(b, "metadata before", [name])
    delete_topic(b, name)
    metadata(b, "metadata after", [name])
    b.call("delete missing", request(ApiKey.DELETE_TOPICS, 6, timeout=10_000,
                                     topics=[{"name": b.topic("-missing"), "topic_id": None}]))
    b.call("delete unknown id", request(ApiKey.DELETE_TOPICS, 6, timeout=10_000,
                                        topics=[{"name": None, "topic_id": uuid.UUID(int=42)}]))
    create_topic(b, name, 1, label="re-create")
    after = metadata(b, "metadata after re-create", [name])
    b.note("topic id changed", before.topics[0].topic_id != after.topics[0].topic_id)


def scenario_delete_topics_versions(b: Broker) -> None:
    """DeleteTopics v1 (oldest accepted) and v4 (first flexible), by name."""
    for version in (1, 4):
        name = b.topic(f"-v{version}")
        create_topic(b, name, 1)
        b.call(f"delete v{version}", request(ApiKey.DELETE_TOPICS, version, timeout=10_000, topic_names=[name]))


def scenario_create_partitions(b: Broker) -> None:
    """CreatePartitions: 1 -> 3 works; back to 2 (decrease) and to 3 (same) are INVALID_PARTITIONS;
    an unknown topic; validate_only to 5 leaves 3."""
    name = b.topic()
    create_topic(b, name, 1)
    create_partitions(b, "increase to 3", name, 3)
    b.wait_until("3 partitions", lambda: topic_ready(b, name, 3))
    create_partitions(b, "decrease to 2", name, 2)
    create_partitions(b, "same count 3", name, 3)
    create_partitions(b, "validate only 5", name, 5, validate_only=True)
    create_partitions(b, "unknown topic", b.topic("-missing"), 2)
    metadata(b, "metadata", [name])


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)
