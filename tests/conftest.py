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
# at the end, so that a green run still shows what went wrong (docs/dev/testing.md).
_RERUN_REPORTS: list[pytest.TestReport] = []
RERUN_REPORT_CHARS = 4000


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun" and report.longrepr is not None:
        _RERUN_REPORTS.append(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for report in _RERUN_REPORTS:
        terminalreporter.write_sep("-", f"first failure of {report.nodeid} (then rerun)")
        text = report.longreprtext
        terminalreporter.write_line(text if len(text) <= RERUN_REPORT_CHARS else "[...]\n" + text[-RERUN_REPORT_CHARS:])
