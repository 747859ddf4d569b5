"""Invariant of the codec: any input either decodes or raises ProtocolError, and nothing else.

No IndexError, struct.error, KeyError, UnicodeDecodeError or kio error may leak to the broker,
whatever the client sends: random bytes, or valid requests with bytes flipped, cut or inserted.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as KioHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import Records, i16, i32

from tidelog.protocol import apis
from tidelog.protocol.codec import decode_request
from tidelog.protocol.errors import ProtocolError
from tidelog.protocol.framing import FrameDecoder
from tidelog.protocol.headers import parse_request_header

st.register_type_strategy(Records, st.binary(max_size=100))  # type: ignore[type-abstract]

CASES = [(key, version) for key, (low, high) in apis.ACCEPTED.items() for version in range(low, high + 1)]


def run(stream: bytes, chunk: int) -> list[Any]:
    """Feed the stream through the whole codec; return what decoded. ProtocolError stops it."""
    decoder = FrameDecoder(1 << 16)
    decoded = []
    try:
        for start in range(0, len(stream), chunk):
            for frame in decoder.feed(stream[start : start + chunk]):
                header = parse_request_header(frame)
                decoded.append(decode_request(header, frame))
    except ProtocolError:
        pass
    return decoded


def write(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


@st.composite
def valid_frames(draw: st.DrawFn) -> bytes:
    key, version = draw(st.sampled_from(CASES))
    request = draw(st.from_type(apis.request_class(key, version)))
    header_cls = KioHeaderV2 if apis.is_flexible(key, version) else KioHeaderV1
    header = header_cls(
        request_api_key=i16(key), request_api_version=i16(version), correlation_id=i32(1), client_id="fuzz"
    )
    return write(header) + write(request)


@st.composite
def mutated(draw: st.DrawFn, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "insert", "version", "varint"]))
        position = draw(st.integers(0, max(len(data) - 1, 0)))
        if action == "flip" and data:
            data[position] ^= draw(st.integers(1, 255))
        elif action == "cut":
            del data[position:]
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif action == "version" and len(data) >= 4:
            data[2:4] = struct.pack(">h", draw(st.integers(-2, 20)))
        elif action == "varint":
            data[position:position] = b"\xff\xff\xff\xff\x7f"
    return bytes(data)


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@settings(max_examples=300)
@given(stream=st.binary(max_size=300), chunk=st.integers(1, 64))
def test_random_bytes_decode_or_raise_protocol_error(stream: bytes, chunk: int) -> None:
    run(stream, chunk)


@settings(max_examples=300)
@given(body=st.binary(max_size=200))
def test_random_frame_bodies_decode_or_raise_protocol_error(body: bytes) -> None:
    run(framed(body), len(body) + 4)


@settings(max_examples=400)
@given(data=st.data())
def test_mutated_valid_requests_decode_or_raise_protocol_error(data: st.DataObject) -> None:
    body = data.draw(valid_frames())
    run(framed(data.draw(mutated(body))), 1 << 20)


@settings(max_examples=100)
@given(data=st.data())
def test_valid_requests_after_a_mutated_one_in_the_same_stream(data: st.DataObject) -> None:
    good = data.draw(valid_frames())
    stream = framed(good) + framed(data.draw(mutated(good)))
    assert len(run(stream, data.draw(st.integers(1, 512)))) >= 1


@settings(max_examples=500)
@given(case=st.sampled_from(CASES), body=st.binary(max_size=120))
def test_garbage_body_behind_a_valid_header_decodes_or_raises_protocol_error(
    case: tuple[int, int], body: bytes
) -> None:
    key, version = case
    header_cls = KioHeaderV2 if apis.is_flexible(key, version) else KioHeaderV1
    header = header_cls(
        request_api_key=i16(key), request_api_version=i16(version), correlation_id=i32(1), client_id=None
    )
    run(framed(write(header) + body), 1 << 20)
