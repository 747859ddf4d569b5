"""Security APIs on a PLAINTEXT listener without an authorizer, against Apache Kafka: ACLs, SASL
handshakes, SCRAM credentials. Both session brokers run with no authorizer configured, which is
how most clusters start; what clients get then is what these scenarios compare.

Each scenario runs only when tidelog advertises the API it starts with; otherwise it is skipped
with that reason.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from helpers.broker_process import BrokerProcess
from helpers.raw_client import RawClient
from tidelog.protocol.apis import ApiKey

TOPIC, ANY, LITERAL, MATCH = 2, 1, 3, 4
READ, ALLOW = 3, 3


def scenario_acls_without_authorizer(b: Broker) -> None:
    """DescribeAcls, CreateAcls and DeleteAcls (v3) when no authorizer is configured."""
    b.call("describe acls", request(ApiKey.DESCRIBE_ACLS, 3, resource_type_filter=ANY, resource_name_filter=None,
                                    pattern_type_filter=MATCH, principal_filter=None, host_filter=None,
                                    operation=1, permission_type=1))
    b.call("create acl", request(ApiKey.CREATE_ACLS, 3, creations=[
        {"resource_type": TOPIC, "resource_name": b.topic(), "resource_pattern_type": LITERAL,
         "principal": "User:alice", "host": "*", "operation": READ, "permission_type": ALLOW},
    ]))
    b.call("delete acls", request(ApiKey.DELETE_ACLS, 3, filters=[
        {"resource_type_filter": TOPIC, "resource_name_filter": b.topic(), "pattern_type_filter": LITERAL,
         "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1},
    ]))


def scenario_sasl_handshake_on_plaintext(b: Broker) -> None:
    """SaslHandshake v1 (PLAIN, and an unknown mechanism) on a PLAINTEXT listener, each on a fresh
    connection, then whether the connection still serves ApiVersions."""
    for mechanism in ("PLAIN", "NO-SUCH-MECHANISM"):
        wire = b.connection()
        b.call(f"handshake {mechanism}", request(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism), wire=wire)
        answer = wire.call(request(ApiKey.API_VERSIONS, 0))
        b.record(f"api versions after {mechanism}", getattr(answer, "error_code", answer))


def scenario_describe_user_scram_credentials(b: Broker) -> None:
    """DescribeUserScramCredentials for an unknown user and for all users (none exist)."""
    b.call("unknown user", request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=[{"name": "nobody"}]))
    b.call("all users", request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None))


FIRST_API = {
    "acls_without_authorizer": ApiKey.DESCRIBE_ACLS,
    "sasl_handshake_on_plaintext": ApiKey.SASL_HANDSHAKE,
    "describe_user_scram_credentials": ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
}


def tidelog_advertises(broker: BrokerProcess, key: ApiKey) -> bool:
    with RawClient(broker.host, broker.port) as client:
        response = client.call(ApiVersionsRequest())
    return any(entry.api_key == int(key) for entry in response.api_keys)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result],
                       tidelog_broker: BrokerProcess) -> None:
    key = FIRST_API[scenario.__name__.removeprefix("scenario_")]
    if not tidelog_advertises(tidelog_broker, key):
        pytest.skip(f"tidelog does not advertise {key.name} ({int(key)}) yet")
    compare_with_kafka(scenario)
