"""A topic's compression.type with real clients: what the producer sends is stored in the topic's codec.

The segment files are read to check the codec each batch was stored with; the records are read back
through confluent-kafka, kafka-python and kcat, which must decompress what the broker compressed.
"""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from helpers.broker_process import BrokerProcess, stored_batches
from helpers.clients import admin_client, consume, produce_all, producer

with warnings.catch_warnings():  # kafka-python 3 imports importlib.resources' deprecated helpers
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition

CODEC_IDS = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
VALUES = [b"record %d " % i * 30 for i in range(300)]


def codecs_on_disk(broker: BrokerProcess, topic: str) -> set[int]:
    return {codec for _, _, codec in stored_batches(broker, topic)}


@pytest.mark.parametrize("topic_codec,client_codec", [
    ("zstd", "none"), ("gzip", "lz4"), ("snappy", "zstd"), ("lz4", "gzip"), ("uncompressed", "snappy"),
])
def test_batches_are_stored_in_the_topics_codec_and_every_client_reads_them(
    broker: BrokerProcess, new_topic: Callable[..., str], topic_codec: str, client_codec: str
) -> None:
    topic = new_topic(config={"compression.type": topic_codec})
    prod = producer(broker.bootstrap, {"compression.type": client_codec, "linger.ms": 20, "enable.idempotence": True})
    produce_all(prod, topic, VALUES, partition=0, key=b"k")
    assert codecs_on_disk(broker, topic) == {CODEC_IDS[topic_codec]}
    assert [m.value() for m in consume(broker.bootstrap, topic, len(VALUES))] == VALUES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        reader = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                               enable_auto_commit=False, consumer_timeout_ms=10_000)
        try:
            reader.assign([TopicPartition(topic, 0)])
            read: list[bytes] = []
            for message in reader:  # stops after consumer_timeout_ms without a record
                read.append(message.value)
                if len(read) == len(VALUES):
                    break
            assert read == VALUES
        finally:
            reader.close()


def test_kcat_reads_what_the_broker_compressed(broker: BrokerProcess, kcat: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(config={"compression.type": "gzip"})
    lines = [b"line-%d" % i for i in range(50)]
    subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-z", "none"],
                   input=b"\n".join(lines) + b"\n", check=True, timeout=30)
    assert codecs_on_disk(broker, topic) == {CODEC_IDS["gzip"]}
    out = subprocess.run([kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%s\n"],
                         capture_output=True, check=True, timeout=30).stdout
    assert out.splitlines() == lines


def test_a_changed_compression_type_applies_to_later_appends_only(broker: BrokerProcess,
                                                                   new_topic: Callable[..., str]) -> None:
    topic = new_topic()  # compression.type=producer
    prod = producer(broker.bootstrap, {"compression.type": "snappy", "linger.ms": 20})
    produce_all(prod, topic, VALUES[:100], partition=0)
    assert codecs_on_disk(broker, topic) == {CODEC_IDS["snappy"]}

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("compression.zstd.level", "10", incremental_operation=AlterConfigOpType.SET),
    ])
    admin = admin_client(broker.bootstrap)
    admin.incremental_alter_configs([resource])[resource].result(10)
    produce_all(prod, topic, VALUES[100:], partition=0)
    before, after = [], []
    for base_offset, _, codec in stored_batches(broker, topic):
        (before if base_offset < 100 else after).append(codec)
    assert set(before) == {CODEC_IDS["snappy"]} and set(after) == {CODEC_IDS["zstd"]}
    assert [m.value() for m in consume(broker.bootstrap, topic, len(VALUES))] == VALUES
