"""Lag evaluation end to end: real consumers misbehave, the console's Burrow API and metrics say how.

One broker, one console sampling every 0.5 s with a 10-sample window, one producer writing ~40
records/s to three topics, and three consumer groups, run side by side:

- ``stops``: consumes and commits for a while, then leaves the group: STOP (group ERR), with lag in
  seconds equal to the age of the first record it did not consume;
- ``slows``: commits every record but handles 4 a second while 40 arrive: WARN;
- ``rewinds``: catches up with a topic that gets no new record (OK), then moves its committed offset
  back to 0 while still a member: REWIND.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.broker_process import BrokerProcess, module_broker, wait_until
from helpers.clients import FAST_CLIENT, create_topic, unique_topic
from helpers.console_process import ConsoleProcess

lag_broker = module_broker("lag_broker", {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500,
                                          "offsets.topic.num.partitions": 1})


@pytest.fixture(scope="module")
def console(lag_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    settings = {"console.lag.interval.ms": 500, "console.lag.window": 10, "console.cluster.name": "lagtest"}
    with ConsoleProcess(tmp_path_factory.mktemp("lag-console"), lag_broker.bootstrap, settings).start() as process:
        yield process


def group_status(console: ConsoleProcess, group: str) -> dict[str, Any] | None:
    answer = httpx.get(f"{console.url}/v3/kafka/lagtest/consumer/{group}/lag", timeout=5)
    if answer.status_code == 404:
        return None
    answer.raise_for_status()
    doc: dict[str, Any] = answer.json()
    assert doc["error"] is False
    return dict(doc["status"])


def partition_status(console: ConsoleProcess, group: str) -> str:
    status = group_status(console, group)
    return str(status["partitions"][0]["status"]) if status and status["partitions"] else ""


def caught_up_seen(console: ConsoleProcess, group: str) -> bool:
    """The console reports the group OK with no lag (not merely OK on a young window)."""
    status = group_status(console, group)
    parts = status["partitions"] if status else []
    return bool(parts) and parts[0]["status"] == "OK" and parts[0]["current_lag"] == 0


def background(work: Callable[[threading.Event], None], stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=work, args=(stop,), daemon=True)
    thread.start()
    return thread


def produce_steadily(bootstrap: str, topics: list[str]) -> Callable[[threading.Event], None]:
    def run(stop: threading.Event) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, **FAST_CLIENT, "linger.ms": 5})
        n = 0
        while not stop.is_set():
            for topic in topics:
                producer.produce(topic, value=f"record {n}".encode())
            n += 1
            producer.poll(0)
            time.sleep(0.025)
        producer.flush(10)
    return run


def member(bootstrap: str, group: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, **FAST_CLIENT, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([topic])
    return consumer


def consume_at(consumer: Consumer, per_second: float, until: Callable[[], bool]) -> None:
    """Handle one record every 1/per_second s and commit it, until ``until()``."""
    while not until():
        message = consumer.poll(0.2)
        if message is None or message.error() is not None:
            continue
        consumer.commit(message=message, asynchronous=False)
        if per_second:
            time.sleep(1 / per_second)


def test_a_stopped_a_slow_and_a_rewinding_consumer_are_told_apart(lag_broker: BrokerProcess,
                                                                   console: ConsoleProcess) -> None:
    bootstrap = lag_broker.bootstrap
    stops_topic, slows_topic, rewinds_topic = (create_topic(bootstrap, unique_topic(p)) for p in ("stops", "slows", "rewinds"))
    stops, slows, rewinds = (unique_topic(g) for g in ("stops", "slows", "rewinds"))
    stop = threading.Event()
    threads = [background(produce_steadily(bootstrap, [stops_topic, slows_topic]), stop)]
    backlog = Producer({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    for n in range(200):  # the rewinder's topic gets no new record: it can be seen caught up
        backlog.produce(rewinds_topic, value=f"record {n}".encode())
    backlog.flush(10)
    rewound, caught_up = threading.Event(), threading.Event()
    seen: dict[str, set[str]] = {stops: set(), slows: set(), rewinds: set()}  # statuses observed

    def stopper(stop: threading.Event) -> None:
        consumer = member(bootstrap, stops, stops_topic)
        started = time.monotonic()
        consume_at(consumer, 0, lambda: time.monotonic() - started > 3 or stop.is_set())
        consumer.close()  # leaves the group; records keep arriving

    def slow(stop: threading.Event) -> None:
        consumer = member(bootstrap, slows, slows_topic)
        consume_at(consumer, 4, stop.is_set)
        consumer.close()

    def rewinder(stop: threading.Event) -> None:
        consumer = member(bootstrap, rewinds, rewinds_topic)
        consume_at(consumer, 0, lambda: stop.is_set() or caught_up_seen(console, rewinds))
        if stop.is_set():
            return
        caught_up.set()
        consumer.commit(offsets=[TopicPartition(rewinds_topic, 0, 0)], asynchronous=False)
        consumer.seek(TopicPartition(rewinds_topic, 0, 0))
        rewound.set()
        consume_at(consumer, 10, lambda: stop.is_set() or seen[rewinds].add(partition_status(console, rewinds)))
        consumer.close()

    threads += [background(work, stop) for work in (stopper, slow, rewinder)]
    try:
        wanted = {stops: "STOP", slows: "WARN", rewinds: "REWIND"}

        def all_seen() -> bool:
            for group in seen:
                seen[group].add(partition_status(console, group))
            return all(wanted[g] in seen[g] for g in seen) and rewound.is_set()

        try:
            wait_until(all_seen, 30, interval=0.2)
        except AssertionError:
            raise AssertionError(f"wanted {wanted}, seen {seen}") from None
        assert "REWIND" not in seen[slows] and "STOP" not in seen[slows], seen
        assert caught_up.is_set(), "the rewinder was seen caught up (OK) before it moved back"

        status = group_status(console, stops)
        assert status is not None and status["status"] == "ERR"
        part = status["partitions"][0]
        assert part["current_lag"] > 0 and part["owner"] == ""
        first_unconsumed = part["end"]["offset"]
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("peek")})
        reader.assign([TopicPartition(stops_topic, 0, first_unconsumed)])
        record = wait_until(lambda: reader.poll(0.5), 10, message="first unconsumed record")
        reader.close()
        age = time.time() - record.timestamp()[1] / 1000
        assert abs(part["lag_seconds"] - age) < 3, (part["lag_seconds"], age)
        assert group_status(console, slows)["status"] in ("WARN", "OK")  # type: ignore[index]

        metrics = httpx.get(f"{console.url}/metrics", timeout=5).text
        assert f'tidelog_console_group_status{{cluster="lagtest",group="{stops}"}} 3' in metrics
        assert f'tidelog_console_partition_status{{cluster="lagtest",group="{stops}",topic="{stops_topic}",partition="0"}} 4' in metrics
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)


def test_burrow_list_endpoints_and_unknown_names(console: ConsoleProcess, lag_broker: BrokerProcess) -> None:
    clusters = httpx.get(f"{console.url}/v3/kafka").json()
    assert clusters["clusters"] == ["lagtest"] and clusters["error"] is False
    detail = httpx.get(f"{console.url}/v3/kafka/lagtest").json()
    assert detail["module"]["servers"] == [lag_broker.bootstrap]
    missing = httpx.get(f"{console.url}/v3/kafka/elsewhere/consumer")
    assert missing.status_code == 404 and missing.json()["error"] is True
    gone = httpx.get(f"{console.url}/v3/kafka/lagtest/consumer/no-such-group/status")
    assert gone.status_code == 404 and gone.json()["message"] == "cluster or consumer not found"
    topic = create_topic(lag_broker.bootstrap, unique_topic("listed"), 2)
    assert topic in wait_until(lambda: topic in httpx.get(f"{console.url}/v3/kafka/lagtest/topic").json()["topics"]
                               and httpx.get(f"{console.url}/v3/kafka/lagtest/topic").json()["topics"], 10)
    assert httpx.get(f"{console.url}/v3/kafka/lagtest/topic/{topic}").json()["offsets"] == [0, 0]
