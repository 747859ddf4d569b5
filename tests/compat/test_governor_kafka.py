"""The governor against Apache Kafka: it speaks only Kafka's Admin APIs, so plan and execute must work
on Kafka as they will on tidelog.

Moves need two brokers, and the session's reference Kafka has one (adding a broker to it would change
what the other compat tests compare), so this module starts its own two-node Kafka (node 1: broker +
controller, node 2: broker, racks r1 and r2): about 20-30 s of start-up on two cores, shared by the
module's tests. Covered: a dry-run plan; execute moving partitions from a loaded broker to an empty
one with throttles set through IncrementalAlterConfigs and removed at the end; a leader-only move
ending in an ElectLeaders round trip; drain and undrain; pause, status and resume through the state
topic; a throttle round trip through the Admin API directly.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_harness.kafka import (
    LOG4J2_CONFIG,
    KafkaUnavailable,
    ReferenceKafka,
    _die_with_parent,
    api_versions_answered,
    random_cluster_id,
)
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from helpers.cli_runner import run_cli
from tidelog.governor.cluster import Cluster
from tidelog.governor.execution import FOLLOWER_RATE, LEADER_REPLICAS, Throttles

FAST = ["--override", "governor.interval.ms=500", "--override", "governor.moves.per.broker=10", "--interval", "0.3",
        "--max-wait", "60"]


class Node(ReferenceKafka):
    """A Kafka node formatted with a given cluster id, so that two nodes form one cluster."""

    def __init__(self, libs: Path, workdir: Path, cluster_id: str, overrides: dict[str, str]) -> None:
        super().__init__(libs, workdir, overrides)
        self.cluster_id = cluster_id

    def format_storage(self) -> None:
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        self.log4j_path.write_text(LOG4J2_CONFIG.format(log=self.log_path))
        command = self.java("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                            "-c", str(self.properties_path), "--ignore-formatted")
        with self.console_path.open("ab") as out:
            done = subprocess.run(command, stdout=out, stderr=out, check=False, timeout=120)
        if done.returncode != 0:
            raise KafkaUnavailable(f"StorageTool format failed ({done.returncode})\n{self.log_tail()}")

    def spawn(self) -> None:
        """Start the JVM without waiting (from the main thread: the child dies with the thread that
        spawned it, see ``_die_with_parent``), so that both nodes boot at the same time."""
        self.format_storage()
        with self.console_path.open("ab") as out:
            self.process = subprocess.Popen(self.java("kafka.Kafka", str(self.properties_path)),
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=self.workdir,
                                            preexec_fn=_die_with_parent)

    def wait_ready(self, deadline: float) -> None:
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise KafkaUnavailable(f"kafka.Kafka exited with {self.process.returncode}\n{self.log_tail()}")
            if api_versions_answered(self.host, self.port, timeout=1.0):
                return
            time.sleep(0.2)
        raise KafkaUnavailable(f"no ApiVersions answer in time\n{self.log_tail()}")


@pytest.fixture(scope="module")
def two_kafkas(kafka_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster_id = random_cluster_id()
    first = Node(kafka_libs, tmp_path_factory.mktemp("gov-kafka-1"), cluster_id, {
        "node.id": "1", "broker.rack": "r1", "offsets.topic.replication.factor": "1", "num.partitions": "1",
        "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1", "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0"})
    second = Node(kafka_libs, tmp_path_factory.mktemp("gov-kafka-2"), cluster_id, {
        "node.id": "2", "process.roles": "broker", "broker.rack": "r2",
        "controller.quorum.voters": first.properties["controller.quorum.voters"]})
    second.properties["listeners"] = f"PLAINTEXT://{second.host}:{second.port}"
    try:
        try:
            first.spawn()
            second.spawn()
            first.wait_ready(time.monotonic() + 150)
            second.wait_ready(time.monotonic() + 150)
        except KafkaUnavailable as exc:
            pytest.fail(f"the two-node Kafka did not start: {exc}")
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        deadline = time.monotonic() + 90
        while len(registered(admin)) < 2:
            assert time.monotonic() < deadline, f"the second Kafka broker did not register\n{second.log_tail()}"
            time.sleep(0.2)
        # the governor would create its state topic with replication factor 2 here, and a partition of
        # replication factor 2 on two brokers cannot be drained: give it replication factor 1
        state = NewTopic("__tidelog_governor", 1, 1, config={"cleanup.policy": "compact"})
        admin.create_topics([state])["__tidelog_governor"].result(30)
        yield first.bootstrap
    finally:
        second.stop()
        first.stop()


def registered(admin: AdminClient) -> set[int]:
    try:
        return set(admin.list_topics(timeout=10).brokers)
    except KafkaException:  # the node answers ApiVersions before it serves Metadata
        return set()


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future resolves
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 15
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)


def topic_on(bootstrap: str, assignment: list[list[int]], records: int = 200) -> str:
    name = f"gov-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, len(assignment), -1, replica_assignment=assignment)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(name, value=b"x" * 1000, partition=i % len(assignment))
    assert producer.flush(30) == 0
    return name


def replicas(bootstrap: str, topic: str) -> dict[int, list[int]]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: list(m.replicas) for p, m in metadata.topics[topic].partitions.items()}


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: m.leader for p, m in metadata.topics[topic].partitions.items()}


def throttle_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for resource in (ConfigResource(ResourceType.TOPIC, topic), ConfigResource(ResourceType.BROKER, "1"),
                     ConfigResource(ResourceType.BROKER, "2")):
        entries = next(iter(admin.describe_configs([resource]).values())).result(10)
        out.update({f"{resource.name}:{k}": v.value for k, v in entries.items() if "throttled" in k and v.value})
    return out


def test_governor_plan_on_kafka_moves_load_onto_the_empty_broker(two_kafkas: str, capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    topic = topic_on(two_kafkas, [[1]] * 6)
    run = run_cli(capsys, "governor", "plan", "-b", two_kafkas, "--json", "--output", str(tmp_path / "p.json"))
    assert run.code == 0, run.err
    plan = run.json()
    assert plan["ok"] and plan["unmetHardGoals"] == []
    ours = [m for m in plan["moves"] if m["topic"] == topic]
    assert ours and all(m["before"] == [1] and m["after"] == [2] for m in ours)
    goals = {g["goal"]: g for g in plan["goals"]}
    assert goals["replica-count"]["violationsBefore"] > 0
    assert json.loads((tmp_path / "p.json").read_text())["moves"] == plan["moves"]


def test_governor_execute_on_kafka_spreads_a_topic_with_throttles_removed_after(
        two_kafkas: str, capsys: pytest.CaptureFixture[str]) -> None:
    topic = topic_on(two_kafkas, [[1]] * 6)
    run = run_cli(capsys, "governor", "execute", "-b", two_kafkas, *FAST,
                  "--override", "governor.throttle.bytes.per.second=20000000")
    assert run.code == 0, run.out + run.err
    assert "finished" in run.out
    deadline = time.monotonic() + 15  # a broker's Metadata answer follows the controller's metadata log
    placed = replicas(two_kafkas, topic)
    while {b for r in placed.values() for b in r} != {1, 2} and time.monotonic() < deadline:
        time.sleep(0.2)
        placed = replicas(two_kafkas, topic)
    assert {b for r in placed.values() for b in r} == {1, 2}, f"{placed}\n{run.out}"
    deadline = time.monotonic() + 15  # config deletions reach describe through the metadata log
    while throttle_configs(two_kafkas, topic) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert throttle_configs(two_kafkas, topic) == {}


def test_governor_leader_only_move_on_kafka_ends_in_a_preferred_election(
        two_kafkas: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    topic = topic_on(two_kafkas, [[2, 1]], records=10)
    assert leaders(two_kafkas, topic) == {0: 2}
    plan = {"moves": [{"topic": topic, "partition": 0, "before": [2, 1], "after": [1, 2], "size": 0}]}
    (tmp_path / "leader.json").write_text(json.dumps(plan))
    run = run_cli(capsys, "governor", "execute", "-b", two_kafkas, "--plan", str(tmp_path / "leader.json"), *FAST)
    assert run.code == 0, run.out + run.err
    assert replicas(two_kafkas, topic) == {0: [1, 2]}
    deadline = time.monotonic() + 15
    while leaders(two_kafkas, topic) != {0: 1} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leaders(two_kafkas, topic) == {0: 1}
    # replication factor 2 on two brokers could not be drained: leave the drain test a drainable cluster
    delete_topic(two_kafkas, topic)


def test_governor_drain_on_kafka_refuses_what_cannot_be_drained_and_changes_nothing(
        two_kafkas: str, capsys: pytest.CaptureFixture[str]) -> None:
    topic = topic_on(two_kafkas, [[1, 2]], records=1)
    run = run_cli(capsys, "governor", "drain", "2", "-b", two_kafkas, *FAST)
    assert run.code == 1 and "hard goals unmet (excluded-brokers)" in run.err
    assert run_cli(capsys, "governor", "status", "-b", two_kafkas, "--json").json()["control"]["drained"] == []
    delete_topic(two_kafkas, topic)


def test_governor_drain_on_kafka_empties_a_broker_and_undrain_takes_it_back(
        two_kafkas: str, capsys: pytest.CaptureFixture[str]) -> None:
    topic = topic_on(two_kafkas, [[2], [2], [1], [2]], records=40)
    run = run_cli(capsys, "governor", "drain", "2", "-b", two_kafkas, *FAST)
    assert run.code == 0, run.out + run.err
    assert all(r == [1] for r in replicas(two_kafkas, topic).values())
    metadata = AdminClient({"bootstrap.servers": two_kafkas}).list_topics(timeout=10)
    assert all(2 not in p.replicas for t in metadata.topics.values() for p in t.partitions.values())
    status = run_cli(capsys, "governor", "status", "-b", two_kafkas, "--json").json()
    assert status["control"]["drained"] == [2] and status["excluded"] == {"2": "draining"}
    run = run_cli(capsys, "governor", "undrain", "2", "-b", two_kafkas, *FAST)
    assert run.code == 0, run.out + run.err
    assert run_cli(capsys, "governor", "status", "-b", two_kafkas, "--json").json()["control"]["drained"] == []
    metadata = AdminClient({"bootstrap.servers": two_kafkas}).list_topics(timeout=10)
    assert any(2 in p.replicas for t in metadata.topics.values() for p in t.partitions.values())


def test_governor_pause_on_kafka_is_seen_by_status_and_lifted_by_resume(
        two_kafkas: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "governor", "pause", "-b", two_kafkas, "--reason", "maintenance window").code == 0
    status = run_cli(capsys, "governor", "status", "-b", two_kafkas, "--json").json()
    assert status["control"]["paused"] and status["control"]["reason"] == "maintenance window"
    assert status["reassignmentSupported"] is True
    assert run_cli(capsys, "governor", "resume", "-b", two_kafkas).code == 0
    assert not run_cli(capsys, "governor", "status", "-b", two_kafkas, "--json").json()["control"]["paused"]


def test_governor_throttles_round_trip_through_incremental_alter_configs_on_kafka(two_kafkas: str) -> None:
    topic = topic_on(two_kafkas, [[1]], records=1)
    wanted = Throttles({topic: {LEADER_REPLICAS: "0:1", "follower.replication.throttled.replicas": "0:2"}},
                       frozenset({1, 2}))

    async def main() -> None:
        cluster = Cluster({"bootstrap.servers": two_kafkas})
        await cluster.describe()
        await cluster.apply_throttles(1_000_000, wanted, Throttles({}, frozenset()))
        await cluster.apply_throttles(1_000_000, Throttles({}, frozenset()), wanted)

    asyncio.run(main())
    # set: visible at once on the topic; then removed (eventually, through the metadata log)
    deadline = time.monotonic() + 15
    while throttle_configs(two_kafkas, topic) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert throttle_configs(two_kafkas, topic) == {}
    assert FOLLOWER_RATE not in str(throttle_configs(two_kafkas, topic))
