"""Record-level produce errors (KIP-467) as a client sees them: librdkafka fails exactly the records
the broker names in ``record_errors`` and fails the rest of the batch as collateral
(``_INVALID_DIFFERENT_RECORD``), so an application can tell the bad records from the good ones."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import FAST_CLIENT, create_topic, unique_topic

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
