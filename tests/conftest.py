"""Shared pytest configuration, and the fixtures every tier uses."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from helpers.broker_process import BrokerProcess, register_failure_report

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100)
settings.load_profile("ci")


@pytest.fixture
def fresh_broker(tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[Callable[..., BrokerProcess]]:
    """Start a broker of one's own: ``fresh_broker({"key": "value"})``. Stopped at teardown."""
    register_failure_report(pytestconfig)
    started: list[BrokerProcess] = []

    def start(overrides: Mapping[str, object] | None = None) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"broker-{len(started)}", overrides)
        started.append(process)
        return process.start()

    yield start
    for process in started:
        process.close()



# -- reruns (scripts/test: --reruns 1): the first failure of a test that passed on its rerun is printed
# at the end, so that a green run still shows what went wrong (docs/dev/testing.md). Every failed or
# rerun attempt also gets one "recap:" line (outcome, test, first error line), which scripts/test
# prints last of all: CI shows only a run's tail, and a rerun's error can hide the first one's.
_RERUN_REPORTS: list[pytest.TestReport] = []
_RECAP: list[str] = []
RERUN_REPORT_CHARS = 4000
RECAP_LINE_CHARS = 400


def first_error_line(text: str) -> str:
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = errors or [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "(no report)"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun" and report.longrepr is not None:
        _RERUN_REPORTS.append(report)
    if report.outcome in ("rerun", "failed") and report.longrepr is not None:
        outcome = "RERUN" if report.outcome == "rerun" else "FAILED"
        where = "" if report.when == "call" else f" ({report.when})"
        line = f"recap: {outcome} {report.nodeid}{where}: {first_error_line(report.longreprtext)}"
        _RECAP.append(line[:RECAP_LINE_CHARS])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for report in _RERUN_REPORTS:
        terminalreporter.write_sep("-", f"first failure of {report.nodeid} (then rerun)")
        text = report.longreprtext
        terminalreporter.write_line(text if len(text) <= RERUN_REPORT_CHARS else "[...]\n" + text[-RERUN_REPORT_CHARS:])
    for line in _RECAP:
        terminalreporter.write_line(line)
