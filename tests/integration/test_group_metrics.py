"""The broker's /metrics reports group counts by state and consumer lag per group and partition."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.broker_process import BrokerProcess, free_port, wait_until


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_consumer_lag_and_group_states_are_scraped(fresh_broker: Callable[..., BrokerProcess]) -> None:
    metrics_port = free_port()
    broker = fresh_broker({
        "metrics.port": metrics_port, "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2,
    })
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce("lagging", value=b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lag-group", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("lagging", 0, 4)], asynchronous=False)
    consumer.close()

    def lag_line() -> str | None:
        for line in scrape(metrics_port).splitlines():
            if line.startswith("tidelog_consumer_lag") and 'group="lag-group"' in line and 'topic="lagging"' in line:
                return line
        return None

    line = wait_until(lag_line, timeout=10)
    assert line is not None and line.endswith(" 6"), line  # 10 produced, committed at 4
    text = scrape(metrics_port)
    assert any(row.startswith("tidelog_groups") and 'state="Empty"' in row for row in text.splitlines()), text[:2000]
