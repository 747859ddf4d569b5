"""A real tidelog cluster for tests: one etcd and N broker subprocesses on loopback ports.

``Cluster.start`` launches etcd, then every broker at once (``node.id`` 1..N, ``broker.rack`` r1..rN,
``metadata.store`` pointing at the etcd) and waits until each answers ApiVersions and the image lists
them all. Sessions are short (3 s lease, 500 ms heartbeat) so that failover tests take seconds; the
settings can be overridden per test. ``leader_of``/``wait_for_leader`` read the cluster's metadata the
way clients do (confluent-kafka's AdminClient).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from helpers.broker_process import BrokerProcess, free_port
from helpers.etcd_process import EtcdProcess

FAST_SESSION = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 4000,
    "replica.fetch.backoff.ms": 200,
    "group.initial.rebalance.delay.ms": 0,
    "leader.imbalance.check.interval.seconds": 2,
}

# For tests that do not measure how fast a dead broker is noticed: a broker (or etcd) starved of CPU
# for a few seconds on a loaded machine keeps its lease (fenced after 3 s without a renewal, where
# FAST_SESSION fences after 2 s and etcd expires the lease after 3 s), instead of every broker
# re-registering at once whenever etcd stalls.
STEADY_SESSION = {
    "broker.session.timeout.ms": 5000,
    "broker.heartbeat.interval.ms": 1000,
    "replica.lag.time.max.ms": 8000,
}


class Cluster:
    def __init__(self, workdir: Path, size: int = 3, overrides: Mapping[str, object] | None = None,
                 per_node: Mapping[int, Mapping[str, object]] | None = None, listeners: Sequence[str] = ()) -> None:
        """``per_node``: settings of one broker (node id → settings) over ``overrides``. ``listeners``:
        names of listeners every broker opens besides its PLAINTEXT one (first, so the inter-broker
        one), each on a free port; ``listener_bootstrap(name)`` lists them."""
        self.listeners = tuple(listeners)
        self.listener_ports: dict[int, dict[str, int]] = {}
        self.workdir = Path(workdir)
        self.per_node = dict(per_node or {})
        self.etcd = EtcdProcess(self.workdir / "etcd")
        self.brokers: dict[int, BrokerProcess] = {}
        self.size = size
        self.overrides = {**FAST_SESSION, **(overrides or {})}

    def start(self, timeout: float = 60.0) -> Cluster:
        self.etcd.start()
        for node in range(1, self.size + 1):
            self.brokers[node] = BrokerProcess(self.workdir / f"broker-{node}", {
                "node.id": node, "broker.rack": f"r{node}", "metadata.store": self.etcd.store_url(), **self.overrides,
                **self.per_node.get(node, {}),
            })
            broker = self.brokers[node]
            self.listener_ports[node] = {name: free_port(broker.host) for name in self.listeners}
            broker.properties["listeners"] = ",".join(
                [broker.properties["listeners"]] + [f"{n}://{broker.host}:{p}" for n, p in self.listener_ports[node].items()])
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda b: b.start(timeout), self.brokers.values()))
        self.wait_for_brokers(set(self.brokers), timeout)
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.is_running())

    def listener_bootstrap(self, name: str) -> str:
        return ",".join(f"{b.host}:{self.listener_ports[n][name]}" for n, b in self.brokers.items() if b.is_running())

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def wait_for_brokers(self, expected: set[int], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            seen = set(self.admin().list_topics(timeout=5).brokers)
            if seen == expected:
                return
            time.sleep(0.2)
        raise AssertionError(f"brokers {sorted(seen)} registered, expected {sorted(expected)}")

    def create_topic(self, name: str, partitions: int = 1, replication: int = 3, **configs: str) -> None:
        admin = self.admin()  # kept alive until the future resolves: a destroyed client fails its futures
        admin.create_topics([NewTopic(name, partitions, replication, config=configs)])[name].result(15)
        for p in range(partitions):
            self.wait_for_leader(name, p)

    def partition(self, topic: str, index: int) -> tuple[int, list[int], list[int]]:
        """(leader, replicas, isr) as Metadata reports them now."""
        md = self.admin().list_topics(topic, timeout=5).topics[topic].partitions[index]
        return md.leader, list(md.replicas), list(md.isrs)

    def wait_for_leader(self, topic: str, index: int, *, not_: int | None = None, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        leader = -1
        while time.monotonic() < deadline:
            try:
                leader = self.partition(topic, index)[0]
            except (KeyError, Exception):
                leader = -1
            if leader >= 0 and leader != not_:
                return leader
            time.sleep(0.1)
        raise AssertionError(f"{topic}-{index}: no leader (other than {not_}) within {timeout} s; last {leader}")

    def wait_for_isr(self, topic: str, index: int, expected: set[int], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        isr: list[int] = []
        while time.monotonic() < deadline:
            isr = self.partition(topic, index)[2]
            if set(isr) == expected:
                return
            time.sleep(0.1)
        raise AssertionError(f"{topic}-{index}: ISR {isr}, expected {sorted(expected)}")

    def close(self) -> None:
        with ThreadPoolExecutor(max(1, len(self.brokers))) as pool:
            list(pool.map(lambda b: b.close(), self.brokers.values()))
        self.etcd.close()
