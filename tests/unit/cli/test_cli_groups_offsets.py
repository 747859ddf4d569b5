"""Planning `tidelog groups reset-offsets`: Kafka's reset options and its clamping to [log start, log end]."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tidelog.cli.groups import (
    PartitionOffsets,
    ResetError,
    ResetTarget,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_partitions,
    plan_partition,
    plan_reset,
)

# committed 50 in a log holding offsets 10..99 (log end 100); the timestamp lookup found 70
MIDDLE = PartitionOffsets(current=50, earliest=10, latest=100, at_timestamp=70)
NO_COMMIT = PartitionOffsets(current=None, earliest=10, latest=100, at_timestamp=None)
# committed before retention removed the start of the log
BEHIND = PartitionOffsets(current=3, earliest=10, latest=100)


@pytest.mark.parametrize(("name", "partition", "target", "expected"), [
    ("earliest", MIDDLE, ResetTarget("earliest"), 10),
    ("latest", MIDDLE, ResetTarget("latest"), 100),
    ("earliest without commit", NO_COMMIT, ResetTarget("earliest"), 10),
    ("to-offset inside the log", MIDDLE, ResetTarget("offset", 42), 42),
    ("to-offset past the end is the log end", MIDDLE, ResetTarget("offset", 1000), 100),
    ("to-offset before the start is the log start", MIDDLE, ResetTarget("offset", 0), 10),
    ("to-offset exactly at the log end", MIDDLE, ResetTarget("offset", 100), 100),
    ("shift back", MIDDLE, ResetTarget("shift", -20), 30),
    ("shift forward", MIDDLE, ResetTarget("shift", 25), 75),
    ("shift back past the start", MIDDLE, ResetTarget("shift", -45), 10),
    ("shift forward past the end", MIDDLE, ResetTarget("shift", 60), 100),
    ("shift by zero from a commit under the log start moves to the start", BEHIND, ResetTarget("shift", 0), 10),
    ("datetime found", MIDDLE, ResetTarget("datetime", 1), 70),
    ("duration found", MIDDLE, ResetTarget("duration", 1), 70),
    ("datetime after the last record is the log end", NO_COMMIT, ResetTarget("datetime", 1), 100),
    ("current keeps the commit", MIDDLE, ResetTarget("current"), 50),
    ("current without a commit is the log end", NO_COMMIT, ResetTarget("current"), 100),
    ("current keeps even a commit under the log start", BEHIND, ResetTarget("current"), 3),
    ("empty log", PartitionOffsets(None, 0, 0), ResetTarget("offset", 5), 0),
])
def test_a_reset_option_gives_kafkas_new_offset(name: str, partition: PartitionOffsets, target: ResetTarget, expected: int) -> None:
    assert plan_partition(partition, target) == expected, name


def test_shifting_a_partition_without_a_committed_offset_is_refused_naming_it() -> None:
    with pytest.raises(ResetError, match="orders:1: cannot shift"):
        plan_reset({("orders", 0): MIDDLE, ("orders", 1): NO_COMMIT}, ResetTarget("shift", 1))


def test_a_plan_covers_every_partition_in_topic_partition_order() -> None:
    plan = plan_reset({("b", 0): MIDDLE, ("a", 1): BEHIND, ("a", 0): NO_COMMIT}, ResetTarget("offset", 60))
    assert list(plan.items()) == [(("a", 0), 60), (("a", 1), 60), (("b", 0), 60)]


@pytest.mark.parametrize(("target", "now_ms", "expected"), [
    (ResetTarget("datetime", 1_000), 5_000, 1_000),
    (ResetTarget("duration", 1_000), 5_000, 4_000),
    (ResetTarget("earliest"), 5_000, None),
    (ResetTarget("shift", 3), 5_000, None),
])
def test_only_time_based_resets_look_up_a_timestamp(target: ResetTarget, now_ms: int, expected: int | None) -> None:
    assert target.lookup_timestamp(now_ms) == expected


@pytest.mark.parametrize(("text", "ms"), [
    ("PT30M", 30 * 60_000),
    ("P1D", 86_400_000),
    ("P1DT2H3M4S", ((26 * 60 + 3) * 60 + 4) * 1000),
    ("PT0.5S", 500),
    ("pt1h", 3_600_000),
])
def test_durations_parse_as_javas_duration_does(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1h", "P1H", "PT1D", "P1DT", "PT-5M"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration_ms(text)


def test_datetimes_with_a_zone_and_without_one() -> None:
    assert parse_datetime_ms("2024-05-01T12:00:00Z") == 1_714_564_800_000
    assert parse_datetime_ms("2024-05-01T14:00:00.250+02:00") == 1_714_564_800_250
    local = datetime(2024, 5, 1, 12, 0).astimezone()  # no zone: local time, as kafka-consumer-groups
    assert parse_datetime_ms("2024-05-01T12:00:00") == round(local.timestamp() * 1000)
    assert parse_datetime_ms("2024-05-01T12:00:00Z") - parse_datetime_ms("2024-05-01T12:00:00+00:30") == int(
        timedelta(minutes=30).total_seconds() * 1000)
    with pytest.raises(ValueError, match="date-time"):
        parse_datetime_ms("yesterday")


@pytest.mark.parametrize(("text", "expected"), [
    ("orders", ("orders", None)),
    ("orders:2", ("orders", [2])),
    ("orders:3,1,1", ("orders", [1, 3])),
])
def test_topic_partition_arguments(text: str, expected: tuple[str, list[int] | None]) -> None:
    assert parse_topic_partitions(text) == expected


@pytest.mark.parametrize("text", ["", ":1", "orders:", "orders:a"])
def test_bad_topic_partition_arguments(text: str) -> None:
    with pytest.raises(ValueError):
        parse_topic_partitions(text)
