"""Produce against Apache Kafka: unknown topics and partitions, acks, sizes, timestamps, bad batches, versions."""

from __future__ import annotations

import struct
import time
import warnings
from collections.abc import Callable

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import (
    BASE_TS,
    V_PRODUCE,
    batch,
    create_topic,
    delete_topic,
    fetch,
    list_offsets,
    metadata,
    metadata_request,
    produce,
)

from helpers.raw_client import legacy_message_set, record_batch
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import Record, build_batch


def scenario_produce_to_unknown_topic(b: Broker) -> None:
    """Produce to a topic that does not exist (auto-creation is on, but Produce never creates):
    UNKNOWN_TOPIC_OR_PARTITION for the partition."""
    produce(b, "produce", b.topic(), batch([b"v"]))
    metadata(b, "metadata afterwards", [b.topic()])


def scenario_produce_to_unknown_partition(b: Broker) -> None:
    """Produce to partition 5 of a one-partition topic, and to partition -1."""
    name = b.topic()
    create_topic(b, name, 1)
    produce(b, "produce to partition 5", name, batch([b"v"]), partition=5)
    produce(b, "produce to partition -1", name, batch([b"v"]), partition=-1)


def scenario_produce_acks(b: Broker) -> None:
    """acks=1 and acks=-1 answer with the base offset; acks=0 gets no answer at all (the next
    request on the connection is answered next); acks=2 is INVALID_REQUIRED_ACKS."""
    name = b.topic()
    create_topic(b, name, 1)
    produce(b, "acks=1", name, batch([b"a", b"b"]), acks=1)
    produce(b, "acks=-1", name, batch([b"c"]), acks=-1)
    fire_and_forget = request(ApiKey.PRODUCE, V_PRODUCE, acks=0, timeout=10_000, topic_data=[
        {"name": name, "partition_data": [{"index": 0, "records": batch([b"d"])}]},
    ])
    wire = b.connection()
    wire.send_only(fire_and_forget)
    b.wait_until("acks=0 record appended", lambda: _latest(b, name) == 4)
    # Had the broker answered the acks=0 produce, this would read that answer (wrong correlation id).
    b.call("metadata on the acks=0 connection", metadata_request([name]), wire=wire)
    list_offsets(b, "latest after acks=0", name, -1)
    produce(b, "acks=2", name, batch([b"e"]), acks=2)
    list_offsets(b, "latest after acks=2", name, -1)


def _latest(b: Broker, topic: str) -> int:
    response = list_offsets(b, None, topic, -1)
    try:
        return int(response.topics[0].partitions[0].offset)
    except (AttributeError, IndexError):
        return -1


def scenario_produce_record_larger_than_max_message_bytes(b: Broker) -> None:
    """A batch above the topic's max.message.bytes (1000) is refused with MESSAGE_TOO_LARGE and
    nothing is appended; a batch just under the limit is accepted."""
    name = b.topic()
    create_topic(b, name, 1, {"max.message.bytes": "1000"})
    produce(b, "2000-byte record", name, batch([b"x" * 2000]))
    produce(b, "900-byte batch", name, batch([b"x" * 900]))
    list_offsets(b, "latest", name, -1)


def scenario_produce_to_deleted_topic(b: Broker) -> None:
    """Produce, delete the topic, produce again: the second produce gets UNKNOWN_TOPIC_OR_PARTITION."""
    name = b.topic()
    create_topic(b, name, 1)
    produce(b, "produce before delete", name, batch([b"v"]))
    delete_topic(b, name)
    produce(b, "produce after delete", name, batch([b"v"]))


def scenario_produce_corrupt_crc(b: Broker) -> None:
    """A batch whose CRC does not match is refused (CORRUPT_MESSAGE) and nothing is appended."""
    name = b.topic()
    create_topic(b, name, 1)
    produce(b, "bad crc", name, record_batch([b"v"], timestamp_ms=BASE_TS, corrupt_crc=True))
    list_offsets(b, "latest", name, -1)


def scenario_produce_legacy_magic(b: Broker) -> None:
    """Produce v9 carrying magic 0 and magic 1 message sets (pre-0.11 format): refused, nothing appended."""
    name = b.topic()
    create_topic(b, name, 1)
    produce(b, "magic 0", name, legacy_message_set([b"v"], magic=0))
    produce(b, "magic 1", name, legacy_message_set([b"v"], magic=1))
    list_offsets(b, "latest", name, -1)


def scenario_produce_null_records(b: Broker) -> None:
    """Produce with a null record set for the partition (waits 3 s at most for an answer)."""
    name = b.topic()
    create_topic(b, name, 1)
    b.call("null records", request(ApiKey.PRODUCE, V_PRODUCE, acks=-1, timeout=10_000, topic_data=[
        {"name": name, "partition_data": [{"index": 0, "records": None}]},
    ]), wire=b.connection(timeout=3.0))
    list_offsets(b, "latest", name, -1)


def scenario_produce_timestamp_far_in_future(b: Broker) -> None:
    """A record stamped two hours ahead is beyond log.message.timestamp.after.max.ms (one hour by
    default): INVALID_TIMESTAMP."""
    name = b.topic()
    create_topic(b, name, 1)
    future = int(time.time() * 1000) + 2 * 3600 * 1000
    produce(b, "two hours ahead", name, batch([b"v"], timestamp_ms=future))
    list_offsets(b, "latest", name, -1)


def scenario_produce_log_append_time(b: Broker) -> None:
    """A topic with message.timestamp.type=LogAppendTime: Produce answers the append time, and
    fetched batches carry the timestamp-type attribute."""
    name = b.topic()
    create_topic(b, name, 1, {"message.timestamp.type": "LogAppendTime"})
    produce(b, "produce", name, batch([b"a", b"b"]))
    fetch(b, "fetch", name, 0)


def scenario_produce_versions(b: Broker) -> None:
    """The same one-record batch produced at v3 (oldest accepted), v7, v9 (first flexible), v11 and
    v12; v13 names the topic by id."""
    name = b.topic()
    create_topic(b, name, 1)
    for version in (3, 7, 9, 11, 12):
        produce(b, f"produce v{version}", name, batch([b"v"]), version=version)
    topic_id = metadata(b, None, [name]).topics[0].topic_id
    b.call("produce v13 by topic id", request(ApiKey.PRODUCE, 13, acks=-1, timeout=10_000, topic_data=[
        {"topic_id": topic_id, "partition_data": [{"index": 0, "records": batch([b"v"])}]},
    ]))
    fetch(b, "fetch all", name, 0)


def scenario_produce_v2_refused(b: Broker) -> None:
    """Produce v2 (advertised from v0 by Kafka 4 for librdkafka's sake, but not served): the broker
    closes the connection without answering."""
    name = b.topic()
    create_topic(b, name, 1)
    message_set = legacy_message_set([b"v"], magic=1)
    encoded = name.encode()
    body = (
        struct.pack(">hii", 1, 10_000, 1) + struct.pack(">h", len(encoded)) + encoded
        + struct.pack(">iii", 1, 0, len(message_set)) + message_set
    )
    b.record("produce v2", b.connection().send_raw(int(ApiKey.PRODUCE), 2, body))
    list_offsets(b, "latest", name, -1)


def _compressed_batch(values: list[bytes], codec: int) -> bytes:
    """A producer's batch compressed with ``codec`` (1 gzip ... 4 zstd), as kafka-python writes it."""
    with warnings.catch_warnings():  # kafka-python 3 imports importlib.resources' deprecated helpers
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=BASE_TS, key=b"k", value=value, headers=[("h", b"%d" % i)])
    return bytes(builder.build())


def scenario_produce_to_topics_with_a_compression_type(b: Broker) -> None:
    """compression.type names the codec batches are stored in: an uncompressed batch is compressed
    (gzip, zstd), an lz4 batch is decompressed (uncompressed) or recompressed (snappy), a batch already
    in the topic's codec is kept; fetched batches show the codec in their attributes."""
    values = [b"value %d " % i * 10 for i in range(20)]
    for codec, sent in [("gzip", batch(values)), ("zstd", _compressed_batch(values, 4)),
                        ("uncompressed", _compressed_batch(values, 3)), ("snappy", _compressed_batch(values, 3))]:
        name = b.topic(f"-{codec}")
        create_topic(b, name, 1, {"compression.type": codec})
        produce(b, f"produce to a {codec} topic", name, sent)
        fetch(b, f"fetch from the {codec} topic", name, 0)


def _batch_with_timestamps(timestamps: list[int], keys: list[bytes | None]) -> bytes:
    """One uncompressed batch whose records carry their own timestamps (kafka-python's builder)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (timestamp, key) in enumerate(zip(timestamps, keys, strict=True)):
        builder.append(i, timestamp=timestamp, key=key, value=b"v%d" % i, headers=[])
    return bytes(builder.build())


def scenario_produce_keyless_records_to_a_compacted_topic(b: Broker) -> None:
    """A batch of six records, three without a key, to a compacted topic: INVALID_RECORD, and
    record_errors names records 1, 3 and 5 (KIP-467), so a client fails exactly those; nothing is
    written. A compressed batch is checked the same way."""
    name = b.topic()
    create_topic(b, name, 1, {"cleanup.policy": "compact"})
    keys = [b"a", None, b"b", None, b"c", None]
    produce(b, "keyless records 1, 3, 5", name, batch([b"v"] * 6, keys=keys))
    produce(b, "compressed, keyless record 0", name, _compressed_batch_with_keys([None, b"k"], codec=1))
    list_offsets(b, "latest", name, -1)


def _compressed_batch_with_keys(keys: list[bytes | None], codec: int) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, key in enumerate(keys):
        builder.append(i, timestamp=BASE_TS, key=key, value=b"v", headers=[])
    return bytes(builder.build())


def scenario_produce_timestamps_out_of_range_record_by_record(b: Broker) -> None:
    """message.timestamp.before.max.ms and after.max.ms of one hour: a batch whose records 1 (two
    hours ahead) and 3 (two hours behind) are out of range gets INVALID_TIMESTAMP with both in
    record_errors; on a compacted topic a keyless record and a late one are both listed, and the
    partition's error is INVALID_TIMESTAMP."""
    hour = 3600 * 1000
    limits = {"message.timestamp.before.max.ms": str(hour), "message.timestamp.after.max.ms": str(hour)}
    name = b.topic()
    create_topic(b, name, 1, limits)
    now = int(time.time() * 1000)
    keys: list[bytes | None] = [b"k"] * 4
    produce(b, "records 1 and 3 out of range", name, _batch_with_timestamps([now, now + 2 * hour, now, now - 2 * hour], keys))
    produce(b, "all in range", name, _batch_with_timestamps([now, now + 1000, now - 1000], keys[:3]))
    compacted = b.topic("-compacted")
    create_topic(b, compacted, 1, {**limits, "cleanup.policy": "compact"})
    produce(b, "keyless record 0, late record 2", compacted,
            _batch_with_timestamps([now, now, now - 2 * hour], [None, b"k", b"k"]))
    list_offsets(b, "latest", name, -1)
    list_offsets(b, "latest compacted", compacted, -1)


def _batch_with_offset_deltas(deltas: list[int], codec: Compression) -> bytes:
    """A producer batch (tidelog's encoder) whose records carry ``deltas`` as offset deltas; its header
    still says ``len(deltas)`` records and a last offset delta of ``len(deltas) - 1``."""
    records = [Record(delta, BASE_TS + i, b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),)) for i, delta in enumerate(deltas)]
    return build_batch(records, compression=codec, last_offset_delta=len(deltas) - 1)


def scenario_produce_inner_offsets_out_of_order(b: Broker) -> None:
    """Batches whose records' offset deltas do not run 0, 1, 2... (0 2 1 3, or 1 1 5 2). An uncompressed
    batch kept uncompressed is stored as sent, deltas included; a batch recompressed for the topic's
    compression.type is stored with its records renumbered in order; a compressed batch kept in its
    codec (gzip, snappy, lz4, zstd) is refused, nothing appended. A batch whose base offset is 5
    (deltas in order) is refused too: a producer's batch starts at 0."""
    name = b.topic()
    create_topic(b, name, 1)
    shuffled, repeated = [0, 2, 1, 3], [1, 1, 5, 2]
    for codec, deltas in [(Compression.NONE, shuffled), (Compression.GZIP, shuffled), (Compression.SNAPPY, repeated),
                          (Compression.LZ4, shuffled), (Compression.ZSTD, repeated)]:
        label = " ".join(map(str, deltas))
        produce(b, f"{codec.name.lower()} batch, deltas {label}", name, _batch_with_offset_deltas(deltas, codec))
    based = build_batch([Record(5 + i, BASE_TS, b"k", b"v") for i in range(3)], base_offset=5, compression=Compression.GZIP)
    produce(b, "gzip batch, base offset 5, deltas 0 1 2", name, based)
    fetch(b, "fetch", name, 0)
    gzip_topic = b.topic("-gzip")
    create_topic(b, gzip_topic, 1, {"compression.type": "gzip"})
    produce(b, "lz4 batch to a gzip topic", gzip_topic, _batch_with_offset_deltas(shuffled, Compression.LZ4))
    produce(b, "uncompressed batch to a gzip topic", gzip_topic, _batch_with_offset_deltas(repeated, Compression.NONE))
    fetch(b, "fetch from the gzip topic", gzip_topic, 0)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)
