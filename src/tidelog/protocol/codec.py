"""Request decoding (kio) and response encoding (hand-written for hot responses, kio otherwise).

``decode_request(header, frame)`` turns the body of a frame into kio's request dataclass. kio 0.6.5
raises ``KeyError`` on a tagged field it does not know, whereas the protocol (KIP-482) says an
unknown tag must be skipped: on that error the body is walked once against the schema, unknown
tags are dropped (``_TagStripper``), and the cleaned body is decoded again. The walk costs a
Python pass over the body, so it only runs on that rare path.

``encode_response(header, response)`` returns the buffers of a whole response frame, ready for
``writelines``: the first holds the 4-byte size and the response header; the others hold the body.
Fetch record bytes are passed through as their own buffer, never copied.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from typing import Any

from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from tidelog.common.errors import ErrorCode
from tidelog.protocol import apis
from tidelog.protocol.encoders import HAND_WRITTEN, Buffers
from tidelog.protocol.errors import InvalidRequest
from tidelog.protocol.headers import RequestHeader, encode_response_header, read_uvarint

_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_API_VERSION_V0 = struct.Struct(">hhh")


def decode_request(header: RequestHeader, frame: bytes | bytearray | memoryview) -> Any:
    """Decode the body of ``frame`` (which starts with ``header``) into kio's request object.

    Raises ``InvalidRequest`` if the body does not parse.
    """
    cls = apis.request_class(header.api_key, header.api_version)
    offset = header.body_offset
    try:
        try:
            request, size = _reader(cls)(frame, offset)
        except KeyError:
            frame, offset = _TagStripper(frame, offset).strip(cls), 0
            request, size = _reader(cls)(frame, offset)
    except InvalidRequest as error:
        error.api_key, error.correlation_id = header.api_key, header.correlation_id
        raise
    except Exception as error:
        raise _invalid(header, f"malformed body: {type(error).__name__}: {error}") from error
    # Bytes after a complete body are ignored, as Kafka's parser does: librdkafka 2.16 pads an
    # all-topics Metadata v13 request with three such bytes.
    return request


def encode_response(header: RequestHeader, response: Any) -> list[bytes | memoryview]:
    """Encode a whole response frame (size, header, body) for the request ``header`` answers."""
    key, version = header.api_key, header.api_version
    if response.__api_key__ != key or response.__version__ != version:
        raise ValueError(
            f"response {type(response).__module__} does not answer API key {key} version {version}"
        )
    encode = HAND_WRITTEN.get(key)
    body: Buffers = encode(response) if encode is not None else [_kio_body(response)]
    flexible = apis.is_flexible(key, version) and key != apis.ApiKey.API_VERSIONS
    return _frame(encode_response_header(header.correlation_id, flexible), body)


def encode_api_versions_unsupported(
    correlation_id: int, ranges: Iterable[tuple[int, int, int]] | None = None
) -> list[bytes | memoryview]:
    """The ApiVersions answer to a version the broker does not know: v0 body, UNSUPPORTED_VERSION.

    ``ranges`` are (api_key, min, max) triples; by default only ApiVersions' own range, which is
    what Kafka sends (``ApiVersionsRequest.getErrorResponse``) and enough for librdkafka to retry
    with v0 and for kafka-python to pick the highest version it reads.
    """
    if ranges is None:
        low, high = apis.accepted_range(apis.ApiKey.API_VERSIONS)
        ranges = [(apis.ApiKey.API_VERSIONS, low, high)]
    entries = [_API_VERSION_V0.pack(key, low, high) for key, low, high in ranges]
    body = _INT16.pack(ErrorCode.UNSUPPORTED_VERSION) + _SIZE.pack(len(entries)) + b"".join(entries)
    return _frame(encode_response_header(correlation_id, False), [body])


def _frame(header: bytes, body: Buffers) -> list[bytes | memoryview]:
    size = len(header) + sum(len(part) for part in body)
    out: list[bytes | memoryview] = [_SIZE.pack(size) + header]
    out.extend(body)
    return out


def _kio_body(response: Any) -> bytes:
    buffer = io.BytesIO()
    _writer(type(response))(buffer, response)
    return buffer.getvalue()


_READERS: dict[object, Callable[[Any, int], tuple[Any, int]]] = {}
_WRITERS: dict[object, Callable[[Any, Any], None]] = {}


def _reader(cls: type[Any]) -> Callable[[Any, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Callable[[Any, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def _invalid(header: RequestHeader, message: str) -> InvalidRequest:
    return InvalidRequest(message, api_key=header.api_key, correlation_id=header.correlation_id)


_FIXED_WIDTH = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


class _TagStripper:
    """Copies one entity's bytes, dropping tagged fields the schema does not declare.

    Walks the wire format field by field from the kio dataclass (declared order, tagged fields
    last), so that unknown tags at any depth are removed and known tags are kept (their value
    walked too). Raises ``InvalidRequest`` if the bytes end early.
    """

    def __init__(self, buf: bytes | bytearray | memoryview, offset: int) -> None:
        self.buf = memoryview(buf)
        self.pos = offset
        self.out = bytearray()

    def strip(self, cls: type[Any]) -> bytes:
        self._entity(cls)
        self.out += self.buf[self.pos :]
        return bytes(self.out)

    def _take(self, size: int) -> memoryview:
        end = self.pos + size
        if size < 0 or end > len(self.buf):
            raise InvalidRequest("body truncated")
        chunk = self.buf[self.pos : end]
        self.pos = end
        return chunk

    def _copy(self, size: int) -> None:
        self.out += self._take(size)

    def _uvarint(self) -> int:
        value, end = read_uvarint(self.buf, self.pos)
        self._copy(end - self.pos)
        return value

    def _signed(self, fmt: str) -> int:
        value: int = struct.unpack_from(fmt, self._peek(struct.calcsize(fmt)))[0]
        self._copy(struct.calcsize(fmt))
        return value

    def _peek(self, size: int) -> memoryview:
        if self.pos + size > len(self.buf):
            raise InvalidRequest("body truncated")
        return self.buf[self.pos : self.pos + size]

    def _entity(self, cls: type[Any]) -> None:
        flexible = bool(cls.__flexible__)
        tagged: dict[int, Any] = {}
        for field in fields(cls):
            tag = get_field_tag(field)
            if tag is None:
                self._field(field, flexible)
            else:
                tagged[int(tag)] = field
        if flexible:
            self._tags(tagged)

    def _tags(self, known: dict[int, Any]) -> None:
        count, end = read_uvarint(self.buf, self.pos)
        self.pos = end
        kept: list[tuple[int, bytes]] = []
        for _ in range(count):
            tag, self.pos = read_uvarint(self.buf, self.pos)
            size, self.pos = read_uvarint(self.buf, self.pos)
            payload = self._take(size)
            if tag in known:
                inner = _TagStripper(payload, 0)
                inner._field(known[tag], True, tagged=True)
                kept.append((tag, bytes(inner.out) + bytes(payload[inner.pos :])))
        self.out += _uvarint_bytes(len(kept))
        for tag, payload_bytes in kept:
            self.out += _uvarint_bytes(tag) + _uvarint_bytes(len(payload_bytes)) + payload_bytes

    def _field(self, field: Any, flexible: bool, tagged: bool = False) -> None:
        kind = classify_field(field)
        if kind.is_array:
            length = self._uvarint() - 1 if flexible else self._signed(">i")
            for _ in range(max(length, 0)):
                self._value(kind, field, flexible)
            return
        if isinstance(kind, EntityField) and not tagged and _is_nullable(field) and self._signed(">b") < 0:
            return
        self._value(kind, field, flexible)

    def _value(self, kind: Any, field: Any, flexible: bool) -> None:
        if isinstance(kind, EntityField | EntityTupleField):
            self._entity(kind.type_)
            return
        assert isinstance(kind, PrimitiveField | PrimitiveTupleField)
        kafka_type = get_schema_field_type(field)
        width = _FIXED_WIDTH.get(kafka_type)
        if width is not None:
            self._copy(width)
        elif flexible:
            self._copy(max(self._uvarint() - 1, 0))
        elif kafka_type == "string":
            self._copy(max(self._signed(">h"), 0))
        else:
            self._copy(max(self._signed(">i"), 0))


def _is_nullable(field: Any) -> bool:
    return type(None) in getattr(field.type, "__args__", ())


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


__all__: Sequence[str] = (
    "decode_request",
    "encode_api_versions_unsupported",
    "encode_response",
)
