"""Do idle connections slow a producing client? Figures, not pass/fail.

    python bench/idle_connections.py [--bootstrap HOST:PORT] [--idle 1000] [--messages 1000000] [--size 100]

Without ``--bootstrap`` the script starts a tidelog broker itself (``python -m tidelog serve`` on a
free port, data in a temporary folder) and stops it at the end. It measures confluent-kafka produce
throughput (acks=1, linger.ms=5, messages of ``--size`` bytes to a 1-partition topic, best of
``--runs``) first with no other connection, then with ``--idle`` connections held open, each of which
has completed an ApiVersions exchange and then says nothing. It prints both figures and the slowdown.
RLIMIT_NOFILE is raised to its hard limit first (the broker started here inherits it).
"""

from __future__ import annotations

import argparse
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    properties = workdir / "server.properties"
    properties.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={workdir / 'data'}\nnode.id=1\n")
    log = (workdir / "broker.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "tidelog", "serve", str(properties)], stdout=log, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"broker exited with {process.returncode}; see {workdir / 'broker.log'}")
        try:
            open_idle_connection("127.0.0.1", port).close()
            return process, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("broker did not start within 30 s")


def open_idle_connection(host: str, port: int) -> socket.socket:
    """A connection that has had its ApiVersions answered and then stays quiet."""
    sock = socket.create_connection((host, port), timeout=10)
    sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    _recv_exactly(sock, size)
    return sock


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return bytes(data)


def produce_rate(bootstrap: str, topic: str, messages: int, size: int) -> float:
    """Messages per second for ``messages`` messages, from the first produce to the last delivery."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    payload = b"x" * size
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining:
        raise SystemExit(f"{remaining} messages not delivered")
    return messages / elapsed


def best_rate(bootstrap: str, topic: str, args: argparse.Namespace) -> float:
    return max(produce_rate(bootstrap, topic, args.messages, args.size) for _ in range(args.runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="an already running broker (default: start tidelog here)")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    limit = raise_fd_limit(args.idle + 256)
    if limit < args.idle + 64:
        raise SystemExit(f"RLIMIT_NOFILE is {limit}: too low for {args.idle} idle connections")

    process = None
    with tempfile.TemporaryDirectory(prefix="tidelog-idle-bench-") as tmp:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            process, bootstrap = start_broker(Path(tmp))
        host, port = bootstrap.rsplit(":", 1)
        idle: list[socket.socket] = []
        try:
            topic = f"idle-bench-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            del admin  # librdkafka handles must be gone before the broker stops, or they log reconnects

            alone = best_rate(bootstrap, topic, args)
            opened = time.perf_counter()
            idle = [open_idle_connection(host, int(port)) for _ in range(args.idle)]
            opening = time.perf_counter() - opened
            crowded = best_rate(bootstrap, topic, args)
            for sock in idle:  # all still open: the broker did not drop them meanwhile
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        raise SystemExit("the broker closed an idle connection during the run")
                except BlockingIOError:
                    pass
        finally:
            for sock in idle:
                sock.close()
            if process is not None:
                process.terminate()
                process.wait(30)

    slowdown = (alone - crowded) / alone * 100
    print(f"messages per run         {args.messages} x {args.size} B, best of {args.runs}")
    print(f"0 idle connections       {alone:12,.0f} msg/s  {alone * args.size / 1e6:7.2f} MB/s")
    print(f"{args.idle} idle connections  {crowded:12,.0f} msg/s  {crowded * args.size / 1e6:7.2f} MB/s"
          f"  (opened in {opening:.2f} s)")
    print(f"slowdown                 {slowdown:+.1f} %")


if __name__ == "__main__":
    main()
