"""The console's pure helpers: settings, record rendering and filters, browse start, reset plans, scrapes."""

from __future__ import annotations

import pytest

from tidelog.console.burrow import status_doc
from tidelog.console.config import ConfigError, parse_config
from tidelog.console.lag import PartitionResult, Sample, Status, evaluate_group
from tidelog.console.messages import Filters, render, start_offset
from tidelog.console.reset import Position, plan
from tidelog.console.scrape import parse_exposition


def test_settings_are_checked_and_secrets_are_redacted() -> None:
    config = parse_config({"bootstrap.servers": "b:9092", "console.listen.port": "9000",
                           "kafka.sasl.password": "hunter2", "kafka.ssl.key.password": "k",
                           "kafka.ssl.ca.location": "/ca.pem", "console.metrics.urls": "http://a/metrics, http://b/metrics"})
    assert config.listen_port == 9000 and config.metrics_urls == ("http://a/metrics", "http://b/metrics")
    assert config.kafka_config()["sasl.password"] == "hunter2"
    shown = config.redacted()
    assert shown["sasl.password"] == "[hidden]" and shown["ssl.key.password"] == "[hidden]"
    assert shown["ssl.ca.location"] == "/ca.pem"
    with pytest.raises(ConfigError, match=r"unknown setting 'console\.lag\.intervall\.ms'"):
        parse_config({"console.lag.intervall.ms": "5"})
    with pytest.raises(ConfigError, match=r"console\.lag\.window='0': must be positive"):
        parse_config({"console.lag.window": "0"})
    with pytest.raises(ConfigError, match="not an http"):
        parse_config({"console.gateway.url": "gateway:8080"})


def test_values_render_as_text_pretty_json_or_hex() -> None:
    assert render(b'{"a":1}', "json") == '{\n  "a": 1\n}'
    assert render(b"not json", "json") == "not json"
    assert render(b"\x00\xffA", "hex") == "00 ff 41"
    assert render(b"caf\xc3\xa9 \xff", "text") == "café \ufffd"
    assert render(None, "text") == "null"


def test_filters_match_key_header_and_substring() -> None:
    headers = [("source", b"web"), ("trace", None)]
    assert Filters(key="k1").match(b"k1", b"v", headers)
    assert not Filters(key="k1").match(b"k2", b"v", headers)
    assert Filters(header="trace").match(None, b"v", headers)
    assert Filters(header="source=web").match(None, b"v", headers)
    assert not Filters(header="source=app").match(None, b"v", headers)
    assert Filters(contains="err").match(None, b"an error", [])
    assert not Filters(contains="err").match(None, None, [])


def test_browsing_starts_where_asked_within_the_log() -> None:
    assert start_offset(10, 100, "end", 0, 50, None) == 50
    assert start_offset(80, 100, "end", 0, 50, None) == 80
    assert start_offset(10, 100, "offset", 5, 50, None) == 10
    assert start_offset(10, 100, "offset", 500, 50, None) == 100
    assert start_offset(10, 100, "timestamp", 0, 50, 42) == 42
    assert start_offset(10, 100, "timestamp", 0, 50, -1) == 100  # nothing that recent


def test_reset_plans_clamp_to_the_log_and_fall_back_to_the_end() -> None:
    positions = {("t", 0): Position(50, 10, 100, at_time=30), ("t", 1): Position(None, 0, 20, at_time=None)}
    assert [(m.partition, m.new_offset) for m in plan(positions, "earliest")] == [(0, 10), (1, 0)]
    assert [(m.partition, m.new_offset) for m in plan(positions, "latest")] == [(0, 100), (1, 20)]
    assert [(m.partition, m.new_offset) for m in plan(positions, "timestamp")] == [(0, 30), (1, 20)]
    moves = plan(positions, "offset", 5)
    assert [(m.partition, m.new_offset, m.lag_after) for m in moves] == [(0, 10, 90), (1, 5, 15)]
    with pytest.raises(ValueError, match="reset target"):
        plan(positions, "yesterday")


def test_prometheus_text_is_parsed_with_labels_and_junk_skipped() -> None:
    text = ('# HELP x y\n# TYPE x gauge\nx{dir="/a",q="say \\"hi\\""} 3\nx 4.5\n'
            'h_bucket{le="1"} 2\nbroken line\ny{a="b"} NaN\n')
    families = parse_exposition(text)
    assert families["x"] == [({"dir": "/a", "q": 'say "hi"'}, 3.0), ({}, 4.5)]
    assert "h_bucket" not in families and "broken" not in families
    assert str(families["y"][0][1]) == "nan"


def test_burrow_status_lists_only_the_partitions_in_trouble() -> None:
    window = (Sample(10, 5, 1000, 1500), Sample(10, 9, 1000, 2000))
    parts = [PartitionResult("t", 0, Status.OK, (), 0, 1.0), PartitionResult("t", 1, Status.STOP, window, 9, 0.2, 4.5)]
    result = evaluate_group("g", parts)
    doc = status_doc("local", result, every_partition=False)
    assert doc["status"] == "ERR" and doc["partition_count"] == 2 and doc["totallag"] == 9
    assert [p["partition"] for p in doc["partitions"]] == [1]
    assert doc["partitions"][0]["end"] == {"offset": 10, "timestamp": 1000, "observedAt": 2000, "lag": 9}
    assert doc["maxlag"]["status"] == "STOP" and doc["maxlag"]["lag_seconds"] == 4.5
    assert len(status_doc("local", result, every_partition=True)["partitions"]) == 2


def test_an_executed_reset_is_the_plan_that_was_shown() -> None:
    from tidelog.console.pages import _parse_moves
    assert _parse_moves('[["orders", 0, 10], ["orders", 1, 0]]') == {("orders", 0): 10, ("orders", 1): 0}
    for damaged in ("", "[]", '[["orders", 0]]', '[["orders", -1, 5]]', "{not json"):
        with pytest.raises(ValueError, match="dry run again"):
            _parse_moves(damaged)
