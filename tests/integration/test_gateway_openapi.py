"""The gateway's OpenAPI document is served as checked in, and schemathesis fuzzes the running gateway
against it in bounded time: no 5xx, answers match the document, and nothing lands in the topic for a
rejected request (the fuzzed writes go to a topic only the fuzzer writes, and it holds exactly as
many records as the gateway answered ``written``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import KafkaError, TopicPartition

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import consumer, create_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess

OPENAPI = Path(__file__).resolve().parents[2] / "src" / "tidelog" / "gateway" / "openapi.json"
fuzz_broker = module_broker("fuzz_broker", GATEWAY_TEST_BROKER)


@pytest.fixture(scope="module")
def fuzzed_gateway(fuzz_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(tmp_path_factory.mktemp("fuzz"), fuzz_broker.bootstrap) as gateway:
        yield gateway


def test_served_document_is_the_checked_in_one(fuzzed_gateway: GatewayProcess) -> None:
    assert httpx.get(f"{fuzzed_gateway.url}/openapi.json").json() == json.loads(OPENAPI.read_text())


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_rejected_writes_land_nothing(
        fuzzed_gateway: GatewayProcess, fuzz_broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(fuzz_broker.bootstrap, "fuzzed")
    # Paths are fuzzed with the topic pinned: writes to other names are 404s, which tell us little.
    schema = json.loads(OPENAPI.read_text())
    for operation in (schema["paths"]["/v1/topics/{topic}/write"]["post"], schema["paths"]["/v1/topics/{topic}/sources"]["get"]):
        operation["parameters"][0]["schema"] = {"type": "string", "enum": [topic]}
    pinned = tmp_path / "openapi.json"
    pinned.write_text(json.dumps(schema))
    command = [sys.executable, "-m", "schemathesis.cli", "run", str(pinned), "--url", fuzzed_gateway.url,
               "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
               "response_schema_conformance", "--max-examples", os.environ.get("TIDELOG_FUZZ_EXAMPLES", "20"),
               "--seed", "18", "--request-timeout", "20"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    records = _records_in(fuzz_broker.bootstrap, topic)
    assert records == _written_by_gateway(fuzzed_gateway, topic)
    assert records > 0  # the fuzzer did get valid writes through


def _written_by_gateway(gateway: GatewayProcess, topic: str) -> int:
    """Records the gateway answered as written (its ``gateway_records_written_total``)."""
    match = re.search(rf'^gateway_records_written_total{{topic="{topic}"}} (\d+)',
                      httpx.get(f"{gateway.url}/metrics").text, re.M)
    return int(match.group(1)) if match else 0


def _records_in(bootstrap: str, topic: str) -> int:
    cons = consumer(bootstrap, {"isolation.level": "read_committed", "enable.partition.eof": True})
    cons.assign([TopicPartition(topic, 0, 0)])
    count = 0
    try:
        while True:
            message = cons.poll(5)
            assert message is not None
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF
                return count
            count += 1
    finally:
        cons.close()
