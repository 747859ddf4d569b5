"""Request and response headers.

Request header, as the broker reads it (all big-endian)::

    v1 (non-flexible request):  api_key int16 | api_version int16 | correlation_id int32
                                | client_id nullable string (int16 length, -1 = null)
    v2 (flexible request):      v1 fields | tagged fields (uvarint count, then per field:
                                uvarint tag, uvarint size, size bytes)

``client_id`` keeps the int16-length form even in v2 (Kafka's RequestHeader.json marks it
``flexibleVersions: none``). Tagged fields in the header are skipped whatever their tag. Whether a
request is flexible comes from the API registry (``apis.is_flexible``).

Response header: v0 is ``correlation_id int32``; v1 adds an empty tagged-field section (one zero
byte). Flexible responses use v1, except ApiVersions, whose response header is always v0 so that a
client that does not yet know the broker's versions can read it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tidelog.protocol import apis
from tidelog.protocol.errors import InvalidRequest, UnknownApiKey, UnsupportedVersion

_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_EMPTY_TAGS = b"\x00"
# Decoded client ids by their bytes: a connection sends the same one with every request.
_CLIENT_IDS: dict[bytes, str] = {}
_CLIENT_IDS_MAX = 4096


class RequestHeader(NamedTuple):
    """A parsed request header; the body starts at ``body_offset`` in the frame.

    A NamedTuple: one is built per request, several times cheaper than a frozen dataclass.
    """

    api_key: apis.ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int

    @property
    def flexible(self) -> bool:
        return apis.is_flexible(self.api_key, self.api_version)


def read_uvarint(buf: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Read an unsigned varint (at most 5 bytes, like Kafka's); return (value, next offset)."""
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if offset >= end:
            raise InvalidRequest("truncated varint")
        byte = buf[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 28:
            raise InvalidRequest("varint longer than 5 bytes")


def skip_tagged_fields(buf: bytes | bytearray | memoryview, offset: int) -> int:
    """Skip a tagged-field section whatever its tags; return the offset after it."""
    count, offset = read_uvarint(buf, offset)
    for _ in range(count):
        _tag, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        offset += size
        if offset > len(buf):
            raise InvalidRequest("truncated tagged field")
    return offset


def parse_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Parse the header at the start of a frame.

    Raises ``UnknownApiKey``, ``UnsupportedVersion`` (with the correlation id, so ApiVersions can be
    answered) or ``InvalidRequest`` (truncated or malformed header).
    """
    if len(frame) < _FIXED.size:
        raise InvalidRequest(f"request header truncated ({len(frame)} bytes)")
    key_value, version, correlation_id = _FIXED.unpack_from(frame, 0)
    key = apis.known_key(key_value)
    if key is None:
        raise UnknownApiKey(key_value, correlation_id)
    if not apis.is_supported(key, version):
        raise UnsupportedVersion(key, version, correlation_id, apis.accepted_range(key))
    client_id, offset = _read_client_id(frame, _FIXED.size, key, correlation_id)
    if apis.is_flexible(key, version):
        try:
            offset = skip_tagged_fields(frame, offset)
        except InvalidRequest as error:
            error.api_key, error.correlation_id = key, correlation_id
            raise
    return RequestHeader(key, version, correlation_id, client_id, offset)


def _read_client_id(
    frame: bytes | bytearray | memoryview, offset: int, key: int, correlation_id: int
) -> tuple[str | None, int]:
    if len(frame) < offset + 2:
        raise InvalidRequest(
            "request header truncated in client_id", api_key=key, correlation_id=correlation_id
        )
    (length,) = _INT16.unpack_from(frame, offset)
    offset += 2
    if length == -1:
        return None, offset
    if length < 0 or len(frame) < offset + length:
        raise InvalidRequest(f"bad client_id length {length}", api_key=key, correlation_id=correlation_id)
    raw = bytes(frame[offset : offset + length])
    client_id = _CLIENT_IDS.get(raw)
    if client_id is None:
        try:
            client_id = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("client_id is not UTF-8", api_key=key, correlation_id=correlation_id) from None
        if len(_CLIENT_IDS) >= _CLIENT_IDS_MAX:
            _CLIENT_IDS.clear()
        _CLIENT_IDS[raw] = client_id
    return client_id, offset + length


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v1 if ``flexible`` else v0. For ApiVersions pass ``flexible=False`` always."""
    header = _INT32.pack(correlation_id)
    return header + _EMPTY_TAGS if flexible else header
