"""Which destination topics are created, grown and re-configured (topics.plan, pure)."""

from __future__ import annotations

from tidelog.mirror.config import parse_config
from tidelog.mirror.topics import TopicState, plan

CONFIG = parse_config({"link": {"name": "l"}, "topics": {"include": [".*"], "rename": "dc1.{topic}"},
                       "source": {"bootstrap.servers": "a"}, "destination": {"bootstrap.servers": "b"}})


def test_missing_topics_are_created_with_the_source_partitions_and_configs_less_the_excluded() -> None:
    source = {"orders": TopicState(6, {"retention.ms": "1000", "min.insync.replicas": "2"})}
    steps = plan(CONFIG, source, {})
    assert steps.create == {"dc1.orders": TopicState(6, {"retention.ms": "1000"})}
    assert not steps.grow and not steps.alter


def test_added_partitions_grow_the_destination_and_changed_configs_are_synced() -> None:
    source = {"orders": TopicState(8, {"retention.ms": "2000", "cleanup.policy": "compact"})}
    dest = {"dc1.orders": TopicState(6, {"retention.ms": "1000", "segment.ms": "5",
                                         "min.insync.replicas": "3"})}
    steps = plan(CONFIG, source, dest)
    assert steps.grow == {"dc1.orders": 8}
    assert steps.alter == {"dc1.orders": ({"retention.ms": "2000", "cleanup.policy": "compact"}, ["segment.ms"])}


def test_a_destination_with_more_partitions_is_reported_not_shrunk() -> None:
    steps = plan(CONFIG, {"orders": TopicState(2, {})}, {"dc1.orders": TopicState(4, {})})
    assert steps.shrunk == ["dc1.orders"] and not steps.grow


def test_in_step_topics_need_nothing() -> None:
    steps = plan(CONFIG, {"orders": TopicState(2, {"retention.ms": "1"})},
                 {"dc1.orders": TopicState(2, {"retention.ms": "1"})})
    assert (steps.create, steps.grow, steps.alter, steps.shrunk) == ({}, {}, {}, [])


PRESERVE = parse_config({"link": {"name": "keep", "offsets": "preserve"}, "topics": {"include": [".*"]},
                         "source": {"bootstrap.servers": "a"}, "destination": {"bootstrap.servers": "b"}})


def test_preserve_marks_created_topics_and_asks_to_check_existing_unmarked_ones_before_adopting() -> None:
    source = {"new": TopicState(2, {}), "old": TopicState(3, {}), "mine": TopicState(1, {}),
              "theirs": TopicState(1, {})}
    dest = {"old": TopicState(2, {"retention.ms": "5"}), "mine": TopicState(1, {"mirror.source": "keep"}),
            "theirs": TopicState(1, {"mirror.source": "east"})}
    steps = plan(PRESERVE, source, dest)
    assert steps.create == {"new": TopicState(2, {"mirror.source": "keep"})}
    assert steps.adopt == {"old": 2}  # its end offsets decide: empty is marked, non-empty refused
    assert steps.foreign == {"theirs": "east"}
    assert steps.grow == {"old": 3}
    assert steps.alter == {"old": ({}, ["retention.ms"])}  # mirror.source itself is never synced


def test_translate_mode_appends_to_existing_topics_whatever_they_hold() -> None:
    steps = plan(CONFIG, {"orders": TopicState(1, {})}, {"dc1.orders": TopicState(1, {"mirror.source": "east"})})
    assert not steps.adopt and not steps.foreign
