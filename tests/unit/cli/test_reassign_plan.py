"""Reassignment plans (pure): Kafka's JSON files, generate, drain, progress lines."""

from __future__ import annotations

import json
import random

import pytest

from tidelog.cli.reassign_plan import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    PlanError,
    Sample,
    drain_plan,
    dumps,
    generate,
    parse_reassignment,
    parse_reassignment_with_dirs,
    parse_topics_to_move,
    progress_line,
    throttle_plan,
)


def test_a_reassignment_file_round_trips_in_kafkas_format() -> None:
    text = '{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}'
    plan = parse_reassignment(text)
    assert plan == {("t", 1): [3, 1]}
    assert json.loads(dumps(plan)) == json.loads(text)


@pytest.mark.parametrize(("text", "complaint"), [
    ("{oops", "not JSON"),
    ('{"version":2,"partitions":[]}', "version 2"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}', "non-empty list"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}', "twice"),
    ('{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}', "integer partition"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["d"]}]}', "absolute path"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}', "one directory"),
])
def test_a_bad_reassignment_file_is_refused_saying_why(text: str, complaint: str) -> None:
    with pytest.raises(PlanError, match=complaint):
        parse_reassignment(text)


def test_topics_to_move_and_generate_keep_each_topics_replication_factor() -> None:
    assert parse_topics_to_move('{"version":1,"topics":[{"topic":"a"},{"topic":"a"}]}') == ["a"]
    current = {("a", 0): [1, 2], ("a", 1): [2, 1], ("b", 0): [1]}
    proposed = generate(current, ["a"], {2: "r2", 3: "r3", 4: "r4"}, rng=random.Random(1))
    assert sorted(proposed) == [("a", 0), ("a", 1)]
    assert all(len(r) == 2 and set(r) <= {2, 3, 4} for r in proposed.values())
    with pytest.raises(PlanError, match="does not exist"):
        generate(current, ["zzz"], {2: None})


def test_drain_replaces_the_broker_in_place_on_another_rack_least_loaded_first() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    current = {("t", 0): [2, 3], ("t", 1): [3, 4], ("t", 2): [1, 2]}
    plan = drain_plan(current, racks, {2})
    assert plan.stuck == []
    assert set(plan.moves) == {("t", 0), ("t", 2)}
    assert plan.moves[("t", 0)][1] == 3 and plan.moves[("t", 0)][0] == 5  # rack b is taken by 3: c
    assert plan.moves[("t", 2)][0] == 1 and racks[plan.moves[("t", 2)][1]] != "a"


def test_drain_reports_a_partition_no_broker_can_take() -> None:
    plan = drain_plan({("t", 0): [1, 2]}, {1: None, 2: None}, {2})
    assert plan.moves == {} and plan.stuck == [("t", 0)]


def test_progress_shows_bytes_rate_and_time_left() -> None:
    mib = 1048576
    line = progress_line(1, 4, Sample(0.0, 2 * mib, 10 * mib), Sample(2.0, 6 * mib, 10 * mib))
    assert line == "1/4 partitions done, 6.0 MiB of 10.0 MiB copied, 2.0 MiB/s, 2 s left"
    assert progress_line(4, 4, None, Sample(0.0, 0, 0)) == "4/4 partitions done"


def test_log_dirs_in_a_reassignment_file_name_the_dir_of_each_replica_that_asks_for_one() -> None:
    text = ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
            '"log_dirs":["/disks/b","any"]}]}')
    assert parse_reassignment_with_dirs(text) == ({("t", 0): [1, 2]}, {("t", 0, 1): "/disks/b"})


def test_throttles_list_current_replicas_as_leaders_and_added_ones_as_followers_like_kafkas_tool() -> None:
    current = {("a", 0): [1, 2], ("a", 1): [2, 3], ("b", 0): [1, 2], ("c", 0): [3, 1]}
    ongoing = {("b", 0): ([1, 2, 4], [4], [2])}  # an earlier move of b-0 from [1, 2] to [1, 4]
    plan = {("a", 0): [3, 4], ("a", 1): [3, 2], ("c", 0): [1, 3]}  # c-0: a reorder, nothing to copy
    limits = throttle_plan(current, ongoing, plan)
    assert limits.topics == {
        "a": {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:3,0:4"},
        "b": {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:4"},
    }
    assert limits.brokers == [1, 2, 3, 4]


def test_a_new_target_for_a_partition_being_moved_copies_from_its_original_replicas() -> None:
    ongoing = {("a", 0): ([1, 2, 3], [3], [2])}
    limits = throttle_plan({("a", 0): [1, 2, 3]}, ongoing, {("a", 0): [1, 4]})
    assert limits.topics == {"a": {LEADER_REPLICAS: "0:1,0:2", FOLLOWER_REPLICAS: "0:4"}}
    assert limits.brokers == [1, 2, 4]
