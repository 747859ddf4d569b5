"""Log formatters with context, and the runtime metrics (event-loop lag, GC pauses, process)."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import logging
import re
import time

import pytest

from tidelog.observability.logs import configure_logging, context
from tidelog.observability.registry import Registry
from tidelog.observability.runtime import EventLoopLagMonitor, GcMonitor, collect_process, register_build_info


@pytest.fixture
def restore_root_logger():  # type: ignore[no-untyped-def]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def log_one(kind: str) -> str:
    stream = io.StringIO()
    configure_logging("INFO", kind, stream)
    logging.getLogger("tidelog.broker.server").warning(
        "closing connection: %s", "bad frame", extra=context(peer="127.0.0.1:50412", client_id="rdkafka", api="Produce", topic=None)
    )
    logging.getLogger("tidelog.x").debug("not shown at INFO")
    return stream.getvalue()


def test_text_lines_carry_context_after_the_message(restore_root_logger: None) -> None:
    line = log_one("text")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING tidelog\.broker\.server: closing connection: bad frame "
        r"\[peer=127\.0\.0\.1:50412 client_id=rdkafka api=Produce\]\n",
        line,
    ), line


def test_json_lines_are_one_object_each_with_context_fields(restore_root_logger: None) -> None:
    lines = log_one("json").splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["level"] == "WARNING" and event["logger"] == "tidelog.broker.server"
    assert event["msg"] == "closing connection: bad frame"
    assert (event["peer"], event["client_id"], event["api"]) == ("127.0.0.1:50412", "rdkafka", "Produce")
    assert "topic" not in event


def test_json_lines_keep_the_traceback_inside_the_object(restore_root_logger: None) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream)
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        logging.getLogger("t").exception("failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert "RuntimeError: boom" in json.loads(lines[0])["exc"]


def test_unknown_context_fields_and_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="colour"):
        context(colour="red")
    with pytest.raises(ValueError, match="text, json"):
        configure_logging("INFO", "xml", io.StringIO())


def test_event_loop_lag_shows_a_blocked_loop() -> None:
    registry = Registry()
    monitor = EventLoopLagMonitor(registry, interval_s=0.01)

    async def main() -> None:
        monitor.start()
        await asyncio.sleep(0.03)
        time.sleep(0.2)  # block the loop
        await asyncio.sleep(0.03)
        await monitor.stop()

    asyncio.run(main())
    assert monitor.histogram.count() >= 2
    worst = max(float(line.rsplit(" ", 1)[1]) for line in registry.render().splitlines()
                if line.startswith("tidelog_event_loop_lag_seconds_sum"))
    assert worst >= 0.15


def test_gc_pauses_are_timed_per_generation() -> None:
    registry = Registry()
    monitor = GcMonitor(registry)
    monitor.install()
    try:
        gc.collect(2)
    finally:
        monitor.uninstall()
    assert monitor.pauses.count(("2",)) >= 1
    assert 'tidelog_gc_pause_seconds_count{generation="2"}' in registry.render()
    before = monitor.pauses.count(("2",))
    gc.collect(2)
    assert monitor.pauses.count(("2",)) == before  # uninstalled: no longer counted


def test_process_metrics_describe_this_process() -> None:
    values = {f.name: f.samples[0][3] for f in collect_process()}
    assert values["process_cpu_seconds_total"] > 0
    assert values["process_open_fds"] >= 3
    assert values["process_resident_memory_bytes"] > 10 * 1024 * 1024
    assert abs(values["process_start_time_seconds"] - time.time()) < 24 * 3600
    assert values["process_open_fds"] <= values.get("process_max_fds", float("inf"))


def test_build_info_names_the_version() -> None:
    registry = Registry()
    register_build_info(registry, "0.1.0")
    assert re.search(r'tidelog_build_info\{version="0\.1\.0",python="3\.\d+\.\d+"\} 1', registry.render())
