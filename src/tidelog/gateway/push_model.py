"""What a push subscription says, parsed and checked; how it is kept; what a delivery carries. Pure.

- ``POST /v1/subscriptions`` body: ``{"group": G, "topics": [T, ...], "endpoint": URL,
  "maxBatchRecords": N, "autoOffsetReset": "earliest"|"latest", "dataCentres": "*"|[DC, ...],
  "timeoutMs": N, "retryBackoffMs": N, "retryBackoffMaxMs": N}``; all but ``group``, ``topics`` and
  ``endpoint`` optional. ``group``, ``topics``, ``autoOffsetReset`` and ``dataCentres`` mean what they
  mean for a pull-read session (``read_model``); ``endpoint`` is an ``http``/``https`` URL;
  ``timeoutMs`` bounds one delivery (a POST to the endpoint), after which it counts as failed;
  a failed delivery is retried after ``retryBackoffMs``, doubling per failure up to ``retryBackoffMaxMs``.
  ``deadLetterTopic`` (optional, an existing topic the subscriber may write) with
  ``deadLetterAfterAttempts`` (default 10): a batch that many attempts failed for is written there
  instead (each record with its key, value and headers plus ``tidelog-dlq-*`` headers naming where it
  came from and why), committed, and delivery goes on; without it a batch is retried for ever.
- Kept in the cluster (``push_store``) as one record of a compacted topic per subscription: key the
  subscription id (UTF-8), value the JSON object ``SubscriptionSpec.to_json`` (the request's fields
  with their defaults filled in, plus ``id``, ``principal``, ``createdMs`` and ``version`` 1); a
  deleted subscription is a tombstone (null value). A value this version cannot read is skipped with
  a warning, never fatal: a newer gateway may have written it.
- A delivery: ``POST <endpoint>`` with ``Content-Type: application/json``, headers
  ``X-Tidelog-Subscription`` and ``X-Tidelog-Delivery`` (a delivery id, the same on every retry of
  the same batch), and the body ``{"subscription", "group", "deliveryId", "attempt", "partitions":
  [{"topic", "partition", "firstOffset", "lastOffset", "records"}], "records": [record, ...]}``,
  records in the pull API's JSON form (``read_model.record_json``) and in order within each partition.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tidelog.gateway.model import InvalidRequest, check_topic
from tidelog.gateway.read_model import Delivered, SessionRequest, parse_session, record_json

MAX_BATCH_RECORDS = 10_000
DEFAULT_BATCH_RECORDS = 100
MAX_ENDPOINT_CHARS = 2048
_FIELDS = {"group", "topics", "endpoint", "maxBatchRecords", "autoOffsetReset", "dataCentres", "timeoutMs",
           "retryBackoffMs", "retryBackoffMaxMs", "deadLetterTopic", "deadLetterAfterAttempts"}
DEFAULT_DEAD_LETTER_ATTEMPTS = 10
_ID = re.compile(r"sub-[0-9a-f]{32}")
VERSION = 1


@dataclass(frozen=True)
class SubscriptionSpec:
    id: str
    principal: str
    created_ms: int
    group: str
    topics: tuple[str, ...]  # as asked (without data-centre expansion)
    data_centres: str | tuple[str, ...] | None
    endpoint: str
    max_batch_records: int
    auto_offset_reset: str
    timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    dead_letter_topic: str | None = None
    dead_letter_after_attempts: int = DEFAULT_DEAD_LETTER_ATTEMPTS

    def session_request(self, *, own_group: str, state_topic: str) -> SessionRequest:
        """The consumer-group subscription (topics expanded by data centre), as a read session's."""
        body: dict[str, Any] = {"group": self.group, "topics": list(self.topics),
                                "autoOffsetReset": self.auto_offset_reset}
        if self.data_centres is not None:
            body["dataCentres"] = self.data_centres if isinstance(self.data_centres, str) else list(self.data_centres)
        return parse_session(json.dumps(body).encode(), default_timeout_ms=30_000, own_group=own_group,
                             state_topic=state_topic)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": VERSION, "id": self.id, "principal": self.principal,
                               "createdMs": self.created_ms, **self.request_json()}
        return out

    def request_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"group": self.group, "topics": list(self.topics), "endpoint": self.endpoint,
                               "maxBatchRecords": self.max_batch_records, "autoOffsetReset": self.auto_offset_reset,
                               "timeoutMs": self.timeout_ms, "retryBackoffMs": self.retry_backoff_ms,
                               "retryBackoffMaxMs": self.retry_backoff_max_ms}
        if self.data_centres is not None:
            out["dataCentres"] = self.data_centres if isinstance(self.data_centres, str) else list(self.data_centres)
        if self.dead_letter_topic is not None:
            out["deadLetterTopic"] = self.dead_letter_topic
            out["deadLetterAfterAttempts"] = self.dead_letter_after_attempts
        return out


def new_subscription_id() -> str:
    return "sub-" + uuid.uuid4().hex


def is_subscription_id(text: str) -> bool:
    return _ID.fullmatch(text) is not None


def _int(obj: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = obj.get(name, default)
    if type(value) is not int or not low <= value <= high:
        raise InvalidRequest(f"{name} must be an integer from {low} to {high}")
    return value


def check_endpoint(endpoint: object) -> str:
    if not isinstance(endpoint, str) or not 0 < len(endpoint) <= MAX_ENDPOINT_CHARS:
        raise InvalidRequest(f"endpoint must be an http or https URL of at most {MAX_ENDPOINT_CHARS} characters")
    try:
        parts = urlsplit(endpoint)
        port = parts.port  # raises for a port that is not a number or out of range
    except ValueError as exc:
        raise InvalidRequest(f"endpoint is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment or port == 0 \
            or any(c.isspace() or ord(c) < 32 for c in endpoint):
        raise InvalidRequest("endpoint must be an http or https URL with a host, e.g. http://host:8000/hook")
    return endpoint


def parse_subscription(body: bytes, *, principal: str, now_ms: int, own_group: str,
                       state_topic: str) -> SubscriptionSpec:
    try:
        obj: Any = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRequest("the body must be a JSON object with 'group', 'topics' and 'endpoint'")
    unknown = set(obj) - _FIELDS
    if unknown:
        raise InvalidRequest(f"unknown fields {sorted(unknown)}")
    session_fields = {k: obj[k] for k in ("group", "topics", "autoOffsetReset", "dataCentres") if k in obj}
    session = parse_session(json.dumps(session_fields).encode(), default_timeout_ms=30_000, own_group=own_group,
                            state_topic=state_topic)  # checks group, topics, data centres
    endpoint = check_endpoint(obj.get("endpoint"))
    backoff = _int(obj, "retryBackoffMs", 100, 1, 60_000)
    backoff_max = _int(obj, "retryBackoffMaxMs", max(backoff, 30_000), backoff, 600_000)
    centres = obj.get("dataCentres")
    dead_letter = obj.get("deadLetterTopic")
    if dead_letter is not None:
        if not isinstance(dead_letter, str):
            raise InvalidRequest("'deadLetterTopic' must be a topic name")
        check_topic(dead_letter)
    elif "deadLetterAfterAttempts" in obj:
        raise InvalidRequest("'deadLetterAfterAttempts' goes with 'deadLetterTopic'")
    return SubscriptionSpec(
        id=new_subscription_id(), principal=principal, created_ms=now_ms, group=session.group,
        topics=tuple(dict.fromkeys(obj["topics"])),
        data_centres=centres if centres is None or isinstance(centres, str) else tuple(centres),
        endpoint=endpoint, max_batch_records=_int(obj, "maxBatchRecords", DEFAULT_BATCH_RECORDS, 1, MAX_BATCH_RECORDS),
        auto_offset_reset=session.auto_offset_reset, timeout_ms=_int(obj, "timeoutMs", 10_000, 100, 120_000),
        retry_backoff_ms=backoff, retry_backoff_max_ms=backoff_max, dead_letter_topic=dead_letter,
        dead_letter_after_attempts=_int(obj, "deadLetterAfterAttempts", DEFAULT_DEAD_LETTER_ATTEMPTS, 1, 1_000_000))


def spec_from_record(key: bytes, value: bytes) -> SubscriptionSpec:
    """A stored subscription; ``ValueError`` for one this version cannot read."""
    obj = json.loads(value)
    if not isinstance(obj, dict) or obj.get("version") != VERSION or obj.get("id") != key.decode():
        raise ValueError(f"not a version-{VERSION} subscription record")
    centres = obj.get("dataCentres")
    return SubscriptionSpec(
        id=str(obj["id"]), principal=str(obj["principal"]), created_ms=int(obj["createdMs"]), group=str(obj["group"]),
        topics=tuple(str(t) for t in obj["topics"]),
        data_centres=centres if centres is None or isinstance(centres, str) else tuple(str(c) for c in centres),
        endpoint=str(obj["endpoint"]), max_batch_records=int(obj["maxBatchRecords"]),
        auto_offset_reset=str(obj["autoOffsetReset"]), timeout_ms=int(obj["timeoutMs"]),
        retry_backoff_ms=int(obj["retryBackoffMs"]), retry_backoff_max_ms=int(obj["retryBackoffMaxMs"]),
        dead_letter_topic=None if obj.get("deadLetterTopic") is None else str(obj["deadLetterTopic"]),
        dead_letter_after_attempts=int(obj.get("deadLetterAfterAttempts", DEFAULT_DEAD_LETTER_ATTEMPTS)))


def spec_record(spec: SubscriptionSpec) -> bytes:
    return json.dumps(spec.to_json(), separators=(",", ":")).encode()


def delivery_body(spec: SubscriptionSpec, delivery_id: str, attempt: int, records: Sequence[Delivered]) -> bytes:
    partitions: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records:
        entry = partitions.setdefault((record.topic, record.partition), {
            "topic": record.topic, "partition": record.partition, "firstOffset": record.offset,
            "lastOffset": record.offset, "records": 0})
        entry["lastOffset"] = record.offset
        entry["records"] += 1
    body = {"subscription": spec.id, "group": spec.group, "deliveryId": delivery_id, "attempt": attempt,
            "partitions": [partitions[k] for k in sorted(partitions)], "records": [record_json(r) for r in records]}
    return json.dumps(body, separators=(",", ":")).encode()


def backoff_s(spec: SubscriptionSpec, failures: int) -> float:
    """The wait before the next attempt after ``failures`` failed ones in a row (at least 1)."""
    return float(min(spec.retry_backoff_ms * 2 ** min(failures - 1, 30), spec.retry_backoff_max_ms)) / 1000
