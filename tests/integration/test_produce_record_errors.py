"""Record-level produce errors (KIP-467) as a client sees them: librdkafka fails exactly the records
the broker names in ``record_errors`` and fails the rest of the batch as collateral
(``_INVALID_DIFFERENT_RECORD``), so an application can tell the bad records from the good ones.

No client writes a compressed batch whose records' offset deltas do not run 0, 1, 2...: such batches
are built with tidelog's own encoder and sent in a raw Produce, then read back by a real consumer."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v11.response import PartitionProduceResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import FAST_CLIENT, create_topic, unique_topic
from helpers.raw_client import RawClient
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import Record, build_batch

record_errors_broker = module_broker("record_errors_broker", {})

HOUR_MS = 3600 * 1000


def produce_one_batch(bootstrap: str, topic: str, records: list[tuple[bytes | None, int | None]]) -> list[int]:
    """Produce ``records`` (key, timestamp) to partition 0 in one batch; each record's delivery error code."""
    errors: dict[int, int] = {}

    def on_delivery(index: int) -> Callable[[KafkaError | None, object], None]:
        def report(error: KafkaError | None, _message: object) -> None:
            errors[index] = error.code() if error is not None else 0

        return report

    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "retries": 0, **FAST_CLIENT})
    for index, (key, timestamp) in enumerate(records):
        prod.produce(topic, b"v%d" % index, key=key, partition=0, timestamp=timestamp or 0,
                     on_delivery=on_delivery(index))
    assert prod.flush(15) == 0
    return [errors[i] for i in range(len(records))]


def test_only_the_keyless_records_of_a_batch_fail_on_a_compacted_topic(record_errors_broker: BrokerProcess) -> None:
    bootstrap = record_errors_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("compacted"), 1, {"cleanup.policy": "compact"})
    codes = produce_one_batch(bootstrap, topic, [(b"a", None), (None, None), (b"b", None), (None, None)])
    assert codes == [
        KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
        KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
    ]


def test_a_batch_with_a_timestamp_out_of_range_fails_whole_in_librdkafka(record_errors_broker: BrokerProcess) -> None:
    # The broker names record 1 alone (the compat tier compares record_errors with Kafka's), but
    # librdkafka fails every record of the batch with INVALID_TIMESTAMP, against Kafka as here.
    bootstrap = record_errors_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("timestamps"), 1, {"message.timestamp.after.max.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    codes = produce_one_batch(bootstrap, topic, [(b"a", now), (b"b", now + 2 * HOUR_MS), (b"c", now)])
    assert codes == [KafkaError.INVALID_TIMESTAMP] * 3


def batch_with_offset_deltas(deltas: list[int], codec: Compression) -> bytes:
    return build_batch([Record(delta, int(time.time() * 1000), b"k%d" % i, b"v%d" % i) for i, delta in enumerate(deltas)],
                       compression=codec, last_offset_delta=len(deltas) - 1)


def raw_produce(broker: BrokerProcess, topic: str, records: bytes) -> PartitionProduceResponse:
    with RawClient(broker.host, broker.port) as raw:
        response = raw.call(ProduceRequest(
            transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
                PartitionProduceData(index=i32(0), records=Records(records)),)),),
        ))
    [partition] = response.responses[0].partition_responses
    return partition  # type: ignore[no-any-return]


def log_end(broker: BrokerProcess, topic: str) -> int:
    with RawClient(broker.host, broker.port) as raw:
        response = raw.call(ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
            ListOffsetsTopic(name=TopicName(topic), partitions=(
                ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),)))
    return int(response.topics[0].partitions[0].offset)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_compressed_batch_whose_offset_deltas_are_out_of_order_is_refused_naming_each_record_out_of_place(
    record_errors_broker: BrokerProcess, codec: Compression,
) -> None:
    topic = create_topic(record_errors_broker.bootstrap, unique_topic(f"inner-{codec.name.lower()}"), 1)
    answer = raw_produce(record_errors_broker, topic, batch_with_offset_deltas([1, 1, 5, 2], codec))
    assert answer.error_code is ErrorCode.invalid_record
    expected = "offset delta {} where {} was expected: the records of a compressed batch must have offset deltas 0, 1, 2..."
    assert [(int(e.batch_index), e.batch_index_error_message) for e in answer.record_errors] == [
        (0, expected.format(1, 0)), (2, expected.format(5, 2)), (3, expected.format(2, 3)),
    ]
    assert answer.error_message == (
        "3 records out of order in a compressed batch (record 0: offset delta 1; record 2: offset delta 5; "
        "record 3: offset delta 2)"
    )
    assert int(answer.base_offset) == -1
    assert log_end(record_errors_broker, topic) == 0
    assert raw_produce(record_errors_broker, topic, batch_with_offset_deltas([0, 1, 2], codec)).error_code is ErrorCode.none
    assert log_end(record_errors_broker, topic) == 3


def test_a_batch_recompressed_for_its_topic_is_stored_with_its_records_renumbered(
    record_errors_broker: BrokerProcess,
) -> None:
    bootstrap = record_errors_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("inner-recompressed"), 1, {"compression.type": "gzip"})
    answer = raw_produce(record_errors_broker, topic, batch_with_offset_deltas([0, 2, 1, 3], Compression.LZ4))
    assert (answer.error_code, int(answer.base_offset), answer.record_errors) == (ErrorCode.none, 0, ())
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **FAST_CLIENT})
    try:
        consumer.subscribe([topic])
        seen: list[tuple[int | None, bytes | None]] = []
        deadline = time.monotonic() + 15
        while len(seen) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append((message.offset(), message.key()))
    finally:
        consumer.close()
    assert seen == [(0, b"k0"), (1, b"k1"), (2, b"k2"), (3, b"k3")]


def test_a_producer_batch_that_does_not_start_at_offset_0_is_refused_whole(record_errors_broker: BrokerProcess) -> None:
    topic = create_topic(record_errors_broker.bootstrap, unique_topic("inner-based"), 1)
    based = build_batch([Record(5 + i, int(time.time() * 1000), b"k", b"v") for i in range(3)], base_offset=5,
                        compression=Compression.GZIP)
    answer = raw_produce(record_errors_broker, topic, based)
    assert (answer.error_code, answer.record_errors) == (ErrorCode.invalid_record, ())
    assert answer.error_message == "batch at 0 has base offset 5; a producer's batch starts at 0"
    assert log_end(record_errors_broker, topic) == 0
