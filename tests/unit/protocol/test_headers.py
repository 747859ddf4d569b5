"""Request header v1/v2 parsing and response header v0/v1 encoding."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.request_header.v1.header import RequestHeader as KioHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from tidelog.protocol.apis import ApiKey
from tidelog.protocol.errors import Hint, InvalidRequest, UnknownApiKey, UnsupportedVersion
from tidelog.protocol.headers import encode_response_header, parse_request_header


def kio_header(key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool) -> bytes:
    cls = KioHeaderV2 if flexible else KioHeaderV1
    buffer = io.BytesIO()
    header = cls(
        request_api_key=i16(key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    entity_writer(cls)(buffer, header)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("key", "version", "flexible"),
    [
        (ApiKey.API_VERSIONS, 0, False),
        (ApiKey.API_VERSIONS, 3, True),
        (ApiKey.METADATA, 8, False),
        (ApiKey.METADATA, 9, True),
        (ApiKey.PRODUCE, 8, False),
        (ApiKey.PRODUCE, 9, True),
        (ApiKey.FETCH, 11, False),
        (ApiKey.FETCH, 12, True),
    ],
)
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "ünïcode-client"])
def test_header_version_follows_the_api_flexible_threshold(
    key: ApiKey, version: int, flexible: bool, client_id: str | None
) -> None:
    raw = kio_header(key, version, 1234, client_id, flexible)
    header = parse_request_header(raw + b"BODY")
    assert (header.api_key, header.api_version, header.correlation_id) == (key, version, 1234)
    assert header.client_id == client_id
    assert header.body_offset == len(raw)
    assert header.flexible is flexible


def test_unknown_tagged_fields_in_a_v2_header_are_skipped() -> None:
    raw = kio_header(ApiKey.METADATA, 12, 5, "c", True)
    with_tags = raw[:-1] + bytes([2, 0, 3]) + b"abc" + bytes([200, 1, 1]) + b"z"
    header = parse_request_header(with_tags + b"BODY")
    assert header.body_offset == len(with_tags)


def test_unknown_api_key_carries_the_correlation_id() -> None:
    with pytest.raises(UnknownApiKey) as caught:
        parse_request_header(struct.pack(">hhih", 999, 0, 77, -1))
    assert (caught.value.api_key, caught.value.correlation_id, caught.value.hint) == (999, 77, Hint.CLOSE)


@pytest.mark.parametrize(
    ("key", "version", "hint"),
    [
        (ApiKey.PRODUCE, 0, Hint.CLOSE),
        (ApiKey.PRODUCE, 2, Hint.CLOSE),
        (ApiKey.PRODUCE, 14, Hint.CLOSE),
        (ApiKey.FETCH, 3, Hint.CLOSE),
        (ApiKey.API_VERSIONS, 5, Hint.API_VERSIONS_FALLBACK),
        (ApiKey.API_VERSIONS, 32767, Hint.API_VERSIONS_FALLBACK),
        (ApiKey.API_VERSIONS, -1, Hint.API_VERSIONS_FALLBACK),
    ],
)
def test_unsupported_version_tells_the_broker_what_kafka_does(key: int, version: int, hint: Hint) -> None:
    with pytest.raises(UnsupportedVersion) as caught:
        parse_request_header(struct.pack(">hhih", key, version, 9, -1))
    assert (caught.value.api_key, caught.value.version, caught.value.correlation_id) == (key, version, 9)
    assert caught.value.hint is hint


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x12\x00",
        struct.pack(">hhi", 18, 0, 1),
        struct.pack(">hhih", 18, 0, 1, 5) + b"abc",
        struct.pack(">hhih", 18, 0, 1, -2),
        struct.pack(">hhih", 18, 0, 1, 2) + b"\xff\xfe",
        struct.pack(">hhih", 18, 3, 1, -1),
        struct.pack(">hhih", 18, 3, 1, -1) + b"\x01\x00\x05ab",
        struct.pack(">hhih", 18, 3, 1, -1) + b"\x80\x80\x80\x80\x80\x01",
    ],
)
def test_malformed_headers_are_invalid_requests(raw: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_request_header(raw)


def test_response_headers() -> None:
    assert encode_response_header(0x01020304, False) == b"\x01\x02\x03\x04"
    assert encode_response_header(-1, True) == b"\xff\xff\xff\xff\x00"
