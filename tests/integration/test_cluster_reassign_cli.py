"""``tidelog partitions reassign`` throttles and ``tidelog log-dirs list|move`` on three brokers, broker 1
with two log dirs.

- ``--execute --throttle`` sets Kafka's throttle configs for the move (the topic's leader/follower
  throttled-replica lists, the rates on the brokers involved and on no other), they hold the copy back
  while it runs, ``--verify`` keeps them while the move is in progress and removes them once it is done;
  another ``--execute`` meanwhile is refused unless ``--additional``, as Kafka's tool does;
- ``log-dirs move --wait`` moves a replica to broker 1's other dir while ``log-dirs list`` shows the
  future replica and its progress;
- a reassignment JSON naming a log dir puts the new replica in that dir, and ``--verify`` says so;
- ``brokers drain --throttle`` throttles its moves while they run and removes the throttles at the end.

One cluster for the module; each test uses its own topics.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from helpers.broker_process import register_failure_report
from helpers.cli_runner import Run, run_cli
from helpers.cluster import STEADY_SESSION, Cluster

VALUE = b"x" * 16_384
THROTTLED = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
             "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
             "replica.alter.log.dirs.io.max.bytes.per.second")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("reassign-cli")
    disks = {1: f"{workdir / 'disk-a'},{workdir / 'disk-b'}"}
    started = Cluster(workdir, overrides=STEADY_SESSION, per_node={1: {"log.dirs": disks[1]}}).start()
    yield started
    started.close()


def dirs_of(cluster: Cluster) -> list[str]:
    return cluster.brokers[1].properties["log.dirs"].split(",")


def cli(capsys: pytest.CaptureFixture[str], cluster: Cluster, *argv: str) -> Run:
    return run_cli(capsys, *argv, "--bootstrap-server", cluster.bootstrap, "--timeout", "20")


def create_on(cluster: Cluster, topic: str, replicas: list[int], records: int) -> None:
    admin = cluster.admin()
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(15)
    cluster.wait_for_leader(topic, 0)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    for _ in range(records):
        producer.produce(topic, VALUE, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def throttle_configs(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, str]:
    """The throttle keys set on a topic or on one broker (not the cluster default, not static)."""
    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource].result(15)
    own = {ConfigSource.DYNAMIC_BROKER_CONFIG.value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return {k: e.value for k, e in entries.items() if k in THROTTLED and e.source in own}


def plan_file(tmp_path: Path, topic: str, replicas: list[int], log_dirs: list[str] | None = None) -> str:
    path = tmp_path / f"{topic}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": replicas, "log_dirs": log_dirs or ["any"] * len(replicas)}]}))
    return str(path)


def wait_for(condition: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_execute_throttle_sets_kafkas_throttles_for_the_move_and_verify_removes_them_once_done(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    topic = "cli-throttled"
    create_on(cluster, topic, [1], 128)  # 2 MiB on broker 1
    plan = plan_file(tmp_path, topic, [2])
    executed = cli(capsys, cluster, "partitions", "reassign", "--execute", "--reassignment-json-file", plan,
                   "--throttle", "20000")
    assert executed.code == 0, executed
    assert "The inter-broker throttle limit was set to 20000 B/s" in executed.out
    assert "You must run --verify periodically" in executed.out

    admin = cluster.admin()
    assert throttle_configs(admin, ResourceType.TOPIC, topic) == {
        "leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": "0:2"}
    rates = {"leader.replication.throttled.rate": "20000", "follower.replication.throttled.rate": "20000"}
    assert throttle_configs(admin, ResourceType.BROKER, "1") == rates
    assert throttle_configs(admin, ResourceType.BROKER, "2") == rates
    assert throttle_configs(admin, ResourceType.BROKER, "3") == {}  # not involved in the move

    # 2 MiB at 20 kB/s: still copying; verify says so and leaves the throttles alone.
    time.sleep(1.0)
    verified = cli(capsys, cluster, "partitions", "reassign", "--verify", "--reassignment-json-file", plan)
    assert f"Reassignment of partition {topic}-0 is still in progress." in verified.out, verified
    assert "Clearing" not in verified.out
    assert throttle_configs(admin, ResourceType.BROKER, "2") == rates
    assert sorted(cluster.partition(topic, 0)[1]) == [1, 2]  # the new replica is still being filled

    # Another plan while this move runs: refused without --additional (Kafka's tool refuses too).
    other = "cli-additional"
    create_on(cluster, other, [1], 4)
    second = plan_file(tmp_path, other, [3])
    refused = cli(capsys, cluster, "partitions", "reassign", "--execute", "--reassignment-json-file", second)
    assert refused.code == 1 and "1 partition move(s) already in progress" in refused.err, refused
    assert "--additional" in refused.err and "Successfully started" not in refused.out
    assert cluster.partition(other, 0)[1] == [1]
    added = cli(capsys, cluster, "partitions", "reassign", "--execute", "--reassignment-json-file", second,
                "--additional")
    assert added.code == 0 and f"Successfully started partition reassignments for {other}-0" in added.out, added
    wait_for(lambda: cluster.partition(other, 0)[1] == [3], "the additional move (not throttled) completes")

    # Lift the rate (as an operator would) and let the move finish; then verify clears everything.
    for broker in ("1", "2"):
        assert cli(capsys, cluster, "configs", "alter", "--entity-type", "brokers", "--entity-name", broker,
                   "--add-config", "leader.replication.throttled.rate=1000000000,"
                                   "follower.replication.throttled.rate=1000000000").code == 0
    wait_for(lambda: cluster.partition(topic, 0)[1] == [2], "the move completes once the rate is lifted")
    verified = cli(capsys, cluster, "partitions", "reassign", "--verify", "--reassignment-json-file", plan)
    assert verified.code == 0, verified
    assert f"Reassignment of partition {topic}-0 is completed." in verified.out
    assert "Clearing broker-level throttles on brokers 1,2,3" in verified.out
    assert f"Clearing topic-level throttles on topics {topic}" in verified.out
    assert throttle_configs(admin, ResourceType.TOPIC, topic) == {}
    for broker in ("1", "2", "3"):
        assert throttle_configs(admin, ResourceType.BROKER, broker) == {}


def test_throttle_options_refuse_a_negative_rate_and_another_mode(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plan = plan_file(tmp_path, "never-created", [1])
    negative = cli(capsys, cluster, "partitions", "reassign", "--execute", "--reassignment-json-file", plan,
                   "--throttle", "-5")
    assert negative.code == 2 and "at least 0" in negative.err
    wrong_mode = cli(capsys, cluster, "partitions", "reassign", "--verify", "--reassignment-json-file", plan,
                     "--throttle", "5")
    assert wrong_mode.code == 2 and "goes with --execute" in wrong_mode.err
    additional = cli(capsys, cluster, "partitions", "reassign", "--verify", "--reassignment-json-file", plan,
                     "--additional")
    assert additional.code == 2 and "--additional goes with --execute" in additional.err


def where(capsys: pytest.CaptureFixture[str], cluster: Cluster, topic: str) -> list[dict[str, object]]:
    listed = cli(capsys, cluster, "log-dirs", "list", "--broker", "1", "--topic", topic, "--json")
    assert listed.code == 0, listed
    replicas: list[dict[str, object]] = listed.json()["replicas"]
    return replicas


def test_log_dirs_move_shows_the_future_replica_while_it_copies_and_ends_in_the_other_dir(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "cli-dir-move"
    create_on(cluster, topic, [1], 64)  # 1 MiB
    (start,) = where(capsys, cluster, topic)
    target = next(d for d in dirs_of(cluster) if d != start["log_dir"])
    assert cli(capsys, cluster, "configs", "alter", "--entity-type", "brokers", "--entity-name", "1",
               "--add-config", "replica.alter.log.dirs.io.max.bytes.per.second=250000").code == 0
    try:
        moved = cli(capsys, cluster, "log-dirs", "move", "--broker", "1", "--topic", topic, "--partition", "0",
                    "--to", target)
        assert moved.code == 0, moved
        assert f"Successfully started log dir moves to {target} for: {topic}-0" in moved.out
        during = where(capsys, cluster, topic)
        future = [r for r in during if r["is_future"]]
        assert len(future) == 1 and future[0]["log_dir"] == target, during
        assert future[0]["of_size"] == start["size"] and int(str(future[0]["offset_lag"])) > 0
        table = cli(capsys, cluster, "log-dirs", "list", "--broker", "1", "--topic", topic)
        assert "future replica:" in table.out and target in table.out

        waited = cli(capsys, cluster, "log-dirs", "move", "--broker", "1", "--topic", topic, "--partition", "0",
                     "--to", target, "--wait")
        assert waited.code == 0, waited
        assert "log dir moves done" in waited.err and f"Moved to {target}: {topic}-0" in waited.out
    finally:
        cli(capsys, cluster, "configs", "alter", "--entity-type", "brokers", "--entity-name", "1",
            "--delete-config", "replica.alter.log.dirs.io.max.bytes.per.second")
    after = where(capsys, cluster, topic)
    assert [(r["log_dir"], r["is_future"], r["size"]) for r in after] == [(target, False, start["size"])]

    refused = cli(capsys, cluster, "log-dirs", "move", "--broker", "1", "--topic", topic, "--partition", "0",
                  "--to", "/not/a/log/dir")
    assert refused.code == 1 and "LOG_DIR_NOT_FOUND" in refused.err


def test_a_reassignment_naming_a_log_dir_puts_the_new_replica_there(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    topic = "cli-json-dirs"
    create_on(cluster, topic, [2], 32)
    target = dirs_of(cluster)[1]
    plan = plan_file(tmp_path, topic, [2, 1], ["any", target])
    executed = cli(capsys, cluster, "partitions", "reassign", "--execute", "--reassignment-json-file", plan,
                   "--replica-alter-log-dirs-throttle", "50000000", "--wait")
    assert executed.code == 0, executed
    assert "The replica-alter-dir throttle limit was set to 50000000 B/s" in executed.out
    assert f"Successfully started log dir moves for: {topic}-0 on broker 1" in executed.out
    assert "Clearing broker-level throttles" in executed.out  # --wait saw the end: throttles gone
    assert throttle_configs(cluster.admin(), ResourceType.BROKER, "1") == {}
    assert cluster.partition(topic, 0)[1] == [2, 1]
    assert [(r["log_dir"], r["is_future"]) for r in where(capsys, cluster, topic)] == [(target, False)]
    verified = cli(capsys, cluster, "partitions", "reassign", "--verify", "--reassignment-json-file", plan)
    assert verified.code == 0, verified
    assert f"Log dir move of {topic}-0 on broker 1 to {target} is completed." in verified.out


def test_drain_with_a_throttle_holds_its_moves_to_it_and_removes_it_when_the_broker_is_empty(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "cli-drained"
    create_on(cluster, topic, [3], 32)  # 512 KiB on broker 3 only
    seen: list[dict[str, str]] = []
    stop = threading.Event()

    def watch() -> None:  # what broker 3's throttle configs are while the drain runs
        admin = cluster.admin()
        while not stop.is_set():
            seen.append(throttle_configs(admin, ResourceType.BROKER, "3"))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        drained = cli(capsys, cluster, "brokers", "drain", "3", "--throttle", "400000")
    finally:
        stop.set()
        watcher.join()
        assert cli(capsys, cluster, "brokers", "undrain", "3").code == 0
    assert drained.code == 0, drained
    assert "The inter-broker throttle limit was set to 400000 B/s" in drained.out
    assert "Clearing broker-level throttles on brokers 1,2,3" in drained.out
    assert {"leader.replication.throttled.rate": "400000", "follower.replication.throttled.rate": "400000"} in seen
    assert cluster.partition(topic, 0)[1] != [3]
    assert throttle_configs(cluster.admin(), ResourceType.TOPIC, topic) == {}
    for broker in ("1", "2", "3"):
        assert throttle_configs(cluster.admin(), ResourceType.BROKER, broker) == {}
