"""`tidelog serve` writes its log as text or, with log.format=json, one JSON object per line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from helpers.broker_process import BrokerProcess


def broker_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_text().splitlines() if line and not line.startswith("=== ")]


def test_json_log_lines_are_objects_with_time_level_logger_and_message(fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker({"log.format": "json", "no.such.setting": "1"})
    broker.stop()
    events = [json.loads(line) for line in broker_lines(broker)]
    assert {"ts", "level", "logger", "msg"} <= set(events[0])
    messages = [e["msg"] for e in events]
    assert "unknown configuration key 'no.such.setting' ignored" in messages
    assert any(m.startswith("tidelog started: node 1") for m in messages)
    assert messages[-1] == "tidelog stopped cleanly"
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["ts"]) for e in events)


def test_text_log_lines_start_with_time_level_and_logger(fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker()
    broker.stop()
    started = [line for line in broker_lines(broker) if "tidelog started" in line]
    assert len(started) == 1
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO tidelog\.broker\.node: tidelog started: node 1, ", started[0])
