"""Request decoding (kio) and response encoding (hand-written for hot responses, kio otherwise).

``decode_request(header, frame)`` turns the body of a frame into kio's request dataclass. Before
kio reads a body, ``_Walker`` checks it against the schema (compiled once per class into a short
plan; runs of fixed-width fields are one step), for two reasons found by fuzzing and reading kio:

- kio 0.6.5 reserves memory for an array from the count on the wire, so a 10-byte request that
  announces 2^35 elements aborts the whole process (a Rust allocation failure, not an exception).
  The walk refuses any count or length larger than the bytes that remain.
- kio raises ``KeyError`` on a tagged field it does not know, whereas KIP-482 says an unknown tag
  is skipped. When the walk sees one, it copies the body without the unknown tags (at any depth)
  and kio decodes that copy.

The common check (no copy) does not interpret the plan: ``_check`` turns each plan once into a
straight-line Python function (see ``_compile_check``) that makes the same checks as ``_Walker``
and raises the same errors, 4-6x faster. The copy without unknown tags stays with ``_Walker``.

``encode_response(header, response)`` returns the buffers of a whole response frame, ready for
``writelines``: the first holds the 4-byte size and the response header; the others hold the body.
Fetch record bytes are passed through as their own buffer, never copied.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
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
from tidelog.protocol.encoders._wire import uvarint
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
        _end, unknown_tags = _check(cls)(frame, offset)
        if unknown_tags:
            stripper = _Walker(frame, strip=True)
            stripper.walk(_plan(cls), offset)
            frame, offset = bytes(stripper.out or b""), 0
        request, _size = _reader(cls)(frame, offset)
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
    size = len(header) + sum(map(len, body))
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

# Steps of a compiled plan: (_FIXED, width) | (_COMPACT,) | (_INT16_LEN,) | (_INT32_LEN,)
# | (_ARRAY, flexible, element step) | (_ENTITY, nullable, plan).
_FIXED, _COMPACT, _INT16_LEN, _INT32_LEN, _ARRAY, _ENTITY = range(6)
Step = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Plan:
    """The wire layout of one kio entity, compiled once: its steps in order and its known tags."""

    steps: tuple[Step, ...]
    flexible: bool
    tags: dict[int, Step]


_PLANS: dict[object, _Plan] = {}


def _plan(cls: type[Any]) -> _Plan:
    found = _PLANS.get(cls)
    if found is None:
        flexible = bool(cls.__flexible__)
        steps: list[Step] = []
        tags: dict[int, Step] = {}
        for field in fields(cls):
            tag = get_field_tag(field)
            if tag is not None:
                tags[int(tag)] = _field_step(field, flexible, tagged=True)
                continue
            step = _field_step(field, flexible, tagged=False)
            if step[0] == _FIXED and steps and steps[-1][0] == _FIXED:
                steps[-1] = (_FIXED, steps[-1][1] + step[1])
            else:
                steps.append(step)
        found = _PLANS[cls] = _Plan(tuple(steps), flexible, tags)
    return found


def _field_step(field: Any, flexible: bool, tagged: bool) -> Step:
    kind = classify_field(field)
    if isinstance(kind, EntityField | EntityTupleField):
        element: Step = (_ENTITY, False, _plan(kind.type_))
    else:
        assert isinstance(kind, PrimitiveField | PrimitiveTupleField)
        kafka_type = get_schema_field_type(field)
        width = _FIXED_WIDTH.get(kafka_type)
        if width is not None:
            element = (_FIXED, width)
        elif flexible:
            element = (_COMPACT,)
        else:
            element = (_INT16_LEN,) if kafka_type == "string" else (_INT32_LEN,)
    if kind.is_array:
        return (_ARRAY, flexible, element)
    if isinstance(kind, EntityField) and not tagged and type(None) in getattr(field.type, "__args__", ()):
        return (_ENTITY, True, element[2])
    return element


class _Walker:
    """Walks a body against its compiled plan before kio reads it.

    It checks every length and count against the bytes that remain, so that kio never sizes an
    allocation from a hostile count (kio 0.6.5 reserves memory for a whole array up front: a
    10-byte request announcing 2^35 elements aborts the process). With ``strip`` it also copies
    the body while dropping tagged fields the schema does not declare, which kio cannot skip.
    """

    def __init__(self, buf: bytes | bytearray | memoryview, strip: bool, end: int | None = None) -> None:
        self.buf = buf
        self.end = len(buf) if end is None else end
        self.out: bytearray | None = bytearray() if strip else None
        self.unknown_tags = False

    def walk(self, plan: _Plan, pos: int) -> int:
        for step in plan.steps:
            pos = self.step(step, pos)
        return self.tags(plan, pos) if plan.flexible else pos

    def _advance(self, pos: int, end: int) -> int:
        if end > self.end:
            raise InvalidRequest("body truncated")
        if self.out is not None:
            self.out += self.buf[pos:end]
        return end

    def step(self, step: Step, pos: int) -> int:
        kind = step[0]
        buf = self.buf
        if kind == _FIXED:
            return self._advance(pos, pos + step[1])
        if kind == _COMPACT:
            length, start = read_uvarint(buf, pos)
            return self._advance(pos, start + max(length - 1, 0))
        if kind == _INT16_LEN:
            self._need(pos, 2)
            return self._advance(pos, pos + 2 + max(_INT16.unpack_from(buf, pos)[0], 0))
        if kind == _INT32_LEN:
            self._need(pos, 4)
            return self._advance(pos, pos + 4 + max(_SIZE.unpack_from(buf, pos)[0], 0))
        if kind == _ARRAY:
            return self._array(step[1], step[2], pos)
        if step[1]:
            self._need(pos, 1)
            marker = buf[pos]
            pos = self._advance(pos, pos + 1)
            if marker == 0xFF:
                return pos
        plan: _Plan = step[2]
        return self.walk(plan, pos)

    def _need(self, pos: int, size: int) -> None:
        if pos + size > self.end:
            raise InvalidRequest("body truncated")

    def _array(self, flexible: bool, element: Step, pos: int) -> int:
        if flexible:
            length, start = read_uvarint(self.buf, pos)
            count = length - 1
        else:
            self._need(pos, 4)
            count, start = _SIZE.unpack_from(self.buf, pos)[0], pos + 4
        pos = self._advance(pos, start)
        count = max(count, 0)  # -1 is a null array; kio refuses any other negative count
        if count > self.end - pos:
            raise InvalidRequest(f"array of {count} elements in {self.end - pos} remaining bytes")
        if element[0] == _FIXED:
            return self._advance(pos, pos + count * element[1])
        for _ in range(count):
            pos = self.step(element, pos)
        return pos

    def tags(self, plan: _Plan, pos: int) -> int:
        count, pos = read_uvarint(self.buf, pos)
        if count > self.end - pos:
            raise InvalidRequest(f"{count} tagged fields in {self.end - pos} remaining bytes")
        kept: list[bytes] = []
        for _ in range(count):
            tag, start = read_uvarint(self.buf, pos)
            size, start = read_uvarint(self.buf, start)
            end = start + size
            self._need(start, size)
            step = plan.tags.get(tag)
            if step is None:
                self.unknown_tags = True
            else:
                inner = _Walker(self.buf, strip=self.out is not None, end=end)
                consumed = inner.step(step, start)
                self.unknown_tags |= inner.unknown_tags
                if inner.out is not None:
                    value = bytes(inner.out) + bytes(self.buf[consumed:end])
                    kept.append(uvarint(tag) + uvarint(len(value)) + value)
            pos = end
        if self.out is not None:
            self.out += uvarint(len(kept)) + b"".join(kept)
        return pos


Check = Callable[[bytes | bytearray | memoryview, int], tuple[int, bool]]
_CHECKS: dict[object, Check] = {}


def _check(cls: type[Any]) -> Check:
    """The compiled ``_Walker(buf, strip=False).walk(plan, pos)`` for ``cls``: (end, unknown tags)."""
    found = _CHECKS.get(cls)
    if found is None:
        found = _CHECKS[cls] = _compile_check(_plan(cls))
    return found


def _compile_check(plan: _Plan) -> Check:
    """Generate, compile and return ``check(buf, pos) -> (end position, unknown tags seen)``.

    The generated function is what ``_Walker(buf, strip=False)`` does for this plan, unrolled:
    one block per step (``pos += width`` for fixed-width runs, an inline one-byte varint read for
    compact lengths, a ``for`` loop per array, the steps of a nested entity inlined), with the
    same bound checks in the same order, so that it raises the same ``InvalidRequest``. An empty
    tagged-field section is one byte compare; any other is left to ``_Walker.tags``. For example,
    a non-flexible array of an entity holding an int32 and a string becomes::

        if pos + 4 > end:
            raise InvalidRequest('body truncated')
        count = unpack_int32(buf, pos)[0]
        pos += 4
        if count < 0:
            count = 0
        if count > end - pos:
            raise InvalidRequest(f'array of {count} elements in {end - pos} remaining bytes')
        for _ in range(count):
            pos += 4
            if pos > end:
                raise InvalidRequest('body truncated')
            ...
    """
    source = _CheckSource()
    source.line(0, "def check(buf, pos):")
    source.line(1, "end = len(buf)")
    source.line(1, "unknown = False")
    source.entity(plan, 1)
    source.line(1, "return pos, unknown")
    namespace: dict[str, Any] = dict(source.names)
    exec(compile("\n".join(source.lines), "<tidelog.protocol.codec check>", "exec"), namespace)
    check: Check = namespace["check"]
    return check


def _walk_tags(buf: bytes | bytearray | memoryview, pos: int, plan: _Plan, unknown: bool) -> tuple[int, bool]:
    """A tagged-field section that is not empty, for the compiled checks: done by ``_Walker``."""
    walker = _Walker(buf, strip=False)
    pos = walker.tags(plan, pos)
    return pos, unknown or walker.unknown_tags


_TRUNCATED = "raise InvalidRequest('body truncated')"


class _CheckSource:
    """Source lines of one compiled check, and the names its code uses."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, object] = {
            "InvalidRequest": InvalidRequest,
            "read_uvarint": read_uvarint,
            "unpack_int16": _INT16.unpack_from,
            "unpack_int32": _SIZE.unpack_from,
            "walk_tags": _walk_tags,
        }

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def entity(self, plan: _Plan, indent: int) -> None:
        for step in plan.steps:
            self.step(step, indent)
        if plan.flexible:
            name = f"plan_{len(self.names)}"
            self.names[name] = plan
            self.line(indent, "if pos < end and buf[pos] == 0:")  # no tagged field
            self.line(indent + 1, "pos += 1")
            self.line(indent, "else:")
            self.line(indent + 1, f"pos, unknown = walk_tags(buf, pos, {name}, unknown)")

    def step(self, step: Step, indent: int) -> None:
        kind = step[0]
        if kind == _FIXED:
            self.advance(indent, str(step[1]))
        elif kind == _COMPACT:
            self.uvarint(indent)
            self.line(indent, "if n > 1:")
            self.advance(indent + 1, "n - 1")
        elif kind in (_INT16_LEN, _INT32_LEN):
            width, unpack = (2, "unpack_int16") if kind == _INT16_LEN else (4, "unpack_int32")
            self.need(indent, width)
            self.line(indent, f"n = {unpack}(buf, pos)[0]")
            self.line(indent, f"pos += {width}")
            self.line(indent, "if n > 0:")
            self.advance(indent + 1, "n")
        elif kind == _ARRAY:
            self.array(step[1], step[2], indent)
        elif step[1]:  # nullable entity: a marker byte, 0xFF for null
            self.need(indent, 1)
            self.line(indent, "marker = buf[pos]")
            self.line(indent, "pos += 1")
            self.line(indent, "if marker != 0xFF:")
            self.block(indent + 1, lambda: self.entity(step[2], indent + 1))
        else:
            self.entity(step[2], indent)

    def array(self, flexible: bool, element: Step, indent: int) -> None:
        if flexible:
            self.uvarint(indent)
            self.line(indent, "count = n - 1 if n else 0")
        else:
            self.need(indent, 4)
            self.line(indent, "count = unpack_int32(buf, pos)[0]")
            self.line(indent, "pos += 4")
            self.line(indent, "if count < 0:")  # -1 is a null array; kio refuses other negatives
            self.line(indent + 1, "count = 0")
        self.line(indent, "if count > end - pos:")
        self.line(
            indent + 1,
            "raise InvalidRequest(f'array of {count} elements in {end - pos} remaining bytes')",
        )
        if element[0] == _FIXED:
            self.line(indent, "if count:")
            self.advance(indent + 1, f"count * {element[1]}")
        else:
            self.line(indent, "for _ in range(count):")
            self.block(indent + 1, lambda: self.step(element, indent + 1))

    def block(self, indent: int, emit: Callable[[], None]) -> None:
        """The body of an ``if`` or ``for``: what ``emit`` writes, or ``pass`` (an empty entity)."""
        before = len(self.lines)
        emit()
        if len(self.lines) == before:
            self.line(indent, "pass")

    def advance(self, indent: int, size: str) -> None:
        self.line(indent, f"pos += {size}")
        self.line(indent, "if pos > end:")
        self.line(indent + 1, _TRUNCATED)

    def need(self, indent: int, size: int) -> None:
        self.line(indent, f"if pos + {size} > end:")
        self.line(indent + 1, _TRUNCATED)

    def uvarint(self, indent: int) -> None:
        """``n, pos = read_uvarint(buf, pos)``, with the one-byte case inline."""
        self.line(indent, "if pos >= end:")
        self.line(indent + 1, "raise InvalidRequest('truncated varint')")
        self.line(indent, "n = buf[pos]")
        self.line(indent, "if n < 0x80:")
        self.line(indent + 1, "pos += 1")
        self.line(indent, "else:")
        self.line(indent + 1, "n, pos = read_uvarint(buf, pos)")


__all__: Sequence[str] = (
    "decode_request",
    "encode_api_versions_unsupported",
    "encode_response",
)
