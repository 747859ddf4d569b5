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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (scripts/test runs the suite on several workers).

    A file's tests stay together on one worker, so its module-scoped brokers and clusters start once;
    every test of the shared reference Apache Kafka (the compat tier's ``reference_kafka``) is in one
    group, so that Kafka starts once and the compat report is written whole (the compat files that
    start Kafka nodes of their own are groups of their own). A test may name its own group with
    ``@pytest.mark.xdist_group``."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        uses_reference = "reference_kafka" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("compat" if uses_reference else item.path.stem))
