"""Idempotent producers whose Produce responses get lost: retried batches must not be stored twice.

The broker here advertises a ``DroppingProxy`` (helpers/proxy.py) as its address, so every client
request goes through it. The proxy cuts the connection instead of delivering a few Produce
responses: the broker has appended those batches, the client does not know, reconnects and sends
them again with the same producer id, epoch and sequence numbers. Counting the records in the log
shows whether the broker recognised the retries as duplicates.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer

from helpers.broker_process import BrokerProcess, register_failure_report
from helpers.clients import consume, produce_all, producer, unique_topic, watermarks
from helpers.proxy import DroppingProxy

with warnings.catch_warnings():  # kafka-python 3.0.12 loads its schemas with importlib.resources.read_text
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

DROPS = 3
RECORDS = 300


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[DroppingProxy]:
    register_failure_report(pytestconfig)
    proxy = DroppingProxy()
    broker = BrokerProcess(tmp_path_factory.mktemp("proxied-broker"),
                           {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    broker.start()
    proxy.start(broker.host, broker.port)
    yield proxy
    proxy.close()
    broker.close()


@pytest.fixture
def via_proxy(proxied: DroppingProxy) -> Iterator[str]:
    """Bootstrap address through the proxy, which is armed to lose the next DROPS Produce responses."""
    proxied.dropped = 0
    proxied.drop_produce_responses = DROPS
    yield f"127.0.0.1:{proxied.port}"
    proxied.drop_produce_responses = 0


def assert_each_record_stored_once(bootstrap: str, topic: str, proxy: DroppingProxy) -> None:
    assert proxy.dropped == DROPS, "the proxy did not lose the responses it was asked to"
    assert watermarks(bootstrap, topic) == {0: (0, RECORDS)}
    received = consume(bootstrap, topic, RECORDS)
    assert [m.value() for m in received] == [f"r{i}".encode() for i in range(RECORDS)]


def values() -> list[bytes]:
    return [f"r{i}".encode() for i in range(RECORDS)]


def test_confluent_kafka_retries_after_lost_responses_store_each_record_once(
    via_proxy: str, proxied: DroppingProxy
) -> None:
    topic = unique_topic()
    prod = producer(via_proxy, {"enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 20,
                                "retry.backoff.ms": 20})

    log = produce_all(prod, topic, values(), timeout=60)

    assert len(log.acked) == RECORDS
    assert_each_record_stored_once(via_proxy, topic, proxied)


def test_kafka_python_retries_after_lost_responses_store_each_record_once(
    via_proxy: str, proxied: DroppingProxy
) -> None:
    topic = unique_topic()
    prod = KafkaProducer(bootstrap_servers=via_proxy, enable_idempotence=True, acks="all", linger_ms=2,
                         batch_size=256, retry_backoff_ms=20, request_timeout_ms=10_000)
    try:
        futures = [prod.send(topic, value=v) for v in values()]
        prod.flush(timeout=60)
        offsets = [f.get(timeout=10).offset for f in futures]
    finally:
        prod.close(timeout=5)

    assert offsets == list(range(RECORDS))
    assert_each_record_stored_once(via_proxy, topic, proxied)


def test_aiokafka_retries_after_lost_responses_store_each_record_once(via_proxy: str, proxied: DroppingProxy) -> None:
    topic = unique_topic()

    async def send() -> list[int]:
        prod = AIOKafkaProducer(bootstrap_servers=via_proxy, enable_idempotence=True, linger_ms=2,
                                max_batch_size=256, retry_backoff_ms=20, request_timeout_ms=10_000)
        await prod.start()
        try:
            futures = [await prod.send(topic, value=v) for v in values()]
            return [(await f).offset for f in futures]
        finally:
            await prod.stop()

    offsets = asyncio.run(asyncio.wait_for(send(), 60))

    assert offsets == list(range(RECORDS))
    assert_each_record_stored_once(via_proxy, topic, proxied)
