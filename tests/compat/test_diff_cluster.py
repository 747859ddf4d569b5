"""Bootstrap APIs against Apache Kafka: ApiVersions, Metadata (unknown topics, auto-creation), DescribeCluster."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from compat_harness.entities import request
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import batch, create_topic, metadata, produce, topic_ready
from compat_harness.wire import RawAnswer

from helpers.raw_client import decode_api_versions_v0
from tidelog.protocol.apis import ApiKey


def scenario_api_versions_v0(b: Broker) -> None:
    """ApiVersions v0 (what aiokafka sends): the advertised range of every API key."""
    b.call("api versions v0", request(ApiKey.API_VERSIONS, 0))


def scenario_api_versions_v3(b: Broker) -> None:
    """ApiVersions v3 (librdkafka, Java): ranges, supported and finalized features."""
    b.call("api versions v3", request(ApiKey.API_VERSIONS, 3, client_software_name="tidelog-compat",
                                      client_software_version="1.0"))


def scenario_api_versions_unknown_version(b: Broker) -> None:
    """ApiVersions at a version no broker knows (v127) is answered in the v0 body format with
    UNSUPPORTED_VERSION and at least ApiVersions' own range, and the connection stays usable."""
    body = request(ApiKey.API_VERSIONS, 3, client_software_name="x", client_software_version="1")
    wire = b.connection()
    outcome = wire.send_version(body, 127)
    if isinstance(outcome, RawAnswer):
        answer = decode_api_versions_v0(struct.pack(">i", 0) + outcome.body)
        b.note("v127 answer", {"error_code": answer.error_code,
                               "api_versions_range": answer.api_keys.get(int(ApiKey.API_VERSIONS))})
    else:
        b.record("v127 answer", outcome)


def scenario_metadata_unknown_topic_without_auto_create(b: Broker) -> None:
    """Metadata for a topic that does not exist, allow_auto_topic_creation=false: the topic comes back
    with UNKNOWN_TOPIC_OR_PARTITION and is not created."""
    name = b.topic()
    metadata(b, "metadata", [name], auto_create=False)
    metadata(b, "metadata again", [name], auto_create=False)


def scenario_metadata_unknown_topic_with_auto_create(b: Broker) -> None:
    """Metadata for a missing topic with allow_auto_topic_creation=true on a broker with
    auto.create.topics.enable=true: the first answer, then the created topic (num.partitions=1)."""
    name = b.topic()
    metadata(b, "first metadata", [name], auto_create=True)
    b.wait_until("auto-created topic ready", lambda: topic_ready(b, name, 1))
    metadata(b, "metadata once created", [name])


def scenario_metadata_invalid_name_with_auto_create(b: Broker) -> None:
    """Auto-creation of an illegal topic name (space, '!', too long, '..') is refused per topic."""
    names = ["bad name!", "x" * 250, ".."]
    metadata(b, "metadata", names, auto_create=True)


def scenario_metadata_empty_topic(b: Broker) -> None:
    """A freshly created topic with three partitions and no data: leaders, epochs, replicas, ISR."""
    name = b.topic()
    create_topic(b, name, 3)
    metadata(b, "metadata", [name])


def scenario_metadata_versions(b: Broker) -> None:
    """The same topic described by Metadata v4 (oldest tidelog accepts), v9 (first flexible) and v13."""
    name = b.topic()
    create_topic(b, name, 1)
    for version in (4, 9, 13):
        metadata(b, f"metadata v{version}", [name], version=version)


def scenario_describe_cluster(b: Broker) -> None:
    """DescribeCluster v0, v1 and v2 (what the Java admin client sends; v2 adds is_fenced and the
    include_fenced_brokers flag): the one broker, the controller id as seen by clients, no
    authorised operations when not asked."""
    b.call("describe cluster v0", request(ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=False))
    b.call("describe cluster v1", request(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False,
                                          endpoint_type=1))
    b.call("describe cluster v2", request(ApiKey.DESCRIBE_CLUSTER, 2, include_cluster_authorized_operations=False,
                                          endpoint_type=1, include_fenced_brokers=True))


def scenario_describe_log_dirs(b: Broker) -> None:
    """DescribeLogDirs v4 for one topic with two batches: the data directory, the partition's size
    in bytes (the same batches take the same bytes), offset lag 0; an unknown topic; then all topics
    of the directory, compared for this scenario's topic only."""
    name = b.topic()
    create_topic(b, name, 2)
    produce(b, None, name, batch([b"one", b"two"]))
    produce(b, None, name, batch([b"three"]))
    b.call("describe topic", request(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=[{"topic": name, "partitions": [0, 1]}]))
    b.call("describe unknown topic", request(ApiKey.DESCRIBE_LOG_DIRS, 4,
                                             topics=[{"topic": b.topic("-missing"), "partitions": [0]}]))
    everything = b.quiet(request(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None))
    mine = [
        (t.name, sorted((p.partition_index, p.partition_size) for p in t.partitions))
        for result in getattr(everything, "results", ()) for t in result.topics if t.name == name
    ]
    b.note("all topics: this topic's entry", mine)


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)
