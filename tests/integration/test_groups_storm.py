"""A rebalance storm: members join and leave continuously while a producer writes.

Three members keep cycling (subscribe, consume a little, commit what they processed, leave) for
30 seconds while a fourth stays put, and a producer writes all along. Afterwards a last member
drains the topic from the committed offsets. Every produced record must have been consumed at least
once, the committed offsets (sampled all along) must never move backwards, and no member may be
told UNKNOWN_MEMBER_ID while it is a member.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from helpers.broker_process import BrokerProcess, register_failure_report
from helpers.clients import FAST_CLIENT, create_topic, leave_and_close, unique_topic

PARTITIONS = 6
STORM_S = 30.0  # the 30-second storm

GROUP_BROKER = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "offsets.topic.num.partitions": 3,
}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("groups-storm"), GROUP_BROKER)
    process.start()
    yield process
    process.close()


class Ledger:
    """Everything produced and consumed, and every error a member was told."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.produced: set[tuple[int, int]] = set()
        self.consumed: set[tuple[int, int]] = set()
        self.member_errors: list[str] = []
        self.commit_samples: list[dict[int, int]] = []


def produce_until(bootstrap: str, topic: str, stop: threading.Event, ledger: Ledger) -> None:
    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **FAST_CLIENT})

    def delivered(error: KafkaError | None, message: object) -> None:
        if error is None:
            with ledger.lock:
                ledger.produced.add((message.partition(), message.offset()))  # type: ignore[attr-defined]

    i = 0
    while not stop.is_set():
        prod.produce(topic, f"r{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
        prod.poll(0)
        i += 1
        time.sleep(0.002)
    assert prod.flush(15) == 0


def member_session(bootstrap: str, group: str, topic: str, ledger: Ledger, until: float) -> None:
    """One membership: join, consume, commit processed offsets whenever partitions go, leave."""
    processed: dict[int, int] = {}

    def on_error(error: KafkaError) -> None:
        with ledger.lock:
            ledger.member_errors.append(str(error))

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
        "fetch.wait.max.ms": 50, "error_cb": on_error, **FAST_CLIENT,
    })

    def commit_owned(c: Consumer, partitions: list[TopicPartition]) -> None:
        owned = [TopicPartition(topic, p.partition, processed[p.partition]) for p in partitions if p.partition in processed]
        for p in partitions:
            processed.pop(p.partition, None)
        if owned:
            try:
                c.commit(offsets=owned, asynchronous=False)
            except Exception as exc:  # a commit refused mid-rebalance is retried by the next owner
                if "UNKNOWN_MEMBER_ID" in str(exc):
                    on_error(exc.args[0])

    consumer.subscribe([topic], on_revoke=commit_owned)
    try:
        while time.monotonic() < until:
            message = consumer.poll(0.05)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    on_error(message.error())
                continue
            with ledger.lock:
                ledger.consumed.add((message.partition(), message.offset()))
            processed[message.partition()] = message.offset() + 1
        commit_owned(consumer, consumer.assignment())
    finally:
        leave_and_close(consumer)


def churn(bootstrap: str, group: str, topic: str, ledger: Ledger, end: float, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < end:
        member_session(bootstrap, group, topic, ledger, min(end, time.monotonic() + rng.uniform(0.5, 2.5)))


def sample_commits(admin: AdminClient, group: str, stop: threading.Event, ledger: Ledger) -> None:
    while not stop.is_set():
        try:
            listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
        except Exception:
            continue
        with ledger.lock:
            ledger.commit_samples.append({tp.partition: tp.offset for tp in listed.topic_partitions})
        time.sleep(0.1)


def test_a_rebalance_storm_loses_nothing_and_never_moves_commits_back(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("storm"), PARTITIONS)
    group = f"storm-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    stop_producing, stop_sampling = threading.Event(), threading.Event()
    end = time.monotonic() + STORM_S
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    threads = [
        threading.Thread(target=produce_until, args=(bootstrap, topic, stop_producing, ledger)),
        threading.Thread(target=sample_commits, args=(admin, group, stop_sampling, ledger)),
        threading.Thread(target=member_session, args=(bootstrap, group, topic, ledger, end)),
        *(threading.Thread(target=churn, args=(bootstrap, group, topic, ledger, end, seed)) for seed in range(3)),
    ]
    for t in threads:
        t.start()
    time.sleep(STORM_S)
    stop_producing.set()
    for t in threads[2:]:
        t.join(30)
    threads[0].join(30)

    # A last member drains what is left, starting from the committed offsets.
    member_session(bootstrap, group, topic, ledger, time.monotonic() + 5)
    stop_sampling.set()
    threads[1].join(15)

    assert len(ledger.produced) > 1000
    missing = ledger.produced - ledger.consumed
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"
    assert not [e for e in ledger.member_errors if "UNKNOWN_MEMBER_ID" in e], ledger.member_errors[:5]
    assert len(ledger.commit_samples) > 20
    highest: dict[int, int] = {}
    for sample in ledger.commit_samples:
        for partition, offset in sample.items():
            if offset >= 0:
                assert offset >= highest.get(partition, -1), f"partition {partition}: commit went back to {offset}"
                highest[partition] = offset
