"""Pull-read requests parsed and checked before a consumer is made; records answered losslessly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tidelog.gateway.model import InvalidRequest
from tidelog.gateway.read_model import (
    MAX_WAIT_MS,
    Delivered,
    Offset,
    parse_commit,
    parse_poll,
    parse_session,
    raw_lines,
    record_json,
)


def session(body: Any) -> Any:
    return parse_session(json.dumps(body).encode(), default_timeout_ms=30_000, own_group="gw", state_topic="state")


def test_session_request_takes_defaults_and_drops_repeated_topics() -> None:
    parsed = session({"group": "readers", "topics": ["a", "b", "a"]})
    assert (parsed.group, parsed.topics, parsed.timeout_ms, parsed.auto_offset_reset) == \
        ("readers", ("a", "b"), 30_000, "latest")


@pytest.mark.parametrize(("body", "fragment"), [
    ({"group": "g"}, "topics"),
    ({"group": "g", "topics": []}, "topics"),
    ({"group": "g", "topics": ["__consumer_offsets"]}, "internal"),
    ({"group": "g", "topics": ["state"]}, "state topic"),
    ({"group": "g", "topics": ["a b"]}, "invalid topic"),
    ({"group": "", "topics": ["a"]}, "group"),
    ({"group": "gw", "topics": ["a"]}, "ownership group"),
    ({"group": "g", "topics": ["a"], "timeoutMs": 10}, "timeoutMs"),
    ({"group": "g", "topics": ["a"], "timeoutMs": "1000"}, "timeoutMs"),
    ({"group": "g", "topics": ["a"], "autoOffsetReset": "smallest"}, "autoOffsetReset"),
    ({"group": "g", "topics": ["a"], "extra": 1}, "unknown fields"),
    ([], "JSON object"),
])
def test_bad_session_request_is_refused_saying_why(body: Any, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment):
        session(body)


def test_poll_parameters_default_and_are_bounded() -> None:
    assert parse_poll({}, buffer_bytes=1000) == parse_poll({"waitMs": "0"}, buffer_bytes=1000)
    asked = parse_poll({"waitMs": "2500", "maxRecords": "10", "maxBytes": "100"}, buffer_bytes=1000)
    assert (asked.wait_ms, asked.max_records, asked.max_bytes, asked.raw) == (2500, 10, 100, False)
    assert parse_poll({}, buffer_bytes=1000, accept="text/plain").raw
    assert not parse_poll({"format": "json"}, buffer_bytes=1000, accept="text/plain").raw


@pytest.mark.parametrize("query", [{"waitMs": str(MAX_WAIT_MS + 1)}, {"waitMs": "-1"}, {"maxRecords": "0"},
                                   {"maxBytes": "1001"}, {"format": "xml"}, {"wait": "1"}, {"waitMs": "1.5"}])
def test_bad_poll_parameters_are_refused(query: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest):
        parse_poll(query, buffer_bytes=1000)


def test_commit_body_is_empty_for_everything_or_lists_offsets() -> None:
    assert parse_commit(b"") is None and parse_commit(b"  \n") is None
    body = {"offsets": [{"topic": "t", "partition": 1, "offset": 42}]}
    assert parse_commit(json.dumps(body).encode()) == [Offset("t", 1, 42)]


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"offsets": []}', b'{"offsets": [{"topic": "t", "partition": 0}]}',
                                  b'{"offsets": [{"topic": "t", "partition": -1, "offset": 0}]}',
                                  b'{"offsets": [{"topic": 1, "partition": 0, "offset": 0}]}'])
def test_bad_commit_body_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidRequest):
        parse_commit(body)


def test_record_json_keeps_text_as_text_and_other_bytes_as_base64() -> None:
    record = Delivered("t", 0, 5, 1700, b"k", b"\xff\x00", (("h", b"v"), ("bin", b"\xc3"), ("none", None)))
    assert record_json(record) == {"topic": "t", "partition": 0, "offset": 5, "timestamp": 1700, "key": "k",
                                   "valueBase64": "/wA=", "headers": {"h": "v", "none": None},
                                   "headersBase64": {"bin": "ww=="}}
    assert record_json(Delivered("t", 0, 6, 1, None, None, ()))["value"] is None


def test_raw_lines_end_each_value_with_a_newline() -> None:
    records = [Delivered("t", 0, i, 0, None, value, ()) for i, value in enumerate([b"a", None, b"c"])]
    assert raw_lines(records) == b"a\n\nc\n"


def test_data_centres_turn_a_topic_into_prefixed_names_or_a_pattern() -> None:
    named = session({"group": "g", "topics": ["logs"], "dataCentres": ["dc1", "dc2"]})
    assert named.topics == named.named_topics == ("dc1.logs", "dc2.logs")
    every = session({"group": "g", "topics": ["web.logs"], "dataCentres": "*"})
    assert every.topics == ("^[A-Za-z0-9-][A-Za-z0-9_-]*\\.web\\.logs$",) and every.named_topics == ()


@pytest.mark.parametrize("centres", [[], ["dc.1"], "dc1", [""], [5]])
def test_bad_data_centres_are_refused(centres: Any) -> None:
    with pytest.raises(InvalidRequest, match="dataCentres"):
        session({"group": "g", "topics": ["logs"], "dataCentres": centres})
