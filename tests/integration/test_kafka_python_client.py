"""kafka-python 3 (KafkaProducer, KafkaConsumer, KafkaAdminClient) against a tidelog broker."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from helpers.broker_process import wait_until
from helpers.clients import topic_partition_count, unique_topic

with warnings.catch_warnings():  # kafka-python 3.0.12 loads its schemas with importlib.resources.read_text
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic, OffsetSpec
    from kafka.errors import InvalidConfigurationError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

CREATE_TIME, LOG_APPEND_TIME = 0, 1


def kp_producer(bootstrap: str, **config: Any) -> KafkaProducer:
    settings: dict[str, Any] = {"bootstrap_servers": bootstrap, "linger_ms": 5, "request_timeout_ms": 10_000,
                                "enable_idempotence": False}
    settings.update(config)
    return KafkaProducer(**settings)


def send_all(prod: KafkaProducer, topic: str, records: Sequence[dict[str, Any]]) -> list[Any]:
    """Send ``records`` (keyword arguments of ``send``), wait for every acknowledgement, close."""
    try:
        futures = [prod.send(topic, **record) for record in records]
        prod.flush(timeout=20)
        return [future.get(timeout=10) for future in futures]
    finally:
        prod.close(timeout=5)


def kp_consume(bootstrap: str, topic: str, count: int, partitions: Sequence[int] = (0,),
               timeout: float = 20.0) -> list[Any]:
    cons = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=100, request_timeout_ms=10_000)
    try:
        cons.assign([TopicPartition(topic, p) for p in partitions])
        cons.seek_to_beginning()
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for batch in cons.poll(timeout_ms=200).values():
                records.extend(batch)
        assert len(records) >= count, f"got {len(records)} of {count} records from {topic}"
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        cons.close()


@pytest.fixture
def kp_admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    yield admin
    admin.close()


def described(admin: KafkaAdminClient, topic: str, keys: list[str] | None = None) -> dict[str, dict[str, Any]]:
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, keys)], config_filter="all")
    return dict(result["topic"][topic])


# -- producing and consuming -----------------------------------------------------------------------


def test_keys_headers_timestamps_and_null_values_come_back_as_produced(bootstrap: str, topic: str) -> None:
    ts = int(time.time() * 1000) - 5_000
    records = [
        {"key": b"k", "value": b"v", "headers": [("h", b"1"), ("h", b"2")], "timestamp_ms": ts},
        {"key": None, "value": b"keyless", "timestamp_ms": ts + 1},
        {"key": b"tombstone", "value": None, "headers": [("empty", b"")], "timestamp_ms": ts + 2},
    ]
    metadata = send_all(kp_producer(bootstrap), topic, records)

    received = kp_consume(bootstrap, topic, 3)

    assert [m.offset for m in metadata] == [0, 1, 2]
    for record, sent in zip(received, records, strict=True):
        assert (record.key, record.value) == (sent["key"], sent["value"])
        assert list(record.headers) == sent.get("headers", [])
        assert (record.timestamp_type, record.timestamp) == (CREATE_TIME, sent["timestamp_ms"])


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_records_compressed_with_each_codec_are_consumed_intact(bootstrap: str, topic: str, codec: str) -> None:
    values = [f"kafka-python {codec} {i} ".encode() * 5 for i in range(100)]
    send_all(kp_producer(bootstrap, compression_type=codec, linger_ms=20), topic, [{"value": v} for v in values])

    assert [r.value for r in kp_consume(bootstrap, topic, len(values))] == values


def test_a_one_mebibyte_record_is_stored_and_fetched_whole(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(config={"max.message.bytes": str(2 * 1024 * 1024)})
    value = os.urandom(1024 * 1024)
    send_all(kp_producer(bootstrap, max_request_size=4 * 1024 * 1024), topic, [{"value": value}])

    (record,) = kp_consume(bootstrap, topic, 1)

    assert record.value == value


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_records_sent_with_each_acks_setting_are_stored(bootstrap: str, topic: str, acks: int | str) -> None:
    values = [f"acks {acks} {i}".encode() for i in range(30)]
    send_all(kp_producer(bootstrap, acks=acks), topic, [{"value": v} for v in values])

    assert [r.value for r in kp_consume(bootstrap, topic, len(values))] == values


def test_idempotent_producer_stores_each_record_exactly_once(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    values = [f"kp idempotent {i}".encode() for i in range(600)]
    send_all(kp_producer(bootstrap, enable_idempotence=True, acks="all"), topic,
             [{"value": v, "partition": i % 3} for i, v in enumerate(values)])

    received = kp_consume(bootstrap, topic, len(values), partitions=range(3))

    assert sorted(r.value for r in received) == sorted(values)
    cons = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        ends = cons.end_offsets([TopicPartition(topic, p) for p in range(3)])
    finally:
        cons.close()
    assert sum(ends.values()) == len(values)


def test_thirty_two_partitions_each_keep_their_own_order(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=32)
    send_all(kp_producer(bootstrap), topic,
             [{"value": f"{p}:{i}".encode(), "partition": p} for i in range(3) for p in range(32)])

    received = kp_consume(bootstrap, topic, 96, partitions=range(32))

    assert [(r.partition, r.offset, r.value) for r in received] == [
        (p, i, f"{p}:{i}".encode()) for p in range(32) for i in range(3)
    ]


def test_log_append_time_topic_reports_log_append_timestamps(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    (metadata,) = send_all(kp_producer(bootstrap), topic, [{"value": b"x", "timestamp_ms": before - 3_600_000}])

    (record,) = kp_consume(bootstrap, topic, 1)

    assert record.timestamp_type == LOG_APPEND_TIME
    assert before - 1000 <= record.timestamp <= int(time.time() * 1000) + 1000
    assert metadata.timestamp == record.timestamp


# -- admin -----------------------------------------------------------------------------------------


def test_admin_creates_a_topic_with_configs_and_describes_them(kp_admin: KafkaAdminClient, bootstrap: str) -> None:
    topic = unique_topic()
    kp_admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "54321"})])

    wait_until(lambda: topic_partition_count(bootstrap, topic) == 2, message="2 partitions")
    configs = described(kp_admin, topic, ["retention.ms", "segment.bytes"])
    assert configs["retention.ms"]["value"] == "54321"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    with pytest.raises(TopicAlreadyExistsError):
        kp_admin.create_topics([NewTopic(topic, 2, 1)])


def test_admin_validate_only_creates_nothing_and_reports_bad_configs(kp_admin: KafkaAdminClient) -> None:
    topic = unique_topic()
    kp_admin.create_topics([NewTopic(topic, 1, 1)], validate_only=True)

    assert topic not in kp_admin.list_topics()
    with pytest.raises(InvalidConfigurationError):
        kp_admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "x"})], validate_only=True)


def test_admin_deletes_a_topic(kp_admin: KafkaAdminClient, topic: str) -> None:
    kp_admin.delete_topics([topic])

    wait_until(lambda: topic not in kp_admin.list_topics(), message="topic deleted")
    with pytest.raises(UnknownTopicOrPartitionError):
        kp_admin.delete_topics([topic])


def test_admin_alters_configs_incrementally_and_resets_them(kp_admin: KafkaAdminClient, topic: str) -> None:
    kp_admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"segment.ms": "222222"})],
                           incremental=True)
    assert described(kp_admin, topic, ["segment.ms"])["segment.ms"]["value"] == "222222"

    kp_admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic, ["segment.ms"])])
    reset = described(kp_admin, topic, ["segment.ms"])["segment.ms"]
    assert (reset["value"], reset["config_source"]) == (str(7 * 24 * 3600 * 1000), "DEFAULT_CONFIG")


def test_admin_legacy_alter_configs_applies_the_new_value(kp_admin: KafkaAdminClient, topic: str) -> None:
    kp_admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"flush.ms": "3333"})],
                           incremental=False, raise_on_unknown=False)

    flush = described(kp_admin, topic, ["flush.ms"])["flush.ms"]
    assert (flush["value"], flush["config_source"]) == ("3333", "DYNAMIC_TOPIC_CONFIG")


def test_admin_create_partitions_grows_the_topic(kp_admin: KafkaAdminClient, bootstrap: str, topic: str) -> None:
    kp_admin.create_partitions({topic: 3})

    wait_until(lambda: topic_partition_count(bootstrap, topic) == 3, message="3 partitions")


def test_admin_lists_offsets_by_spec_and_timestamp_and_deletes_records(
    kp_admin: KafkaAdminClient, bootstrap: str, topic: str
) -> None:
    t0 = int(time.time() * 1000) - 50_000
    for i, ts in enumerate([t0, t0 + 10, t0 + 30, t0 + 20]):
        send_all(kp_producer(bootstrap), topic, [{"value": f"r{i}".encode(), "timestamp_ms": ts}])
    tp = TopicPartition(topic, 0)

    def lookup(spec: Any) -> tuple[int, int]:
        result = kp_admin.list_partition_offsets({tp: spec})[tp]
        return result.offset, result.timestamp

    assert lookup(OffsetSpec.EARLIEST)[0] == 0
    assert lookup(OffsetSpec.LATEST)[0] == 4
    assert lookup(OffsetSpec.MAX_TIMESTAMP) == (2, t0 + 30)
    assert lookup(t0 + 5) == (1, t0 + 10)

    result = kp_admin.delete_records({tp: 3})
    assert result[tp]["low_watermark"] == 3
    assert lookup(OffsetSpec.EARLIEST)[0] == 3
