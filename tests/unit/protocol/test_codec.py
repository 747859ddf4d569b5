"""decode_request and encode_response: what the broker gets from a frame and puts on the wire."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v8.response import MetadataResponse as MetadataResponseV8
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.schema.request_header.v2.header import RequestHeader as KioHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeaderV0
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta

from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import decode_request, encode_api_versions_unsupported, encode_response
from tidelog.protocol.errors import InvalidRequest
from tidelog.protocol.headers import RequestHeader, parse_request_header

ZERO = i32Timedelta.parse(datetime.timedelta(0))


def write(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def request_frame(request: Any, correlation_id: int = 1) -> bytes:
    header = KioHeaderV2(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(correlation_id),
        client_id="test",
    )
    return write(header) + write(request)


def decode(frame: bytes) -> Any:
    return decode_request(parse_request_header(frame), frame)


METADATA = MetadataRequest(
    topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
    allow_auto_topic_creation=False,
    include_topic_authorized_operations=True,
)


def test_unknown_top_level_tag_is_skipped() -> None:
    frame = request_frame(ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7"))
    tagged = frame[:-1] + bytes([2, 7, 2]) + b"hi" + bytes([9, 0])
    assert decode(tagged) == ApiVersionsRequest(client_software_name="kcat", client_software_version="1.7")


def test_unknown_tag_inside_a_nested_entity_is_skipped() -> None:
    frame = request_frame(METADATA)
    body = write(METADATA)
    topic = write(METADATA.topics[0])
    assert body.count(topic) == 1
    tagged_topic = topic[:-1] + bytes([1, 42, 3]) + b"xyz"
    tagged = frame.replace(topic, tagged_topic)
    assert decode(tagged) == METADATA


def test_known_tag_is_kept_while_an_unknown_one_is_dropped() -> None:
    request = FetchRequest(
        cluster_id="cluster-a",
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            FetchTopic(
                topic="t",
                partitions=(
                    FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=5,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1024,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    frame = request_frame(request)
    assert frame.endswith(bytes([1, 0, 10, 10]) + b"cluster-a")
    tagged = frame[: -len(b"cluster-a") - 4] + bytes([2, 0, 10, 10]) + b"cluster-a" + bytes([5, 1, 0])
    assert decode(tagged) == request


@pytest.mark.parametrize("garbage", [b"\x00", b"trailing bytes", b"\x01\x00\x00"])
def test_trailing_bytes_after_a_complete_body_are_ignored_as_kafka_does(garbage: bytes) -> None:
    # librdkafka 2.16 sends an all-topics Metadata v13 with three stray bytes after the body
    # (\x00\x00\x00 \x00 \x01\x00\x00 on the wire); Kafka parses the body and ignores the rest.
    assert decode(request_frame(METADATA, correlation_id=31) + garbage) == METADATA


@pytest.mark.parametrize("cut", [1, 2, 5])
def test_truncated_body_is_an_invalid_request(cut: int) -> None:
    with pytest.raises(InvalidRequest):
        decode(request_frame(METADATA)[:-cut])


def test_truncated_body_with_an_unknown_tag_is_an_invalid_request() -> None:
    frame = request_frame(ApiVersionsRequest(client_software_name="a", client_software_version="b"))
    with pytest.raises(InvalidRequest):
        decode(frame[:-1] + bytes([1, 7, 20]) + b"short")


def split(buffers: list[bytes | memoryview]) -> tuple[int, bytes]:
    wire = b"".join(bytes(part) for part in buffers)
    (size,) = struct.unpack_from(">i", wire)
    assert size == len(wire) - 4
    return size, wire[4:]


def header_for(key: int, version: int, correlation_id: int = 99) -> RequestHeader:
    return RequestHeader(ApiKey(key), version, correlation_id, "c", 0)


def test_api_versions_response_header_is_v0_even_for_flexible_versions() -> None:
    from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse

    response = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
        throttle_time=ZERO,
    )
    _, wire = split(encode_response(header_for(18, 3), response))
    assert wire == struct.pack(">i", 99) + write(response)


def test_flexible_response_gets_header_v1_and_legacy_gets_v0() -> None:
    flexible = MetadataResponseV12(brokers=(), cluster_id="c", controller_id=1, topics=(), throttle_time=ZERO)
    legacy = MetadataResponseV8(
        brokers=(),
        cluster_id="c",
        controller_id=1,
        topics=(),
        throttle_time=ZERO,
        cluster_authorized_operations=0,
    )
    assert split(encode_response(header_for(3, 12), flexible))[1] == struct.pack(">ib", 99, 0) + write(
        flexible
    )
    assert split(encode_response(header_for(3, 8), legacy))[1] == struct.pack(">i", 99) + write(legacy)


def test_cold_responses_are_encoded_by_kio() -> None:
    response = DescribeClusterResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        cluster_id="tidelog",
        controller_id=1,
        brokers=(DescribeClusterBroker(broker_id=1, host="localhost", port=9092, rack=None),),
        cluster_authorized_operations=-2147483648,
    )
    _, wire = split(encode_response(header_for(60, 1), response))
    assert wire == struct.pack(">ib", 99, 0) + write(response)


def test_response_for_another_version_is_refused() -> None:
    flexible = MetadataResponseV12(brokers=(), cluster_id="c", controller_id=1, topics=(), throttle_time=ZERO)
    with pytest.raises(ValueError):
        encode_response(header_for(3, 11), flexible)


def test_api_versions_fallback_is_a_v0_body_with_unsupported_version() -> None:
    _, wire = split(encode_api_versions_unsupported(1234))
    header, offset = entity_reader(KioResponseHeaderV0)(wire, 0)
    assert header.correlation_id == 1234
    body, size = entity_reader(ApiVersionsResponseV0)(wire, offset)
    assert offset + size == len(wire)
    assert body.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]


def test_api_versions_fallback_can_list_every_range() -> None:
    ranges = [(0, 0, 13), (1, 4, 17), (18, 0, 4)]
    _, wire = split(encode_api_versions_unsupported(5, ranges))
    body, _ = entity_reader(ApiVersionsResponseV0)(wire, 4)
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == ranges


def test_decode_works_on_a_memoryview_frame() -> None:
    frame = memoryview(request_frame(METADATA))
    assert decode_request(parse_request_header(frame), frame) == METADATA


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff\x0f",  # compact array of 2^32 - 2 topics in a 5-byte body
        b"\x80\x80\x80\x80\x08\x00\x00",  # 2^31 - 1 topics
    ],
)
def test_huge_array_count_is_refused_before_kio_allocates_for_it(body: bytes) -> None:
    # kio 0.6.5 reserves memory from the wire count: without the schema walk this aborts the process.
    frame = request_frame(METADATA)[: -len(write(METADATA))] + body
    with pytest.raises(InvalidRequest, match="array of"):
        decode(frame)


def test_huge_legacy_array_count_is_refused() -> None:
    from kio.schema.request_header.v1.header import RequestHeader as KioHeaderV1

    header = KioHeaderV1(
        request_api_key=i16(3), request_api_version=i16(8), correlation_id=i32(1), client_id=None
    )
    frame = write(header) + struct.pack(">i", 2**31 - 1) + b"\x00\x00\x00"
    with pytest.raises(InvalidRequest, match="array of"):
        decode(frame)
