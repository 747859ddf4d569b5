"""Every API tidelog serves, sent at a version outside its range: what Kafka does, what tidelog does.

Kafka checks the version in the request header before it reads the body; for every key except
ApiVersions (``test_diff_cluster``) and Produce v0-2 (``test_diff_produce``) an unsupported version
is expected to close the connection without an answer. Each probe uses a well-formed body of the
nearest supported version, so a broker that wrongly accepted the version would answer rather than
fail to parse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn
from compat_harness.steps import metadata_request

from tidelog.protocol.apis import ApiKey

# key: (versions to probe, a valid request at a supported version whose body is sent)
T = "compat-versions-probe"
PROBES: dict[ApiKey, tuple[tuple[int, ...], Callable[[], Any]]] = {
    ApiKey.PRODUCE: ((14,), lambda: request(ApiKey.PRODUCE, 9, acks=1, timeout=1000, topic_data=[])),
    ApiKey.FETCH: ((3, 19), lambda: request(ApiKey.FETCH, 4, max_wait=0, min_bytes=1, topics=[])),
    ApiKey.LIST_OFFSETS: ((0, 12), lambda: request(ApiKey.LIST_OFFSETS, 1, replica_id=-1, topics=[])),
    ApiKey.METADATA: ((3, 14), lambda: metadata_request([T], version=4)),
    ApiKey.DESCRIBE_CLUSTER: ((3,), lambda: request(ApiKey.DESCRIBE_CLUSTER, 0,
                                                    include_cluster_authorized_operations=False)),
    ApiKey.INIT_PRODUCER_ID: ((6, 7), lambda: request(ApiKey.INIT_PRODUCER_ID, 0, transactional_id=None,
                                                      transaction_timeout=1000)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ((1, 5), lambda: request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, topics=[])),
    ApiKey.DELETE_RECORDS: ((3,), lambda: request(ApiKey.DELETE_RECORDS, 0, topics=[], timeout=1000)),
    ApiKey.CREATE_TOPICS: ((1, 8), lambda: request(ApiKey.CREATE_TOPICS, 2, topics=[], timeout=1000,
                                                   validate_only=True)),
    ApiKey.DELETE_TOPICS: ((0, 7), lambda: request(ApiKey.DELETE_TOPICS, 1, topic_names=[], timeout=1000)),
    ApiKey.CREATE_PARTITIONS: ((4,), lambda: request(ApiKey.CREATE_PARTITIONS, 0, topics=[], timeout=1000,
                                                     validate_only=True)),
    ApiKey.DESCRIBE_CONFIGS: ((0, 5), lambda: request(ApiKey.DESCRIBE_CONFIGS, 1, resources=[])),
    ApiKey.ALTER_CONFIGS: ((3,), lambda: request(ApiKey.ALTER_CONFIGS, 0, resources=[], validate_only=True)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ((2,), lambda: request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, resources=[],
                                                             validate_only=True)),
    ApiKey.DESCRIBE_LOG_DIRS: ((0, 6), lambda: request(ApiKey.DESCRIBE_LOG_DIRS, 1, topics=[])),
    # Consumer groups (both brokers close for these whether or not tidelog serves the key yet).
    ApiKey.FIND_COORDINATOR: ((7,), lambda: request(ApiKey.FIND_COORDINATOR, 0, key=T)),
    ApiKey.JOIN_GROUP: ((10,), lambda: request(ApiKey.JOIN_GROUP, 0, group_id=T, session_timeout=10_000,
                                               member_id="", protocol_type="consumer", protocols=[])),
    ApiKey.SYNC_GROUP: ((6,), lambda: request(ApiKey.SYNC_GROUP, 0, group_id=T, generation_id=1, member_id="m",
                                              assignments=[])),
    ApiKey.HEARTBEAT: ((5,), lambda: request(ApiKey.HEARTBEAT, 0, group_id=T, generation_id=1, member_id="m")),
    ApiKey.LEAVE_GROUP: ((6,), lambda: request(ApiKey.LEAVE_GROUP, 0, group_id=T, member_id="m")),
    ApiKey.DESCRIBE_GROUPS: ((7,), lambda: request(ApiKey.DESCRIBE_GROUPS, 0, groups=[T])),
    ApiKey.LIST_GROUPS: ((6,), lambda: request(ApiKey.LIST_GROUPS, 0)),
    ApiKey.DELETE_GROUPS: ((3,), lambda: request(ApiKey.DELETE_GROUPS, 0, groups_names=[T])),
    ApiKey.OFFSET_COMMIT: ((1, 11), lambda: request(ApiKey.OFFSET_COMMIT, 2, group_id=T, generation_id_or_member_epoch=-1,
                                                    member_id="", retention_time_ms=-1, topics=[])),
    ApiKey.OFFSET_FETCH: ((0, 11), lambda: request(ApiKey.OFFSET_FETCH, 1, group_id=T, topics=[])),
    ApiKey.OFFSET_DELETE: ((1,), lambda: request(ApiKey.OFFSET_DELETE, 0, group_id=T, topics=[])),
}


def _scenario(key: ApiKey) -> ScenarioFn:
    versions, make = PROBES[key]

    def scenario(b: Broker) -> None:
        for version in versions:
            b.probe(f"v{version}", make(), version)
        # The broker keeps serving other connections afterwards.
        b.record("ApiVersions on a new connection", b.connection().call(request(ApiKey.API_VERSIONS, 0)).error_code)

    name = f"unsupported_version_{key.name.lower()}"
    scenario.__name__ = f"scenario_{name}"
    scenario.__doc__ = (f"{key.name} (key {int(key)}) at v{' and v'.join(map(str, versions))}: closed without an "
                        "answer or answered, and the broker still serves other connections.")
    return scenario


SCENARIOS = [_scenario(key) for key in PROBES]


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.__name__.removeprefix("scenario_")) for s in SCENARIOS])
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)
