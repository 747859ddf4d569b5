"""Record formats of the console producer and consumer (pure functions, no Kafka client here).

Consumer output:

- ``raw``: the value, then a newline (``--print-key``: key, separator, value);
- ``json``: one object per line: ``{"topic", "partition", "offset", "timestamp", "timestamp_type",
  "key", "value", "headers"}``. A key or value that is not UTF-8 text is given as ``key_b64`` /
  ``value_b64`` (base64) instead; headers are a list of ``{"key", "value"}`` (or ``value_b64``);
- a kcat-style format string (``-f``): ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key,
  ``%K`` key length, ``%s`` value, ``%S`` value length, ``%T`` timestamp (ms), ``%h`` headers as
  ``k=v,k2=v2``, ``%%`` a percent sign; ``\\n``, ``\\t``, ``\\r`` and ``\\\\`` are escapes. A null key or
  value prints as nothing (length -1).

Producer input, one record per line:

- ``raw``: the line is the value; with a key separator, the part before its first occurrence is the
  key; with ``--parse-headers``, a ``k:v,k2:v2`` prefix ending in a tab holds the headers;
- ``json``: an object with any of ``key``, ``key_b64``, ``value``, ``value_b64``, ``headers`` (an
  object, or the list the consumer prints), ``partition`` and ``timestamp`` (ms). A ``key`` or
  ``value`` that is not a string is sent as its JSON text. What ``consume --format json`` prints,
  ``produce --format json`` reads back unchanged.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Headers = list[tuple[str, bytes | None]]


class FormatError(ValueError):
    """A format string or an input line that cannot be used; the message says where."""


@dataclass
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    timestamp_type: str | None
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)


@dataclass
class ProducedRecord:
    value: bytes | None
    key: bytes | None = None
    headers: Headers = field(default_factory=list)
    partition: int | None = None
    timestamp: int | None = None


# -- consumer output -----------------------------------------------------------------------------

_FIELDS: dict[str, Callable[[ConsumedRecord], bytes]] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "k": lambda r: r.key or b"",
    "K": lambda r: str(-1 if r.key is None else len(r.key)).encode(),
    "s": lambda r: r.value or b"",
    "S": lambda r: str(-1 if r.value is None else len(r.value)).encode(),
    "T": lambda r: str(-1 if r.timestamp is None else r.timestamp).encode(),
    "h": lambda r: b",".join(k.encode() + b"=" + (v or b"") for k, v in r.headers),
}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


class KcatFormat:
    """A compiled kcat ``-f`` format string."""

    def __init__(self, fmt: str) -> None:
        self.parts: list[bytes | str] = []  # literal bytes, or a field letter
        literal, i = "", 0
        while i < len(fmt):
            char = fmt[i]
            if char in "%\\" and i + 1 >= len(fmt):
                raise FormatError(f"format string ends with a lone {char!r}")
            if char == "%":
                code = fmt[i + 1]
                if code == "%":
                    literal += "%"
                elif code in _FIELDS:
                    self._flush(literal)
                    literal = ""
                    self.parts.append(code)
                else:
                    raise FormatError(f"unknown format token %{code} (known: %t %p %o %k %K %s %S %T %h %%)")
                i += 2
            elif char == "\\":
                literal += _ESCAPES.get(fmt[i + 1], "\\" + fmt[i + 1])
                i += 2
            else:
                literal += char
                i += 1
        self._flush(literal)

    def _flush(self, literal: str) -> None:
        if literal:
            self.parts.append(literal.encode())

    def render(self, record: ConsumedRecord) -> bytes:
        return b"".join(part if isinstance(part, bytes) else _FIELDS[part](record) for part in self.parts)


def _text_or_b64(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode()}


def render_json(record: ConsumedRecord) -> bytes:
    out: dict[str, Any] = {
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "timestamp_type": record.timestamp_type,
    }
    out.update(_text_or_b64("key", record.key))
    out.update(_text_or_b64("value", record.value))
    out["headers"] = [{"key": k, **_text_or_b64("value", v)} for k, v in record.headers]
    return json.dumps(out, ensure_ascii=False).encode() + b"\n"


def render_raw(record: ConsumedRecord, print_key: bool = False, key_separator: bytes = b"\t") -> bytes:
    value = record.value or b""
    if print_key:
        return (record.key or b"") + key_separator + value + b"\n"
    return value + b"\n"


# -- producer input ------------------------------------------------------------------------------


def parse_header_list(text: str) -> Headers:
    """``k:v,k2:v2`` → [("k", b"v"), ("k2", b"v2")]; a header without ``:`` has a null value."""
    headers: Headers = []
    for item in text.split(","):
        if not item:
            continue
        key, sep, value = item.partition(":")
        headers.append((key, value.encode() if sep else None))
    return headers


def parse_raw_line(line: str, key_separator: str | None = None, parse_headers: bool = False) -> ProducedRecord:
    headers: Headers = []
    if parse_headers:
        prefix, sep, line = line.partition("\t")
        if not sep:
            raise FormatError("--parse-headers: no tab after the headers")
        headers = parse_header_list(prefix)
    if key_separator is None:
        return ProducedRecord(line.encode(), headers=headers)
    key, sep, value = line.partition(key_separator)
    if not sep:
        raise FormatError(f"no key separator {key_separator!r} in the line")
    return ProducedRecord(value.encode(), key.encode(), headers)


def _bytes_field(obj: dict[str, Any], name: str) -> bytes | None:
    if f"{name}_b64" in obj:
        try:
            return base64.b64decode(obj[f"{name}_b64"], validate=True)
        except (binascii.Error, TypeError) as exc:
            raise FormatError(f"{name}_b64 is not base64: {exc}") from None
    value = obj.get(name)
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


def _json_headers(raw: Any) -> Headers:
    if raw is None:
        return []
    if isinstance(raw, dict):
        return [(str(k), None if v is None else str(v).encode()) for k, v in raw.items()]
    if isinstance(raw, list):
        headers: Headers = []
        for item in raw:
            if isinstance(item, dict) and "key" in item:
                headers.append((str(item["key"]), _bytes_field(item, "value")))
            elif isinstance(item, list) and len(item) == 2:
                headers.append((str(item[0]), None if item[1] is None else str(item[1]).encode()))
            else:
                raise FormatError(f"header {item!r} is neither {{'key', 'value'}} nor [key, value]")
        return headers
    raise FormatError("headers must be an object or a list")


def parse_json_line(line: str) -> ProducedRecord:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FormatError("expected a JSON object")
    partition, timestamp = obj.get("partition"), obj.get("timestamp")
    for name, number in (("partition", partition), ("timestamp", timestamp)):
        if number is not None and (not isinstance(number, int) or isinstance(number, bool)):
            raise FormatError(f"{name} must be an integer")
    return ProducedRecord(_bytes_field(obj, "value"), _bytes_field(obj, "key"), _json_headers(obj.get("headers")),
                          partition, timestamp)
