"""What a pull-read request says, parsed and checked; and how a record is answered. Pure.

- ``POST /v1/sessions`` body: ``{"group": G, "topics": [T, ...], "timeoutMs": N,
  "autoOffsetReset": "earliest"|"latest", "dataCentres": "*"|[DC, ...]}`` (all but ``group`` and
  ``topics`` optional). Without ``dataCentres`` topics are read as named; with a list, ``T`` means
  ``<DC>.T`` for each DC listed; with ``"*"``, ``T`` means every ``<DC>.T`` there is or will be (a
  regular-expression subscription, ``^[A-Za-z0-9-][A-Za-z0-9_-]*\\.T$``: a DC name has no dot and
  does not start with ``_``, so no internal topic can match);
- ``GET /v1/sessions/{id}/records`` query: ``waitMs`` (0 to ``MAX_WAIT_MS``), ``maxRecords``
  (1 to ``MAX_RECORDS``), ``maxBytes`` (1 to the session's buffer), ``format`` (``json`` or ``raw``);
- ``POST /v1/sessions/{id}/commit`` body: empty (commit everything this session has delivered) or
  ``{"offsets": [{"topic": T, "partition": P, "offset": O}, ...]}`` where ``O`` is Kafka's committed
  offset: the next record to read, i.e. the last processed record's offset + 1 (a poll answer's
  ``next`` lists exactly these).

A record in JSON: ``{"topic", "partition", "offset", "timestamp", "key", "value", "headers"}``.
Keys, values and header values are UTF-8 strings; one that is not valid UTF-8 is given as base64
under ``keyBase64`` / ``valueBase64`` / ``headersBase64`` instead, so nothing is lost or mangled.
In the raw format a batch is the values, each followed by ``\\n`` (a null value is an empty line).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidelog.gateway.model import InvalidRequest, check_topic

MAX_TOPICS = 100
MAX_WAIT_MS = 60_000
MAX_RECORDS = 10_000
DEFAULT_RECORDS = 500
MIN_TIMEOUT_MS = 500
MAX_TIMEOUT_MS = 3_600_000
_DC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_GROUP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:")


@dataclass(frozen=True)
class SessionRequest:
    group: str
    topics: tuple[str, ...]  # the subscription: topic names, or patterns starting with '^'
    timeout_ms: int
    auto_offset_reset: str

    @property
    def named_topics(self) -> tuple[str, ...]:
        """The topics named outright (which must exist); patterns match what there is."""
        return tuple(t for t in self.topics if not t.startswith("^"))


def dc_pattern(topic: str) -> str:
    """Every ``<dc>.<topic>``, as a librdkafka (POSIX extended) regular expression."""
    return "^[A-Za-z0-9-][A-Za-z0-9_-]*\\." + topic.replace(".", "\\.") + "$"


@dataclass(frozen=True)
class PollRequest:
    wait_ms: int
    max_records: int
    max_bytes: int
    raw: bool


@dataclass(frozen=True)
class Offset:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Delivered:
    """One record as read from the cluster, kept until a poll hands it out."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    @property
    def size(self) -> int:
        return (len(self.key or b"") + len(self.value or b"") + sum(len(n) + len(v or b"") for n, v in self.headers)
                + 64)


def _int(value: object, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise InvalidRequest(f"{what} must be an integer from {low} to {high}")
    return value


def _query_int(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidRequest(f"{name} must be an integer, got {text[:30]!r}") from None
    return _int(value, name, low, high)


def check_group(group: object, forbidden: str) -> str:
    if not isinstance(group, str) or not 0 < len(group) <= 249 or not set(group) <= _GROUP_CHARS:
        raise InvalidRequest("group must be 1 to 249 of letters, digits, '.', '_', '-', ':'")
    if group == forbidden:
        raise InvalidRequest(f"group {group!r} is the gateway's own ownership group (gateway.group.id)")
    return group


def parse_session(body: bytes, *, default_timeout_ms: int, own_group: str, state_topic: str) -> SessionRequest:
    try:
        obj: Any = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRequest("the body must be a JSON object with 'group' and 'topics'")
    unknown = set(obj) - {"group", "topics", "timeoutMs", "autoOffsetReset", "dataCentres"}
    if unknown:
        raise InvalidRequest(f"unknown fields {sorted(unknown)}")
    topics = obj.get("topics")
    if not isinstance(topics, list) or not 0 < len(topics) <= MAX_TOPICS or not all(isinstance(t, str) for t in topics):
        raise InvalidRequest(f"'topics' must be a list of 1 to {MAX_TOPICS} topic names")
    for topic in topics:
        check_topic(topic)
        if topic == state_topic:
            raise InvalidRequest(f"topic {topic!r} is the gateway's state topic")
    reset = obj.get("autoOffsetReset", "latest")
    if reset not in ("earliest", "latest"):
        raise InvalidRequest("autoOffsetReset must be 'earliest' or 'latest'")
    timeout = _int(obj.get("timeoutMs", default_timeout_ms), "timeoutMs", MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)
    subscription = _with_data_centres(topics, obj.get("dataCentres"), state_topic)
    return SessionRequest(check_group(obj.get("group"), own_group), tuple(dict.fromkeys(subscription)), timeout,
                          reset)


def _with_data_centres(topics: list[str], centres: object, state_topic: str) -> list[str]:
    if centres is None:
        return topics
    if centres == "*":
        return [dc_pattern(t) for t in topics]
    if not isinstance(centres, list) or not 0 < len(centres) <= MAX_TOPICS \
            or not all(isinstance(dc, str) and dc and set(dc) <= _DC_CHARS for dc in centres):
        raise InvalidRequest("dataCentres must be \"*\" or a list of data-centre names (letters, digits, '_', '-')")
    named = [f"{dc}.{t}" for dc in centres for t in topics]
    for topic in named:
        check_topic(topic)
        if topic == state_topic:
            raise InvalidRequest(f"topic {topic!r} is the gateway's state topic")
    return named


def parse_poll(query: Mapping[str, str], *, buffer_bytes: int, accept: str = "") -> PollRequest:
    unknown = set(query) - {"waitMs", "maxRecords", "maxBytes", "format"}
    if unknown:
        raise InvalidRequest(f"unknown query parameters {sorted(unknown)}")
    fmt = query.get("format", "raw" if accept.startswith("text/plain") else "json")
    if fmt not in ("json", "raw"):
        raise InvalidRequest("format must be 'json' or 'raw'")
    return PollRequest(_query_int(query, "waitMs", 0, 0, MAX_WAIT_MS),
                       _query_int(query, "maxRecords", DEFAULT_RECORDS, 1, MAX_RECORDS),
                       _query_int(query, "maxBytes", buffer_bytes, 1, buffer_bytes), fmt == "raw")


def parse_commit(body: bytes) -> list[Offset] | None:
    """The offsets to commit, or None for "everything delivered"."""
    if not body.strip():
        return None
    try:
        obj: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict) or set(obj) != {"offsets"} or not isinstance(obj["offsets"], list):
        raise InvalidRequest("the body must be empty or {\"offsets\": [{\"topic\", \"partition\", \"offset\"}, ...]}")
    offsets = []
    for i, entry in enumerate(obj["offsets"]):
        if not isinstance(entry, dict) or set(entry) != {"topic", "partition", "offset"} \
                or not isinstance(entry["topic"], str):
            raise InvalidRequest(f"offsets[{i}] must be an object with 'topic', 'partition' and 'offset'")
        offsets.append(Offset(entry["topic"], _int(entry["partition"], f"offsets[{i}].partition", 0, 2**31 - 1),
                              _int(entry["offset"], f"offsets[{i}].offset", 0, 2**63 - 1)))
    if not offsets:
        raise InvalidRequest("'offsets' is empty; send an empty body to commit everything delivered")
    return offsets


def _text(data: bytes | None) -> tuple[bool, str | None]:
    """(is UTF-8, text or base64)."""
    if data is None:
        return True, None
    try:
        return True, data.decode()
    except UnicodeDecodeError:
        return False, base64.b64encode(data).decode()


def record_json(record: Delivered) -> dict[str, Any]:
    out: dict[str, Any] = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
                           "timestamp": record.timestamp}
    for name, data in (("key", record.key), ("value", record.value)):
        utf8, text = _text(data)
        out[name if utf8 else f"{name}Base64"] = text
    headers: dict[str, str | None] = {}
    binary: dict[str, str | None] = {}
    for name, data in record.headers:
        utf8, text = _text(data)
        (headers if utf8 else binary)[name] = text
    out["headers"] = headers
    if binary:
        out["headersBase64"] = binary
    return out


def raw_lines(records: Sequence[Delivered]) -> bytes:
    return b"".join((r.value or b"") + b"\n" for r in records)


def offsets_json(offsets: Sequence[Offset]) -> list[dict[str, Any]]:
    return [{"topic": o.topic, "partition": o.partition, "offset": o.offset} for o in offsets]
