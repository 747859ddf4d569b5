"""`tidelog configs ...` and `tidelog cluster describe` against a running broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from helpers.broker_process import BrokerProcess
from helpers.cli_runner import Run, run_cli
from tidelog.cli.main import main


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], bootstrap: str) -> Callable[..., Run]:
    return lambda *argv: run_cli(capsys, *argv, "-b", bootstrap)


def settings(run: Run) -> dict[str, dict[str, object]]:
    [entity] = run.json()  # type: ignore[misc]
    return {c["name"]: c for c in entity["configs"]}


def test_describe_shows_only_settings_changed_on_the_topic_unless_all(cli: Callable[..., Run], new_topic: Callable[..., str]) -> None:
    name = new_topic(config={"retention.ms": "60000"})
    human = cli("configs", "describe", "--entity-type", "topics", "--entity-name", name)
    assert human.code == 0
    assert human.out.splitlines()[0] == f"Settings of topic {name}:"
    assert human.out.splitlines()[1].split() == ["NAME", "VALUE", "SOURCE", "READ-ONLY", "SENSITIVE"]
    assert human.out.splitlines()[3].split() == ["retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG", "no", "no"]
    assert len(human.out.splitlines()) == 4
    everything = settings(cli("configs", "describe", "--entity-type", "topics", "--entity-name", name, "--all", "--json"))
    assert everything["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert everything["segment.bytes"] == {"name": "segment.bytes", "value": "1073741824", "source": "DEFAULT_CONFIG",
                                           "read_only": False, "sensitive": False, "default": True}


def test_alter_sets_list_values_in_brackets_and_deletes_back_to_default(cli: Callable[..., Run], topic: str) -> None:
    run = cli("configs", "alter", "--entity-type", "topics", "--entity-name", topic,
              "--add-config", "cleanup.policy=[compact,delete],max.message.bytes=2000000")
    assert (run.code, run.out) == (0, f"Completed updating config for topic {topic}.\n")
    changed = settings(cli("configs", "describe", "--entity-type", "topics", "--entity-name", topic, "--json"))
    assert {k: v["value"] for k, v in changed.items()} == {"cleanup.policy": "compact,delete", "max.message.bytes": "2000000"}
    cli("configs", "alter", "--entity-type", "topics", "--entity-name", topic, "--delete-config", "cleanup.policy,max.message.bytes")
    described = cli("configs", "describe", "--entity-type", "topics", "--entity-name", topic)
    assert described.out == f"No settings changed on topic {topic} (--all shows every setting).\n"


def test_alter_refuses_bad_values_with_kafkas_error(cli: Callable[..., Run], topic: str) -> None:
    run = cli("configs", "alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "retention.ms=soon", "--json")
    assert run.code == 1
    [outcome] = run.json()  # type: ignore[misc]
    assert "INVALID_CONFIG" in outcome["error"]


def test_describe_of_a_missing_topic_fails(cli: Callable[..., Run]) -> None:
    run = cli("configs", "describe", "--entity-type", "topics", "--entity-name", "no-such-topic-here")
    assert run.code == 1 and "UNKNOWN_TOPIC_OR_PART" in run.err


@pytest.fixture
def own_broker(fresh_broker: Callable[..., BrokerProcess]) -> Iterator[BrokerProcess]:
    """A broker of this test's own: broker settings changed here must not leak into other tests."""
    yield fresh_broker({"num.partitions": "2"})


def test_broker_settings_show_their_source_and_dynamic_defaults_can_change(
    capsys: pytest.CaptureFixture[str], own_broker: BrokerProcess
) -> None:
    def cli(*argv: str) -> Run:
        return run_cli(capsys, *argv, "-b", own_broker.bootstrap)

    everything = settings(cli("configs", "describe", "--entity-type", "brokers", "--entity-name", "1", "--all", "--json"))
    assert everything["num.partitions"]["source"] == "STATIC_BROKER_CONFIG"
    assert everything["num.partitions"]["value"] == "2"
    assert everything["node.id"]["read_only"] is True
    altered = cli("configs", "alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config", "log.retention.ms=3600000")
    assert (altered.code, altered.out) == (0, "Completed updating config for broker 1.\n")
    dynamic = cli("configs", "describe", "--entity-type", "brokers")  # every broker, dynamic settings only
    assert dynamic.out.splitlines()[0] == "Settings of broker 1:"
    rows = [line.split() for line in dynamic.out.splitlines()[3:]]
    assert [row[:2] for row in rows] == [["log.retention.ms", "3600000"]]
    assert rows[0][2] in ("DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    refused = cli("configs", "alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config", "node.id=7")
    assert refused.code == 1 and "node.id" in refused.err


def test_alter_needs_an_entity_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["configs", "alter", "--entity-type", "topics", "--add-config", "a=1"])
    assert exited.value.code == 2 and "--entity-name" in capsys.readouterr().err


def test_cluster_describe_names_the_cluster_controller_and_brokers(cli: Callable[..., Run], broker: BrokerProcess,
                                                                   topic: str) -> None:
    facts = cli("cluster", "describe", "--json").json()
    assert isinstance(facts, dict)
    assert facts["controller"] == 1
    assert facts["brokers"] == [{"id": 1, "host": broker.host, "port": broker.port, "rack": None}]
    assert facts["topics"] >= 1 and facts["partitions"] >= facts["topics"]
    assert (facts["offline_partitions"], facts["under_replicated_partitions"]) == (0, 0)
    human = cli("cluster", "describe")
    lines = human.out.splitlines()
    assert lines[0] == f"Cluster ID: {facts['cluster_id']}"
    assert lines[1] == "Controller: 1"
    assert lines[2].startswith(f"Topics: {facts['topics']}  Partitions: {facts['partitions']}  Offline: 0")
    assert lines[3].split() == ["BROKER", "HOST", "PORT", "RACK", "ROLE"]
    assert lines[5].split() == ["1", broker.host, str(broker.port), "-", "controller"]
