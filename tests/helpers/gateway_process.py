"""Run ``tidelog gateway`` as a subprocess, the way a user runs it, for integration and system tests.

``GatewayProcess(workdir, bootstrap, overrides)`` picks a free port, and by default a group id and a
state topic of its own (so that tests sharing a broker never share gateway state); ``start`` waits
until ``/readyz`` answers 200 (the instance is in its group and every shard it owns is loaded).
``kill9`` and ``restart`` keep port, group and instance id, so a restarted gateway is the same
instance to the cluster. Its output goes to ``gateway.log`` in ``workdir``, shown when a test fails
through ``log_tail``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from helpers.broker_process import REPO_ROOT, free_port

# Brokers that serve gateway tests: a new group's first rebalance at once (Kafka's default waits 3 s),
# short sessions allowed, and no topic created by a metadata request for a missing one.
GATEWAY_TEST_BROKER: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "auto.create.topics.enable": False,
}


class GatewayError(Exception):
    pass


class GatewayProcess:
    def __init__(self, workdir: Path, bootstrap: str, overrides: Mapping[str, object] | None = None,
                 *, group: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.bootstrap = bootstrap
        token = uuid.uuid4().hex[:8]
        group = group or f"gw-{token}"
        self.settings: dict[str, str] = {
            "gateway.listen.port": str(self.port),
            "gateway.group.id": group,
            "gateway.state.topic": f"__gwstate-{group}",
            "gateway.state.partitions": "4",
            "gateway.instance.id": f"{group}-{self.port}",
            "gateway.session.timeout.ms": "6000",
        }
        self.settings.update({k: str(v) for k, v in (overrides or {}).items()})
        self.log_path = self.workdir / f"gateway-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        scheme = "https" if "gateway.ssl.certfile" in self.settings else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "tidelog", "gateway", "--bootstrap-server", self.bootstrap]
        for key, value in self.settings.items():
            command += ["--override", f"{key}={value}"]
        return command

    def start(self, timeout: float = 30.0, *, wait_ready: bool = True, **client: Any) -> GatewayProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1", HYPOTHESIS_STORAGE_DIRECTORY=str(REPO_ROOT / ".hypothesis"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), env.get("PYTHONPATH")]))
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            cwd=self.workdir, env=env)
        if wait_ready:
            try:
                self.wait_ready(timeout, **client)
            except BaseException:
                self.kill9()
                raise
        return self

    def wait_ready(self, timeout: float = 30.0, **client: Any) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise GatewayError(f"gateway exited with {self.process.returncode}\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1, **client).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise GatewayError(f"gateway not ready within {timeout} s\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def kill9(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
                raise GatewayError(f"gateway did not stop within {timeout} s\n{self.log_tail()}") from None
        return int(self.process.returncode)

    def restart(self, **client: Any) -> GatewayProcess:
        self.kill9()
        return self.start(**client)

    def close(self) -> None:
        try:
            self.stop(timeout=10)
        except GatewayError:
            pass
        self.kill9()

    def __enter__(self) -> GatewayProcess:
        return self if self.process is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json(url: str, topic: str, source_id: str, chunks: list[tuple[int, list[str]]], **kwargs: Any) -> httpx.Response:
    """POST chunks ``[(seqno, [value, ...]), ...]`` of one source as JSON."""
    body = {"sourceId": source_id, "chunks": [{"seqno": s, "records": [{"value": v} for v in values]}
                                               for s, values in chunks]}
    return httpx.post(f"{url}/v1/topics/{topic}/write", json=body, timeout=30, **kwargs)
