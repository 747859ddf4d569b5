"""Fixtures of the compat tier: Apache Kafka and tidelog, started once per session, same settings.

``reference_kafka`` installs Kafka's jars if needed (``kafka/install.sh``), formats a KRaft storage
directory and starts one combined broker+controller node; ``tidelog_broker`` starts tidelog with the
same broker settings. If Kafka cannot be installed or started, every test that needs it fails with
the reason: the tier never skips silently.

``compare(scenario)`` runs a scenario function (see ``compat_harness.scenario``) against both,
records the result for the report, and fails with a readable diff when a difference is neither
allowed nor a known bug (``allowed_differences.toml``); while a listed known bug reproduces, the
test is an expected failure, and it fails once the bug is gone so that its entry gets removed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from compat_harness import allowlist as allowlist_module
from compat_harness.kafka import KafkaUnavailable, ReferenceKafka, install_kafka, kafka_version
from compat_harness.report import DEFAULT_REPORT, REPORT
from compat_harness.scenario import Endpoint, Result, ScenarioFn, compare

from helpers.broker_process import REFERENCE_KAFKA_ENV, BrokerProcess, register_failure_report

# Settings both brokers get. Replication factors are 1 (one node); the group rebalance delay is 0 so
# group scenarios are not slowed down.
COMMON_CONFIG = {
    "node.id": "1",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}
# Settings only Kafka knows (tidelog would warn about them).
KAFKA_ONLY_CONFIG = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}

_SESSION_TOKEN = uuid.uuid4().hex[:6]


@pytest.fixture(scope="session")
def kafka_libs() -> Path:
    try:
        libs = install_kafka()
    except KafkaUnavailable as exc:
        pytest.fail(f"Apache Kafka is needed by the compat tier and could not be installed: {exc}")
    REPORT.kafka_version = kafka_version(libs)
    return libs


@pytest.fixture(scope="session")
def reference_kafka(kafka_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceKafka]:
    kafka = ReferenceKafka(kafka_libs, tmp_path_factory.mktemp("reference-kafka"),
                           {**COMMON_CONFIG, **KAFKA_ONLY_CONFIG})
    try:
        kafka.start()
    except KafkaUnavailable as exc:
        kafka.stop()
        pytest.fail(f"Apache Kafka did not start: {exc}")
    yield kafka
    kafka.stop()


@pytest.fixture(scope="session")
def tidelog_broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    # BrokerProcess runs Kafka instead of tidelog when this variable is set; here we want tidelog.
    saved = os.environ.pop(REFERENCE_KAFKA_ENV, None)
    try:
        broker = BrokerProcess(tmp_path_factory.mktemp("compat-tidelog"), COMMON_CONFIG)
    finally:
        if saved is not None:
            os.environ[REFERENCE_KAFKA_ENV] = saved
    broker.start()
    yield broker
    broker.close()


@pytest.fixture(scope="session")
def allowlist() -> allowlist_module.AllowList:
    return allowlist_module.load()


@pytest.fixture
def compare_with_kafka(
    reference_kafka: ReferenceKafka, tidelog_broker: BrokerProcess, allowlist: allowlist_module.AllowList,
) -> Callable[[ScenarioFn], Result]:
    kafka = Endpoint("kafka", reference_kafka.host, reference_kafka.port)
    tidelog = Endpoint("tidelog", tidelog_broker.host, tidelog_broker.port)

    def run(scenario: ScenarioFn) -> Result:
        name = scenario.__name__.removeprefix("scenario_")
        prefix = f"c{_SESSION_TOKEN}-{name.replace('_', '-')}"
        result = compare(name, scenario, kafka, tidelog, allowlist, prefix)
        REPORT.add(result)
        if result.status == "different":
            pytest.fail(result.failure_text(), pytrace=False)
        if result.status == "known bug":
            findings = ", ".join(sorted({entry.finding or "" for _, entry in result.known}))
            pytest.xfail(f"known tidelog bug {findings} (docs/dev/compat-findings.md)")
        return result

    return run


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Written where the scenarios ran. Under pytest-xdist (scripts/test) each worker has some of them
    # and writes its own part (compat-report-gw0.md, ...); `pytest tests/compat` writes the whole report.
    if not REPORT.results and not REPORT.extra:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "COMPAT_REPORT" not in os.environ:
        os.environ["COMPAT_REPORT"] = str(DEFAULT_REPORT.with_name(f"compat-report-{worker}.md"))
    path = REPORT.write(allowlist_module.load())
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("-", "compat report")
        reporter.write_line(f"{REPORT.summary_line()} (report: {path})")
