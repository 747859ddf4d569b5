"""What a write request says, parsed and checked before anything is written.

Two body forms for ``POST /v1/topics/{topic}/write``:

- ``application/json``: ``{"sourceId": S, "chunks": [{"seqno": N, "records": [R, ...]}, ...],
  "meta": {"host": H, "file": F, "logType": T}}`` where a record ``R`` is ``{"value": V, "key": K,
  "headers": {NAME: VALUE}}`` (``value`` required, may be null; strings are written as UTF-8; ``key``
  and ``headers`` optional);
- anything else (``text/plain``, ``application/octet-stream``): one chunk, ``sourceId`` and ``seqno``
  (and optionally ``host``, ``file``, ``logType``) in the query string; each line of the body
  (split on ``\\n``, a trailing ``\\r`` kept) is one record's value. A final newline ends the last line
  rather than adding an empty record.

Bodies are parsed with orjson (a C parser, several times faster than ``json`` on the gateway's hot
path, and stricter: invalid UTF-8 and lone surrogates are refused as not JSON rather than failing
later). Every rule is checked here, so a request that is rejected writes nothing: topic names follow Kafka's
rules and may not start with ``__`` (internal topics, the gateway's state topic), a sourceId is 1 to
1024 characters, seqnos are integers in [0, 2**63-1], a chunk has 1 to ``MAX_RECORDS`` records, a
request has 1 to ``MAX_CHUNKS`` chunks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from tidelog.gateway.seqno import SeqnoError, check_seqno

MAX_CHUNKS = 10_000
MAX_RECORDS = 100_000
MAX_SOURCE_ID = 1024
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class InvalidRequest(ValueError):
    """The request breaks a rule; the message says which, for the client."""


class Record(NamedTuple):
    """One record to write. A named tuple rather than a dataclass: a request makes one per record,
    and a frozen dataclass's constructor costs several times as much (the gateway's hot path)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class Chunk:
    seqno: int
    records: tuple[Record, ...]
    value_bytes: int = -1  # the values' total length when the parser counted it (-1: count on demand)

    def size(self) -> int:
        if self.value_bytes >= 0:
            return self.value_bytes
        return sum(len(r.value or b"") for r in self.records)


@dataclass(frozen=True)
class Meta:
    host: str = ""
    file: str = ""
    log_type: str = ""


@dataclass(frozen=True)
class WriteRequest:
    topic: str  # as the client named it (before the data-centre prefix)
    source_id: str
    chunks: tuple[Chunk, ...]
    meta: Meta = field(default_factory=Meta)
    size: int = 0  # bytes of the request body: what the request holds in memory, for back-pressure


def check_topic(topic: str) -> str:
    if not 0 < len(topic) <= 249 or topic in (".", "..") or not set(topic) <= _TOPIC_CHARS:
        raise InvalidRequest(f"invalid topic name {topic[:60]!r}: 1 to 249 of letters, digits, '.', '_', '-'")
    if topic.startswith("__"):
        raise InvalidRequest(f"topic {topic!r} is internal; the gateway does not write to topics starting with '__'")
    return topic


def check_source_id(source_id: object) -> str:
    if not isinstance(source_id, str) or not 0 < len(source_id) <= MAX_SOURCE_ID:
        raise InvalidRequest(f"sourceId must be a string of 1 to {MAX_SOURCE_ID} characters")
    return source_id


def _seqno(value: object) -> int:
    try:
        return check_seqno(value)
    except SeqnoError as exc:
        raise InvalidRequest(str(exc)) from None


def _text(value: object, what: str, *, nullable: bool = False) -> bytes | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{what} must be a string{' or null' if nullable else ''}")
    return value.encode()


def _records(records: list[Any], where: str) -> tuple[tuple[Record, ...], int]:
    """The records of a JSON list and their values' total length. The common record,
    ``{"value": "<text>"}``, takes the short way (the named tuple made without its Python-level
    constructor); the place of a bad record is formatted only when it is reported."""
    out: list[Record] = []
    append, new, size = out.append, tuple.__new__, 0
    for i, obj in enumerate(records):
        if type(obj) is dict and len(obj) == 1:
            value = obj.get("value")
            if type(value) is str:
                encoded = value.encode()
                size += len(encoded)
                append(new(Record, (encoded, None, ())))
                continue
        record = _record(obj, f"{where}[{i}]")
        size += len(record.value or b"")
        append(record)
    return tuple(out), size


def _record(obj: object, where: str) -> Record:
    if not isinstance(obj, dict):
        raise InvalidRequest(f"{where} must be an object with 'value' (and optional 'key', 'headers')")
    unknown = set(obj) - {"value", "key", "headers"}
    if unknown:
        raise InvalidRequest(f"{where} has unknown fields {sorted(unknown)}")
    if "value" not in obj:
        raise InvalidRequest(f"{where} has no 'value'")
    headers = obj.get("headers") or {}
    if not isinstance(headers, dict):
        raise InvalidRequest(f"{where}.headers must be an object of strings")
    pairs = tuple((str(name), _text(value, f"{where}.headers.{name}") or b"") for name, value in headers.items())
    return Record(_text(obj["value"], f"{where}.value", nullable=True),
                  _text(obj.get("key"), f"{where}.key", nullable=True), pairs)


def _chunk(obj: object, where: str) -> Chunk:
    if not isinstance(obj, dict) or set(obj) - {"seqno", "records"} or "seqno" not in obj:
        raise InvalidRequest(f"{where} must be an object with 'seqno' and 'records'")
    records = obj.get("records")
    if not isinstance(records, list) or not 0 < len(records) <= MAX_RECORDS:
        raise InvalidRequest(f"{where}.records must be a list of 1 to {MAX_RECORDS} records")
    parsed, size = _records(records, f"{where}.records")
    return Chunk(_seqno(obj["seqno"]), parsed, size)


def _meta(obj: object) -> Meta:
    if obj is None:
        return Meta()
    if not isinstance(obj, dict) or set(obj) - {"host", "file", "logType"}:
        raise InvalidRequest("meta must be an object with optional 'host', 'file', 'logType' strings")
    values = [obj.get(name, "") for name in ("host", "file", "logType")]
    if not all(isinstance(v, str) for v in values):
        raise InvalidRequest("meta fields must be strings")
    return Meta(*values)


def parse_json(topic: str, body: bytes) -> WriteRequest:
    try:
        obj: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRequest("the body must be a JSON object with 'sourceId' and 'chunks'")
    unknown = set(obj) - {"sourceId", "chunks", "meta"}
    if unknown:
        raise InvalidRequest(f"unknown fields {sorted(unknown)}")
    chunks = obj.get("chunks")
    if not isinstance(chunks, list) or not 0 < len(chunks) <= MAX_CHUNKS:
        raise InvalidRequest(f"'chunks' must be a list of 1 to {MAX_CHUNKS} chunks")
    return WriteRequest(check_topic(topic), check_source_id(obj.get("sourceId")),
                        tuple(_chunk(c, f"chunks[{i}]") for i, c in enumerate(chunks)), _meta(obj.get("meta")),
                        len(body))


def parse_raw(topic: str, query: Mapping[str, str], body: bytes) -> WriteRequest:
    if "seqno" not in query:
        raise InvalidRequest("a raw body needs 'sourceId' and 'seqno' in the query string")
    try:
        number = int(query["seqno"])
    except ValueError:
        raise InvalidRequest(f"seqno must be an integer, got {query['seqno'][:30]!r}") from None
    seqno = _seqno(number)
    lines = body.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not 0 < len(lines) <= MAX_RECORDS:
        raise InvalidRequest(f"a raw body must hold 1 to {MAX_RECORDS} lines")
    meta = Meta(query.get("host", ""), query.get("file", ""), query.get("logType", ""))
    new = tuple.__new__
    chunk = Chunk(seqno, tuple([new(Record, (line, None, ())) for line in lines]), len(body) - body.count(b"\n"))
    return WriteRequest(check_topic(topic), check_source_id(query.get("sourceId")), (chunk,), meta, len(body))


def parse_records_json(body: bytes) -> tuple[tuple[Record, ...], Meta]:
    """The staged API's JSON chunk: ``{"records": [R, ...], "meta": {...}}`` (``meta`` optional)."""
    try:
        obj: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict) or set(obj) - {"records", "meta"}:
        raise InvalidRequest("the body must be a JSON object with 'records' (and optional 'meta')")
    records = obj.get("records")
    if not isinstance(records, list) or not 0 < len(records) <= MAX_RECORDS:
        raise InvalidRequest(f"'records' must be a list of 1 to {MAX_RECORDS} records")
    return _records(records, "records")[0], _meta(obj.get("meta"))
