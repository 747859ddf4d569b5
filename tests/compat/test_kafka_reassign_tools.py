"""Apache Kafka's own tools drive a three-broker tidelog cluster: kafka-reassign-partitions.sh
(``--generate``, ``--execute``, ``--verify``) moves a topic off a broker, and kafka-leader-election.sh
(``--election-type PREFERRED``) gives leadership back to the preferred replica.

The tools run as Kafka's scripts run them (``java -cp <Kafka's jars> <the tool's main class>``, the
classes kafka-reassign-partitions.sh and kafka-leader-election.sh name), with the jars the compat
tier installs (``kafka/install.sh``). Automatic leader rebalance is off in this cluster, so the only
thing that can move leadership back is the tool's ElectLeaders request.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_harness.kafka import JVM_OPTIONS
from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.broker_process import register_failure_report
from helpers.cluster import STEADY_SESSION, Cluster

pytestmark = pytest.mark.slow  # five JVM starts: over a minute on a loaded two-core machine
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"  # kafka-reassign-partitions.sh
ELECT = "org.apache.kafka.tools.LeaderElectionCommand"  # kafka-leader-election.sh
TOOL_TIMEOUT_S = 120.0  # a JVM start on a loaded two-core machine takes several seconds


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    started = Cluster(tmp_path_factory.mktemp("kafka-tools"),
                      overrides={**STEADY_SESSION, "auto.leader.rebalance.enable": False}).start()
    yield started
    started.close()


def kafka_tool(libs: Path, main_class: str, *args: str) -> str:
    """Run one of Kafka's command-line tools; its stdout (it must exit 0)."""
    done = subprocess.run(["java", *JVM_OPTIONS, "-cp", f"{libs}/*", main_class, *args], capture_output=True,
                          text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{main_class} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def json_after(output: str, heading: str) -> dict[str, object]:
    """The JSON line that follows ``heading`` in a tool's output."""
    lines = output.splitlines()
    start = lines.index(heading) + 1
    return dict(json.loads(next(line for line in lines[start:] if line.startswith("{"))))


def replicas_of(plan: dict[str, object]) -> dict[tuple[str, int], list[int]]:
    partitions = plan["partitions"]
    assert isinstance(partitions, list)
    return {(p["topic"], p["partition"]): list(p["replicas"]) for p in partitions}


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, value=b"r%d" % i, partition=i % partitions)
    assert producer.flush(60) == 0


def count_records(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < expected and time.monotonic() < deadline:
        seen += sum(1 for m in consumer.consume(500, 0.5) if not m.error())
    consumer.close()
    return seen


def test_kafka_reassign_partitions_moves_a_topic_off_a_broker(cluster: Cluster, kafka_libs: Path,
                                                               tmp_path: Path) -> None:
    topic = "tools-moved"
    cluster.create_topic(topic, partitions=2, replication=2)
    produce(cluster.bootstrap, topic, 2, 200)
    before = {(topic, p): cluster.partition(topic, p)[1] for p in range(2)}
    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))

    generated = kafka_tool(kafka_libs, REASSIGN, "--bootstrap-server", cluster.bootstrap, "--generate",
                           "--topics-to-move-json-file", str(to_move), "--broker-list", "2,3")
    assert replicas_of(json_after(generated, "Current partition replica assignment")) == before
    proposed = json_after(generated, "Proposed partition reassignment configuration")
    target = replicas_of(proposed)
    assert set(target) == set(before) and all(sorted(r) == [2, 3] for r in target.values()), generated
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))

    executed = kafka_tool(kafka_libs, REASSIGN, "--bootstrap-server", cluster.bootstrap, "--execute",
                          "--throttle", "50000000", "--reassignment-json-file", str(plan))
    assert "Successfully started partition reassignments for" in executed, executed
    deadline = time.monotonic() + 60
    while any(cluster.partition(topic, p)[1] != target[(topic, p)] for p in range(2)) and time.monotonic() < deadline:
        time.sleep(0.5)
    # --execute --throttle set the rates on every broker and the throttled-replica lists on the topic;
    # --verify, once the moves are done, removes them all again.
    verified = kafka_tool(kafka_libs, REASSIGN, "--bootstrap-server", cluster.bootstrap, "--verify",
                          "--reassignment-json-file", str(plan))
    assert "Clearing broker-level throttles on brokers" in verified and "Clearing topic-level throttles" in verified, verified
    for p in range(2):
        assert f"Reassignment of partition {topic}-{p} is completed." in verified, verified
        leader, replicas, isr = cluster.partition(topic, p)
        assert replicas == target[(topic, p)] and sorted(isr) == [2, 3] and leader in (2, 3)
    assert count_records(cluster.bootstrap, topic, 2, 200) == 200


def test_kafka_leader_election_gives_leadership_back_to_the_preferred_replica(
        cluster: Cluster, kafka_libs: Path, tmp_path: Path) -> None:
    topic = "tools-elect"
    cluster.create_topic(topic, partitions=1, replication=2)
    cluster.wait_for_isr(topic, 0, set(cluster.partition(topic, 0)[1]))
    leader, replicas, _ = cluster.partition(topic, 0)
    assert leader == replicas[0]
    # A reorder copies nothing and completes at once; the leader stays, and is no longer preferred.
    reordered = tmp_path / "reorder.json"
    reordered.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [replicas[1], replicas[0]], "log_dirs": ["any", "any"]}]}))
    kafka_tool(kafka_libs, REASSIGN, "--bootstrap-server", cluster.bootstrap, "--execute",
               "--reassignment-json-file", str(reordered))
    assert cluster.partition(topic, 0)[:2] == (leader, [replicas[1], replicas[0]])

    elected = kafka_tool(kafka_libs, ELECT, "--bootstrap-server", cluster.bootstrap, "--election-type", "PREFERRED",
                         "--topic", topic, "--partition", "0")
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in elected, elected
    assert cluster.wait_for_leader(topic, 0, not_=leader) == replicas[1]
    again = kafka_tool(kafka_libs, ELECT, "--bootstrap-server", cluster.bootstrap, "--election-type", "PREFERRED",
                       "--topic", topic, "--partition", "0")
    assert "Valid replica already elected for partitions" in again and f"{topic}-0" in again, again
