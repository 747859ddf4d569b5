"""aiokafka (AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient) against a tidelog broker.

aiokafka only speaks ApiVersions v0 and the older, non-flexible request versions, so these tests
also cover the broker's non-flexible encodings. Each test runs its own event loop (``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import ConsumerRecord

from helpers.broker_process import wait_until
from helpers.clients import topic_partition_count, unique_topic

T = TypeVar("T")
CREATE_TIME, LOG_APPEND_TIME = 0, 1
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
TOPIC_ALREADY_EXISTS, INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION = 36, 40, 3


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def send_all(bootstrap: str, topic: str, records: Sequence[dict[str, Any]], **config: Any) -> list[Any]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **config)
    await producer.start()
    try:
        futures = [await producer.send(topic, **record) for record in records]
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def consume(bootstrap: str, topic: str, count: int, partitions: Sequence[int] = (0,),
                  timeout: float = 20.0, **config: Any) -> list[ConsumerRecord[bytes, bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100, **config)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        await consumer.seek_to_beginning()
        records: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        assert len(records) >= count, f"got {len(records)} of {count} records from {topic}"
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        await consumer.stop()


async def with_admin(bootstrap: str, action: Callable[[AIOKafkaAdminClient], Coroutine[Any, Any, T]]) -> T:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        return await action(admin)
    finally:
        await admin.close()


async def topic_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, tuple[str, int]]:
    """name -> (value, config source) from DescribeConfigs."""
    (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    (resource,) = response.resources
    error_code, _message, _type, _name, entries = resource
    assert error_code == 0
    return {entry[0]: (entry[1], entry[3]) for entry in entries}


# -- producing and consuming -----------------------------------------------------------------------


def test_keys_headers_timestamps_and_null_values_come_back_as_produced(bootstrap: str, topic: str) -> None:
    ts = int(time.time() * 1000) - 7_000
    records = [
        {"key": b"k", "value": b"v", "headers": [("h", b"1"), ("h", b"2")], "timestamp_ms": ts},
        {"key": None, "value": b"keyless", "timestamp_ms": ts + 1},
        {"key": b"tombstone", "value": None, "timestamp_ms": ts + 2},
    ]

    async def scenario() -> list[ConsumerRecord[bytes, bytes]]:
        metadata = await send_all(bootstrap, topic, records)
        assert [m.offset for m in metadata] == [0, 1, 2]
        return await consume(bootstrap, topic, 3)

    for record, sent in zip(run(scenario()), records, strict=True):
        assert (record.key, record.value) == (sent["key"], sent["value"])
        assert list(record.headers) == sent.get("headers", [])
        assert (record.timestamp_type, record.timestamp) == (CREATE_TIME, sent["timestamp_ms"])


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_records_compressed_with_each_codec_are_consumed_intact(bootstrap: str, topic: str, codec: str) -> None:
    values = [f"aiokafka {codec} {i} ".encode() * 4 for i in range(100)]

    async def scenario() -> list[ConsumerRecord[bytes, bytes]]:
        await send_all(bootstrap, topic, [{"value": v} for v in values], compression_type=codec, linger_ms=20)
        return await consume(bootstrap, topic, len(values))

    assert [r.value for r in run(scenario())] == values


def test_a_one_mebibyte_record_is_stored_and_fetched_whole(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(config={"max.message.bytes": str(2 * 1024 * 1024)})
    value = os.urandom(1024 * 1024)

    async def scenario() -> list[ConsumerRecord[bytes, bytes]]:
        await send_all(bootstrap, topic, [{"value": value}], max_request_size=4 * 1024 * 1024)
        return await consume(bootstrap, topic, 1)

    (record,) = run(scenario())
    assert record.value == value


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_records_sent_with_each_acks_setting_are_stored(bootstrap: str, topic: str, acks: int | str) -> None:
    values = [f"aiokafka acks {acks} {i}".encode() for i in range(30)]

    async def scenario() -> list[ConsumerRecord[bytes, bytes]]:
        await send_all(bootstrap, topic, [{"value": v} for v in values], acks=acks)
        return await consume(bootstrap, topic, len(values))

    assert [r.value for r in run(scenario())] == values


def test_idempotent_producer_stores_each_record_exactly_once(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    values = [f"aiokafka idempotent {i}".encode() for i in range(600)]

    async def scenario() -> tuple[list[ConsumerRecord[bytes, bytes]], dict[TopicPartition, int]]:
        await send_all(bootstrap, topic, [{"value": v, "partition": i % 3} for i, v in enumerate(values)],
                       enable_idempotence=True)
        received = await consume(bootstrap, topic, len(values), partitions=range(3))
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        await consumer.start()
        try:
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(3)])
        finally:
            await consumer.stop()
        return received, ends

    received, ends = run(scenario())
    assert sorted(r.value for r in received) == sorted(values)
    assert sum(ends.values()) == len(values)


def test_thirty_two_partitions_each_keep_their_own_order(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=32)

    async def scenario() -> list[ConsumerRecord[bytes, bytes]]:
        await send_all(bootstrap, topic,
                       [{"value": f"{p}:{i}".encode(), "partition": p} for i in range(3) for p in range(32)])
        return await consume(bootstrap, topic, 96, partitions=range(32))

    assert [(r.partition, r.offset, r.value) for r in run(scenario())] == [
        (p, i, f"{p}:{i}".encode()) for p in range(32) for i in range(3)
    ]


def test_offsets_for_times_finds_the_first_record_at_or_after_a_timestamp(bootstrap: str, topic: str) -> None:
    t0 = int(time.time() * 1000) - 40_000

    async def scenario() -> None:
        for i, ts in enumerate([t0, t0 + 10, t0 + 20]):
            await send_all(bootstrap, topic, [{"value": f"r{i}".encode(), "timestamp_ms": ts}])
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            found = await consumer.offsets_for_times({tp: t0 + 5})
            assert (found[tp].offset, found[tp].timestamp) == (1, t0 + 10)
            assert (await consumer.offsets_for_times({tp: t0 + 21}))[tp] is None
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 3}
        finally:
            await consumer.stop()

    run(scenario())


# -- admin -----------------------------------------------------------------------------------------


def test_admin_creates_a_topic_with_configs_and_refuses_duplicates_and_bad_configs(bootstrap: str) -> None:
    topic = unique_topic()

    async def scenario(admin: AIOKafkaAdminClient) -> None:
        created = await admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "4242"})])
        assert [tuple(e)[:2] for e in created.topic_errors] == [(topic, 0)]
        again = await admin.create_topics([NewTopic(topic, 2, 1)])
        assert [tuple(e)[:2] for e in again.topic_errors] == [(topic, TOPIC_ALREADY_EXISTS)]
        other = unique_topic()
        bad = await admin.create_topics([NewTopic(other, 1, 1, topic_configs={"cleanup.policy": "x"})],
                                        validate_only=True)
        assert [tuple(e)[:2] for e in bad.topic_errors] == [(other, INVALID_CONFIG)]
        configs = await topic_configs(admin, topic)
        assert configs["retention.ms"] == ("4242", DYNAMIC_TOPIC_CONFIG)
        assert configs["segment.bytes"] == ("1073741824", DEFAULT_CONFIG)

    run(with_admin(bootstrap, scenario))
    wait_until(lambda: topic_partition_count(bootstrap, topic) == 2, message="2 partitions")


def test_admin_validate_only_creates_nothing(bootstrap: str) -> None:
    topic = unique_topic()

    async def scenario(admin: AIOKafkaAdminClient) -> list[str]:
        checked = await admin.create_topics([NewTopic(topic, 1, 1)], validate_only=True)
        assert [tuple(e)[:2] for e in checked.topic_errors] == [(topic, 0)]
        return await admin.list_topics()

    assert topic not in run(with_admin(bootstrap, scenario))


def test_admin_legacy_alter_configs_replaces_the_whole_set_of_overrides(
    bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(config={"retention.ms": "111111"})

    async def scenario(admin: AIOKafkaAdminClient) -> dict[str, tuple[str, int]]:
        (response,) = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"segment.ms": "222222"})]
        )
        assert [error_code for error_code, *_ in response.resources] == [0]
        return await topic_configs(admin, topic)

    configs = run(with_admin(bootstrap, scenario))
    assert configs["segment.ms"] == ("222222", DYNAMIC_TOPIC_CONFIG)
    assert configs["retention.ms"] == (str(7 * 24 * 3600 * 1000), DEFAULT_CONFIG)


def test_admin_grows_partitions_deletes_records_and_deletes_the_topic(bootstrap: str, topic: str) -> None:
    async def scenario(admin: AIOKafkaAdminClient) -> None:
        grown = await admin.create_partitions({topic: NewPartitions(3)})
        assert [tuple(e)[:2] for e in grown.topic_errors] == [(topic, 0)]
        await send_all(bootstrap, topic, [{"value": f"r{i}".encode(), "partition": 0} for i in range(5)])
        tp = TopicPartition(topic, 0)
        assert await admin.delete_records({tp: RecordsToDelete(3)}) == {tp: 3}
        records = await consume(bootstrap, topic, 2)
        assert [r.offset for r in records] == [3, 4]
        deleted = await admin.delete_topics([topic])
        assert [tuple(e)[:2] for e in deleted.topic_error_codes] == [(topic, 0)]
        again = await admin.delete_topics([topic])
        assert [tuple(e)[:2] for e in again.topic_error_codes] == [(topic, UNKNOWN_TOPIC_OR_PARTITION)]

    run(with_admin(bootstrap, scenario))
