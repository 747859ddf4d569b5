"""KIP-599's controller_mutation_rate on a broker subprocess: CreateTopics, CreatePartitions and
DeleteTopics charged per topic against a token bucket (burst: 11 s of the quota).

- strict versions (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a topic is accepted
  while the bucket is not already empty, even when it takes it below zero; the topics after that
  are refused THROTTLING_QUOTA_EXCEEDED (89) with the throttle time; seen on the wire and by
  kafka-python's admin client (which speaks v7);
- older versions: every topic is accepted and the response carries the throttle time, the
  connection muted that long; seen on the wire and with confluent-kafka's AdminClient;
- topics a Metadata request auto-creates: charged strictly to the requesting client (as Kafka 4's
  broker forwards them to the controller); a refused one is answered UNKNOWN_TOPIC_OR_PARTITION and
  not created, the Metadata response never throttled; a producer gets the topic once the bucket refills.
"""

from __future__ import annotations

import datetime
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kio.index import load_response_schema
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.create_partitions.v2.request import CreatePartitionsRequest as CreatePartitionsV2
from kio.schema.create_partitions.v2.request import CreatePartitionsTopic as PartitionsTopicV2
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest as CreatePartitionsV3
from kio.schema.create_partitions.v3.request import CreatePartitionsTopic as PartitionsTopicV3
from kio.schema.create_topics.v5.request import CreatableTopic as TopicV5
from kio.schema.create_topics.v5.request import CreateTopicsRequest as CreateTopicsV5
from kio.schema.create_topics.v7.request import CreatableTopic as TopicV7
from kio.schema.create_topics.v7.request import CreateTopicsRequest as CreateTopicsV7
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsV6
from kio.schema.delete_topics.v6.request import DeleteTopicState
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i16, i32, i32Timedelta

from helpers.broker_process import BrokerProcess, free_port, register_failure_report
from helpers.clients import FAST_CLIENT, admin_client, topic_partition_count, unique_topic
from helpers.raw_client import RawClient, encode_request

THROTTLED = 89  # THROTTLING_QUOTA_EXCEEDED
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=10))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    proc = BrokerProcess(tmp_path_factory.mktemp("mutations"), {"metrics.port": free_port()})
    proc.start()
    yield proc
    proc.close()


def set_rate(broker: BrokerProcess, client_id: str, rate: float) -> None:
    entry = EntryData(entity=(EntityData(entity_type="client-id", entity_name=client_id),),
                      ops=(OpData(key="controller_mutation_rate", value=rate, remove=False),))
    with RawClient(broker.host, broker.port) as client:
        (result,) = client.call(AlterClientQuotasRequest(entries=(entry,), validate_only=False)).entries
    assert result.error_code == 0, result.error_message


def call_as(client: RawClient, client_id: str, request: Any) -> tuple[Any, float]:
    """Send ``request`` under ``client_id``; the response and how long it took."""
    correlation_id = client.next_correlation_id()
    started = time.monotonic()
    client.send_frame(encode_request(request, correlation_id=correlation_id, client_id=client_id))
    response = client.receive_response(load_response_schema(request.__api_key__, request.__version__), correlation_id)
    return response, time.monotonic() - started


def create_v7(*topics: tuple[str, int]) -> CreateTopicsV7:
    return CreateTopicsV7(topics=tuple(TopicV7(name=n, num_partitions=i32(p), replication_factor=i16(1), assignments=(), configs=())
                                       for n, p in topics), timeout=TIMEOUT, validate_only=False)


def ms(delta: Any) -> float:
    return float(delta.total_seconds() * 1000)


def metric(broker: BrokerProcess, name: str, **labels: str) -> float:
    port = broker.properties["metrics.port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(w in line for w in wanted):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not exported")


def test_strict_request_takes_topics_until_the_bucket_is_empty_then_refuses_the_rest(broker: BrokerProcess) -> None:
    client_id = unique_topic("strict")
    set_rate(broker, client_id, 2)  # burst 22 partitions
    a, b, c = unique_topic("mut-a"), unique_topic("mut-b"), unique_topic("mut-c")
    with RawClient(broker.host, broker.port, timeout=15) as client:
        response, _ = call_as(client, client_id, create_v7((a, 20), (b, 5), (c, 1)))
        results = {t.name: t for t in response.topics}
        assert [results[n].error_code for n in (a, b)] == [0, 0], "the bucket was not empty: b goes through past zero"
        assert results[c].error_code == THROTTLED
        assert results[c].error_message == "The throttling quota has been exceeded."
        assert 1300 <= ms(response.throttle_time) <= 1500  # 3 partitions short at 2/s
        # muted for the throttle time: the next request on this connection waits it out
        deleted, took = call_as(client, client_id, DeleteTopicsV6(topics=(DeleteTopicState(name=b, topic_id=None),), timeout=TIMEOUT))
        assert took >= 1.2
        (result,) = deleted.responses
        assert result.error_code == 0, "refilled past zero while muted: the deletion is accepted"
        grow, _ = call_as(client, client_id, CreatePartitionsV3(
            topics=(PartitionsTopicV3(name=a, count=i32(22), assignments=None),), timeout=TIMEOUT, validate_only=False))
        (grown,) = grow.results
        assert grown.error_code == THROTTLED, "deleting b's 5 partitions emptied the bucket again"
        assert ms(grow.throttle_time) > 1000
    assert topic_partition_count(broker.bootstrap, a) == 20
    assert metric(broker, "tidelog_client_quota_throttled_total", quota="controller_mutation_rate", client_id=client_id) >= 2
    assert metric(broker, "tidelog_controller_mutation_tokens", client_id=client_id) < 0


def test_old_versions_are_accepted_and_throttled_instead(broker: BrokerProcess) -> None:
    client_id = unique_topic("permissive")
    set_rate(broker, client_id, 2)
    a, b = unique_topic("mut-old-a"), unique_topic("mut-old-b")
    request = CreateTopicsV5(topics=tuple(TopicV5(name=n, num_partitions=i32(15), replication_factor=i16(1), assignments=(), configs=())
                                          for n in (a, b)), timeout=TIMEOUT, validate_only=False)
    with RawClient(broker.host, broker.port, timeout=15) as client:
        response, _ = call_as(client, client_id, request)
        assert [t.error_code for t in response.topics] == [0, 0]
        assert 3800 <= ms(response.throttle_time) <= 4000  # 30 - 22 = 8 partitions at 2/s
        grow, took = call_as(client, client_id, CreatePartitionsV2(
            topics=(PartitionsTopicV2(name=a, count=i32(16), assignments=None),), timeout=TIMEOUT, validate_only=False))
        assert took >= 3.5, "the connection was muted for the throttle time"
        (grown,) = grow.results
        assert grown.error_code == 0 and ms(grow.throttle_time) > 0


def test_kafka_python_admin_sees_throttling_quota_exceeded(broker: BrokerProcess) -> None:
    client_id = unique_topic("kp-admin")
    set_rate(broker, client_id, 1)  # burst 11
    names = [unique_topic("kp") for _ in range(3)]
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=client_id)
    try:
        result = admin.create_topics({names[0]: {"num_partitions": 10, "replication_factor": 1},
                                      names[1]: {"num_partitions": 2, "replication_factor": 1},
                                      names[2]: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
    finally:
        admin.close()
    errors = {t["name"]: t["error_code"] for t in result["topics"]}
    assert errors == {names[0]: 0, names[1]: 0, names[2]: THROTTLED}


def test_confluent_kafka_admin_is_throttled_not_refused(broker: BrokerProcess) -> None:
    client_id = unique_topic("rd-admin")
    set_rate(broker, client_id, 2)  # burst 22
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": client_id, **FAST_CLIENT})
    sizes = {unique_topic("rd"): n for n in (10, 10, 5, 1)}  # strict would refuse the last: the bucket is at -3
    futures = admin.create_topics([NewTopic(name, n, 1) for name, n in sizes.items()], operation_timeout=10)
    for future in futures.values():
        future.result(timeout=20)  # all created: librdkafka speaks CreateTopics v4, a permissive version
    started = time.monotonic()
    first = next(iter(sizes))
    admin.create_partitions([NewPartitions(first, 11)], operation_timeout=10)[first].result(timeout=20)
    waited = time.monotonic() - started
    assert waited >= 1.5, f"muted for the throttle (26 - 22 = 4 partitions at 2/s), waited {waited:.2f}s"
    assert metric(broker, "tidelog_client_quota_throttled_total", quota="controller_mutation_rate", client_id=client_id) >= 1
    assert metric(broker, "tidelog_requests_total", api="CreateTopics", version="4") >= 1
    for future in admin.delete_topics(list(sizes), operation_timeout=10).values():
        future.result(timeout=20)


def test_auto_created_topics_are_charged_and_refused_past_the_quota_without_throttling_metadata(
    broker: BrokerProcess,
) -> None:
    client_id = unique_topic("auto-create")
    set_rate(broker, client_id, 1)  # burst 11; auto-created topics have num.partitions = 1
    names = [unique_topic("auto") for _ in range(14)]
    request = MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    with RawClient(broker.host, broker.port, timeout=15) as client:
        response, _ = call_as(client, client_id, request)
    assert ms(response.throttle_time) == 0  # Metadata is never throttled for it
    assert {t.error_code for t in response.topics} == {3}  # UNKNOWN_TOPIC_OR_PARTITION: created or refused alike
    existing = admin_client(broker.bootstrap).list_topics(timeout=5).topics
    created = [n for n in names if n in existing]
    # 11 tokens: the 12th topic still gets through (the bucket was not below zero), then it is
    assert created == names[:12]
    assert metric(broker, "tidelog_controller_mutation_tokens", client_id=client_id) < 0
    assert metric(broker, "tidelog_requests_total", api="Metadata", version="12") >= 1

    # a producer under the same client id asks again until the bucket has refilled
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, **FAST_CLIENT})
    delivered: list[Any] = []
    started = time.monotonic()
    for name in names[12:]:
        producer.produce(name, b"v", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(30)
    waited = time.monotonic() - started
    assert delivered == [None, None]
    assert waited >= 1.0, f"the refused topics were created only as the bucket refilled ({waited:.2f}s)"
    assert set(names) <= set(admin_client(broker.bootstrap).list_topics(timeout=5).topics)
