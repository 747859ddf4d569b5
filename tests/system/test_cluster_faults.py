"""The fault tier: acks=all writes from idempotent producers survive each fault, none lost or doubled.

Each scenario creates its own RF=3 topic (4 partitions, ``min.insync.replicas=2``), starts a
:class:`helpers.checker.Checker` (3 confluent-kafka producers, 150 records/s each), breaks the cluster
while they write, brings it back, waits until every replica is in sync again, and reads everything
back: every acknowledged record once, at the offset it was acknowledged at, offsets gap-free, each
producer's order kept, all replicas holding the same batches, and no delivery failed (the producers
retry for two minutes: any failure is an error a retrying client could not ride out).

The scenarios share one :class:`helpers.fault_cluster.FaultCluster` (three brokers, 3 s sessions, a
3-member etcd, every etcd and inter-broker path through a relay that can be cut); a scenario that
leaves it broken gets it replaced before the next one. Each prints its row of the table in
docs/cluster.md ("Faults"); ``pytest -s tests/system/test_cluster_faults.py`` shows them, and the table
comes at the end of the module.
"""

from __future__ import annotations

import datetime
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from helpers.broker_process import register_failure_report
from helpers.checker import Checker, Figures
from helpers.fault_cluster import FaultCluster
from helpers.raw_client import RawClient, record_batch

PARTITIONS = 4
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
CLUSTER_SETTINGS = {"offsets.topic.num.partitions": 3}
RESULTS: list[Figures] = []

pytestmark = pytest.mark.slow


class SharedCluster:
    """One cluster for the module, replaced when a scenario left it unhealthy."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self.tmp = tmp
        self.cluster: FaultCluster | None = None

    def get(self) -> FaultCluster:
        if self.cluster is not None and not self.cluster.healthy():
            self.cluster.close()
            self.cluster = None
        if self.cluster is None:
            self.cluster = FaultCluster(self.tmp.mktemp("faults"), overrides=CLUSTER_SETTINGS).start()
        return self.cluster

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    holder = SharedCluster(tmp_path_factory)
    yield holder
    holder.close()
    if RESULTS:
        print("\n" + Figures.HEADER)
        for figures in RESULTS:
            print(figures.row())


@pytest.fixture
def cluster(shared: SharedCluster, pytestconfig: pytest.Config) -> FaultCluster:
    register_failure_report(pytestconfig)
    return shared.get()


def run_scenario(cluster: FaultCluster, name: str, fault: Callable[[str, Checker], dict[str, float]]) -> Figures:
    """Write through ``fault(topic, checker)`` (which returns its own figures), settle, read back."""
    topic = "".join(c if c.isalnum() else "-" for c in name).strip("-")
    cluster.create_topic(topic, PARTITIONS, 3, **TOPIC_CONFIGS)
    checker = Checker(cluster.all_bootstrap, topic, PARTITIONS).start()
    try:
        checker.wait_for_acks(300, since=checker.started_at)
        notes = fault(topic, checker)
        checker.wait_for_acks(300, since=time.monotonic())  # writing again once the cluster is back
    finally:
        checker.stop()
    cluster.settle(topic, PARTITIONS)
    figures = checker.verify(name, replica_dirs(cluster, topic))
    figures.notes.update(notes)
    RESULTS.append(figures)
    print(f"\n{figures.row()}")
    assert not figures.problems(), figures.problems()
    return figures


def replica_dirs(cluster: FaultCluster, topic: str) -> dict[int, list[Path]]:
    md = cluster.admin().list_topics(topic, timeout=5).topics[topic]
    return {p: [cluster.brokers[r].data_dir for r in m.replicas] for p, m in md.partitions.items()}


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 30.0, interval: float = 0.05) -> float:
    """Poll until ``predicate()``; the seconds it took."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(interval)
    return time.monotonic() - started


def leaders(cluster: FaultCluster, topic: str) -> dict[int, int]:
    md = cluster.admin().list_topics(topic, timeout=5).topics[topic]
    return {p: m.leader for p, m in md.partitions.items()}


# -- brokers dying -----------------------------------------------------------------------------------


def test_acknowledged_writes_survive_the_kill9_of_a_partitions_leader(cluster: FaultCluster) -> None:
    def fault(topic: str, checker: Checker) -> dict[str, float]:
        leader = cluster.partition(topic, 0)[0]
        checker.mark_down(leader)
        cluster.brokers[leader].kill9()
        killed = time.monotonic()
        cluster.wait_for_leader(topic, 0, not_=leader)
        elected = time.monotonic() - killed
        checker.wait_for_acks(200, since=killed)
        cluster.brokers[leader].start()
        checker.mark_up(leader)
        return {"new leader after (s)": elected}

    run_scenario(cluster, "leader kill -9", fault)


def test_acknowledged_writes_survive_the_kill9_of_the_controller(cluster: FaultCluster) -> None:
    def fault(topic: str, checker: Checker) -> dict[str, float]:
        controller = cluster.controller()
        led = [p for p, leader in leaders(cluster, topic).items() if leader == controller]
        checker.mark_down(controller)
        cluster.brokers[controller].kill9()
        killed = time.monotonic()
        took = wait_for(lambda: cluster.controller() not in (-1, controller), "a new controller")
        for p in led:  # the new controller's first job: the partitions the old one led
            cluster.wait_for_leader(topic, p, not_=controller)
        moved = time.monotonic() - killed
        cluster.brokers[controller].start()
        checker.mark_up(controller)
        return {"new controller after (s)": took, "its partitions led again after (s)": moved}

    run_scenario(cluster, "controller kill -9", fault)


def test_a_sigterm_rolling_restart_of_every_broker_is_ridden_out_without_errors(cluster: FaultCluster) -> None:
    def fault(topic: str, checker: Checker) -> dict[str, float]:
        longest_stop = 0.0
        for node, broker in sorted(cluster.brokers.items()):
            began = time.monotonic()
            assert broker.stop(signal.SIGTERM) == 0
            longest_stop = max(longest_stop, time.monotonic() - began)
            checker.mark_down(node)  # leadership must have moved before the process exited
            broker.start()
            checker.mark_up(node)
            cluster.settle(topic, PARTITIONS)  # back in every ISR before the next one goes
        return {"longest controlled shutdown (s)": longest_stop}

    figures = run_scenario(cluster, "rolling restart (SIGTERM)", fault)
    assert figures.no_leader_s < 1.0, "a stopped broker was still named leader after it exited"


# -- links cut ---------------------------------------------------------------------------------------


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_and_rejoins_when_healed(cluster: FaultCluster) -> None:
    def fault(topic: str, checker: Checker) -> dict[str, float]:
        leader, replicas, _ = cluster.partition(topic, 0)
        follower = next(r for r in replicas if r != leader)
        cluster.cut_between(leader, follower)
        left = wait_for(lambda: follower not in cluster.partition(topic, 0)[2], "the follower leaving the ISR")
        checker.wait_for_acks(200, since=time.monotonic())  # acks=all goes on with the smaller ISR
        cluster.heal_between(leader, follower)
        rejoined = wait_for(lambda: follower in cluster.partition(topic, 0)[2], "the follower rejoining the ISR")
        return {"left the ISR after (s)": left, "rejoined after (s)": rejoined}

    run_scenario(cluster, "follower cut off from leader", fault)


class FenceProbe(threading.Thread):
    """Produces (acks=1) to one broker directly, every 50 ms: when did it last accept a write?"""

    def __init__(self, host: str, port: int, topic: str) -> None:
        super().__init__(daemon=True, name="fence-probe")
        self.address = (host, port)
        self.topic = topic
        self.last_accepted = 0.0
        self.refused = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        client: RawClient | None = None
        while not self.stopping.wait(0.05):
            try:
                client = client or RawClient(*self.address, timeout=1.0)
                response = client.call(ProduceRequest(
                    transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1),
                    topic_data=(TopicProduceData(name=self.topic, partition_data=(
                        PartitionProduceData(index=0, records=record_batch([b"probe"])),)),),
                ))
                code = response.responses[0].partition_responses[0].error_code
            except Exception:
                if client is not None:
                    client.close()
                client, code = None, -1
            if code == 0:
                self.last_accepted = time.monotonic()
            else:
                self.refused += 1
        if client is not None:
            client.close()


def test_a_leader_cut_off_from_etcd_stops_taking_writes_before_another_is_elected(cluster: FaultCluster) -> None:
    def fault(topic: str, checker: Checker) -> dict[str, float]:
        probe_topic = f"{topic}-probe"
        cluster.create_topic(probe_topic, 1, 3)
        leader = cluster.partition(probe_topic, 0)[0]
        probe = FenceProbe(cluster.brokers[leader].host, cluster.brokers[leader].port, probe_topic)
        probe.start()
        wait_for(lambda: probe.last_accepted > 0, "the probe's first write")
        checker.mark_down(leader)
        cluster.cut_from_etcd(leader)
        cut = time.monotonic()

        def elected() -> bool:  # read in etcd: the election itself, not a broker's view of it
            state = cluster.stored_partition(probe_topic, 0)
            return state is not None and state["leader"] not in (-1, leader)

        wait_for(elected, "a new leader of the probe partition", interval=0.02)
        elected_at = time.monotonic()
        time.sleep(0.5)
        probe.stopping.set()
        probe.join(5)
        assert probe.last_accepted < elected_at, "the old leader took a write after a new leader was elected"
        for p in range(PARTITIONS):
            wait_for(lambda p=p: (cluster.stored_partition(topic, p) or {}).get("leader") not in (-1, leader),
                     f"{topic}-{p} led by another broker")
        cluster.heal_etcd(leader)
        checker.mark_up(leader)
        return {"old leader's last write after (s)": probe.last_accepted - cut,
                "new leader after (s)": elected_at - cut}

    run_scenario(cluster, "leader cut off from etcd", fault)


def test_a_leader_isolated_from_etcd_and_its_followers_loses_nothing_acknowledged(cluster: FaultCluster) -> None:
    """Split brain: the old leader still takes writes from clients until it fences itself, but none can
    be acknowledged (no follower fetches them); when it returns it must truncate them away."""

    def fault(topic: str, checker: Checker) -> dict[str, float]:
        leader = cluster.partition(topic, 0)[0]
        others = [n for n in cluster.brokers if n != leader]
        checker.mark_down(leader)
        cluster.cut_from_etcd(leader)
        for other in others:
            cluster.cut_between(leader, other)
        elected = wait_for(lambda: (cluster.stored_partition(topic, 0) or {}).get("leader") not in (-1, leader),
                           "a new leader of partition 0")
        checker.wait_for_acks(200, since=time.monotonic())
        log_before = len(cluster.brokers[leader].log_text())
        cluster.heal_etcd(leader)
        for other in others:
            cluster.heal_between(leader, other)
        checker.mark_up(leader)
        cluster.settle(topic, PARTITIONS)
        truncations = re.findall(rf"truncating {re.escape(topic)}-\d+ from (\d+) to (\d+)",
                                 cluster.brokers[leader].log_text()[log_before:])
        truncated = sum(int(before) - int(after) for before, after in truncations)
        return {"new leader after (s)": elected,
                "records the old leader alone held, truncated": truncated}

    run_scenario(cluster, "leader isolated from etcd and followers", fault)


# -- etcd --------------------------------------------------------------------------------------------


def test_acknowledged_writes_survive_a_restart_of_etcd(cluster: FaultCluster) -> None:
    def fault(topic: str, checker: Checker) -> dict[str, float]:
        before = leaders(cluster, topic)
        began = time.monotonic()
        cluster.restart_etcd(down_s=3.0)
        down = time.monotonic() - began
        checker.wait_for_acks(200, since=time.monotonic())
        kept = sum(1 for p, leader in leaders(cluster, topic).items() if before.get(p) == leader)
        return {"etcd down (s)": down, "leaders kept": kept}

    run_scenario(cluster, "etcd restarted (kill -9)", fault)


def test_a_three_member_etcd_losing_one_member_keeps_the_cluster_working(cluster: FaultCluster) -> None:
    def fault(topic: str, checker: Checker) -> dict[str, float]:
        member = cluster.etcd_members.members[0]  # every broker's first endpoint
        member.kill9()
        lost = time.monotonic()
        time.sleep(3)  # a whole session: no broker may lose its registration over it
        cluster.wait_for_brokers(set(cluster.brokers), timeout=5)
        # Metadata writes still work: a leader's death is handled through the two members left.
        leader = cluster.partition(topic, 0)[0]
        checker.mark_down(leader)
        cluster.brokers[leader].kill9()
        killed = time.monotonic()
        cluster.wait_for_leader(topic, 0, not_=leader)
        elected = time.monotonic() - killed
        cluster.brokers[leader].start()
        checker.mark_up(leader)
        member.start()
        return {"member down (s)": time.monotonic() - lost, "leader kill -9 meanwhile, new leader after (s)": elected}

    run_scenario(cluster, "etcd member lost", fault)
