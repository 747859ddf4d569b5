"""confluent-kafka (librdkafka 2.16) producing to and consuming from a tidelog broker."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_END, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TopicPartition

from helpers.clients import DeliveryLog, consume, consumer, produce_all, producer, watermarks


def test_keys_headers_timestamps_and_null_values_come_back_as_produced(bootstrap: str, topic: str) -> None:
    base_ts = int(time.time() * 1000) - 60_000
    sent = [
        (b"k1", b"v1", [("h1", b"a"), ("h1", b"second value, same key"), ("empty", b"")], base_ts),
        (None, b"no key", [], base_ts + 1),
        (b"tombstone", None, [("null-header", None)], base_ts + 2),
        (b"", b"", [], base_ts + 3),
    ]
    prod = producer(bootstrap, {"linger.ms": 50})
    for key, value, headers, ts in sent:
        prod.produce(topic, key=key, value=value, headers=headers, timestamp=ts)
    assert prod.flush(15) == 0

    received = consume(bootstrap, topic, len(sent))

    assert [m.offset() for m in received] == [0, 1, 2, 3]
    for message, (key, value, headers, ts) in zip(received, sent, strict=True):
        assert message.key() == key
        assert message.value() == value
        assert (message.headers() or []) == headers
        assert message.timestamp() == (TIMESTAMP_CREATE_TIME, ts)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_records_compressed_with_each_codec_are_consumed_intact(bootstrap: str, topic: str, codec: str) -> None:
    values = [f"record {i} ".encode() * (i % 7 + 1) for i in range(200)]
    produce_all(producer(bootstrap, {"compression.type": codec, "linger.ms": 20}), topic, values, key=b"k")

    received = consume(bootstrap, topic, len(values))

    assert [m.value() for m in received] == values
    assert [m.offset() for m in received] == list(range(len(values)))
    assert all(m.key() == b"k" for m in received)


def test_a_one_mebibyte_record_is_stored_and_fetched_whole(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(config={"max.message.bytes": str(2 * 1024 * 1024)})
    value = os.urandom(1024 * 1024)
    produce_all(producer(bootstrap, {"message.max.bytes": 4 * 1024 * 1024}), topic, [value, b"after"])

    received = consume(bootstrap, topic, 2)  # default fetch sizes: the broker must return the big batch

    assert [len(m.value()) for m in received] == [len(value), 5]
    assert received[0].value() == value


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_records_sent_with_each_acks_setting_are_stored(bootstrap: str, topic: str, acks: str) -> None:
    values = [f"acks={acks} #{i}".encode() for i in range(50)]
    produce_all(producer(bootstrap, {"acks": acks}), topic, values)

    received = consume(bootstrap, topic, len(values))

    assert [m.value() for m in received] == values


def test_idempotent_producer_stores_each_record_exactly_once(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=4)
    values = [f"idempotent {i}".encode() for i in range(2000)]
    prod = producer(bootstrap, {"enable.idempotence": True, "linger.ms": 1, "batch.num.messages": 50,
                                "max.in.flight.requests.per.connection": 5})
    log = produce_all(prod, topic, values)

    assert len(log.acked) == len(values)
    marks = watermarks(bootstrap, topic, range(4))
    assert sum(high for _, high in marks.values()) == len(values)
    received = consume(bootstrap, topic, len(values), partitions=range(4), settle=0.3)
    assert sorted(m.value() for m in received) == sorted(values)


def test_thirty_two_partitions_each_keep_their_own_order(bootstrap: str, new_topic: Callable[..., str]) -> None:
    partitions = 32
    topic = new_topic(partitions=partitions)
    prod = producer(bootstrap)
    for partition in range(partitions):
        for i in range(5):
            prod.produce(topic, value=f"{partition}:{i}".encode(), partition=partition)
    assert prod.flush(20) == 0

    received = consume(bootstrap, topic, partitions * 5, partitions=range(partitions))

    by_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for message in received:
        by_partition[message.partition()].append((message.offset(), message.value()))
    assert sorted(by_partition) == list(range(partitions))
    for partition, records in by_partition.items():
        assert records == [(i, f"{partition}:{i}".encode()) for i in range(5)]


def test_keyed_records_land_in_the_partition_the_key_hashes_to(bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=8)
    keys = [f"user-{i}".encode() for i in range(40)]
    prod = producer(bootstrap, {"partitioner": "murmur2_random"})
    log = DeliveryLog()
    for key in keys:
        prod.produce(topic, key=key, value=key, on_delivery=log)
    assert prod.flush(15) == 0

    received = consume(bootstrap, topic, len(keys), partitions=range(8))

    placed = {m.key(): m.partition() for m in log.acked}
    assert {m.key(): m.partition() for m in received} == placed
    assert len(set(placed.values())) > 1


def test_log_append_time_topic_stamps_records_with_the_broker_clock(
    bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produce_all(producer(bootstrap), topic, [b"stamped"])
    after = int(time.time() * 1000)
    old_create_time = before - 3_600_000

    prod = producer(bootstrap)
    prod.produce(topic, value=b"old create time", timestamp=old_create_time)
    assert prod.flush(10) == 0
    received = consume(bootstrap, topic, 2)

    for message in received:
        kind, ts = message.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= int(time.time() * 1000) + 1000
    assert received[0].timestamp()[1] <= after + 1000


def test_consumer_starting_past_the_end_resets_to_the_earliest_offset(bootstrap: str, topic: str) -> None:
    produce_all(producer(bootstrap), topic, [b"a", b"b", b"c"])

    received = consume(bootstrap, topic, 3, offset=1000, config={"auto.offset.reset": "earliest"})

    assert [m.offset() for m in received] == [0, 1, 2]


def test_consumer_reading_from_the_end_gets_only_new_records(bootstrap: str, topic: str) -> None:
    produce_all(producer(bootstrap), topic, [b"old"])
    prod = producer(bootstrap, {"linger.ms": 0})
    cons = consumer(bootstrap)
    try:
        cons.assign([TopicPartition(topic, 0, OFFSET_END)])
        deadline = time.monotonic() + 15
        message = None
        sent = 0
        while message is None:  # the end offset resolves asynchronously: keep producing until one arrives
            assert time.monotonic() < deadline, "nothing received from the end of the partition"
            produce_all(prod, topic, [f"new {sent}".encode()])
            sent += 1
            message = cons.poll(0.3)
        assert message.error() is None
        assert message.offset() >= 1
        assert message.value().startswith(b"new ")
    finally:
        cons.close()
