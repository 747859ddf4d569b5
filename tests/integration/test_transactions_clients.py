"""Transactions with real clients: commit and abort seen through read_committed and read_uncommitted
consumers of three libraries, zombie fencing, the timeout abort and a broker restart.

Each test starts its own broker with a small ``__transaction_state`` and a fast sweeper.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from helpers.broker_process import BrokerProcess
from helpers.clients import create_topic, unique_topic

TXN_BROKER = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture
def txn_broker(fresh_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    return fresh_broker(TXN_BROKER)


def txn_producer(bootstrap: str, txn_id: str, **extra: Any) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})
    producer.init_transactions(20)
    return producer


def read_all(bootstrap: str, topic: str, isolation: str, expected: int | None = None, timeout: float = 10.0) -> list[bytes]:
    """Values of ``topic`` partition 0 from the start, as a consumer with ``isolation`` sees them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    idle_until = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if expected is None and time.monotonic() > idle_until:
                    break
                continue
            if msg.error():
                continue
            values.append(msg.value())
            idle_until = time.monotonic() + 1.0
            if expected is not None and len(values) >= expected:
                break
    finally:
        consumer.close()
    return values


def produce_committed_and_aborted(bootstrap: str, topic: str) -> None:
    producer = txn_producer(bootstrap, f"tx-{uuid.uuid4().hex[:8]}")
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"committed-{i}".encode())
    producer.commit_transaction(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"aborted-{i}".encode())
    producer.flush(10)
    producer.abort_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, b"committed-last")
    producer.commit_transaction(10)


def test_aborted_records_are_hidden_from_read_committed_confluent_consumers(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic())
    produce_committed_and_aborted(txn_broker.bootstrap, topic)
    committed = read_all(txn_broker.bootstrap, topic, "read_committed")
    assert committed == [b"committed-0", b"committed-1", b"committed-2", b"committed-last"]
    everything = read_all(txn_broker.bootstrap, topic, "read_uncommitted")
    assert everything == [*committed[:3], b"aborted-0", b"aborted-1", b"aborted-2", b"committed-last"]


def test_kafka_python_and_aiokafka_read_committed_skip_aborted_records(txn_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    topic = create_topic(txn_broker.bootstrap, unique_topic())
    produce_committed_and_aborted(txn_broker.bootstrap, topic)
    wanted = [b"committed-0", b"committed-1", b"committed-2", b"committed-last"]

    def kafka_python(isolation: str) -> list[bytes]:
        consumer = KafkaConsumer(topic, bootstrap_servers=txn_broker.bootstrap, isolation_level=isolation,
                                 auto_offset_reset="earliest", consumer_timeout_ms=3000, enable_auto_commit=False)
        try:
            return [m.value for m in consumer]
        finally:
            consumer.close()

    assert kafka_python("read_committed") == wanted
    assert len(kafka_python("read_uncommitted")) == 7

    async def aio(isolation: str) -> list[bytes]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=txn_broker.bootstrap, isolation_level=isolation,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got: list[bytes] = []
            batches = await consumer.getmany(timeout_ms=3000)
            while batches:
                got += [m.value for ms in batches.values() for m in ms if m.value is not None]
                batches = await consumer.getmany(timeout_ms=1000)
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(aio("read_committed")) == wanted
    assert len(asyncio.run(aio("read_uncommitted"))) == 7


def test_open_transaction_holds_read_committed_consumers_at_the_last_stable_offset(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic())
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, b"before")
    plain.flush(10)
    producer = txn_producer(txn_broker.bootstrap, "holder")
    producer.begin_transaction()
    producer.produce(topic, b"in-flight")
    producer.flush(10)
    plain.produce(topic, b"after")
    plain.flush(10)
    assert read_all(txn_broker.bootstrap, topic, "read_committed") == [b"before"]
    producer.commit_transaction(10)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=3) == [b"before", b"in-flight", b"after"]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic())
    zombie = txn_producer(txn_broker.bootstrap, "shared-id")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(10)
    successor = txn_producer(txn_broker.bootstrap, "shared-id")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(10)
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"zombie-2")
        zombie.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert "fenced" in error.str().lower() or "epoch" in error.str().lower(), error
    assert read_all(txn_broker.bootstrap, topic, "read_committed") == [b"successor"]


def test_a_transaction_open_past_its_timeout_is_aborted_and_the_lso_moves_on(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic())
    producer = txn_producer(txn_broker.bootstrap, "forgetful", **{"transaction.timeout.ms": 5000})
    opened = time.monotonic()
    producer.begin_transaction()
    producer.produce(topic, b"never-committed")
    producer.flush(10)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, b"plain")
    plain.flush(10)
    assert read_all(txn_broker.bootstrap, topic, "read_committed") == []
    assert time.monotonic() - opened < 5.0, "the check above must run before the timeout"
    # The sweeper (every 200 ms) aborts the transaction once it is 5 s old: "plain" becomes stable.
    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=1, timeout=15) == [b"plain"]
    assert time.monotonic() - opened >= 5.0
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)


def test_transactions_and_coordinator_state_survive_a_broker_restart(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic())
    producer = txn_producer(txn_broker.bootstrap, "durable")
    producer.begin_transaction()
    producer.produce(topic, b"one")
    producer.commit_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, b"open-at-crash")
    producer.flush(10)
    txn_broker.kill9()
    txn_broker.start()
    # The restarted coordinator remembers the id: a new producer gets the next epoch and the
    # transaction left open is aborted by that InitProducerId.
    successor = txn_producer(txn_broker.bootstrap, "durable")
    successor.begin_transaction()
    successor.produce(topic, b"two")
    successor.commit_transaction(10)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=2) == [b"one", b"two"]
    assert read_all(txn_broker.bootstrap, topic, "read_uncommitted", expected=3) == [b"one", b"open-at-crash", b"two"]


@pytest.fixture
def group_topics(txn_broker: BrokerProcess) -> Iterator[tuple[str, str]]:
    yield create_topic(txn_broker.bootstrap, unique_topic("in")), create_topic(txn_broker.bootstrap, unique_topic("out"))


def test_offsets_sent_in_an_aborted_transaction_are_not_committed(txn_broker: BrokerProcess, group_topics: tuple[str, str]) -> None:
    source, _ = group_topics
    group = f"g-{uuid.uuid4().hex[:8]}"
    producer = txn_producer(txn_broker.bootstrap, "offsets")
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 5)], metadata, 10)
    producer.abort_transaction(10)
    assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset < 0
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 7)], metadata, 10)
    producer.commit_transaction(10)
    assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == 7
    consumer.close()


def test_a_transaction_left_open_across_a_broker_crash_is_aborted_after_its_timeout(txn_broker: BrokerProcess) -> None:
    topic = create_topic(txn_broker.bootstrap, unique_topic())
    vanished = txn_producer(txn_broker.bootstrap, "vanished", **{"transaction.timeout.ms": 4000})
    vanished.begin_transaction()
    # The coordinator's clock for the transaction starts when the partition is added, which the
    # produce below triggers: take our reference just before it, so that the bound is a lower one.
    opened = time.monotonic()
    vanished.produce(topic, b"orphan")
    vanished.flush(10)
    txn_broker.kill9()
    txn_broker.start()
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, b"later")
    plain.flush(10)
    # The restarted coordinator replays the open transaction with its start time and aborts it once
    # 4 s have passed; until then the orphan holds read_committed consumers back.
    got = read_all(txn_broker.bootstrap, topic, "read_committed", expected=1, timeout=20)
    assert got == [b"later"]
    # 50 ms of slack: the broker's start time is wall-clock milliseconds, ours is monotonic.
    assert time.monotonic() - opened >= 4.0 - 0.05
