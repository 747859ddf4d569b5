"""Decoders for the records the platform processes keep in their state topics, for readers that are
not those processes (the console). Pure: bytes in, frozen data out, ``ValueError`` for a record that
does not decode. The writers stay where they are; unit tests check that what they write decodes here
(tests/unit/common/test_platform_records.py), so the formats cannot drift apart unnoticed.

Why here: the console may not import the gateway (import-linter contract), and the governor keeps
no decoder of its own (its store parses JSON in place). A neutral module at the bottom of the layers
can be read by anyone.

Formats (each writer's module docstring is the authority):

- **Gateway state** (``gateway.state.topic``, default ``__tidelog_gateway_state``; gateway/state_codec.py):
  key ``["<topic>", "<sourceId>"]`` (UTF-8 JSON array), value ``{"v": 1, "seqno": N, "partition": P}``;
  a null value forgets the source. One record per (topic, source), compacted, partition = shard.
- **Governor** (``governor.state.topic``, default ``__tidelog_governor``; governor/store.py): key ``plan``,
  ``control``, ``throttles`` or ``last``, value a JSON object (shapes below); a null value deletes.
- **Mirror checkpoints** are decoded by the mirror's own pure ``tidelog.mirror.position.Checkpoint``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

GATEWAY_STATE_VERSION = 1
GOVERNOR_KEYS = ("plan", "control", "throttles", "last")


@dataclass(frozen=True, slots=True)
class GatewaySource:
    topic: str
    source_id: str
    seqno: int        # the last sequence number written for this source
    partition: int    # the data topic's partition the source writes to


def decode_gateway_key(key: bytes) -> tuple[str, str]:
    try:
        value = json.loads(key)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("gateway state key is not JSON") from None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError("gateway state key is not [topic, sourceId]")
    return value[0], value[1]


def decode_gateway_state(key: bytes, value: bytes) -> GatewaySource:
    topic, source_id = decode_gateway_key(key)
    obj = _object(value, "gateway state value")
    if obj.get("v") != GATEWAY_STATE_VERSION:
        raise ValueError(f"gateway state value of an unknown version: {str(obj.get('v'))[:20]}")
    seqno, partition = obj.get("seqno"), obj.get("partition")
    if not (_count(seqno) and _count(partition)):
        raise ValueError("gateway state value fields are not non-negative integers")
    assert isinstance(seqno, int) and isinstance(partition, int)
    return GatewaySource(topic, source_id, seqno, partition)


@dataclass(frozen=True, slots=True)
class GovernorMove:
    topic: str
    partition: int
    before: tuple[int, ...]   # replica list when the plan was made
    after: tuple[int, ...]    # target replica list, leader first
    size: int                 # bytes of one replica

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(b for b in self.after if b not in self.before)


@dataclass(frozen=True, slots=True)
class GovernorPlan:
    id: str
    created_ms: int
    reason: str
    throttle: float           # bytes/s per throttled replica stream; 0 = none
    moves: tuple[GovernorMove, ...]
    cancelled: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class GovernorControl:
    paused: bool
    paused_by: str            # "operator", "breaker" or ""
    reason: str
    drained: tuple[int, ...]
    updated_ms: int


@dataclass(frozen=True, slots=True)
class GovernorLast:
    id: str
    reason: str
    finished_ms: int
    moves: int
    cancelled: int
    throttled: bool
    error: str


@dataclass(frozen=True, slots=True)
class GovernorThrottles:
    topics: dict[str, dict[str, str]]
    brokers: tuple[int, ...]


GovernorRecord = GovernorPlan | GovernorControl | GovernorLast | GovernorThrottles


def decode_governor(key: str, value: bytes) -> GovernorRecord:
    """One governor state record by its key; ``ValueError`` for an unknown key or a bad value."""
    obj = _object(value, f"governor {key} record")
    try:
        if key == "plan":
            moves = tuple(GovernorMove(str(m["topic"]), int(m["partition"]), _ids(m["before"]), _ids(m["after"]),
                                       int(m.get("size", 0))) for m in obj["moves"])
            cancelled = frozenset((str(t), int(p)) for t, p in obj.get("cancelled", []))
            return GovernorPlan(str(obj["id"]), int(obj.get("createdMs", 0)), str(obj.get("reason", "")),
                                float(obj.get("throttle", 0) or 0), moves, cancelled)
        if key == "control":
            return GovernorControl(bool(obj.get("paused", False)), str(obj.get("pausedBy", "")),
                                   str(obj.get("reason", "")), _ids(obj.get("drained", [])),
                                   int(obj.get("updatedMs", 0)))
        if key == "last":
            return GovernorLast(str(obj.get("id", "")), str(obj.get("reason", "")), int(obj.get("finishedMs", 0)),
                                int(obj.get("moves", 0)), int(obj.get("cancelled", 0)),
                                bool(obj.get("throttled", False)), str(obj.get("error", "")))
        if key == "throttles":
            topics = {str(t): {str(k): str(v) for k, v in c.items()} for t, c in obj.get("topics", {}).items()}
            return GovernorThrottles(topics, _ids(obj.get("brokers", [])))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"governor {key} record does not decode: {exc!r}") from None
    raise ValueError(f"unknown governor state key {key[:40]!r}")


def _object(value: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{what} is not JSON") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what} is not a JSON object")
    return obj


def _count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ValueError("expected a list of broker ids")
    return tuple(int(b) for b in value)
