"""A minimal Kafka protocol client over a plain socket, for tests that send what real clients never do.

Requests are kio entities encoded with the request header their schema names (v1 for non-flexible
requests, v2 for flexible ones); responses are read with kio readers after the response header their
schema names (v0 for ApiVersions and non-flexible responses, v1 for flexible ones). Anything can
also be sent as raw bytes, and a frame can carry any API key or version, so a test can build the
malformed and unsupported requests that a broker must survive.

Record batches are built here too, independently of tidelog's own codec, so that a bug shared by
the broker's encoder and decoder cannot hide: ``record_batch`` (magic 2, uncompressed, CRC-32C),
``legacy_message_set`` (magic 0 or 1, CRC-32) and ``decode_batches`` (magic 2, uncompressed).
"""

from __future__ import annotations

import io
import itertools
import socket
import struct
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import crc32c
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

T = TypeVar("T")

Header = tuple[bytes, bytes | None]


class ConnectionClosed(Exception):
    """The broker closed the connection (EOF or reset) while a response was expected."""


# ---------------------------------------------------------------------------------------------------
# Requests and responses


def encode_request(
    request: Any,
    *,
    correlation_id: int,
    client_id: str | None = "tidelog-raw-client",
    api_key: int | None = None,
    api_version: int | None = None,
) -> bytes:
    """Header + body of ``request`` (a kio request entity), without the length prefix.

    ``api_key`` and ``api_version`` override what the entity's schema says, to send requests the
    broker must refuse (the body stays the entity's own encoding).
    """
    header_type = type(request).__header_schema__
    header = header_type(
        request_api_key=request.__api_key__ if api_key is None else api_key,
        request_api_version=request.__version__ if api_version is None else api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header)
    entity_writer(type(request))(buffer, request)
    return buffer.getvalue()


def raw_request(api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: str = "raw") -> bytes:
    """Header v1 (non-flexible) + ``body``, for versions kio has no schema for (Produce v2)."""
    encoded_id = client_id.encode()
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(encoded_id)) + encoded_id + body


def decode_response(response_type: type[T], frame: bytes) -> tuple[int, T]:
    """(correlation id, response) from one response frame (without its length prefix).

    Raises ValueError when bytes are left over: a real client would misread such a response.
    """
    header_type = response_type.__header_schema__  # type: ignore[attr-defined]
    header, offset = entity_reader(header_type)(frame, 0)
    body, size = entity_reader(response_type)(frame, offset)
    if offset + size != len(frame):
        raise ValueError(
            f"{response_type.__name__}: {len(frame) - offset - size} bytes left over after the body"
        )
    return header.correlation_id, body


@dataclass(frozen=True)
class ApiVersionsV0Body:
    """An ApiVersions response in the v0 body format, which is what an unknown version gets."""

    correlation_id: int
    error_code: int
    api_keys: dict[int, tuple[int, int]]


def decode_api_versions_v0(frame: bytes) -> ApiVersionsV0Body:
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame, 0)
    offset = 10
    keys = {}
    for _ in range(max(count, 0)):
        key, low, high = struct.unpack_from(">hhh", frame, offset)
        keys[key] = (low, high)
        offset += 6
    return ApiVersionsV0Body(correlation_id, error_code, keys)


class RawClient:
    """One blocking connection to a broker. Use as a context manager, or call ``close``."""

    def __init__(self, host: str, port: int, *, timeout: float = 5.0, source: str | None = None) -> None:
        """``source``: the local address to connect from (any 127.x.y.z plays another client on Linux)."""
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_ids = itertools.count(1)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def next_correlation_id(self) -> int:
        return next(self._correlation_ids)

    # -- sending -------------------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send_request(self, request: Any, *, api_key: int | None = None, api_version: int | None = None) -> int:
        """Send a kio request entity; returns its correlation id."""
        correlation_id = self.next_correlation_id()
        self.send_frame(
            encode_request(request, correlation_id=correlation_id, api_key=api_key, api_version=api_version)
        )
        return correlation_id

    # -- receiving -----------------------------------------------------------------------------

    def _recv_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            try:
                chunk = self.sock.recv(size - len(chunks))
            except ConnectionResetError as exc:
                raise ConnectionClosed("connection reset by the broker") from exc
            if not chunk:
                raise ConnectionClosed(f"EOF after {len(chunks)} of {size} bytes")
            chunks += chunk
        return bytes(chunks)

    def receive_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exactly(4))
        return self._recv_exactly(size)

    def receive_response(self, response_type: type[T], correlation_id: int) -> T:
        received_id, response = decode_response(response_type, self.receive_frame())
        if received_id != correlation_id:
            raise AssertionError(f"correlation id {received_id}, expected {correlation_id}")
        return response

    def call(self, request: Any) -> Any:
        """Send ``request`` and return the decoded response of the matching schema version."""
        correlation_id = self.send_request(request)
        response_type = load_response_schema(request.__api_key__, request.__version__)
        return self.receive_response(response_type, correlation_id)

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout``; any bytes it sends first
        are read and dropped."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            self.sock.settimeout(remaining)
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
        return False


# ---------------------------------------------------------------------------------------------------
# Record batches, written from the format description (not from tidelog's codec)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def varint(value: int) -> bytes:
    """Kafka's signed (zig-zag) varint/varlong."""
    unsigned = _zigzag(value) & ((1 << 64) - 1)
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def _read_varint(buf: bytes, offset: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), offset


def _bytes_field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def _record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
            headers: Sequence[Header]) -> bytes:
    body = (
        b"\x00"
        + varint(timestamp_delta)
        + varint(offset_delta)
        + _bytes_field(key)
        + _bytes_field(value)
        + varint(len(headers))
        + b"".join(varint(len(k)) + k + _bytes_field(v) for k, v in headers)
    )
    return varint(len(body)) + body


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


BATCH_HEADER_SIZE = 61


def record_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Sequence[Header]] | None = None,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    magic: int = 2,
    corrupt_crc: bool = False,
) -> bytes:
    """An uncompressed record batch (magic 2 layout), valid unless asked otherwise."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    keys = keys or [None] * len(values)
    headers = headers or [()] * len(values)
    records = b"".join(
        _record(i, 0, key, value, hdrs) for i, (key, value, hdrs) in enumerate(zip(keys, values, headers, strict=True))
    )
    after_crc = struct.pack(
        ">hiqqqhii", 0, len(values) - 1, now, now, producer_id, producer_epoch, base_sequence, len(values)
    ) + records
    crc = crc32c.crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    partition_leader_epoch = -1
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, magic, crc) + after_crc


def legacy_message_set(values: Sequence[bytes], *, magic: int) -> bytes:
    """A message set in the pre-0.11 format (magic 0 or 1), uncompressed, with valid CRC-32s."""
    out = bytearray()
    for offset, value in enumerate(values):
        body = struct.pack(">bb", magic, 0)
        if magic == 1:
            body += struct.pack(">q", int(time.time() * 1000))
        body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
        message = struct.pack(">I", zlib.crc32(body)) + body
        out += struct.pack(">qi", offset, len(message)) + message
    return bytes(out)


def decode_batches(buf: bytes) -> list[Record]:
    """Records of the whole uncompressed magic-2 batches in ``buf`` (a trailing partial batch, as a
    fetch may return, is ignored)."""
    records: list[Record] = []
    pos = 0
    while pos + 12 <= len(buf):
        base_offset, batch_length = struct.unpack_from(">qi", buf, pos)
        end = pos + 12 + batch_length
        if end > len(buf):
            break
        (attributes,) = struct.unpack_from(">h", buf, pos + 21)
        if attributes & 0x07:
            raise ValueError("decode_batches reads uncompressed batches only")
        (base_timestamp,) = struct.unpack_from(">q", buf, pos + 27)
        (count,) = struct.unpack_from(">i", buf, pos + 57)
        offset = pos + BATCH_HEADER_SIZE
        for _ in range(count):
            _length, offset = _read_varint(buf, offset)
            offset += 1  # record attributes
            ts_delta, offset = _read_varint(buf, offset)
            offset_delta, offset = _read_varint(buf, offset)
            key, offset = _read_bytes(buf, offset)
            value, offset = _read_bytes(buf, offset)
            header_count, offset = _read_varint(buf, offset)
            hdrs = []
            for _ in range(header_count):
                hkey, offset = _read_bytes(buf, offset)
                hvalue, offset = _read_bytes(buf, offset)
                hdrs.append((hkey or b"", hvalue))
            records.append(Record(base_offset + offset_delta, base_timestamp + ts_delta, key, value, tuple(hdrs)))
        pos = end
    return records


def _read_bytes(buf: bytes, offset: int) -> tuple[bytes | None, int]:
    length, offset = _read_varint(buf, offset)
    if length < 0:
        return None, offset
    return bytes(buf[offset : offset + length]), offset + length
