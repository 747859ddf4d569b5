"""A clustered broker that cannot join says why and exits; it never hangs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from helpers.broker_process import BrokerProcess, free_port
from helpers.etcd_process import EtcdProcess


def _serve(workdir: Path, *overrides: str, timeout: float = 60) -> tuple[int, str, float]:
    args = [sys.executable, "-m", "tidelog", "serve", "--override", f"log.dirs={workdir / 'data'}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"]
    for item in overrides:
        args += ["--override", item]
    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    return done.returncode, done.stderr, time.monotonic() - started


def test_unreachable_etcd_fails_fast_with_the_endpoint_named(tmp_path: Path) -> None:
    port = free_port()
    code, stderr, took = _serve(tmp_path, f"metadata.store=etcd://127.0.0.1:{port}/t")
    assert code == 1
    assert "cannot join the cluster" in stderr and f"127.0.0.1:{port}" in stderr
    assert took < 20


def test_a_node_id_held_by_a_live_broker_is_refused_by_name(tmp_path: Path) -> None:
    etcd = EtcdProcess(tmp_path / "etcd").start()
    first = BrokerProcess(tmp_path / "first", {"node.id": 7, "metadata.store": etcd.store_url(),
                                                "broker.session.timeout.ms": 2000,
                                                "broker.heartbeat.interval.ms": 500})
    try:
        first.start()
        code, stderr, took = _serve(tmp_path / "second", "node.id=7", f"metadata.store={etcd.store_url()}",
                                    "broker.session.timeout.ms=2000", "broker.heartbeat.interval.ms=500")
        assert code == 1
        assert "node.id 7 is already registered" in stderr
        assert took < 30  # waited out one session (a previous life's lease), then gave up
        assert first.is_running()
    finally:
        first.close()
        etcd.close()
