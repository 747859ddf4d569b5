"""The neutral decoders read exactly what the platform processes write: each case encodes with the
writer's own code (gateway.state_codec, the governor's PartitionMove and record shapes) and decodes here."""

from __future__ import annotations

import json

import pytest

from tidelog.common.platform_records import (
    GatewaySource,
    GovernorControl,
    GovernorLast,
    GovernorPlan,
    GovernorThrottles,
    decode_gateway_state,
    decode_governor,
)
from tidelog.gateway.seqno import SourceState
from tidelog.gateway.state_codec import encode_state, state_key
from tidelog.governor.planner import PartitionMove


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@pytest.mark.parametrize("topic, source", [("orders", "web-1"), ("ünï|code", '["quoted",]'), ("t", "")])
def test_gateway_state_written_by_the_gateway_decodes_to_its_source_seqno_and_partition(topic: str,
                                                                                        source: str) -> None:
    decoded = decode_gateway_state(state_key(topic, source), encode_state(SourceState(41, 3)))
    assert decoded == GatewaySource(topic, source, 41, 3)


@pytest.mark.parametrize("key, value", [
    (b"not json", b'{"v":1,"seqno":1,"partition":0}'),
    (b'["only-topic"]', b'{"v":1,"seqno":1,"partition":0}'),
    (b'["t","s"]', b'{"v":2,"seqno":1,"partition":0}'),
    (b'["t","s"]', b'{"v":1,"seqno":-1,"partition":0}'),
    (b'["t","s"]', b'{"v":1,"seqno":true,"partition":0}'),
    (b'["t","s"]', b"[1]"),
    (b'["t","s"]', b"\xff"),
])
def test_a_gateway_record_that_does_not_decode_is_a_value_error(key: bytes, value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_gateway_state(key, value)


def test_governor_records_in_the_shapes_the_engine_writes_decode() -> None:
    moves = [PartitionMove("orders", 0, (1, 2), (3, 2), 4096), PartitionMove("orders", 1, (1, 2), (2, 1), 10)]
    plan = decode_governor("plan", _json({"id": "ab12", "createdMs": 5, "reason": "drain 1", "throttle": 1e6,
                                          "moves": [m.to_json() for m in moves], "cancelled": [["orders", 1]]}))
    assert isinstance(plan, GovernorPlan)
    assert [(m.topic, m.partition, m.before, m.after, m.size) for m in plan.moves] == [
        (m.topic, m.partition, m.before, m.after, m.size) for m in moves]
    assert plan.cancelled == {("orders", 1)} and plan.moves[0].adding == (3,) and plan.throttle == 1e6
    control = decode_governor("control", _json({"paused": True, "pausedBy": "breaker", "reason": "disk 91%",
                                                "drained": [4], "updatedMs": 9}))
    assert control == GovernorControl(True, "breaker", "disk 91%", (4,), 9)
    last = decode_governor("last", _json({"id": "ab12", "reason": "drain 1", "finishedMs": 7, "moves": 2,
                                          "cancelled": 1, "throttled": True, "error": "breaker opened"}))
    assert last == GovernorLast("ab12", "drain 1", 7, 2, 1, True, "breaker opened")
    throttles = decode_governor("throttles", _json({"topics": {"orders": {"leader.replication.throttled.replicas":
                                                                          "0:1"}}, "brokers": [1, 3]}))
    assert throttles == GovernorThrottles({"orders": {"leader.replication.throttled.replicas": "0:1"}}, (1, 3))


@pytest.mark.parametrize("key, value", [
    ("plan", b'{"id":"x"}'),
    ("plan", b'{"id":"x","moves":[{"topic":"t","partition":0,"before":1,"after":[2]}]}'),
    ("control", b'{"drained":"all"}'),
    ("elsewhere", b"{}"),
    ("last", b"null"),
])
def test_a_governor_record_that_does_not_decode_is_a_value_error(key: str, value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_governor(key, value)
