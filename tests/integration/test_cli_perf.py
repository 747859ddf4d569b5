"""`tidelog perf ...` against a running broker: the summary's counts match what a consumer reads back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from helpers.cli_runner import Run, run_cli
from helpers.clients import consume, watermarks


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], bootstrap: str) -> Callable[..., Run]:
    """Run ``tidelog ARGS -b <session broker>`` in process."""
    return lambda *argv: run_cli(capsys, *argv, "-b", bootstrap)


def assert_sane_latency(latency: dict[str, float]) -> None:
    assert set(latency) == {"avg", "p50", "p95", "p99", "p99.9", "max"}
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["p99.9"] <= latency["max"]
    assert latency["avg"] <= latency["max"]


def test_perf_produce_with_processes_writes_exactly_what_it_reports(
    cli: Callable[..., Run], bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=3)
    run = cli("perf", "produce", topic, "--num-records", "3001", "--record-size", "120", "--processes", "2",
              "--acks", "1", "--linger-ms", "2", "--batch-size", "16384", "--json")
    assert run.code == 0, run.err
    report = run.json()
    assert (report["records"], report["bytes"], report["errors"], report["processes"]) == (3001, 3001 * 120, 0, 2)
    assert report["records_per_sec"] > 0 and report["mb_per_sec"] > 0
    assert_sane_latency(report["latency_ms"])
    ends = watermarks(bootstrap, topic, [0, 1, 2])
    assert sum(end for _start, end in ends.values()) == 3001
    messages = consume(bootstrap, topic, 3001, partitions=[0, 1, 2], settle=0.3)
    assert len(messages) == 3001
    assert {len(m.value() or b"") for m in messages} == {120}

    # perf consume reads back the same count and bytes, over two processes.
    consumed = cli("perf", "consume", topic, "--processes", "2", "--json")
    assert consumed.code == 0, consumed.err
    back = consumed.json()
    assert (back["records"], back["bytes"], back["errors"], back["processes"]) == (3001, 3001 * 120, 0, 2)
    limited = cli("perf", "consume", topic, "--num-records", "1000", "--processes", "3", "--json").json()
    assert (limited["records"], limited["bytes"]) == (1000, 1000 * 120)


def test_perf_produce_for_a_duration_respects_the_throughput_cap(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    run = cli("perf", "produce", topic, "--duration", "1", "--throughput", "400", "--record-size", "10", "--json")
    report = run.json()
    assert 300 <= report["records"] <= 480
    assert watermarks(bootstrap, topic)[0][1] == report["records"]
    assert 0.9 <= report["duration_s"] < 5


def test_perf_produce_human_summary_and_progress_lines(cli: Callable[..., Run], topic: str) -> None:
    run = cli("perf", "produce", topic, "--duration", "1.2", "--throughput", "500", "--reporting-interval", "0.5")
    assert run.code == 0
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in run.out.splitlines() if line.strip()}
    assert set(rows) == {"records", "errors", "bytes", "duration", "throughput", "latency"}
    assert rows["records"].endswith(" acknowledged") and rows["errors"] == "0"
    assert rows["latency"].startswith("ms   avg ")
    progress = [line for line in run.err.splitlines() if " records sent, " in line]
    assert progress and progress[0].endswith("ms max latency.")


def test_perf_latency_round_trips_every_record(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    start = watermarks(bootstrap, topic)[0][1]
    report = cli("perf", "latency", topic, "--num-records", "60", "--record-size", "50", "--json").json()
    assert (report["records"], report["errors"], report["bytes"]) == (60, 0, 60 * 50)
    assert_sane_latency(report["latency_ms"])
    assert watermarks(bootstrap, topic)[0][1] - start == 60


def test_perf_refuses_a_missing_topic(cli: Callable[..., Run]) -> None:
    run = cli("perf", "produce", "no-such-perf-topic", "--num-records", "10")
    assert run.code == 1 and "does not exist" in run.err
