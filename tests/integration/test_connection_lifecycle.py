"""Connections: idle ones are closed after connections.max.idle.ms; a busy broker shuts down cleanly."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable

from confluent_kafka import Producer

from helpers.broker_process import BrokerProcess


def test_idle_connection_is_closed_after_connections_max_idle_ms(fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker({"connections.max.idle.ms": "300"})
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        started = time.monotonic()
        assert sock.recv(1) == b""  # the broker closed it
        waited = time.monotonic() - started
    assert 0.25 < waited < 3.0


def test_sigterm_with_producers_attached_exits_cleanly_and_keeps_every_acked_record(
    fresh_broker: Callable[..., BrokerProcess],
) -> None:
    broker = fresh_broker()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 1})
    acked = []
    for i in range(500):
        producer.produce("shutdown-topic", value=b"%d" % i, on_delivery=lambda err, msg: acked.append(err is None))
    assert producer.flush(15) == 0
    assert all(acked) and len(acked) == 500
    started = time.monotonic()
    assert broker.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 5.0
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition("shutdown-topic", 0, 0)])
    values = []
    deadline = time.monotonic() + 15
    while len(values) < 500 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(500))
