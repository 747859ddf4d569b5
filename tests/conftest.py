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

