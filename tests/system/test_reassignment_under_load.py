"""Partitions moved while producers (acks=all, idempotent) and a consumer run, on three brokers.

One scenario: every partition of a topic moves to a new replica set (leaders leaving too); then a
second move starts and the controller is killed with kill -9 in the middle of it: another broker
becomes controller, finds the moves in etcd (they are still listed: the killed broker is a target of
some, and cannot copy while dead), and completes them once the killed broker is back (a move that
finished in the instant before the kill landed counts as done: the race cannot be closed from outside). The checker
(helpers/checker.py) then reads everything back: nothing lost, nothing duplicated, offsets dense; a
consumer that ran throughout never waited more than a few seconds for the next record.

Timing on a loaded machine (2 cores shared by many test processes): the sessions are longer than
FAST_SESSION's 3 s (5 s, renewed every second: fenced after 3 s without a renewal), so that a broker
starved of CPU for two seconds keeps its lease instead of churning registrations; the restart of the
killed broker may take tens of seconds to answer (importing tidelog alone is 2 s of CPU, 8 s of wall
time at a load of 16) and is given 60 s. What is checked is not relaxed: no loss, no duplicate, no
gap, the consumer never waiting 8 s.
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
from kafka.errors import KafkaConnectionError

from helpers.broker_process import register_failure_report
from helpers.checker import Checker, write_gap_where
from helpers.cluster import STEADY_SESSION, Cluster

pytestmark = pytest.mark.slow
PARTITIONS = 3
BROKERS = (1, 2, 3)
LOADED_MACHINE_SESSION = {
    **STEADY_SESSION,
    "offsets.topic.num.partitions": 3,  # the group's coordinator; 50 partitions would only add load
}
RESTART_TIMEOUT_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    started = Cluster(tmp_path, size=len(BROKERS), overrides=LOADED_MACHINE_SESSION).start()
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
        self.gap_began = 0.0  # monotonic moment of the record before the longest gap
        self.received = 0

    def run(self) -> None:
        last = None
        while not self.stopping.is_set():
            message = self.consumer.poll(0.2)
            now = time.monotonic()
            if message is None or message.error():
                continue
            if last is not None and self.received > 0 and now - last > self.longest_gap:
                self.longest_gap, self.gap_began = now - last, last
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
    controller = admin.describe_cluster().result(10).controller
    return -1 if controller is None else int(controller.id)


def moving(admin: KafkaAdminClient, topic: str) -> set[int]:
    """The topic's partitions being moved. Right after a controller kill a broker may still name the
    dead controller, which kafka-python's admin asks and finds refusing: ask again, as an operator would."""
    for _ in range(20):
        try:
            return {tp.partition for tp in admin.list_partition_reassignments() if tp.topic == topic}
        except KafkaConnectionError:
            time.sleep(0.5)
    return {tp.partition for tp in admin.list_partition_reassignments() if tp.topic == topic}


def test_moves_under_load_lose_nothing_and_survive_a_controller_kill(cluster: Cluster, tmp_path: Path) -> None:
    topic = "moving-load"
    cluster.create_topic(topic, PARTITIONS, 2)
    checker = Checker(cluster.bootstrap, topic, PARTITIONS, producers=2, rate=50.0,
                      client_log=tmp_path / "producers-eos.log").start()
    reader = GapConsumer(cluster.bootstrap, topic)
    reader.start()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        checker.wait_for_acks(100, since=checker.started_at)
        plan = {KTP(topic, p): shifted(cluster.partition(topic, p)[1]) for p in range(PARTITIONS)}
        start_moves(admin, plan)
        wait_until(lambda: all(cluster.partition(topic, tp.partition)[1] == r for tp, r in plan.items()),
                   "the first moves")
        checker.wait_for_acks(50, since=time.monotonic())

        wait_until(lambda: controller_of(cluster) in BROKERS, "a controller")
        controller = controller_of(cluster)
        second = {KTP(topic, p): shifted(cluster.partition(topic, p)[1]) for p in range(PARTITIONS)}
        # Moves that add the controller's broker cannot complete while it is dead: they must outlive it.
        waiting_for_killed = {tp.partition for tp, r in second.items() if controller in r and controller not in plan[tp]}
        assert waiting_for_killed, f"no move adds broker {controller}: {second}"
        start_moves(admin, second)
        checker.mark_down(controller)
        killed_at = time.monotonic()
        cluster.brokers[controller].kill9()
        admin.close()
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
        # Another broker takes over; the moves whose target holds the dead broker are still recorded.
        wait_until(lambda: controller_of(cluster) not in (-1, controller), "a new controller")
        # A move may also have finished in the instant between its acceptance and the kill (the killed
        # broker caught up at once); what must never be seen is one neither listed nor done.
        still_moving = moving(admin, topic)
        finished = {p for p in waiting_for_killed if cluster.partition(topic, p)[1] == second[KTP(topic, p)]}
        assert waiting_for_killed <= still_moving | finished, "a move was lost or completed without its target"
        print(f"\nmoves adding the killed controller: {sorted(waiting_for_killed)}, still listed after the kill: "
              f"{sorted(waiting_for_killed & still_moving)}")
        cluster.brokers[controller].start(RESTART_TIMEOUT_S)
        restarted_at = time.monotonic()
        checker.mark_up(controller)
        wait_until(lambda: all(cluster.partition(topic, tp.partition)[1] == r for tp, r in second.items()),
                   "the moves begun before the controller died", timeout=60.0)
        wait_until(lambda: not moving(admin, topic), "no move left")
        checker.wait_for_acks(50, since=time.monotonic())
    finally:
        checker.stop()
        admin.close()
        time.sleep(2)
        reader.stopping.set()
        reader.join(10)
    for p in range(PARTITIONS):
        cluster.wait_for_isr(topic, p, set(second[KTP(topic, p)]))
    figures = checker.verify("reassignment under load")
    gap, gap_partition, gap_began = write_gap_where(checker.acks.values())
    timeline = (f"broker {controller} killed at 0 s, back at {restarted_at - killed_at:.1f} s; longest write gap "
                f"{gap:.1f} s on partition {gap_partition} from {gap_began - killed_at:.1f} s; the consumer's "
                f"{reader.longest_gap:.1f} s from {reader.gap_began - killed_at:.1f} s")
    print(f"\n{figures.row()} consumer longest gap {reader.longest_gap:.2f} s\n{timeline}")
    # Also next to the brokers' logs: a run that passes on its rerun shows only RERUN in the summary.
    (tmp_path / "timeline.txt").write_text(f"{figures.row()}\n{timeline}\n")
    assert not figures.problems(), figures.problems()
    assert reader.received >= figures.acknowledged
    assert reader.longest_gap < 8.0, f"the consumer waited {reader.longest_gap:.1f} s for a record ({timeline})"
