"""Malformed, unsupported and hostile input on a raw socket: Kafka's answer, and nobody else hurt.

Framing errors (negative or oversized length, a body that does not parse, an unknown API key) close
the offending connection; request-level errors get Kafka's error code. After each case, a fresh
connection and a long-lived bystander connection both still get ApiVersions answered. A hypothesis
fuzz test, bounded in time, ends with the broker still serving and its memory bounded.
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from helpers.broker_process import BrokerProcess, register_failure_report, wait_until
from helpers.clients import create_topic, produce_all, producer
from helpers.raw_client import (
    RawClient,
    decode_api_versions_v0,
    decode_batches,
    encode_request,
    legacy_message_set,
    raw_request,
    record_batch,
)

MAX_REQUEST = 2 * 1024 * 1024  # socket.request.max.bytes of these brokers
TOPIC = "bad-input"
FUZZ_SECONDS = 20.0
RSS_GROWTH_BOUND = 64 * 1024 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("bad-input-broker"),
                            {"socket.request.max.bytes": MAX_REQUEST, "auto.create.topics.enable": "false"})
    process.start()
    create_topic(process.bootstrap, TOPIC)
    produce_all(producer(process.bootstrap), TOPIC, [b"first", b"second", b"third"])
    yield process
    process.close()


@pytest.fixture(scope="module")
def bystander(broker: BrokerProcess) -> Iterator[RawClient]:
    """A connection opened before any bad input and used after each case."""
    with RawClient(broker.host, broker.port) as client:
        yield client


@pytest.fixture
def client(broker: BrokerProcess, bystander: RawClient) -> Iterator[RawClient]:
    """The connection that misbehaves. After the test, the broker must still serve everyone else."""
    with RawClient(broker.host, broker.port) as raw:
        yield raw
    assert_still_serving(broker, bystander)


def api_versions_ok(raw: RawClient) -> bool:
    response = raw.call(ApiVersionsRequest(client_software_name="tests", client_software_version="1"))
    return bool(response.error_code == ErrorCode.none and response.api_keys)


def assert_still_serving(broker: BrokerProcess, bystander: RawClient) -> None:
    assert broker.is_running(), "the broker process died"
    with RawClient(broker.host, broker.port) as fresh:
        assert api_versions_ok(fresh), "a fresh connection was not served"
    assert api_versions_ok(bystander), "the bystander connection was not served"


def produce_request(records: bytes, topic: str = TOPIC, partition: int = 0) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition,
                                                                                      records=records),)),),
    )


def produce_error(raw: RawClient, records: bytes, topic: str = TOPIC, partition: int = 0) -> ErrorCode:
    response = raw.call(produce_request(records, topic, partition))
    (topic_response,) = response.responses
    (partition_response,) = topic_response.partition_responses
    return ErrorCode(partition_response.error_code)


def fetch_request(offset: int, topic: str = TOPIC, max_wait_ms: int = 50) -> FetchRequest:
    return FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=0, fetch_offset=offset,
                                                                   partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(),
    )


def fetched_partition(raw: RawClient, offset: int, topic: str = TOPIC):  # type: ignore[no-untyped-def]
    response = raw.call(fetch_request(offset, topic))
    assert response.error_code == ErrorCode.none
    (topic_response,) = response.responses
    (partition,) = topic_response.partitions
    return partition


# -- framing -----------------------------------------------------------------------------------------


def test_negative_frame_length_closes_the_connection(client: RawClient) -> None:
    client.send_bytes(struct.pack(">i", -5) + b"junk")

    assert client.wait_closed()


def test_frame_longer_than_socket_request_max_bytes_closes_the_connection(client: RawClient) -> None:
    client.send_bytes(struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 1024)

    assert client.wait_closed()


def test_connection_closed_in_the_middle_of_a_frame_is_cleaned_up(client: RawClient) -> None:
    frame = encode_request(ApiVersionsV0(), correlation_id=1)
    client.send_bytes(struct.pack(">i", len(frame) + 100) + frame)
    client.sock.shutdown(socket.SHUT_WR)

    assert client.wait_closed()


def test_request_whose_body_is_cut_short_closes_the_connection(client: RawClient) -> None:
    request = MetadataRequest(topics=(MetadataRequestTopic(name=TOPIC, topic_id=None),),
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    frame = encode_request(request, correlation_id=1)
    client.send_frame(frame[:-6])

    assert client.wait_closed()


def test_unknown_api_key_closes_the_connection(client: RawClient) -> None:
    client.send_frame(raw_request(api_key=999, api_version=0, correlation_id=1, body=b""))

    assert client.wait_closed()


def test_garbage_body_closes_the_connection(client: RawClient) -> None:
    client.send_frame(raw_request(api_key=3, api_version=12, correlation_id=1, body=random.Random(3).randbytes(64)))

    assert client.wait_closed()


# -- versions ----------------------------------------------------------------------------------------


def test_unknown_api_versions_version_gets_the_v0_error_response(client: RawClient) -> None:
    correlation_id = client.send_request(
        ApiVersionsRequest(client_software_name="tests", client_software_version="1"), api_version=99
    )

    answer = decode_api_versions_v0(client.receive_frame())

    assert answer.correlation_id == correlation_id
    assert answer.error_code == ErrorCode.unsupported_version
    assert answer.api_keys.get(18, (99, -1))[0] == 0, "ApiVersions' own range must be in the answer"
    assert answer.api_keys[18][1] >= 3


def test_api_versions_v0_is_answered(client: RawClient) -> None:
    response = client.call(ApiVersionsV0())

    assert response.error_code == ErrorCode.none
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[0][0] == 0, "Produce must be advertised from v0 (librdkafka < 2.11.1 compression)"
    assert ranges[1][0] <= 4 <= ranges[1][1]


def test_produce_v2_closes_the_connection_as_kafka_4_does(client: RawClient) -> None:
    # Kafka 4 advertises Produce from v0 (for old librdkafka's feature checks) but its oldest
    # supported version is 3: a v0-2 request is refused at the header and the connection closed,
    # without an answer (checked against Apache Kafka 4.0 and 4.1).
    message_set = legacy_message_set([b"old"], magic=1)
    body = (struct.pack(">hii", -1, 5000, 1) + struct.pack(">h", len(TOPIC)) + TOPIC.encode()
            + struct.pack(">iii", 1, 0, len(message_set)) + message_set)
    client.send_frame(raw_request(api_key=0, api_version=2, correlation_id=42, body=body))

    assert client.wait_closed()


# -- record batches ----------------------------------------------------------------------------------


def test_batch_with_a_bad_crc_is_refused_as_corrupt(client: RawClient) -> None:
    assert produce_error(client, record_batch([b"bad crc"], corrupt_crc=True)) == ErrorCode.corrupt_message


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_format_in_a_modern_produce_is_refused_as_invalid_record(client: RawClient, magic: int) -> None:
    assert produce_error(client, legacy_message_set([b"old format"], magic=magic)) == ErrorCode.invalid_record


def test_record_larger_than_message_max_bytes_is_refused_as_too_large(client: RawClient) -> None:
    batch = record_batch([os.urandom(1_100_000)])
    assert len(batch) < MAX_REQUEST

    assert produce_error(client, batch) == ErrorCode.message_too_large


def test_refused_batches_leave_the_log_untouched(client: RawClient) -> None:
    before = fetched_partition(client, 0).high_watermark
    produce_error(client, record_batch([b"x"], corrupt_crc=True))
    produce_error(client, record_batch([os.urandom(1_100_000)]))

    partition = fetched_partition(client, 0)

    assert partition.high_watermark == before
    assert [r.value for r in decode_batches(partition.records or b"")][:3] == [b"first", b"second", b"third"]


# -- unknown topics and offsets ----------------------------------------------------------------------


def test_produce_to_an_unknown_topic_is_refused_without_creating_it(client: RawClient) -> None:
    assert produce_error(client, record_batch([b"x"]), topic="no-such-topic") == ErrorCode.unknown_topic_or_partition
    assert produce_error(client, record_batch([b"x"]), partition=5) == ErrorCode.unknown_topic_or_partition

    request = MetadataRequest(topics=(MetadataRequestTopic(name="no-such-topic", topic_id=None),),
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    (described,) = client.call(request).topics
    assert described.error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_from_an_unknown_topic_is_refused(client: RawClient) -> None:
    partition = fetched_partition(client, 0, topic="no-such-topic")

    assert partition.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("offset", [1000, -5], ids=["past-the-end", "negative"])
def test_fetch_at_an_offset_out_of_range_is_refused(client: RawClient, offset: int) -> None:
    partition = fetched_partition(client, offset)

    assert partition.error_code == ErrorCode.offset_out_of_range
    assert not partition.records


def test_fetch_at_the_log_end_returns_nothing_and_no_error(client: RawClient) -> None:
    end = fetched_partition(client, 0).high_watermark

    partition = fetched_partition(client, end)

    assert partition.error_code == ErrorCode.none
    assert not partition.records


# -- logging -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["oversized-frame", "garbage-body", "unknown-api-key"])
def test_a_bad_connection_is_logged_once_with_the_client_address(broker: BrokerProcess, client: RawClient,
                                                                 case: str) -> None:
    host, port = client.sock.getsockname()[:2]
    if case == "oversized-frame":
        client.send_bytes(struct.pack(">i", MAX_REQUEST + 10))
    elif case == "garbage-body":
        client.send_frame(raw_request(api_key=3, api_version=12, correlation_id=1, body=b"\xff" * 33))
    else:
        client.send_frame(raw_request(api_key=999, api_version=0, correlation_id=1, body=b""))
    assert client.wait_closed()

    address = f"{host}:{port}"
    lines = wait_until(lambda: [line for line in broker.log_text().splitlines() if address in line],
                       timeout=5, message=f"a log line naming {address}")
    assert len(lines) == 1, f"expected one line naming {address}, got: {lines}"


# -- fuzzing -----------------------------------------------------------------------------------------


def seed_frames() -> list[bytes]:
    topic = "fuzz"
    requests = [
        ApiVersionsV0(),
        ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"),
        MetadataRequest(topics=(MetadataRequestTopic(name=topic, topic_id=None),), allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False),
        produce_request(record_batch([b"fuzz value"], keys=[b"k"], headers=[[(b"h", b"v")]]), topic=topic),
        fetch_request(0, topic=topic, max_wait_ms=10),
        ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)),)),
        CreateTopicsRequest(topics=(CreatableTopic(name="fuzz-created", num_partitions=1, replication_factor=1,
                                                   assignments=(), configs=()),),
                            timeout=datetime.timedelta(seconds=5), validate_only=True),
        DescribeConfigsRequest(resources=(DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                                  configuration_keys=None),),
                               include_synonyms=False, include_documentation=False),
        InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
                              producer_id=-1, producer_epoch=-1),
    ]
    return [encode_request(r, correlation_id=7) for r in requests]


SEEDS = seed_frames()


@st.composite
def hostile_frames(draw: st.DrawFn) -> bytes:
    """Bytes to send on a fresh connection: a length-prefixed frame that is random, a mutated valid
    request, a valid request cut short, or a wrong length prefix."""
    kind = draw(st.sampled_from(["random", "mutated", "truncated", "bad-length", "random-header"]))
    if kind == "random":
        payload = draw(st.binary(max_size=256))
    elif kind == "random-header":
        header = struct.pack(">hhi", draw(st.integers(-2, 80)), draw(st.integers(-1, 20)), 1)
        payload = header + draw(st.binary(max_size=128))
    else:
        seed = bytearray(draw(st.sampled_from(SEEDS)))
        if kind == "mutated":
            for _ in range(draw(st.integers(1, 8))):
                seed[draw(st.integers(0, len(seed) - 1))] = draw(st.integers(0, 255))
            payload = bytes(seed)
        elif kind == "truncated":
            payload = bytes(seed[: draw(st.integers(0, len(seed) - 1))])
        else:
            length = draw(st.one_of(st.integers(-(2**31), -1), st.integers(len(seed) + 1, MAX_REQUEST * 4)))
            return struct.pack(">i", length) + bytes(seed)
    return struct.pack(">i", len(payload)) + payload


def test_fuzzed_frames_leave_the_broker_serving_with_bounded_memory(tmp_path: Path,
                                                                     pytestconfig: pytest.Config) -> None:
    register_failure_report(pytestconfig)
    with BrokerProcess(tmp_path, {"socket.request.max.bytes": MAX_REQUEST,
                                  "auto.create.topics.enable": "false"}) as fuzzed:
        create_topic(fuzzed.bootstrap, "fuzz")
        with RawClient(fuzzed.host, fuzzed.port) as watcher:
            rss_before = fuzzed.rss_bytes()
            deadline = time.monotonic() + FUZZ_SECONDS
            sent = 0

            @settings(max_examples=2000, deadline=None, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
            @given(hostile_frames())
            def throw(data: bytes) -> None:
                nonlocal sent
                if time.monotonic() > deadline:
                    return
                sent += 1
                with RawClient(fuzzed.host, fuzzed.port, timeout=2) as attacker:
                    try:
                        attacker.send_bytes(data)
                        attacker.sock.settimeout(0.15)
                        attacker.sock.recv(65536)  # an answer, a close, or (timeout) a wait for more bytes
                    except OSError:
                        pass  # includes the broker closing before it read everything

            throw()
            assert fuzzed.is_running(), "the broker died during fuzzing"
            assert api_versions_ok(watcher), "the long-lived connection was not served after fuzzing"
            with RawClient(fuzzed.host, fuzzed.port) as fresh:
                assert api_versions_ok(fresh)
            rss_after = fuzzed.rss_bytes()
    assert sent > 50, f"only {sent} frames were sent in {FUZZ_SECONDS} s"
    assert rss_after - rss_before < RSS_GROWTH_BOUND, (
        f"RSS grew from {rss_before >> 20} MiB to {rss_after >> 20} MiB over {sent} hostile frames"
    )
