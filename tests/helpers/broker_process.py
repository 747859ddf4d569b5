"""Run a tidelog broker as a subprocess, the way a user runs it: ``python -m tidelog serve FILE``.

``BrokerProcess`` picks a free port, writes a ``server.properties`` in its working directory, starts
the broker with its stdout and stderr appended to ``broker.log`` there, and waits until the port
accepts and ApiVersions v0 is answered. ``stop`` (SIGTERM by default), ``kill9`` and ``restart``
keep the same port and data directory, so a restarted broker serves the same log.

When a test fails, the tail of the log of every broker still in use is added to the report (see
``register_failure_report``), so a failure shows what the broker said.

To check that a test is right rather than the broker, run it against Apache Kafka: set
``TIDELOG_TEST_REFERENCE_KAFKA`` to a folder holding the jars of ``org.apache.kafka:kafka_2.13`` 4.x and
its dependencies (``mvn dependency:copy-dependencies`` on a pom naming it). ``BrokerProcess`` then
formats a KRaft storage directory and runs ``kafka.Kafka`` in combined mode with the same settings.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import IO, TypeVar

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from helpers.raw_client import RawClient

REPO_ROOT = Path(__file__).resolve().parents[2]
REFERENCE_KAFKA_ENV = "TIDELOG_TEST_REFERENCE_KAFKA"
LOG_TAIL_LINES = 60
T = TypeVar("T")


class BrokerError(Exception):
    """The broker did not start or stop as expected. The message ends with the tail of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def api_versions_answered(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a fresh connection gets ApiVersions v0 answered with error code 0."""
    try:
        with RawClient(host, port, timeout=timeout) as client:
            response = client.call(ApiVersionsRequest())
    except (OSError, ValueError, AssertionError):
        return False
    return response.error_code == 0


class BrokerProcess:
    """One broker subprocess with its own port, properties file, data directory and log file."""

    _in_use: list[BrokerProcess] = []  # brokers whose log is shown when a test fails

    def __init__(self, workdir: Path, overrides: Mapping[str, object] | None = None, *,
                 host: str = "127.0.0.1") -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = free_port(host)
        self.data_dir = self.workdir / "data"
        self.properties_path = self.workdir / "server.properties"
        self.log_path = self.workdir / "broker.log"
        self.properties: dict[str, str] = {
            "node.id": "1",
            "listeners": f"PLAINTEXT://{host}:{self.port}",
            "log.dirs": str(self.data_dir),
        }
        self.reference_kafka = os.environ.get(REFERENCE_KAFKA_ENV)
        if self.reference_kafka:
            self.properties.update(_kraft_properties(host, self.port, free_port(host)))
        self.properties.update({key: _render(value) for key, value in (overrides or {}).items()})
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        BrokerProcess._in_use.append(self)

    # -- facts -----------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "broker not started"
        return self.process.pid

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss_bytes(self) -> int:
        """Resident set size of the broker process, from /proc/PID/status (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise BrokerError("VmRSS not found in /proc status")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def _error(self, message: str) -> BrokerError:
        return BrokerError(f"{message}\n--- {self.log_path} (last {LOG_TAIL_LINES} lines) ---\n{self.log_tail()}")

    # -- life cycle ------------------------------------------------------------------------------

    def write_properties(self) -> None:
        text = "".join(f"{key}={value}\n" for key, value in self.properties.items())
        self.properties_path.write_text(text)

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        if self.is_running():
            raise BrokerError("broker already running")
        self.write_properties()
        self.starts += 1
        # kio imports hypothesis (installed for the tests), which builds a Unicode table in
        # ``.hypothesis/`` under the working directory: 1.2 s per start in a new folder, once here.
        env = dict(os.environ, PYTHONUNBUFFERED="1", HYPOTHESIS_STORAGE_DIRECTORY=str(REPO_ROOT / ".hypothesis"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "tidelog", "serve", str(self.properties_path)]
        with self.log_path.open("ab") as log:
            log.write(f"=== start #{self.starts}: port {self.port} ===\n".encode())
            log.flush()
            if self.reference_kafka:
                command = self._reference_kafka_command(log)
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.workdir, env=env,
            )
        self._wait_until_serving(timeout)
        return self

    def _reference_kafka_command(self, log: IO[bytes]) -> list[str]:
        java = ["java", "-Xmx512m", "-cp", f"{self.reference_kafka}/*"]
        if not (self.data_dir / "meta.properties").exists():
            cluster_id = "-"
            while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: a leading "-" reads as an option
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            subprocess.run(
                [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties_path)],
                stdout=log, stderr=log, check=True,
            )
        return [*java, "kafka.Kafka", str(self.properties_path)]

    def _wait_until_serving(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise self._error(f"broker exited with code {code} before serving on {self.bootstrap}")
            if api_versions_answered(self.host, self.port, timeout=1.0):
                return
            time.sleep(0.05)
        self.kill9()
        raise self._error(f"broker did not answer ApiVersions on {self.bootstrap} within {timeout:.0f} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send ``sig`` and wait for the exit; returns the exit code. A broker that does not exit in
        time is killed and BrokerError is raised."""
        if self.process is None:
            raise BrokerError("broker not started")
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                if not self.reference_kafka:  # tidelog prints every thread's stack on SIGUSR1: into the log
                    self.process.send_signal(signal.SIGUSR1)
                    time.sleep(1)
                self.kill9()
                error = f"broker did not exit within {timeout:.0f} s of signal {sig}"
                raise BrokerError(f"{error}\n--- {self.log_path} (last 200 lines) ---\n{self.log_tail(200)}") from None
        return int(self.process.returncode)

    def kill9(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> BrokerProcess:
        if self.is_running():
            self.stop(sig)
        return self.start(timeout)

    def close(self) -> None:
        """Make sure the process is gone (SIGTERM, then SIGKILL) and stop showing its log."""
        try:
            if self.is_running():
                try:
                    self.stop(timeout=10)
                except BrokerError:
                    pass
        finally:
            self.kill9()
            if self in BrokerProcess._in_use:
                BrokerProcess._in_use.remove(self)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _kraft_properties(host: str, port: int, controller_port: int) -> dict[str, str]:
    return {
        "process.roles": "broker,controller",
        "controller.quorum.voters": f"1@{host}:{controller_port}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return str(int(value.total_seconds() * 1000))
    return str(value)


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> T:
    """Poll ``predicate`` until it returns a truthy value, which is returned; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not reached within {timeout} s (last value: {result!r})")
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------------
# pytest: show broker logs on failure


class _FailureReport:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if not report.failed:
            return
        for broker in BrokerProcess._in_use:
            report.sections.append(
                (f"broker {broker.bootstrap} log: {broker.log_path} (last {LOG_TAIL_LINES} lines)", broker.log_tail())
            )


def register_failure_report(config: pytest.Config) -> None:
    """Add broker log tails to failing tests' reports. Safe to call from several fixtures."""
    name = "tidelog-broker-failure-report"
    if not config.pluginmanager.has_plugin(name):
        config.pluginmanager.register(_FailureReport(), name)


# Settings for brokers that serve consumer-group tests: no join delay, short sessions allowed, and a
# small __consumer_offsets so it loads quickly.
GROUP_TEST_BROKER: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "offsets.topic.num.partitions": 3,
}


def module_broker(fixture_name: str, overrides: Mapping[str, object]) -> Callable[..., Iterator[BrokerProcess]]:
    """A module-scoped fixture named ``fixture_name``: one broker with ``overrides`` for the module.

    Usage at module level: ``group_broker = module_broker("group_broker", GROUP_TEST_BROKER)``.
    """

    @pytest.fixture(scope="module", name=fixture_name)
    def fixture(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
        register_failure_report(pytestconfig)
        with BrokerProcess(tmp_path_factory.mktemp(fixture_name), overrides) as process:
            yield process

    return fixture


def stored_batches(broker: BrokerProcess, topic: str, partition: int = 0) -> list[tuple[int, int, int]]:
    """(base offset, record count, codec id) of every batch in the partition's segment files."""
    batches = []
    for segment in sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base_offset, length = struct.unpack_from(">qi", data, pos)
            if length <= 0:
                break  # preallocated tail
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            (count,) = struct.unpack_from(">i", data, pos + 57)
            batches.append((base_offset, count, attributes & 0x07))
            pos += 12 + length
    return batches
