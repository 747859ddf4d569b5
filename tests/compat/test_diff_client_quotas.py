"""Client quotas against Apache Kafka: DescribeClientQuotas and AlterClientQuotas answers and errors
compared field by field, and Kafka's own kafka-configs.sh (``kafka.admin.ConfigCommand`` from the
installed jars) altering, describing and deleting quotas on tidelog.

The session's brokers are shared with other scenarios, so every scenario names its entities after
its own prefix and removes what it set. Kafka lists an entity's parts in its own (hash) order, so
describe answers are recorded with the parts sorted.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest

from helpers.broker_process import BrokerProcess
from helpers.raw_client import RawClient
from tidelog.protocol.apis import ApiKey

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def _alter(b: Broker, label: str, entity: dict[str, str | None], ops: dict[str, float | None], version: int = 1,
           validate_only: bool = False) -> None:
    b.call(label, request(ApiKey.ALTER_CLIENT_QUOTAS, version, validate_only=validate_only, entries=[{
        "entity": [{"entity_type": k, "entity_name": v} for k, v in entity.items()],
        "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()],
    }]))


def _describe(b: Broker, label: str, components: list[tuple[str, int, str | None]], strict: bool = True,
              present: bool | None = None) -> None:
    """Record a DescribeClientQuotas answer. With ``present``, ask again (for up to 10 s) until
    entries are there (True) or gone (False): Kafka answers from the broker's copy of the metadata
    log, which can lag the controller's commit that answered the alteration."""
    deadline = time.monotonic() + 10
    while True:
        answer = b.quiet(request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, strict=strict, components=[
            {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]))
        if present is None or bool(answer.entries) == present or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    entries = None if answer.entries is None else sorted(
        (sorted((e.entity_type, e.entity_name or "<default>") for e in entry.entity),
         sorted((v.key, v.value) for v in entry.values))
        for entry in answer.entries
    )
    b.note(label, {"error_code": int(answer.error_code), "error_message": answer.error_message, "entries": entries})


def scenario_client_quotas_alter_and_describe(b: Broker) -> None:
    """Set quotas on a user, a user with the default client, a client id and an ip; describe them
    exactly, by default, by any name; validate_only; then remove them all."""
    user, client = b.topic("-u"), b.topic("-c")
    _alter(b, "user", {"user": user}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048})
    _alter(b, "user + default client", {"user": user, "client-id": None}, {"request_percentage": 12.5})
    _alter(b, "client", {"client-id": client}, {"controller_mutation_rate": 3})
    _alter(b, "ip", {"ip": "10.11.12.13"}, {"connection_creation_rate": 7})
    _alter(b, "validate only", {"client-id": client}, {"producer_byte_rate": 99}, validate_only=True)
    _alter(b, "same value again", {"user": user}, {"producer_byte_rate": 1024}, version=0)
    _describe(b, "exact user", [("user", EXACT, user)], present=True)
    _describe(b, "user, not strict", [("user", EXACT, user)], strict=False)
    _describe(b, "user and default client", [("user", EXACT, user), ("client-id", DEFAULT, None)], present=True)
    _describe(b, "exact client", [("client-id", EXACT, client)], present=True)
    _describe(b, "exact ip", [("ip", EXACT, "10.11.12.13")], present=True)
    _alter(b, "remove user keys", {"user": user}, {"producer_byte_rate": None, "consumer_byte_rate": None})
    _alter(b, "remove absent key", {"user": user}, {"producer_byte_rate": None})
    _alter(b, "remove user + default client", {"user": user, "client-id": None}, {"request_percentage": None})
    _alter(b, "remove client", {"client-id": client}, {"controller_mutation_rate": None})
    _alter(b, "remove ip", {"ip": "10.11.12.13"}, {"connection_creation_rate": None})
    _describe(b, "user after removal", [("user", EXACT, user)], strict=False, present=False)


def scenario_client_quotas_bad_alterations(b: Broker) -> None:
    """AlterClientQuotas refusals: values out of range, unknown keys and entity types, bad combinations."""
    user = b.topic("-bad")
    cases: list[tuple[str, dict[str, str | None], dict[str, float | None]]] = [
        ("negative", {"user": user}, {"producer_byte_rate": -1}),
        ("zero", {"user": user}, {"consumer_byte_rate": 0}),
        ("fraction of a long", {"user": user}, {"producer_byte_rate": 1.5}),
        ("too large for a long", {"user": user}, {"producer_byte_rate": 1e20}),
        ("fractional percentage", {"user": user}, {"request_percentage": 0.5}),
        ("unknown key", {"user": user}, {"no_such_rate": 1}),
        ("ip key on a user", {"user": user}, {"connection_creation_rate": 1}),
        ("user key on an ip", {"ip": "10.1.1.1"}, {"producer_byte_rate": 1}),
        ("unknown entity type", {"group": user}, {"producer_byte_rate": 1}),
        ("ip with user", {"ip": "10.1.1.1", "user": user}, {"connection_creation_rate": 1}),
        ("bad ip", {"ip": "999.1.1.1"}, {"connection_creation_rate": 1}),
        ("empty user name", {"user": ""}, {"producer_byte_rate": 1}),
        ("too large for an int", {"ip": "10.1.1.1"}, {"connection_creation_rate": 3e9}),
    ]
    for label, entity, ops in cases:
        _alter(b, label, entity, ops)
    b.call("empty entity", request(ApiKey.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
        {"entity": [], "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]}]))
    b.call("duplicate key", request(ApiKey.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
        {"entity": [{"entity_type": "user", "entity_name": user}],
         "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False},
                 {"key": "producer_byte_rate", "value": 2.0, "remove": False}]}]))
    _describe(b, "nothing was stored", [("user", EXACT, user)], strict=False)


def scenario_client_quotas_bad_filters(b: Broker) -> None:
    """DescribeClientQuotas refusals: null exact match, a default with a name, repeated and unknown
    types, an unknown match type, ip with user."""
    cases = [
        ("exact without a name", [("user", EXACT, None)]),
        ("default with a name", [("user", DEFAULT, "x")]),
        ("specified with a name", [("user", SPECIFIED, "x")]),
        ("type twice", [("user", EXACT, "a"), ("user", DEFAULT, None)]),
        ("unknown type", [("group", EXACT, "g")]),
        ("empty type", [("", EXACT, "g")]),
        ("unknown match type", [("user", 7, None)]),
        ("ip with user", [("ip", SPECIFIED, None), ("user", SPECIFIED, None)]),
    ]
    for label, components in cases:
        _describe(b, label, components)


FIRST_API = {
    "client_quotas_alter_and_describe": ApiKey.ALTER_CLIENT_QUOTAS,
    "client_quotas_bad_alterations": ApiKey.ALTER_CLIENT_QUOTAS,
    "client_quotas_bad_filters": ApiKey.DESCRIBE_CLIENT_QUOTAS,
}


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)


def _kafka_configs(libs: Path, bootstrap: str, *args: str) -> str:
    done = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", f"{libs}/*",
         "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, f"kafka-configs.sh {' '.join(args)} failed: {done.stdout}\n{done.stderr}"
    return "\n".join(line for line in done.stdout.splitlines() if not line.startswith(("SLF4J", "log4j")))


@pytest.mark.slow
def test_kafka_configs_sh_manages_quotas_on_tidelog(kafka_libs: Path, tidelog_broker: BrokerProcess) -> None:
    """kafka-configs.sh --alter, --describe, --alter --delete-config against tidelog (one JVM each)."""
    user = f"kc-{tidelog_broker.port}"
    out = _kafka_configs(kafka_libs, tidelog_broker.bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
                         "--entity-type", "clients", "--entity-default",
                         "--add-config", "producer_byte_rate=2048,consumer_byte_rate=4096")
    assert f"Completed updating config for user {user}" in out
    described = _kafka_configs(kafka_libs, tidelog_broker.bootstrap, "--describe", "--entity-type", "users",
                               "--entity-name", user, "--entity-type", "clients", "--entity-default")
    assert f"Quota configs for user-principal '{user}', the default client-id are" in described
    assert "consumer_byte_rate=4096.0" in described and "producer_byte_rate=2048.0" in described
    _kafka_configs(kafka_libs, tidelog_broker.bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
                   "--entity-type", "clients", "--entity-default", "--delete-config", "producer_byte_rate,consumer_byte_rate")


    with RawClient(tidelog_broker.host, tidelog_broker.port) as client:
        left: Any = client.call(DescribeClientQuotasRequest(
            components=(ComponentData(entity_type="user", match_type=0, match=user),), strict=False))
    assert left.entries == ()
