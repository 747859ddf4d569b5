"""Run the ``tidelog`` command in process, capturing what it prints (for the CLI's tests)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest

from tidelog.cli.main import main


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    """``tidelog ARGV``: exit code and captured output; the root logger is restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        code = main(list(argv))
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)
