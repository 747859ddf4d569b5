"""Command-line plumbing: where the cluster is, key=value options, start offsets, --help everywhere."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tidelog.cli.common import CliError, client_config, parse_assignments, split_config_list
from tidelog.cli.consume import OFFSET_TAIL_BASE, parse_offset, parse_timestamp
from tidelog.cli.main import build_parser, env_overrides, main


def options(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["topics", "list", *argv])


def test_bootstrap_flag_beats_config_file_beats_environment_beats_default(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# client settings\nbootstrap.servers=file:9092\nclient.id=ops\n")
    env = {"TIDELOG_BOOTSTRAP_SERVER": "env:9092"}
    assert client_config(options(), {})["bootstrap.servers"] == "127.0.0.1:9092"
    assert client_config(options(), env)["bootstrap.servers"] == "env:9092"
    from_file = client_config(options("--command-config", str(props)), env)
    assert (from_file["bootstrap.servers"], from_file["client.id"]) == ("file:9092", "ops")
    assert client_config(options("--command-config", str(props), "-b", "flag:9092"), env)["bootstrap.servers"] == "flag:9092"
    assert client_config(options("-X", "client.id=x=y"), {})["client.id"] == "x=y"


def test_a_missing_command_config_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(CliError) as caught:
        client_config(options("--command-config", str(tmp_path / "nope")), {})
    assert caught.value.code == 2


def test_bootstrap_environment_variable_is_not_a_broker_setting() -> None:
    assert env_overrides({"TIDELOG_BOOTSTRAP_SERVER": "x:1", "TIDELOG_LOG_DIRS": "/d"}) == {"log.dirs": "/d"}


@pytest.mark.parametrize(
    ("text", "items"),
    [("a=1,b=2", ["a=1", "b=2"]), ("cleanup.policy=[compact,delete],x=1", ["cleanup.policy=compact,delete", "x=1"]),
     ("single", ["single"]), ("a=1,,b=2,", ["a=1", "b=2"])],
)
def test_kafka_configs_lists_split_on_commas_outside_brackets(text: str, items: list[str]) -> None:
    assert split_config_list(text) == items


def test_unbalanced_brackets_and_missing_equals_are_usage_errors() -> None:
    with pytest.raises(CliError):
        split_config_list("a=[1,2")
    with pytest.raises(CliError) as caught:
        parse_assignments(["novalue"], "--config")
    assert caught.value.code == 2


@pytest.mark.parametrize(
    ("text", "offset"),
    [("0", 0), ("42", 42), ("earliest", -2), ("beginning", -2), ("latest", -1), ("end", -1), ("-10", OFFSET_TAIL_BASE - 10)],
)
def test_start_offsets_parse_to_librdkafka_offsets(text: str, offset: int) -> None:
    assert parse_offset(text) == offset


@pytest.mark.parametrize(
    ("text", "ms"),
    [("1700000000000", 1_700_000_000_000), ("2023-11-14T22:13:20Z", 1_700_000_000_000),
     ("2023-11-14T22:13:20", 1_700_000_000_000), ("2023-11-14T23:13:20+01:00", 1_700_000_000_000)],
)
def test_timestamps_are_epoch_ms_or_iso_8601(text: str, ms: int) -> None:
    assert parse_timestamp(text) == ms


@pytest.mark.parametrize("bad", ["yesterday", "12:00"])
def test_unparseable_start_positions_are_usage_errors(bad: str) -> None:
    with pytest.raises(CliError):
        parse_timestamp(bad)
    with pytest.raises(CliError):
        parse_offset(bad)


def all_commands() -> list[list[str]]:
    """Every command path, e.g. ["topics", "create"], from the parser itself."""
    paths: list[list[str]] = [[]]

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    paths.append([*path, name])
                    walk(child, [*path, name])

    walk(build_parser(), [])
    return paths


@pytest.mark.parametrize("path", all_commands(), ids=lambda p: " ".join(p) or "tidelog")
def test_every_level_has_help_with_examples(path: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "usage: tidelog" in text
    assert "examples:" in text


def test_the_commands_are_all_there() -> None:
    commands = {" ".join(p) for p in all_commands()}
    assert {"serve", "topics create", "topics list", "topics describe", "topics alter", "topics delete",
            "configs describe", "configs alter", "produce", "consume", "cluster describe",
            "perf produce", "perf consume", "perf latency"} <= commands


def test_perf_produce_needs_a_count_or_a_duration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["perf", "produce", "t"])
    assert exited.value.code == 2
    assert "--num-records" in capsys.readouterr().err
