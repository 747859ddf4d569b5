"""`tidelog topics ...` against a running broker: human tables and --json, exit codes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from helpers.cli_runner import Run, run_cli
from helpers.clients import admin_client, produce_all, producer, topic_partition_count, unique_topic


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], bootstrap: str) -> Callable[..., Run]:
    """Run ``tidelog ARGS -b <session broker>`` in process."""
    return lambda *argv: run_cli(capsys, *argv, "-b", bootstrap)


def table_rows(text: str) -> list[list[str]]:
    """The data rows of a table (after its ──── rule), split on runs of spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("─")) + 1
    return [line.split() for line in lines[start:] if line.strip()]


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = admin_client(bootstrap)  # must outlive the future
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = next(iter(futures.values())).result(timeout=10)
    return {name: entry.value for name, entry in entries.items()}


def test_create_makes_the_topic_with_its_partitions_and_configs(cli: Callable[..., Run], bootstrap: str) -> None:
    name = unique_topic()
    run = cli("topics", "create", name, "--partitions", "3", "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    assert (run.code, run.out) == (0, f"Created topic {name}.\n")
    assert topic_partition_count(bootstrap, name) == 3
    configs = topic_configs(bootstrap, name)
    assert (configs["retention.ms"], configs["cleanup.policy"]) == ("3600000", "compact")


def test_create_of_an_existing_topic_fails_unless_if_not_exists(cli: Callable[..., Run]) -> None:
    name = unique_topic()
    assert cli("topics", "create", "--topic", name).code == 0
    again = cli("topics", "create", name)
    assert again.code == 1 and "TOPIC_ALREADY_EXISTS" in again.err
    tolerant = cli("topics", "create", name, "--if-not-exists", "--json")
    assert tolerant.code == 0
    assert tolerant.json() == [{"topic": name, "status": "exists", "error": None}]


def test_create_reports_each_topic_in_json_and_a_bad_setting_fails(cli: Callable[..., Run], bootstrap: str) -> None:
    good, bad = unique_topic(), unique_topic()
    run = cli("topics", "create", good, "--json")
    assert run.json() == [{"topic": good, "status": "created", "error": None}]
    refused = cli("topics", "create", bad, "--config", "retention.ms=soon", "--json")
    assert refused.code == 1
    [outcome] = refused.json()  # type: ignore[misc]
    assert outcome["status"] == "error" and "INVALID_CONFIG" in outcome["error"]
    assert topic_partition_count(bootstrap, bad) == 0


def test_validate_only_creates_nothing(cli: Callable[..., Run], bootstrap: str) -> None:
    name = unique_topic()
    run = cli("topics", "create", name, "--partitions", "2", "--validate-only")
    assert run.code == 0 and "can be created" in run.out
    assert topic_partition_count(bootstrap, name) == 0


def test_list_shows_topics_in_a_table_and_in_json(cli: Callable[..., Run], new_topic: Callable[..., str]) -> None:
    name = new_topic(partitions=2)
    human = cli("topics", "list")
    assert human.code == 0
    assert human.out.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"]
    assert [name, "2", "1"] in table_rows(human.out)
    listed = cli("topics", "list", "--json").json()
    assert {"topic": name, "partitions": 2, "replication_factor": 1, "error": None} in listed  # type: ignore[operator]
    visible = cli("topics", "list", "--exclude-internal", "--json").json()
    assert name in [t["topic"] for t in visible]  # type: ignore[union-attr]
    assert not [t["topic"] for t in visible if t["topic"].startswith("__")]  # type: ignore[union-attr]


def test_describe_shows_leaders_isr_offsets_and_overrides(cli: Callable[..., Run], bootstrap: str) -> None:
    name = unique_topic()
    cli("topics", "create", name, "--partitions", "2", "--config", "retention.ms=60000")
    produce_all(producer(bootstrap), name, [b"a", b"b", b"c"], partition=1)
    human = cli("topics", "describe", name)
    assert human.code == 0
    header = human.out.splitlines()[0]
    assert header.startswith(f"Topic: {name}  TopicId: ")
    assert "PartitionCount: 2  ReplicationFactor: 1  Configs: retention.ms=60000" in header
    assert table_rows(human.out) == [["0", "1", "1", "1", "0", "0"], ["1", "1", "1", "1", "0", "3"]]
    [described] = cli("topics", "describe", name, "--json").json()  # type: ignore[misc]
    assert described["configs"] == {"retention.ms": "60000"}
    assert described["partition_count"] == 2 and described["internal"] is False
    assert described["partitions"][1] == {"partition": 1, "leader": 1, "replicas": [1], "isr": [1],
                                          "log_start_offset": 0, "log_end_offset": 3}


def test_describe_of_a_missing_topic_fails(cli: Callable[..., Run]) -> None:
    run = cli("topics", "describe", unique_topic("missing"))
    assert run.code == 1 and "UNKNOWN_TOPIC_OR_PART" in run.err


def test_health_filters_leave_out_healthy_partitions(cli: Callable[..., Run], topic: str) -> None:
    for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
        run = cli("topics", "describe", topic, flag, "--json")
        assert (run.code, run.json()) == (0, [])
        assert cli("topics", "describe", flag).out == ""


def test_alter_grows_partitions_and_sets_and_removes_configs(cli: Callable[..., Run], bootstrap: str) -> None:
    name = unique_topic()
    cli("topics", "create", name, "--config", "cleanup.policy=compact")
    run = cli("topics", "alter", name, "--partitions", "4", "--config", "retention.ms=7200000", "--delete-config", "cleanup.policy")
    assert (run.code, run.out) == (0, f"Altered topic {name}.\n")
    assert topic_partition_count(bootstrap, name) == 4
    configs = topic_configs(bootstrap, name)
    assert (configs["retention.ms"], configs["cleanup.policy"]) == ("7200000", "delete")
    shrink = cli("topics", "alter", name, "--partitions", "2", "--json")
    assert shrink.code == 1
    assert shrink.json()[0]["status"] == "error"  # type: ignore[index]


def test_alter_without_a_change_is_a_usage_error(cli: Callable[..., Run], topic: str) -> None:
    run = cli("topics", "alter", topic)
    assert run.code == 2 and "nothing to alter" in run.err


def test_delete_removes_topics_and_if_exists_tolerates_missing_ones(cli: Callable[..., Run], bootstrap: str) -> None:
    name = unique_topic()
    cli("topics", "create", name)
    run = cli("topics", "delete", name)
    assert (run.code, run.out) == (0, f"Deleted topic {name}.\n")
    assert topic_partition_count(bootstrap, name) == 0
    assert cli("topics", "delete", name).code == 1
    tolerant = cli("topics", "delete", name, "--if-exists", "--json")
    assert (tolerant.code, tolerant.json()) == (0, [{"topic": name, "status": "missing", "error": None}])


def test_an_unreachable_cluster_is_reported_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    run = run_cli(capsys, "topics", "list", "-b", "127.0.0.1:1", "--timeout", "2")
    assert run.code == 1
    assert run.err.splitlines()[-1].startswith("tidelog: ")
