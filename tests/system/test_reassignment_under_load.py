"""Partitions moved while producers (acks=all, idempotent) and a consumer run, on four brokers.

One scenario: every partition of a topic moves to a new replica set (leaders leaving too); then a
second move starts and the controller is killed with kill -9 in the middle of it: the new controller
finds the move in etcd and completes it. The checker (helpers/checker.py) then reads everything back:
nothing lost, nothing duplicated, offsets dense; a consumer that ran throughout never waited more
than a few seconds for the next record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP

from helpers.broker_process import register_failure_report
from helpers.checker import Checker
from helpers.cluster import Cluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skip(reason="work in progress: the moves under load and the controller kill pass, but the killed "
                            "controller's restart did not answer ApiVersions within 30 s on the loaded 2-core machine; "
                            "not yet seen green end to end"),
]
PARTITIONS = 3
BROKERS = (1, 2, 3, 4)


@pytest.fixture
def cluster(tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    started = Cluster(tmp_path, size=4).start()
    yield started
    started.close()


class GapConsumer(threading.Thread):
    """Reads the topic from the start and keeps the longest wait between two records."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"gap-{topic}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.stopping = threading.Event()
        self.longest_gap = 0.0
        self.received = 0

    def run(self) -> None:
        last = None
        while not self.stopping.is_set():
            message = self.consumer.poll(0.2)
            now = time.monotonic()
            if message is None or message.error():
                continue
            if last is not None and self.received > 0:
                self.longest_gap = max(self.longest_gap, now - last)
            last = now
            self.received += 1
        self.consumer.close()


def wait_until(condition: object, what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():  # type: ignore[operator]
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def shifted(replicas: list[int]) -> list[int]:
    """Each replica moved to the next broker id (wrapping): every replica, leader included, moves."""
    return [BROKERS[(BROKERS.index(r) + 1) % len(BROKERS)] for r in replicas]


def start_moves(admin: KafkaAdminClient, plan: dict[KTP, list[int]]) -> None:
    """Start every move, asking again for partitions refused while a broker re-registered (a broker
    whose lease lapsed under load is briefly unknown: INVALID_REPLICA_ASSIGNMENT)."""
    left = dict(plan)
    deadline = time.monotonic() + 30
    while left and time.monotonic() < deadline:
        answers = admin.alter_partition_reassignments(left)
        left = {tp: r for tp, r in left.items() if answers.get(tp) is not None}
        if left:
            time.sleep(0.5)
    assert not left, f"moves refused: {left}"


def controller_of(cluster: Cluster) -> int:
    admin = cluster.admin()
    return int(admin.describe_cluster().result(10).controller.id)


def test_moves_under_load_lose_nothing_and_survive_a_controller_kill(cluster: Cluster) -> None:
    topic = "moving-load"
    cluster.create_topic(topic, PARTITIONS, 2)
    checker = Checker(cluster.bootstrap, topic, PARTITIONS, producers=2, rate=100.0).start()
    reader = GapConsumer(cluster.bootstrap, topic)
    reader.start()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        checker.wait_for_acks(200, since=checker.started_at)
        plan = {KTP(topic, p): shifted(cluster.partition(topic, p)[1]) for p in range(PARTITIONS)}
        start_moves(admin, plan)
        wait_until(lambda: all(cluster.partition(topic, tp.partition)[1] == r for tp, r in plan.items()),
                   "the first moves")
        checker.wait_for_acks(100, since=time.monotonic())

        controller = controller_of(cluster)
        second = {KTP(topic, p): shifted(cluster.partition(topic, p)[1]) for p in range(PARTITIONS)}
        start_moves(admin, second)
        checker.mark_down(controller)
        cluster.brokers[controller].kill9()
        admin.close()
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
        # Replicas on the killed broker cannot catch up until it returns: bring it back, then every
        # move must complete under the new controller.
        cluster.brokers[controller].start()
        checker.mark_up(controller)
        wait_until(lambda: all(cluster.partition(topic, tp.partition)[1] == r for tp, r in second.items()),
                   "the moves begun before the controller died")
        wait_until(lambda: not admin.list_partition_reassignments(), "no move left")
        checker.wait_for_acks(100, since=time.monotonic())
    finally:
        checker.stop()
        admin.close()
        time.sleep(2)
        reader.stopping.set()
        reader.join(10)
    for p in range(PARTITIONS):
        cluster.wait_for_isr(topic, p, set(second[KTP(topic, p)]))
    figures = checker.verify("reassignment under load")
    print(f"\n{figures.row()} consumer longest gap {reader.longest_gap:.2f} s")
    assert not figures.problems(), figures.problems()
    assert reader.received >= figures.acknowledged
    assert reader.longest_gap < 8.0, f"the consumer waited {reader.longest_gap:.1f} s for a record"
