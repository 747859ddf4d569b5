"""`tidelog groups ...` against a broker subprocess, with a real confluent-kafka consumer group: lag as
produced minus committed, resets planned and applied (and refused while members are active), a consumer
resuming where a reset put the group, offsets and groups deleted. Human tables and --json both."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from helpers.broker_process import BrokerProcess, register_failure_report, wait_until
from helpers.cli_runner import Run, run_cli
from helpers.clients import FAST_CLIENT, create_topic, produce_all, producer, unique_topic

PRODUCED = {0: 10, 1: 6}  # records per partition
COMMITTED = {0: 4, 1: 6}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("cli-groups"),
                            {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2})
    process.start()
    yield process
    process.close()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], group_broker: BrokerProcess) -> Callable[..., Run]:
    return lambda *argv: run_cli(capsys, *argv, "-b", group_broker.bootstrap)


def table_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("─")) + 1
    return [line.split() for line in lines[start:] if line.strip()]


def group_consumer(bootstrap: str, group: str, client_id: str = "cli-test") -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                     "session.timeout.ms": 6000, **FAST_CLIENT})


def wait_assigned(consumer: Consumer, count: int) -> None:
    deadline = time.monotonic() + 15
    while len(consumer.assignment()) < count:
        assert time.monotonic() < deadline, "no assignment within 15 s"
        consumer.poll(0.1)


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


@pytest.fixture
def active_group(group_broker: BrokerProcess) -> Iterator[tuple[str, str, Consumer]]:
    """A topic with 10 + 6 records and a group whose one live member committed 4 and 6."""
    bootstrap = group_broker.bootstrap
    topic, group = create_topic(bootstrap, unique_topic(), partitions=2), unique_topic("group")
    prod = producer(bootstrap)
    for partition, count in PRODUCED.items():
        produce_all(prod, topic, [f"{partition}-{i}".encode() for i in range(count)], partition=partition)
    member = group_consumer(bootstrap, group)
    member.subscribe([topic])
    wait_assigned(member, 2)
    member.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    yield topic, group, member
    try:
        member.close()
    except RuntimeError:
        pass  # the test closed it already


def test_list_and_describe_show_the_live_group_its_lag_and_its_member(cli: Callable[..., Run], active_group: tuple[str, str, Consumer]) -> None:
    topic, group, _member = active_group
    listed = cli("groups", "list", "--json")
    assert {"group": group, "type": "classic", "state": "Stable", "simple": False} in listed.json()
    assert group in cli("groups", "list", "--state", "stable").out
    assert group not in cli("groups", "list", "--state", "Empty").out

    human = cli("groups", "describe", group)
    assert human.code == 0
    rows = {(r[1], r[2]): r for r in table_rows(human.out)}
    assert rows[(topic, "0")][3:6] == ["4", "10", "6"]
    assert rows[(topic, "1")][3:6] == ["6", "6", "0"]
    assert rows[(topic, "0")][-1] == "cli-test"

    [doc] = cli("groups", "describe", group, "--json").json()
    assert doc["state"] == "Stable" and doc["members"] == 1
    lags = {o["partition"]: (o["current_offset"], o["log_end_offset"], o["lag"], o["client_id"]) for o in doc["offsets"]}
    assert lags == {p: (COMMITTED[p], PRODUCED[p], PRODUCED[p] - COMMITTED[p], "cli-test") for p in PRODUCED}

    [members] = cli("groups", "describe", group, "--members", "--json").json()
    assert [sorted(m["assignment"]) for m in members["member_list"]] == [[f"{topic}:0", f"{topic}:1"]]
    state = cli("groups", "describe", group, "--state")
    assert table_rows(state.out)[0][0] == group and "Stable" in state.out


def test_reset_is_refused_while_the_group_has_members_but_the_plan_is_shown(
        cli: Callable[..., Run], active_group: tuple[str, str, Consumer], group_broker: BrokerProcess) -> None:
    topic, group, _member = active_group
    refused = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert refused.code == 1 and "inactive" in refused.err and "Stable" in refused.err
    plan = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert plan.code == 0 and "refused while the group is Stable" in plan.err
    assert committed(group_broker.bootstrap, group) == {(topic, p): o for p, o in COMMITTED.items()}


def test_a_dry_run_changes_nothing_and_execute_moves_the_offsets_where_a_consumer_resumes(
        cli: Callable[..., Run], active_group: tuple[str, str, Consumer], group_broker: BrokerProcess) -> None:
    topic, group, member = active_group
    member.close()
    bootstrap = group_broker.bootstrap
    wait_until(lambda: "Empty" in cli("groups", "describe", group, "--state").out, message="group empty")

    dry = cli("groups", "reset-offsets", "--group", group, "--all-topics", "--shift-by", "-3", "--json")
    assert dry.code == 0 and "Dry run" in dry.err
    assert dry.json()["executed"] is False
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in dry.json()["partitions"]] == [(0, 4, 1), (1, 6, 3)]
    assert committed(bootstrap, group) == {(topic, 0): 4, (topic, 1): 6}

    human = cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "999", "--execute")
    assert human.code == 0
    assert table_rows(human.out) == [[group, topic, "0", "4", "10"]]  # clamped to the log end
    applied = cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-earliest", "--execute", "--json")
    assert applied.json()["executed"] is True
    assert committed(bootstrap, group) == {(topic, 0): 10, (topic, 1): 0}
    lag = {o["partition"]: o["lag"] for o in cli("groups", "describe", group, "--json").json()[0]["offsets"]}
    assert lag == {0: 0, 1: 6}

    resumed = group_consumer(bootstrap, group)
    try:
        resumed.subscribe([topic])
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 15
        while len(seen) < 6 and time.monotonic() < deadline:
            message = resumed.poll(0.2)
            if message is not None and message.error() is None:
                seen.append((message.partition(), message.offset()))
        assert sorted(seen) == [(1, o) for o in range(6)]  # partition 0 is at its end: nothing more from it
    finally:
        resumed.close()


def test_time_based_resets_find_the_first_record_at_or_after_the_time(
        cli: Callable[..., Run], active_group: tuple[str, str, Consumer]) -> None:
    topic, group, _member = active_group
    future = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-datetime", "2999-01-01T00:00:00Z", "--json")
    assert [r["new_offset"] for r in future.json()["partitions"]] == [10, 6]  # nothing that recent: log end
    past = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--by-duration", "P1D", "--json")
    assert [r["new_offset"] for r in past.json()["partitions"]] == [0, 0]
    bad = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--by-duration", "1 hour")
    assert bad.code == 2 and "PnDTnHnMnS" in bad.err


def test_delete_offsets_then_delete_the_group(cli: Callable[..., Run], active_group: tuple[str, str, Consumer],
                                              group_broker: BrokerProcess) -> None:
    topic, group, member = active_group
    busy = cli("groups", "delete", group)
    assert busy.code == 1 and "NON_EMPTY_GROUP" in busy.err
    member.close()
    wait_until(lambda: "Empty" in cli("groups", "describe", group, "--state").out, message="group empty")

    deleted = cli("groups", "delete-offsets", "--group", group, "--topic", f"{topic}:0", "--json")
    assert deleted.code == 0 and deleted.json() == [{"group": group, "topic": topic, "partition": 0, "error": None}]
    assert committed(group_broker.bootstrap, group) == {(topic, 1): 6}

    gone = cli("groups", "delete", group, "--json")
    assert gone.code == 0 and gone.json() == [{"group": group, "status": "deleted", "error": None}]
    assert group not in cli("groups", "list").out
    missing = cli("groups", "delete", group)
    assert missing.code == 1 and "GROUP_ID_NOT_FOUND" in missing.err


def test_a_reset_naming_a_missing_topic_or_partition_fails_without_creating_it(
        cli: Callable[..., Run], active_group: tuple[str, str, Consumer]) -> None:
    topic, group, _member = active_group
    missing = unique_topic("missing")
    run = cli("groups", "reset-offsets", "--group", group, "--topic", missing, "--to-earliest")
    assert run.code == 1 and f"topic {missing} does not exist" in run.err
    assert missing not in cli("topics", "list").out  # the broker auto-creates topics, but not for this
    assert cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:7", "--to-earliest").code == 2
