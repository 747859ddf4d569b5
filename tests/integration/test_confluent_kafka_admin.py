"""confluent-kafka's AdminClient administering topics, configs and offsets on a tidelog broker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from helpers.broker_process import wait_until
from helpers.clients import (
    admin_client,
    consume,
    produce_all,
    producer,
    topic_partition_count,
    unique_topic,
    watermarks,
)

DEFAULT_RETENTION_MS = str(7 * 24 * 3600 * 1000)


@pytest.fixture
def admin(bootstrap: str) -> AdminClient:
    return admin_client(bootstrap)


def topic_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    (future,) = futures.values()
    return dict(future.result(timeout=10))


def error_code_of(future: object) -> int:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=10)  # type: ignore[attr-defined]
    return int(raised.value.args[0].code())


def test_created_topic_has_its_partitions_and_reports_its_configs_as_topic_overrides(
    admin: AdminClient, bootstrap: str
) -> None:
    topic = unique_topic()
    futures = admin.create_topics(
        [NewTopic(topic, 3, 1, config={"retention.ms": "123456", "cleanup.policy": "compact"})]
    )
    futures[topic].result(timeout=10)

    wait_until(lambda: topic_partition_count(bootstrap, topic) == 3, message="3 partitions in metadata")
    configs = topic_configs(admin, topic)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "123456", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default


def test_validate_only_creation_checks_the_request_but_creates_nothing(admin: AdminClient, bootstrap: str) -> None:
    topic = unique_topic()
    futures = admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "1000"})], validate_only=True)
    futures[topic].result(timeout=10)

    assert topic not in admin.list_topics(timeout=5).topics
    bad = admin.create_topics([NewTopic(topic, 2, 1, config={"cleanup.policy": "bogus"})], validate_only=True)
    assert error_code_of(bad[topic]) == KafkaError.INVALID_CONFIG


def test_creating_a_topic_twice_fails_with_topic_already_exists(admin: AdminClient, topic: str) -> None:
    futures = admin.create_topics([NewTopic(topic, 1, 1)])

    assert error_code_of(futures[topic]) == KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize(
    ("config", "partitions"),
    [({"cleanup.policy": "bogus"}, 1), ({"no.such.config": "1"}, 1), ({"retention.ms": "soon"}, 1)],
    ids=["bad-value", "unknown-key", "not-a-number"],
)
def test_creating_a_topic_with_an_invalid_config_is_refused(
    admin: AdminClient, config: dict[str, str], partitions: int
) -> None:
    topic = unique_topic()
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])

    assert error_code_of(futures[topic]) == KafkaError.INVALID_CONFIG
    assert topic not in admin.list_topics(timeout=5).topics


def test_creating_a_topic_with_zero_partitions_is_refused(admin: AdminClient) -> None:
    topic = unique_topic()
    futures = admin.create_topics([NewTopic(topic, 0, 1)])

    assert error_code_of(futures[topic]) == KafkaError.INVALID_PARTITIONS


def test_deleted_topic_disappears_and_deleting_it_again_fails(admin: AdminClient, bootstrap: str, topic: str) -> None:
    produce_all(producer(bootstrap), topic, [b"soon gone"])

    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=10)

    wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, message="topic gone from metadata")
    again = admin.delete_topics([topic])
    assert error_code_of(again[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs_sets_then_deletes_a_topic_override(admin: AdminClient, topic: str) -> None:
    def alter(op: AlterConfigOpType, value: str | None) -> None:
        entry = ConfigEntry("retention.ms", value, incremental_operation=op)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
        (future,) = admin.incremental_alter_configs([resource]).values()
        future.result(timeout=10)

    alter(AlterConfigOpType.SET, "3600000")
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    alter(AlterConfigOpType.DELETE, None)
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"].value == DEFAULT_RETENTION_MS
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_incremental_alter_configs_with_an_invalid_value_changes_nothing(admin: AdminClient, topic: str) -> None:
    entry = ConfigEntry("cleanup.policy", "bogus", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    (future,) = admin.incremental_alter_configs([resource]).values()

    assert error_code_of(future) == KafkaError.INVALID_CONFIG
    assert topic_configs(admin, topic)["cleanup.policy"].value == "delete"


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_the_whole_set_of_overrides(
    admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(config={"retention.ms": "111111"})

    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "222222"})
    (future,) = admin.alter_configs([resource]).values()
    future.result(timeout=10)

    configs = topic_configs(admin, topic)
    assert configs["segment.ms"].value == "222222"
    assert configs["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == DEFAULT_RETENTION_MS


def test_broker_configs_report_defaults_and_static_settings(admin: AdminClient, broker: object) -> None:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    configs = dict(future.result(timeout=10))

    assert configs["message.max.bytes"].value == "1048588"
    assert configs["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["auto.create.topics.enable"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_create_partitions_grows_a_topic_and_the_new_partitions_take_records(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=10)

    wait_until(lambda: topic_partition_count(bootstrap, topic) == 4, message="4 partitions in metadata")
    produce_all(producer(bootstrap), topic, [b"in the new partition"], partition=3)
    assert [m.value() for m in consume(bootstrap, topic, 1, partitions=[3])] == [b"in the new partition"]
    shrink = admin.create_partitions([NewPartitions(topic, 2)])
    assert error_code_of(shrink[topic]) == KafkaError.INVALID_PARTITIONS


def test_list_offsets_finds_earliest_latest_by_timestamp_and_max_timestamp(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    t0 = int(time.time() * 1000) - 100_000
    timestamps = [t0, t0 + 100, t0 + 200, t0 + 50]  # the last one is out of order
    prod = producer(bootstrap)
    for i, ts in enumerate(timestamps):  # one batch each, so that every timestamp is its own batch's max
        prod.produce(topic, value=f"r{i}".encode(), timestamp=ts)
        assert prod.flush(10) == 0
    tp = TopicPartition(topic, 0)

    def offset_for(spec: OffsetSpec) -> tuple[int, int]:
        result = admin.list_offsets({tp: spec})[tp].result(timeout=10)
        return result.offset, result.timestamp

    assert offset_for(OffsetSpec.earliest())[0] == 0
    assert offset_for(OffsetSpec.latest())[0] == 4
    assert offset_for(OffsetSpec.for_timestamp(t0 + 100)) == (1, t0 + 100)
    assert offset_for(OffsetSpec.for_timestamp(t0 + 150)) == (2, t0 + 200)
    assert offset_for(OffsetSpec.for_timestamp(t0 + 201))[0] == -1
    assert offset_for(OffsetSpec.max_timestamp()) == (2, t0 + 200)


def test_delete_records_moves_the_log_start_offset(admin: AdminClient, bootstrap: str, topic: str) -> None:
    produce_all(producer(bootstrap), topic, [f"r{i}".encode() for i in range(10)])

    (future,) = admin.delete_records([TopicPartition(topic, 0, 4)]).values()
    deleted = future.result(timeout=10)

    assert deleted.low_watermark == 4
    assert watermarks(bootstrap, topic) == {0: (4, 10)}
    tp = TopicPartition(topic, 0)
    assert admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=10).offset == 4
    assert [m.offset() for m in consume(bootstrap, topic, 6)] == [4, 5, 6, 7, 8, 9]


def test_delete_records_beyond_the_high_watermark_is_refused(admin: AdminClient, bootstrap: str, topic: str) -> None:
    produce_all(producer(bootstrap), topic, [b"one", b"two"])
    (future,) = admin.delete_records([TopicPartition(topic, 0, 50)]).values()

    assert error_code_of(future) == KafkaError.OFFSET_OUT_OF_RANGE


def test_cluster_description_names_the_single_broker_as_controller(admin: AdminClient, broker: object) -> None:
    cluster = admin.describe_cluster().result(timeout=10)

    assert [node.id for node in cluster.nodes] == [1]
    assert cluster.controller is not None and cluster.controller.id == 1
    assert cluster.cluster_id
