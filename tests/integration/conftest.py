"""Fixtures of the integration tier: one broker subprocess shared by the session, fresh topics per test.

Most tests share ``broker`` (started once, about a second) and isolate themselves with topic names
made unique per test (``topic``). Tests that need a broker configured differently start their own
with ``BrokerProcess`` in a ``tmp_path``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping

import pytest

from helpers.broker_process import BrokerProcess, register_failure_report
from helpers.clients import create_topic, unique_topic

SESSION_BROKER_CONFIG = {
    "auto.create.topics.enable": "true",
    "num.partitions": "1",
}


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("session-broker"), SESSION_BROKER_CONFIG)
    process.start()
    yield process
    process.close()


@pytest.fixture(scope="session")
def bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def topic(bootstrap: str) -> str:
    """A topic name no other test uses, with one partition created."""
    return create_topic(bootstrap, unique_topic())


@pytest.fixture
def new_topic(bootstrap: str) -> Callable[..., str]:
    """``new_topic(partitions=1, config=None)``: create a topic with a unique name and return it."""

    def make(partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        return create_topic(bootstrap, unique_topic(), partitions, config)

    return make


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: run `scripts/bootstrap test` (it installs the Debian package)")
    return path
