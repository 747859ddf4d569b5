"""Run ``tidelog console`` as a subprocess, the way a user runs it, for integration tests.

``ConsoleProcess(workdir, bootstrap, overrides)`` picks a free port, starts the console with its output in
``console-PORT.log`` in ``workdir``, and ``start`` waits until ``/readyz`` answers 200 (the cluster
answered and the lag sampler finished a poll). Use it as a context manager: the process is stopped
(SIGTERM, then SIGKILL) on exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from helpers.broker_process import REPO_ROOT, free_port


class ConsoleProcess:
    def __init__(self, workdir: Path, bootstrap: str, overrides: Mapping[str, object] | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.bootstrap = bootstrap
        self.settings = {"console.listen.port": str(self.port), **{k: str(v) for k, v in (overrides or {}).items()}}
        self.log_path = self.workdir / f"console-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ConsoleProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1", HYPOTHESIS_STORAGE_DIRECTORY=str(REPO_ROOT / ".hypothesis"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "tidelog", "console", "--bootstrap-server", self.bootstrap]
        for key, value in self.settings.items():
            command += ["--override", f"{key}={value}"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            cwd=self.workdir, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"console exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"console not ready within {timeout} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> ConsoleProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
