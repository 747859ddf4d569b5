"""Wire primitives shared by the hand-written encoders.

Conventions (Kafka's, and kio's for the Python values):
- non-flexible strings: int16 length then UTF-8, -1 for null; flexible: uvarint(length + 1), 0 null.
- non-flexible arrays and bytes: int32 count/length, -1 for null; flexible: uvarint(count + 1).
- durations are whole milliseconds, ``round(seconds * 1000)``; datetimes are epoch milliseconds,
  ``round(timestamp * 1000)``, null as -1; a null UUID is sixteen zero bytes.
- a flexible structure ends with its tagged fields: uvarint count, then per field uvarint tag,
  uvarint size, value. A tagged field is written only when its value differs from its default.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import MISSING, fields
from typing import Any

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
NO_TAGS = b"\x00"
NULL_UUID = bytes(16)

_SMALL_UVARINTS = [bytes([value]) for value in range(128)]


def uvarint(value: int) -> bytes:
    if value < 128:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = value.encode()
    return uvarint(len(data) + 1) + data


def legacy_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    data = value.encode()
    return INT16.pack(len(data)) + data


def string(value: str | None, flexible: bool) -> bytes:
    return compact_string(value) if flexible else legacy_string(value)


def array_length(count: int | None, flexible: bool) -> bytes:
    if flexible:
        return b"\x00" if count is None else uvarint(count + 1)
    return INT32.pack(-1 if count is None else count)


_INT32_ARRAYS: dict[tuple[tuple[int, ...], bool], bytes] = {}


def int32_array(values: tuple[int, ...], flexible: bool) -> bytes:
    """An int32 array; cached, since replica and ISR lists repeat across partitions."""
    key = (values, flexible)
    found = _INT32_ARRAYS.get(key)
    if found is None:
        if len(_INT32_ARRAYS) >= 4096:
            _INT32_ARRAYS.clear()
        found = array_length(len(values), flexible) + struct.pack(f">{len(values)}i", *values)
        _INT32_ARRAYS[key] = found
    return found


def millis(duration: datetime.timedelta) -> int:
    return round(duration.total_seconds() * 1000)


def epoch_millis(moment: datetime.datetime | None) -> int:
    return -1 if moment is None else round(moment.timestamp() * 1000)


def uuid_bytes(value: Any) -> bytes:
    return NULL_UUID if value is None else bytes(value.bytes)


def tagged(tag: int, payload: bytes) -> bytes:
    return uvarint(tag) + uvarint(len(payload)) + payload


def tag_section(entries: list[bytes]) -> bytes:
    if not entries:
        return NO_TAGS
    return uvarint(len(entries)) + b"".join(entries)


_DEFAULTS: dict[object, dict[str, Any]] = {}


def defaults(cls: type[Any]) -> dict[str, Any]:
    """Field name → declared default for a kio dataclass (fields without one are left out)."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
        _DEFAULTS[cls] = found
    return found


def node_endpoints(endpoints: Any) -> bytes:
    """The compact array of NodeEndpoint (node_id, host, port, rack) used by Produce and Fetch v10+/v16+."""
    out = bytearray(uvarint(len(endpoints) + 1))
    for node in endpoints:
        out += INT32.pack(node.node_id) + compact_string(node.host) + INT32.pack(node.port)
        out += compact_string(node.rack) + NO_TAGS
    return bytes(out)
