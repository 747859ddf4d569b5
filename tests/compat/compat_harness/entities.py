"""kio entities from plain data, and plain data from kio entities.

``request(key, version, **fields)`` builds a kio request of that version from keyword arguments in
which nested entities are plain dicts and arrays plain lists, so a scenario writes one request shape
and can send it at several versions. Missing fields take the schema's default; a field the version
lacks is an error (``TypeError`` from the dataclass) so that a scenario cannot silently send less
than it means to. Integers given for duration fields become ``timedelta`` in milliseconds.

``to_plain(entity)`` turns a kio response into nested dicts (entity fields, in schema order), lists
and scalars: error codes as ``NAME(code)`` strings, durations as milliseconds, UUIDs as strings,
record bytes as ``bytes``. Normalisation and diffing work on that form.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import types
import typing
import uuid
from typing import Any

from kio.index import load_request_schema

from tidelog.protocol.apis import ApiKey


def request(key: ApiKey | int, version: int, **fields: Any) -> Any:
    """A kio request of ``key`` at ``version`` built from plain ``fields``."""
    return build(load_request_schema(int(key), version), fields)


def build(entity_type: type[Any], data: dict[str, Any]) -> Any:
    hints = _hints(entity_type)
    names = {f.name for f in dataclasses.fields(entity_type)}
    unknown = set(data) - names
    if unknown:
        raise TypeError(f"{entity_type.__module__}.{entity_type.__name__} has no field {sorted(unknown)}")
    return entity_type(**{name: _coerce(hints[name], value) for name, value in data.items()})


@functools.cache
def _hints(entity_type: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(entity_type)


def _coerce(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    hint = _strip_optional(hint)
    origin = typing.get_origin(hint)
    if origin is tuple:
        (item_type, *_rest) = typing.get_args(hint)
        return tuple(_coerce(item_type, item) for item in value)
    if isinstance(value, dict) and dataclasses.is_dataclass(hint):
        return build(typing.cast(type[Any], hint), value)
    name = getattr(hint, "__name__", "")
    if name.endswith("Timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value


def _strip_optional(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def to_plain(value: Any) -> Any:
    """Nested dicts/lists/scalars for a kio entity (see the module docstring)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return f"{value.name.upper()}({value.value})"
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value
