"""The 3-broker clusters of ``bench/compare.py``'s workload 7 (``--workloads cluster``).

Both clusters run on 127.0.0.1 with their data under one folder, four processes each:

- **tidelog**: one etcd (Debian's ``etcd-server``, its default timing) and three ``tidelog serve``
  brokers, ``node.id`` 1-3, ``broker.rack`` rack-1..3, ``metadata.store=etcd://.../bench``. The
  controller is whichever broker holds the election key in etcd.
- **Apache Kafka**: three brokers (``process.roles=broker``, ``node.id`` 1-3, the same racks) and one
  dedicated KRaft controller (``process.roles=controller``, ``node.id`` 0), each with the JVM options
  of ``kafka-server-start.sh``. A dedicated controller rather than three combined nodes: killing a
  partition's leader then never kills the active controller too, so a failover measures a broker's
  death alone, as on tidelog when the killed leader is not the controller (``Cluster.controller``),
  and the counts match (tidelog's etcd against Kafka's controller).

Every other setting is each system's default, both sides set alike: ``broker.session.timeout.ms``
and ``broker.heartbeat.interval.ms`` (9000 and 2000, the defaults of both, unless the caller asks
for others), the internal topics at their default replication factor 3.

A ``Cluster`` sums CPU seconds and resident memory over its four processes (a process killed during
the run counts with its CPU seconds up to its death) and is stopped with SIGKILL: its data is thrown
away after the group, and a controlled shutdown of three brokers at once costs tens of seconds.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import peers

HOST = "127.0.0.1"
SIZE = 3
KAFKA_CONTROLLER_ID = 0


@dataclass
class Cluster:
    """Three broker processes and the fourth they need (etcd, or Kafka's controller)."""

    name: str
    brokers: dict[int, peers.Broker]
    support: peers.Broker
    session_ms: int
    heartbeat_ms: int
    controller_is_broker: bool  # tidelog: one of the brokers leads the cluster (Metadata's controller id)
    startup_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    _cpu_seen: dict[int, float] = field(default_factory=dict)

    @property
    def processes(self) -> list[peers.Broker]:
        return [*self.brokers.values(), self.support]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process.poll() is None)

    def cpu_seconds(self) -> float:
        """Every process's utime + stime; a dead one's as last read (``kill9`` reads it just before)."""
        for process in self.processes:
            with contextlib.suppress(OSError, IndexError, ValueError):
                self._cpu_seen[process.pid] = process.cpu_seconds()
        return sum(self._cpu_seen.values())

    def _alive_sum(self, read: str) -> int:
        total = 0
        for process in self.processes:
            with contextlib.suppress(OSError, ValueError):
                total += getattr(process, read)()
        return total

    def rss_bytes(self) -> int:
        return self._alive_sum("rss_bytes")

    def peak_rss_bytes(self) -> int:
        """The sum of each live process's own peak (not the peak of the sum)."""
        return self._alive_sum("peak_rss_bytes")

    def reset_peak_rss(self) -> None:
        for process in self.processes:
            with contextlib.suppress(OSError):
                process.reset_peak_rss()

    def kill9(self, node: int) -> None:
        broker = self.brokers[node]
        self.cpu_seconds()
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(30)

    def stop(self, timeout: float = 60.0) -> None:
        self.cpu_seconds()
        for process in self.processes:
            if process.process.poll() is None:
                process.process.send_signal(signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.process.wait(timeout)

    def partition(self, topic: str, index: int) -> tuple[int, list[int], list[int], int]:
        """(leader, replicas, ISR, controller id) of ``topic``-``index`` as Metadata reports them now."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        metadata = admin.list_topics(topic, timeout=10)
        part = metadata.topics[topic].partitions[index]
        return part.leader, list(part.replicas), list(part.isrs), metadata.controller_id

    def wait_for_brokers(self, timeout: float) -> None:
        """Until Metadata lists all three brokers (Kafka: registered and unfenced)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.process.poll() is not None:
                    raise peers.BrokerUnavailable(f"{self.name} node {process.workdir.name} exited with "
                                                  f"{process.process.returncode}\n{process.log_tail()}")
            with contextlib.suppress(Exception):
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                seen = set(admin.list_topics(timeout=5).brokers)
                if seen == set(self.brokers):
                    return
            time.sleep(0.2)
        self.stop()
        raise peers.BrokerUnavailable(f"{self.name}: Metadata lists brokers {sorted(seen)} after {timeout:.0f} s")


def _session(session_ms: int, heartbeat_ms: int) -> dict[str, str]:
    return {"broker.session.timeout.ms": str(session_ms), "broker.heartbeat.interval.ms": str(heartbeat_ms)}


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=1) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def start_etcd(folder: Path, timeout: float = 30.0) -> peers.Broker:
    """One etcd member, default timing (100 ms heartbeat, 1 s election), as ``tidelog dev-cluster`` runs it."""
    binary = shutil.which("etcd")
    if binary is None:
        raise peers.BrokerUnavailable("etcd is not installed: scripts/bootstrap test installs Debian's etcd-server")
    folder.mkdir(parents=True, exist_ok=True)
    port, peer = peers.free_port(), peers.free_port()
    command = [
        binary, "--name", "bench", "--data-dir", str(folder / "data"),
        "--listen-client-urls", f"http://{HOST}:{port}", "--advertise-client-urls", f"http://{HOST}:{port}",
        "--listen-peer-urls", f"http://{HOST}:{peer}", "--initial-advertise-peer-urls", f"http://{HOST}:{peer}",
        "--initial-cluster", f"bench=http://{HOST}:{peer}", "--log-level", "warn",
    ]
    log_path = folder / "etcd.log"
    with log_path.open("ab") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    etcd = peers.Broker("etcd", HOST, port, process, folder, log_path)
    deadline = time.monotonic() + timeout
    while not _etcd_healthy(port):
        if process.poll() is not None or time.monotonic() > deadline:
            etcd.stop()
            raise peers.BrokerUnavailable(f"etcd did not become healthy\n{etcd.log_tail()}")
        time.sleep(0.05)
    return etcd


def start_tidelog_cluster(folder: Path, session_ms: int = 9000, heartbeat_ms: int = 2000, loop: str = "uvloop",
                          timeout: float = 120.0, overrides: Mapping[str, str] | None = None) -> Cluster:
    """etcd, then three brokers at once; ``startup_s`` is from the brokers' launch until Metadata lists all three.
    ``overrides``: more settings for every broker (experiments; the comparison sets none)."""
    etcd = start_etcd(folder / "etcd")
    store = f"etcd://{etcd.host}:{etcd.port}/bench"
    started = time.monotonic()
    brokers: dict[int, peers.Broker] = {}
    try:
        for node in range(1, SIZE + 1):
            brokers[node] = peers.launch_tidelog(folder / f"broker-{node}", {
                "node.id": str(node), "broker.rack": f"rack-{node}", "metadata.store": store,
                **_session(session_ms, heartbeat_ms), **(overrides or {})}, loop=loop)
        for broker in brokers.values():
            peers.wait_ready(broker, started, timeout)
    except peers.BrokerUnavailable:
        for process in [*brokers.values(), etcd]:
            process.stop(10)
        raise
    cluster = Cluster("tidelog", brokers, etcd, session_ms, heartbeat_ms, controller_is_broker=True)
    cluster.wait_for_brokers(timeout)
    cluster.startup_s = time.monotonic() - started
    cluster.notes.append(f"3 brokers + etcd, event loop {loop}, broker.session.timeout.ms={session_ms}, "
                         f"broker.heartbeat.interval.ms={heartbeat_ms}")
    return cluster


def start_kafka_cluster(folder: Path, libs: Path, session_ms: int = 9000, heartbeat_ms: int = 2000,
                        timeout: float = 180.0) -> Cluster:
    """One controller and three brokers formatted (in parallel) for one cluster id, then started at once;
    ``startup_s`` is from the launch (formatting excluded) until Metadata lists all three brokers."""
    controller_port = peers.free_port()
    ports = {node: peers.free_port() for node in range(1, SIZE + 1)}
    common = {
        "controller.quorum.voters": f"{KAFKA_CONTROLLER_ID}@{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        **_session(session_ms, heartbeat_ms),
    }
    nodes: dict[int, dict[str, str]] = {KAFKA_CONTROLLER_ID: {
        "node.id": str(KAFKA_CONTROLLER_ID), "process.roles": "controller",
        "listeners": f"CONTROLLER://{HOST}:{controller_port}", "log.dirs": str(folder / "controller" / "data"),
        **common,
    }}
    for node, port in ports.items():
        nodes[node] = {
            "node.id": str(node), "process.roles": "broker", "broker.rack": f"rack-{node}",
            "listeners": f"PLAINTEXT://{HOST}:{port}", "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
            "inter.broker.listener.name": "PLAINTEXT", "log.dirs": str(folder / f"broker-{node}" / "data"), **common,
        }

    def home(node: int) -> Path:
        return folder / ("controller" if node == KAFKA_CONTROLLER_ID else f"broker-{node}")

    cluster_id = peers.new_kafka_cluster_id()
    with ThreadPoolExecutor(len(nodes)) as pool:
        list(pool.map(lambda node: peers.prepare_kafka(home(node), libs, nodes[node], cluster_id), nodes))
    started = time.monotonic()
    controller = peers.launch_kafka(home(KAFKA_CONTROLLER_ID), libs, controller_port)
    brokers = {node: peers.launch_kafka(home(node), libs, port) for node, port in ports.items()}
    try:
        for process in [controller, *brokers.values()]:
            peers.wait_ready(process, started, timeout)
    except peers.BrokerUnavailable:
        for process in [*brokers.values(), controller]:
            process.stop(10)
        raise
    cluster = Cluster("kafka", brokers, controller, session_ms, heartbeat_ms, controller_is_broker=False)
    cluster.wait_for_brokers(timeout)
    cluster.startup_s = time.monotonic() - started
    cluster.notes.append(f"3 brokers + 1 KRaft controller, broker.session.timeout.ms={session_ms}, "
                         f"broker.heartbeat.interval.ms={heartbeat_ms}")
    return cluster
