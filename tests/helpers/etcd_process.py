"""Run real etcd servers (Debian's ``etcd-server``, 3.4) on free loopback ports for tests.

``EtcdProcess`` is one member with its data in its own folder, its output appended to ``etcd.log``
there; ``start`` waits until ``/health`` on the client URL says healthy (a leader is elected).
``stop`` (SIGTERM), ``kill9`` and ``start`` again keep the ports and the data, so a restarted etcd
has the same keys and leases. ``EtcdCluster`` starts three members that form one cluster.
``SilentLink`` relays to one member and can cut the link silently (a partition, not a refusal).

Timing flags: a 50 ms raft heartbeat and a 500 ms election timeout make elections fast and let etcd
grant leases as short as 1 s (its floor is 1.5 election timeouts), so tests can use 2-3 s sessions.
``scripts/bootstrap test`` installs etcd.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from helpers.broker_process import free_port

HOST = "127.0.0.1"


class EtcdError(Exception):
    """etcd did not start or stop as expected; the message ends with its log's tail."""


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise EtcdError("etcd is not installed: run scripts/bootstrap test (installs Debian's etcd-server)")
    return path


class EtcdProcess:
    def __init__(self, workdir: Path, name: str = "etcd0") -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.client_port = free_port(HOST)
        self.peer_port = free_port(HOST)
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "etcd.log"
        self.initial_cluster = f"{name}={self.peer_url}"
        self.cluster_token = f"tidelog-test-{name}-{self.client_port}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"

    def store_url(self, prefix: str = "tidelog") -> str:
        return f"etcd://{self.endpoint}/{prefix}"

    def command(self) -> list[str]:
        return [
            etcd_binary(), "--name", self.name, "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster, "--initial-cluster-token", self.cluster_token,
            "--initial-cluster-state", "new",
            "--heartbeat-interval", "50", "--election-timeout", "500",
            "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
        ]

    def launch(self) -> EtcdProcess:
        """Start the process without waiting (members of a cluster wait for each other)."""
        if self.is_running():
            return self
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        return self

    def start(self, timeout: float = 15.0) -> EtcdProcess:
        self.launch()
        self.wait_healthy(timeout)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=1.0) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def wait_healthy(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise self._error(f"etcd exited with code {self.process.returncode}")
            if self.healthy():
                return
            time.sleep(0.05)
        raise self._error(f"etcd not healthy within {timeout} s")

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if not self.is_running():
            return
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def close(self) -> None:
        self.kill9()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _error(self, message: str) -> EtcdError:
        return EtcdError(f"{self.name}: {message}\n--- {self.log_path} ---\n{self.log_tail()}")


class EtcdCluster:
    """Three (or ``size``) etcd members on loopback forming one cluster."""

    def __init__(self, workdir: Path, size: int = 3) -> None:
        self.members = [EtcdProcess(Path(workdir) / f"etcd{i}", f"etcd{i}") for i in range(size)]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        token = f"tidelog-test-cluster-{self.members[0].client_port}"
        for member in self.members:
            member.initial_cluster = initial
            member.cluster_token = token

    @property
    def endpoints(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    def store_url(self, prefix: str = "tidelog") -> str:
        return f"etcd://{self.endpoints}/{prefix}"

    def start(self, timeout: float = 20.0) -> EtcdCluster:
        for member in self.members:
            member.launch()
        for member in self.members:
            member.wait_healthy(timeout)
        return self

    def close(self) -> None:
        for member in self.members:
            member.close()


class SilentLink:
    """A TCP relay to one etcd member whose link can be cut silently, like a network partition.

    ``cut()`` stops carrying bytes in both directions without closing anything: connections stay
    open and nothing arrives (new connections are accepted and then hear nothing), as when packets
    are lost. ``heal()`` carries on with the bytes held back, so no stream is corrupted.
    ``answer_late(seconds)`` holds every byte from etcd back that long (in order), as a loaded etcd
    or a slow link does; requests still reach etcd at once.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server((HOST, 0))
        self.port = int(self._listener.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._answer_delay_s = 0.0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    def cut(self) -> None:
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def answer_late(self, seconds: float) -> None:
        self._answer_delay_s = seconds

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._flowing.wait()
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._sockets += [client, upstream]
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=self._pump_late, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                if self._closed:
                    break
                sink.sendall(data)
        except OSError:
            pass
        _shut(source, sink)

    def _pump_late(self, source: socket.socket, sink: socket.socket) -> None:
        """Like _pump, each chunk sent ``answer_late`` seconds after it arrived (FIFO, never reordered)."""
        held: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def deliver() -> None:
            while (item := held.get()) and item[1]:
                due, data = item
                time.sleep(max(0.0, due - time.monotonic()))
                self._flowing.wait()
                try:
                    sink.sendall(data)
                except OSError:
                    break
            _shut(source, sink)

        threading.Thread(target=deliver, daemon=True).start()
        try:
            while data := source.recv(65536):
                if self._closed:
                    break
                held.put((time.monotonic() + self._answer_delay_s, data))
        except OSError:
            pass
        held.put((0.0, b""))

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()


def _shut(*socks: socket.socket) -> None:
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
