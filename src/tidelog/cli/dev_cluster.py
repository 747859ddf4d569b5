"""``tidelog dev-cluster``: etcd and N brokers on this machine, for trying a cluster out and for tests.

Everything lives under one folder (``--dir``, default ``./dev-cluster``)::

    etcd/            etcd's data (member dir) and etcd.log
    broker-<N>/      broker N's log dir; broker-<N>.log beside it holds what it printed

Broker N listens on ``127.0.0.1:<base-port + N - 1>``, has ``node.id=N`` and ``broker.rack=rack-<N>``
and finds the others through ``metadata.store=etcd://127.0.0.1:<etcd-port>/tidelog``. Each is an ordinary
``tidelog serve`` process. Ctrl-C (or SIGTERM) stops the brokers with SIGTERM (a controlled shutdown
each), then etcd. Run it again on the same folder and the cluster comes back with its data.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from tidelog.cli.common import CliError

HOST = "127.0.0.1"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "dev-cluster",
        help="run etcd and several brokers locally (a cluster to try)",
        description="Start etcd and --brokers brokers on loopback ports, data under --dir; Ctrl-C stops them all.",
        epilog="examples:\n  tidelog dev-cluster --brokers 3\n"
        "  tidelog dev-cluster --brokers 5 --dir /tmp/five --override default.replication.factor=3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument("--dir", default="dev-cluster", help="folder for etcd's and the brokers' data (default ./dev-cluster)")
    parser.add_argument("--base-port", type=int, default=9092, help="port of broker 1; broker N gets base + N - 1")
    parser.add_argument("--etcd-port", type=int, default=2379, help="etcd's client port (its peer port is the next one)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every broker (repeatable)")
    parser.set_defaults(func=dev_cluster_command)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _wait_for(check: Any, what: str, timeout: float, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise CliError(f"{what} exited with code {process.returncode}; see {log_path}")
        if check():
            return
        time.sleep(0.1)
    raise CliError(f"{what} did not come up within {timeout:g} s; see {log_path}")


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=1) as response:
            return b'"true"' in response.read()
    except OSError:
        return False


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _brokers_registered(bootstrap: str, count: int) -> bool:
    """Every broker is in the cluster's metadata (registered in etcd), as a client will see it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
    except KafkaException:
        return False
    return len(metadata.brokers) >= count


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when dev-cluster itself dies, even by SIGKILL (Linux
    PR_SET_PDEATHSIG), so no broker or etcd outlives it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start_etcd(folder: Path, port: int) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    binary = shutil.which("etcd")
    if binary is None:
        raise CliError("etcd is not installed: apt-get install etcd-server (scripts/bootstrap test installs it)")
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "etcd.log", "ab")  # noqa: SIM115 (closed when the cluster stops)
    peer = port + 1
    command = [
        binary, "--name", "dev", "--data-dir", str(folder / "data"),
        "--listen-client-urls", f"http://{HOST}:{port}", "--advertise-client-urls", f"http://{HOST}:{port}",
        "--listen-peer-urls", f"http://{HOST}:{peer}", "--initial-advertise-peer-urls", f"http://{HOST}:{peer}",
        "--initial-cluster", f"dev=http://{HOST}:{peer}",
    ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=_die_with_parent)
    _wait_for(lambda: _etcd_healthy(port), "etcd", 30, process, folder / "etcd.log")
    return process, log


def _start_broker(root: Path, node: int, port: int, store: str, overrides: list[str]) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    data = root / f"broker-{node}"
    log_path = root / f"broker-{node}.log"
    log = open(log_path, "ab")  # noqa: SIM115 (closed when the cluster stops)
    settings = [
        f"node.id={node}", f"listeners=PLAINTEXT://{HOST}:{port}", f"log.dirs={data}", f"metadata.store={store}",
        f"broker.rack=rack-{node}", *overrides,
    ]
    command = [sys.executable, "-m", "tidelog", "serve", *(arg for s in settings for arg in ("--override", s))]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=_die_with_parent)
    return process, log


def _stop(processes: list[tuple[str, subprocess.Popen[bytes]]], timeout: float = 30) -> None:
    for _, process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for name, process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"{name} did not stop within {timeout:g} s: killed", file=sys.stderr)
            process.kill()


def dev_cluster_command(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1", 2)
    root = Path(args.dir).resolve()
    ports = [args.base_port + i for i in range(args.brokers)]
    busy = [p for p in [args.etcd_port, args.etcd_port + 1, *ports] if not _port_free(p)]
    if busy:
        raise CliError(f"port(s) {', '.join(map(str, busy))} already in use: pick --base-port / --etcd-port")
    root.mkdir(parents=True, exist_ok=True)
    stopping = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    etcd, etcd_log = _start_etcd(root / "etcd", args.etcd_port)
    store = f"etcd://{HOST}:{args.etcd_port}/tidelog"
    brokers: list[tuple[str, subprocess.Popen[bytes]]] = []
    logs = [etcd_log]
    try:
        for node, port in enumerate(ports, start=1):
            process, log = _start_broker(root, node, port, store, args.override)
            brokers.append((f"broker {node}", process))
            logs.append(log)
        for (name, process), port in zip(brokers, ports, strict=True):
            node = int(name.split()[1])
            _wait_for(lambda port=port: _accepts(port), name, 60, process, root / f"broker-{node}.log")
        bootstrap = ",".join(f"{HOST}:{p}" for p in ports)
        # Listening is not yet registered: a replicated topic created now could find one broker only.
        name, process = brokers[0]
        _wait_for(lambda: _brokers_registered(bootstrap, len(ports)), "the brokers' registrations", 60, process,
                  root / "broker-1.log")
        print(f"etcd      {HOST}:{args.etcd_port}  data {root / 'etcd'}")
        for node, port in enumerate(ports, start=1):
            print(f"broker {node}  {HOST}:{port}  rack rack-{node}  log {root / f'broker-{node}.log'}")
        print(f"bootstrap servers: {bootstrap}")
        print("Ctrl-C stops the cluster.", flush=True)
        while not stopping:
            for name, process in brokers:
                if process.returncode is None and process.poll() is not None:
                    print(f"{name} exited with code {process.returncode}", file=sys.stderr, flush=True)
            time.sleep(0.2)
        print("stopping the brokers (controlled shutdown), then etcd", flush=True)
        return 0
    finally:
        _stop(brokers)
        _stop([("etcd", etcd)])
        for log in logs:
            log.close()
