"""The Apache Kafka Java client, unmodified, against tidelog (and against Kafka, to prove each check).

``java/CompatClientCheck.java`` is compiled with javac against the kafka-clients jar that
``kafka/install.sh`` installed, once per session, and run once per check and broker. Each check
runs against Apache Kafka first: a check that fails there is a broken check, not a tidelog bug.
The group check runs against tidelog only when tidelog advertises JoinGroup; until consumer groups
are served it is skipped with that reason.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from compat_harness.kafka import ReferenceKafka
from compat_harness.report import REPORT
from compat_harness.scenario import Broker, Endpoint
from compat_harness.steps import create_topic
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from helpers.broker_process import BrokerProcess
from helpers.raw_client import RawClient

SOURCE = Path(__file__).resolve().parent / "java" / "CompatClientCheck.java"
JOIN_GROUP = 11
CHECK_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def java_classes(kafka_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("java-classes")
    done = subprocess.run(
        ["javac", "-d", str(out), "-cp", f"{kafka_libs}/*", str(SOURCE)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"javac failed on {SOURCE.name}:\n{done.stdout}\n{done.stderr}")
    return out


def run_check(classes: Path, libs: Path, host: str, port: int, check: str) -> subprocess.CompletedProcess[str]:
    topic = f"java-{check}-{uuid.uuid4().hex[:8]}"
    bootstrap = f"{host}:{port}"
    if check in NEEDS_TOPIC:
        broker = Broker(Endpoint("broker", host, port), topic)
        try:
            create_topic(broker, topic, 2, label=None)
        finally:
            broker.close()
    return subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{classes}:{libs}/*",
         "CompatClientCheck", bootstrap, check, topic],
        capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False,
    )


def advertises(broker: BrokerProcess, api_key: int) -> bool:
    with RawClient(broker.host, broker.port) as client:
        response = client.call(ApiVersionsRequest())
    return any(entry.api_key == api_key for entry in response.api_keys)


def _verdict(done: subprocess.CompletedProcess[str]) -> tuple[bool, str]:
    lines = done.stdout.strip().splitlines()
    passed = done.returncode == 0 and bool(lines) and lines[-1].startswith("DONE")
    failure = [line for line in done.stderr.splitlines() if "AssertionError" in line or "Exception" in line]
    detail = (failure[0] if failure else (lines[-1] if lines else "no output"))
    return passed, detail.replace("|", "/")[:200]


CHECKS = ["cluster", "admin", "produce-consume", "group", "static-group"]
NEEDS_TOPIC = {"produce-consume", "group", "static-group"}
# Known tidelog bugs (docs/dev/compat-findings.md) that make a check fail against tidelog: the test
# is a strict expected failure until they are fixed, then fails so that the entry is removed here.
KNOWN_BUGS: dict[str, str] = {}


def _tidelog_params() -> list[object]:
    return [
        pytest.param(check, marks=pytest.mark.xfail(
            strict=True, reason=f"known tidelog bug {KNOWN_BUGS[check]} (docs/dev/compat-findings.md)",
        )) if check in KNOWN_BUGS else check
        for check in CHECKS
    ]


@pytest.mark.parametrize("check", CHECKS)
def test_java_client_check_passes_against_kafka(
    check: str, java_classes: Path, kafka_libs: Path, reference_kafka: ReferenceKafka,
) -> None:
    done = run_check(java_classes, kafka_libs, reference_kafka.host, reference_kafka.port, check)
    passed, detail = _verdict(done)
    REPORT.add_check(f"java {check} vs Kafka", "pass" if passed else "FAIL", detail)
    assert passed, f"the Java check {check!r} fails against Apache Kafka itself:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("check", _tidelog_params())
def test_java_client_check_passes_against_tidelog(
    check: str, java_classes: Path, kafka_libs: Path, tidelog_broker: BrokerProcess,
) -> None:
    if check == "group" and not advertises(tidelog_broker, JOIN_GROUP):
        REPORT.add_check(f"java {check} vs tidelog", "skipped", "tidelog does not advertise JoinGroup yet")
        pytest.skip("tidelog does not advertise JoinGroup (11): consumer groups are not served yet")
    done = run_check(java_classes, kafka_libs, tidelog_broker.host, tidelog_broker.port, check)
    passed, detail = _verdict(done)
    known = KNOWN_BUGS.get(check)
    outcome = "pass" if passed else (f"fails: known bug {known}" if known else "FAIL")
    REPORT.add_check(f"java {check} vs tidelog", outcome, detail)
    assert passed, f"the Java client check {check!r} fails against tidelog:\n{done.stdout}\n{done.stderr}"
