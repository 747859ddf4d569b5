"""Slow-request isolation with real clients: a slow log dir holds up its own readers, nobody else.

One broker with two log dirs; every read of ``data/b`` that returns bytes takes 1 s more
(``tidelog.test.log.dir.read.delay``, the injected-latency seam of ``broker/disk_pools.py``). Two
confluent-kafka consumers read a backlog on ``data/b`` from its start; meanwhile a producer
(acks=all) and the admin client talk to the broker about a topic on ``data/a``; another producer makes
a topic on ``data/b`` roll a segment every few requests (each roll sleeps the injected second too). With the disk pools
(the default) their requests are answered in the usual milliseconds while the slow dir's readers
still make progress; with ``tidelog.log.dir.io.threads=0`` (every read on the event loop, as before)
the same requests wait behind the slow reads, which shows the seam does what the first test relies on.

The latency bounds are a fraction of the injected second, not tight figures: this is a shared
2-core machine. The figures are bench/slow_disk_bench.py's.
"""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import FAST_CLIENT, admin_client, create_topic, unique_topic

DELAY_MS = 1000


def start_broker(workdir: Path, delay_ms: int = DELAY_MS, **overrides: object) -> BrokerProcess:
    data = workdir / "data"
    return BrokerProcess(workdir, {
        "log.dirs": f"{data / 'a'},{data / 'b'}",
        "metrics.port": free_port(),
        "tidelog.test.log.dir.read.delay": f"{data / 'b'}:{delay_ms}",
        "tidelog.log.dir.slow.read.ms": 100,
        **overrides,
    }).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    proc = start_broker(tmp_path_factory.mktemp("isolation"))
    yield proc
    proc.close()


def metric(broker: BrokerProcess, name: str, **labels: str) -> float | None:
    port = broker.properties["metrics.port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {" and all(w in line for w in wanted):
            return float(line.rsplit(" ", 1)[1])
    return None


def place_topics(broker: BrokerProcess, config: dict[str, str] | None = None) -> tuple[str, str]:
    """A new topic on each dir (a new log goes to the dir with fewer): (on a, on b)."""
    data = broker.workdir / "data"
    on: dict[str, str] = {}
    for _ in range(6):
        name = create_topic(broker.bootstrap, unique_topic("iso"), config=config)
        on.setdefault("a" if (data / "a" / f"{name}-0").is_dir() else "b", name)
        if len(on) == 2:
            return on["a"], on["b"]
    raise AssertionError(f"new topics all went to one dir: {on}")


class BacklogReader(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.count = 0
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False,
                                  "max.partition.fetch.bytes": 4096, "fetch.queue.backoff.ms": 0, **FAST_CLIENT})
        self.consumer.assign([TopicPartition(topic, 0, 0)])

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.count += 1
        self.consumer.close()


def round_trips(bootstrap: str, topic: str, seconds: float) -> tuple[list[float], list[float]]:
    """Produce (acks=all) one record at a time and describe the topic's configs: each answer's ms."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", **FAST_CLIENT})
    admin = admin_client(bootstrap)
    producer.produce(topic, b"warm")
    assert producer.flush(30) == 0
    acks: list[float] = []
    admin_ms: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        producer.produce(topic, b"h" * 100)
        assert producer.flush(30) == 0
        acks.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        describe(admin, topic)
        admin_ms.append((time.perf_counter() - started) * 1000)
    return acks, admin_ms


def describe(admin: AdminClient, topic: str) -> None:
    for future in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values():
        future.result(10)


def fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4096, **FAST_CLIENT})
    for _ in range(count):
        producer.produce(topic, b"x" * 1000)
        producer.poll(0)
    assert producer.flush(30) == 0


def readers_on(bootstrap: str, topic: str, count: int = 2) -> list[BacklogReader]:
    readers = [BacklogReader(bootstrap, topic) for _ in range(count)]
    for reader in readers:
        reader.start()
    return readers


def stop(readers: list[BacklogReader]) -> None:
    for reader in readers:
        reader.stop.set()
    for reader in readers:
        reader.join(15)


def test_healthy_dir_clients_are_not_held_behind_a_slow_dirs_reads(broker: BrokerProcess) -> None:
    healthy, slow = place_topics(broker)
    fill(broker.bootstrap, slow, 400)
    slow_dir = str(broker.workdir / "data" / "b")
    readers = readers_on(broker.bootstrap, slow)
    try:
        assert wait_until(lambda: metric(broker, "tidelog_log_dir_slow", dir=slow_dir) == 1, 15)
        assert wait_until(lambda: all(r.count > 0 for r in readers), 15), "the slow dir's readers get records"
        acks, admin_ms = round_trips(broker.bootstrap, healthy, 4.0)
        got = sum(r.count for r in readers)
        assert wait_until(lambda: sum(r.count for r in readers) > got, 10), "the slow dir's readers go on"
        # Their connections took a second per fetch: marked slow, their reads on the slow lane.
        assert (metric(broker, "tidelog_connections_slow") or 0) >= 1
        assert (metric(broker, "tidelog_disk_work_total", lane="slow", kind="read") or 0) > 0
    finally:
        stop(readers)
    assert len(acks) > 20, f"only {len(acks)} produce round trips in 4 s"
    assert statistics.median(acks) < DELAY_MS / 5, sorted(acks)
    assert statistics.median(admin_ms) < DELAY_MS / 5, sorted(admin_ms)


class RollingWriter(threading.Thread):
    """Produces 1 KB records to a topic with 16 KiB segments: a roll every 15 records or so (every
    fourth request or so)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.stop = threading.Event()
        self.acked = 0
        # Batches of at most 4 KiB: a request must fit the topic's 16 KiB segment.bytes.
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 4096,
                                  **FAST_CLIENT})

    def delivered(self, error: object, _msg: object) -> None:
        if error is None:
            self.acked += 1

    def run(self) -> None:
        while not self.stop.is_set():
            if len(self.producer) < 40:  # a few rolls' worth waiting, not a backlog that outlives the test
                self.producer.produce(self.topic, b"r" * 1000, on_delivery=self.delivered)
            self.producer.poll(0.01)
        self.producer.purge()
        self.producer.flush(10)


def test_rolls_on_a_slow_dir_do_not_hold_up_produce_to_the_healthy_dir(broker: BrokerProcess) -> None:
    """Each roll of the slow dir's topic takes the injected second (on that dir's pool); the healthy
    dir's producer is answered in milliseconds throughout, its worst round trip far below a second."""
    healthy, slow = place_topics(broker, {"segment.bytes": "16384"})  # the healthy topic rolls too, on its fast dir

    def segments(topic: str, on: str) -> int:
        return len(list((broker.workdir / "data" / on / f"{topic}-0").glob("*.log")))

    writer = RollingWriter(broker.bootstrap, slow)
    writer.start()
    try:
        assert wait_until(lambda: segments(slow, "b") >= 2, 20), "the slow dir's topic rolls"
        slow_before, healthy_before = segments(slow, "b"), segments(healthy, "a")
        acks, _ = round_trips(broker.bootstrap, healthy, 4.0)
        slow_rolls, healthy_rolls = segments(slow, "b") - slow_before, segments(healthy, "a") - healthy_before
    finally:
        writer.stop.set()
        writer.join(40)
    print(f"healthy dir produce during {slow_rolls} slow rolls (and {healthy_rolls} of its own): {len(acks)} acks, "
          f"median {statistics.median(acks):.1f} ms, worst {max(acks):.1f} ms")
    assert slow_rolls >= 2, "the slow dir rolled during the measurement"
    assert writer.acked > 30
    assert (metric(broker, "tidelog_disk_work_total", lane="dir", kind="roll") or 0) >= slow_rolls + healthy_rolls
    assert len(acks) > 20, f"only {len(acks)} produce round trips in 4 s"
    assert statistics.median(acks) < DELAY_MS / 10, sorted(acks)
    assert max(acks) < DELAY_MS / 2, f"a healthy produce waited {max(acks):.0f} ms: behind a slow roll?"


def test_a_slow_dir_recovers_when_its_reads_are_fast_again(broker: BrokerProcess) -> None:
    _, slow = place_topics(broker)
    fill(broker.bootstrap, slow, 2000)
    slow_dir = str(broker.workdir / "data" / "b")
    readers = readers_on(broker.bootstrap, slow)
    try:
        assert wait_until(lambda: metric(broker, "tidelog_log_dir_slow", dir=slow_dir) == 1, 15)
        admin = admin_client(broker.bootstrap)
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("tidelog.test.log.dir.read.delay", "", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(10)
        assert wait_until(lambda: metric(broker, "tidelog_log_dir_slow", dir=slow_dir) == 0, 15), "unmarked"
        got = sum(r.count for r in readers)
        assert wait_until(lambda: sum(r.count for r in readers) > got + 200, 10), "read at the disk's pace again"
    finally:
        stop(readers)


@pytest.mark.slow  # about 20 s on 2 shared cores: without the pools every request waits for the slow reads
def test_without_the_pools_the_same_fault_holds_up_every_client(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    register_failure_report(pytestconfig)
    delay_ms = 400  # one reader, a shorter delay: enough to show, and this test stays short
    broker = start_broker(tmp_path, delay_ms, **{"tidelog.log.dir.io.threads": 0})
    try:
        healthy, slow = place_topics(broker)
        fill(broker.bootstrap, slow, 400)
        readers = readers_on(broker.bootstrap, slow, 1)
        try:
            assert wait_until(lambda: all(r.count > 0 for r in readers), 15)
            acks, admin_ms = round_trips(broker.bootstrap, healthy, 3.0)
        finally:
            stop(readers)
    finally:
        broker.close()
    assert statistics.median(acks + admin_ms) > delay_ms / 4, sorted(acks + admin_ms)
