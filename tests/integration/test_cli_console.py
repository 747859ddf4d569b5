"""`tidelog produce` and `tidelog consume` against a running broker, cross-checked with confluent-kafka and kcat."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.broker_process import REPO_ROOT
from helpers.cli_runner import Run, run_cli
from helpers.clients import consume, produce_all, producer, unique_topic


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """``cli(*args, stdin="...")`` runs ``tidelog ARGS -b <session broker>`` in process."""

    def run(*argv: str, stdin: str = "") -> Run:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        return run_cli(capsys, *argv, "-b", bootstrap)

    return run


def test_lines_from_stdin_become_records_with_keys_and_headers(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    run = cli("produce", topic, "--key-separator", ":", "--header", "source=cli", stdin="k1:v1\nk2:v2:with colon\n")
    assert run.code == 0
    assert run.err == f"Produced 2 record(s) to {topic} (partition 0: offsets 0-1).\n"
    messages = consume(bootstrap, topic, 2)
    assert [(m.key(), m.value(), m.headers()) for m in messages] == [
        (b"k1", b"v1", [("source", b"cli")]), (b"k2", b"v2:with colon", [("source", b"cli")]),
    ]


def test_produce_json_summary_and_explicit_partition(cli: Callable[..., Run], bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    run = cli("produce", topic, "-m", "one", "-m", "two", "--partition", "2", "--json")
    assert run.code == 0
    assert json.loads(run.out) == {
        "topic": topic, "delivered": 2, "failed": 0, "undelivered": 0,
        "partitions": {"2": {"first_offset": 0, "last_offset": 1, "count": 2}}, "errors": {},
    }
    assert [m.value() for m in consume(bootstrap, topic, 2, partitions=[2])] == [b"one", b"two"]


def test_headers_parsed_from_the_line(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    cli("produce", topic, "--parse-headers", "-K", "=", stdin="trace:abc,span:1\tkey=value\n")
    [message] = consume(bootstrap, topic, 1)
    assert (message.key(), message.value(), message.headers()) == (b"key", b"value", [("trace", b"abc"), ("span", b"1")])


def test_a_malformed_line_stops_the_producer_after_sending_the_lines_before(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    run = cli("produce", topic, "-K", ":", stdin="k:good\nno separator\nk:never\n")
    assert run.code == 1
    assert "input line 2" in run.err and "Produced 1 record(s)" in run.err
    assert [m.value() for m in consume(bootstrap, topic, 1, settle=0.3)] == [b"good"]


def test_consume_prints_values_and_the_processed_count(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    produce_all(producer(bootstrap), topic, [b"a", b"b", b"c"])
    run = cli("consume", topic, "--from-beginning", "-e")
    assert (run.code, run.out) == (0, "a\nb\nc\n")
    assert run.err.splitlines()[-1] == "Processed a total of 3 messages"


def test_consume_starts_where_asked(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    prod = producer(bootstrap)
    produce_all(prod, topic, [b"old-1", b"old-2"])
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce_all(prod, topic, [b"new-1", b"new-2"])
    assert cli("consume", topic, "--offset", "-1", "-e").out == "new-2\n"
    assert cli("consume", topic, "--partition", "0", "--offset", "1", "-e").out == "old-2\nnew-1\nnew-2\n"
    assert cli("consume", topic, "--timestamp", str(boundary_ms), "-e").out == "new-1\nnew-2\n"
    assert cli("consume", topic, "--offset", "latest", "-e").out == ""
    assert cli("consume", topic, "--from-beginning", "--max-messages", "3").out == "old-1\nold-2\nnew-1\n"


def test_consume_exits_when_idle(cli: Callable[..., Run], topic: str) -> None:
    started = time.monotonic()
    run = cli("consume", topic, "--timeout-ms", "500")
    assert run.code == 0 and run.out == ""
    assert 0.4 < time.monotonic() - started < 10


def test_kcat_style_format_strings(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    prod = producer(bootstrap)
    prod.produce(topic, value=b"v1", key=b"k1", headers=[("h", b"x")], timestamp=1_700_000_000_000)
    prod.produce(topic, value=b"v2", timestamp=1_700_000_000_001)
    prod.flush(10)
    run = cli("consume", topic, "--from-beginning", "-e", "-f", "%t|%p|%o|%k|%K|%s|%S|%T|%h\\n")
    assert run.out == f"{topic}|0|0|k1|2|v1|2|1700000000000|h=x\n{topic}|0|1||-1|v2|2|1700000000001|\n"


def test_json_lines_round_trip_binary_records_between_topics(cli: Callable[..., Run], bootstrap: str) -> None:
    source, copy = unique_topic(), unique_topic()
    prod = producer(bootstrap)
    prod.produce(source, value=b"\x00\xffbinary", key=b"k", headers=[("h", b"\xfe")])
    prod.produce(source, value=json.dumps({"a": 1}).encode())
    prod.flush(10)
    dumped = cli("consume", source, "--from-beginning", "-e", "--format", "json")
    first = json.loads(dumped.out.splitlines()[0])
    assert (first["topic"], first["offset"], first["key"], first["value_b64"]) == (source, 0, "k", "AP9iaW5hcnk=")
    assert first["headers"] == [{"key": "h", "value_b64": "/g=="}]
    assert first["timestamp_type"] == "CreateTime"
    assert cli("produce", copy, "--format", "json", stdin=dumped.out).code == 0
    copied = consume(bootstrap, copy, 2)
    assert [(m.key(), m.value(), m.headers()) for m in copied] == [
        (b"k", b"\x00\xffbinary", [("h", b"\xfe")]), (None, b'{"a": 1}', None),
    ]


def test_print_key_with_a_separator(cli: Callable[..., Run], bootstrap: str, topic: str) -> None:
    produce_all(producer(bootstrap), topic, [b"v"], key=b"k")
    assert cli("consume", topic, "--from-beginning", "-e", "--print-key", "--key-separator", " => ").out == "k => v\n"


def test_consuming_a_missing_topic_or_partition_fails_cleanly(cli: Callable[..., Run], topic: str) -> None:
    missing = cli("consume", unique_topic("missing"), "-e")
    assert missing.code == 1 and "does not exist" in missing.err
    no_partition = cli("consume", topic, "--partition", "5", "-e")
    assert no_partition.code == 1 and "no partition 5" in no_partition.err


def test_what_the_cli_produces_kcat_reads(cli: Callable[..., Run], bootstrap: str, topic: str, kcat: str) -> None:
    cli("produce", topic, "-K", ":", stdin="a:1\nb:2\n")
    out = subprocess.run([kcat, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%k=%s\n"],
                         capture_output=True, timeout=30, check=True).stdout
    assert out == b"a=1\nb=2\n"


def test_the_installed_command_finds_the_cluster_through_the_environment(bootstrap: str, topic: str, tmp_path: Path) -> None:
    env = dict(os.environ, TIDELOG_BOOTSTRAP_SERVER=bootstrap, PYTHONPATH=str(REPO_ROOT / "src"))
    tidelog = [sys.executable, "-m", "tidelog"]
    produced = subprocess.run([*tidelog, "produce", topic], input=b"from a pipe\n", env=env, capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*tidelog, "consume", topic, "--from-beginning", "-e"], env=env, capture_output=True, timeout=60)
    assert (consumed.returncode, consumed.stdout) == (0, b"from a pipe\n")
    assert consumed.stderr.decode().strip().splitlines()[-1] == "Processed a total of 1 messages"
