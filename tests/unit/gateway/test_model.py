"""Write requests are parsed and checked before anything is written."""

from __future__ import annotations

import json
import re

import pytest

from tidelog.gateway.model import (
    InvalidRequest,
    Meta,
    Record,
    check_topic,
    parse_json,
    parse_raw,
    parse_records_json,
)


def _json(**body: object) -> bytes:
    return json.dumps(body).encode()


def test_json_body_gives_chunks_records_keys_headers_and_meta() -> None:
    request = parse_json("logs", _json(sourceId="web-1", meta={"host": "h1", "file": "/a.log", "logType": "nginx"},
                                       chunks=[{"seqno": 4, "records": [{"value": "x", "key": "k", "headers": {"a": "b"}},
                                                                         {"value": None}]}]))
    assert request.source_id == "web-1"
    assert request.meta.host == "h1" and request.meta.log_type == "nginx"
    assert request.chunks[0].seqno == 4
    assert request.chunks[0].records == (Record(b"x", b"k", (("a", b"b"),)), Record(None))


def test_raw_body_is_one_chunk_with_one_record_per_line() -> None:
    request = parse_raw("logs", {"sourceId": "s", "seqno": "7", "host": "h"}, b"one\ntwo\r\n\nlast\n")
    assert [r.value for r in request.chunks[0].records] == [b"one", b"two\r", b"", b"last"]
    assert request.chunks[0].seqno == 7
    assert request.meta.host == "h"


@pytest.mark.parametrize(("body", "fragment"), [
    (b"not json", "not JSON"),
    (b"[]", "JSON object"),
    (_json(chunks=[{"seqno": 1, "records": [{"value": "x"}]}]), "sourceId"),
    (_json(sourceId="", chunks=[{"seqno": 1, "records": [{"value": "x"}]}]), "sourceId"),
    (_json(sourceId="s", chunks=[]), "chunks"),
    (_json(sourceId="s", chunks=[{"seqno": -1, "records": [{"value": "x"}]}]), "seqno"),
    (_json(sourceId="s", chunks=[{"seqno": 1.5, "records": [{"value": "x"}]}]), "seqno"),
    (_json(sourceId="s", chunks=[{"seqno": 1, "records": []}]), "records"),
    (_json(sourceId="s", chunks=[{"seqno": 1, "records": [{"key": "k"}]}]), "no 'value'"),
    (_json(sourceId="s", chunks=[{"seqno": 1, "records": [{"value": 3}]}]), "value must be a string"),
    (_json(sourceId="s", chunks=[{"seqno": 1, "records": [{"value": "x", "headers": {"h": 1}}]}]), "headers"),
    (_json(sourceId="s", chunks=[{"seqno": 1, "records": [{"value": "x"}]}], extra=1), "unknown fields"),
    (_json(sourceId="s", meta={"host": 1}, chunks=[{"seqno": 1, "records": [{"value": "x"}]}]), "meta"),
])
def test_json_request_breaking_a_rule_is_refused_with_the_reason(body: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment):
        parse_json("logs", body)


@pytest.mark.parametrize(("query", "body", "fragment"), [
    ({"sourceId": "s"}, b"x", "seqno"),
    ({"sourceId": "s", "seqno": "x1"}, b"x", "integer"),
    ({"sourceId": "s", "seqno": "-1"}, b"x", "0 to"),
    ({"seqno": "1"}, b"x", "sourceId"),
    ({"sourceId": "s", "seqno": "1"}, b"", "1 to"),
])
def test_raw_request_breaking_a_rule_is_refused_with_the_reason(query: dict[str, str], body: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment):
        parse_raw("logs", query, body)


@pytest.mark.parametrize("topic", ["", "a/b", "a b", "x" * 250, "__consumer_offsets", "__tidelog_gateway_state", ".."])
def test_invalid_or_internal_topics_are_refused(topic: str) -> None:
    with pytest.raises(InvalidRequest):
        check_topic(topic)


def test_staged_json_chunk_gives_records_and_meta() -> None:
    records, meta = parse_records_json(_json(records=[{"value": "x", "key": "k"}, {"value": None}], meta={"host": "h"}))
    assert records == (Record(b"x", b"k"), Record(None))
    assert meta == Meta(host="h")


@pytest.mark.parametrize(("body", "fragment"), [
    (b"[", "not JSON"),
    (_json(records=[]), "1 to"),
    (_json(records=[{"value": 1}]), "records[0].value"),
    (_json(records=[{"value": "x"}], sourceId="s"), "'records'"),
])
def test_staged_json_chunk_breaking_a_rule_is_refused(body: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(fragment)):
        parse_records_json(body)
