"""``tidelog dev-cluster``: etcd and brokers from one command, a real cluster to clients, gone on Ctrl-C."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from helpers.broker_process import free_port


def _free_pair() -> int:
    """A port p with p + 1 free too (dev-cluster uses consecutive ports)."""
    while True:
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def test_dev_cluster_serves_a_replicated_topic_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    base, etcd_port = _free_pair(), _free_pair()
    while abs(base - etcd_port) < 2:
        etcd_port = _free_pair()
    command = [sys.executable, "-m", "tidelog", "dev-cluster", "--brokers", "2", "--dir", str(tmp_path / "dc"),
               "--base-port", str(base), "--etcd-port", str(etcd_port),
               "--override", "broker.session.timeout.ms=3000", "--override", "broker.heartbeat.interval.ms=500"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        try:
            _drive(process, base)
        finally:
            if process.poll() is None:
                process.kill()


def _drive(process: subprocess.Popen[str], base: int) -> None:
    lines: list[str] = []
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if line.startswith("Ctrl-C") or not line:
            break
    assert lines[-1].startswith("Ctrl-C"), "".join(lines)
    bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
    assert f"bootstrap servers: {bootstrap}" in "".join(lines)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("tour", 1, 2)])["tour"].result(15)
    partition = admin.list_topics("tour", timeout=10).topics["tour"].partitions[0]
    assert sorted(partition.replicas) == [1, 2]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce("tour", value=b"hello cluster")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tour"})
    consumer.assign([TopicPartition("tour", 0, 0)])
    message = None
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            break
    consumer.close()
    assert message is not None and message.value() == b"hello cluster"
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 0
    assert "stopping the brokers" in process.stdout.read()
