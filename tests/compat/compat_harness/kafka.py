"""Apache Kafka 4.x as a subprocess: installed by ``kafka/install.sh``, run in KRaft combined mode.

``install_kafka`` runs the install script (quick when the jars are already cached) and returns the
jar folder. ``ReferenceKafka`` writes a ``server.properties`` for one node that is both broker and
controller, on two free ports, formats its storage directory with ``kafka.tools.StorageTool format``
(a static controller quorum: ``controller.quorum.voters`` names this node), starts ``kafka.Kafka``
with a small heap and a log4j 2 configuration that writes ``kafka.log`` in its working directory,
and waits until ApiVersions is answered on the client port.

A failure to install or to start raises ``KafkaUnavailable`` with the tail of the relevant log:
the compat tier fails loudly rather than skipping.
"""

from __future__ import annotations

import base64
import ctypes
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from helpers.broker_process import api_versions_answered, free_port

HERE = Path(__file__).resolve().parent
INSTALL_SCRIPT = HERE.parent / "kafka" / "install.sh"
JVM_OPTIONS = [
    "-Xmx512m",
    "-Xms128m",
    "-XX:+UseSerialGC",  # two cores and one short-lived JVM: the simplest collector starts fastest
    "-XX:TieredStopAtLevel=1",  # C1 only: start-up matters more than peak throughput here
    "-Djava.awt.headless=true",
]
LOG_TAIL_LINES = 40

LOG4J2_CONFIG = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
"""


class KafkaUnavailable(Exception):
    """Apache Kafka could not be installed or started; the message says why."""


def install_kafka(timeout: float = 600.0) -> Path:
    """Run ``install.sh`` and return the folder of jars it prints."""
    try:
        done = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaUnavailable(f"{INSTALL_SCRIPT} did not finish within {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise KafkaUnavailable(
            f"{INSTALL_SCRIPT} failed with exit code {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    libs = Path(done.stdout.strip().splitlines()[-1])
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise KafkaUnavailable(f"{INSTALL_SCRIPT} printed {libs}, which holds no kafka_2.13 jar")
    return libs


def kafka_version(libs: Path) -> str:
    """The version of the kafka_2.13 jar in ``libs`` (e.g. ``4.1.1``)."""
    jar = next(libs.glob("kafka_2.13-*.jar"))
    return jar.stem.removeprefix("kafka_2.13-")


def random_cluster_id() -> str:
    """A cluster id in Kafka's format: a UUID, URL-safe base64 without padding (22 characters). Never
    one starting with '-': Kafka's StorageTool would read it as an option (a random start failure)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _die_with_parent() -> None:
    """Run in the child before exec: Linux sends it SIGTERM when the test process dies
    (PR_SET_PDEATHSIG), so a killed test session does not leave a JVM behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class ReferenceKafka:
    """One Apache Kafka node (broker + controller) in ``workdir``, configured with ``overrides``."""

    def __init__(self, libs: Path, workdir: Path, overrides: Mapping[str, str] | None = None,
                 host: str = "127.0.0.1") -> None:
        self.libs = libs
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = free_port(host)
        self.controller_port = free_port(host)
        self.data_dir = self.workdir / "data"
        self.properties_path = self.workdir / "server.properties"
        self.log_path = self.workdir / "kafka.log"
        self.console_path = self.workdir / "kafka.out"
        self.log4j_path = self.workdir / "log4j2.properties"
        self.properties = {
            "node.id": "1",
            "process.roles": "broker,controller",
            "controller.quorum.voters": f"1@{host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **dict(overrides or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def java(self, *arguments: str) -> list[str]:
        return [
            "java", *JVM_OPTIONS, f"-Dlog4j2.configurationFile={self.log4j_path}",
            "-cp", f"{self.libs}/*", *arguments,
        ]

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = []
        for path in (self.console_path, self.log_path):
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def format_storage(self) -> None:
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        self.log4j_path.write_text(LOG4J2_CONFIG.format(log=self.log_path))
        command = self.java("kafka.tools.StorageTool", "format", "-t", random_cluster_id(),
                            "-c", str(self.properties_path), "--ignore-formatted")
        with self.console_path.open("ab") as out:
            done = subprocess.run(command, stdout=out, stderr=out, check=False, timeout=120)
        if done.returncode != 0:
            raise KafkaUnavailable(f"kafka.tools.StorageTool format failed ({done.returncode})\n{self.log_tail()}")

    def start(self, timeout: float = 120.0) -> ReferenceKafka:
        self.format_storage()
        with self.console_path.open("ab") as out:
            self.process = subprocess.Popen(
                self.java("kafka.Kafka", str(self.properties_path)),
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=self.workdir,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise KafkaUnavailable(f"kafka.Kafka exited with {self.process.returncode}\n{self.log_tail()}")
            if api_versions_answered(self.host, self.port, timeout=1.0):
                return self
            time.sleep(0.1)
        self.stop()
        raise KafkaUnavailable(f"Kafka did not answer ApiVersions within {timeout:.0f} s\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Kafka's controlled shutdown), then SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
