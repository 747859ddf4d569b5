"""The Kafka-mode outage spool's pure pieces: the settings that turn it on, a position's progress, and
what a replay transaction takes from spooled batches given the committed baseline."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tidelog.agent import positions
from tidelog.agent.config import parse_config
from tidelog.agent.files import SavedGeneration
from tidelog.agent.kafka_spool import SpoolingAgent, newer, plan_replay, progress
from tidelog.agent.outage_spool import Handoff, OutageSpool, Pending
from tidelog.agent.positions import SavedSource
from tidelog.agent.shipper import AgentError
from tidelog.common.errors import ConfigError

KAFKA = '[agent]\n{agent}\n[kafka]\nbootstrap.servers = "k:9092"\n[[files]]\npaths = ["x"]\ntopic = "t"\n'
SOURCE = "h:/var/log/app.log"


def _saved(next_generation: int, *generations: tuple[int, int]) -> SavedSource:
    return SavedSource(SOURCE, "/var/log/app.log", "t", next_generation,
                       [SavedGeneration(number, 1, 100 + number, offset, 0, 0) for number, offset in generations])


def _state(next_generation: int, *generations: tuple[int, int]) -> str:
    return positions.encode("a", _saved(next_generation, *generations)).decode()


def test_a_state_dir_turns_the_spool_on_straight_to_kafka_and_zero_turns_it_off() -> None:
    on = parse_config(tomllib.loads(KAFKA.format(agent='state.dir = "/var/lib/agent"')))
    assert on.gateway is None and on.state_dir == Path("/var/lib/agent") and on.spool_max_bytes == 256 << 20
    off = parse_config(tomllib.loads(KAFKA.format(agent='state.dir = "/s"\nspool.max.bytes = 0')))
    assert off.spool_max_bytes == 0
    assert parse_config(tomllib.loads(KAFKA.format(agent=""))).spool_max_bytes == 0


def test_a_spool_size_without_a_state_dir_is_refused_with_what_to_set() -> None:
    with pytest.raises(ConfigError, match=r"agent\.spool\.max\.bytes: the spool is kept in agent\.state\.dir"):
        parse_config(tomllib.loads(KAFKA.format(agent="spool.max.bytes = 1000")))


def test_the_spooling_agent_refuses_a_configuration_without_a_spool() -> None:
    with pytest.raises(AgentError, match="needs"):
        SpoolingAgent(parse_config(tomllib.loads(KAFKA.format(agent=""))))


def test_progress_is_the_first_unfinished_generation_or_the_next_one() -> None:
    assert progress(_saved(3, (1, 500), (2, 0))) == (1, 500)
    assert progress(_saved(3)) == (3, 0)
    assert progress(_saved(0)) == (0, 0)
    assert newer(_saved(3, (2, 10)), _saved(3, (1, 900)))
    assert newer(_saved(4, (2, 10)), _saved(3, (2, 10))) and not newer(_saved(3, (2, 10)), _saved(3, (2, 10)))


def _batch(lines: list[tuple[int, int]], state: str | None, next_offset: int) -> Handoff:
    handoff = Handoff(lines={SOURCE: ("t", [Pending(g, e, b"%d" % e) for g, e in lines])}, next_offset=next_offset,
                      time_ms=1234)
    if state is not None:
        handoff.states[SOURCE] = state
    return handoff


def test_replay_leaves_out_lines_the_baseline_holds_and_never_writes_a_position_behind_it() -> None:
    # The spool holds gen 0 lines 10..40 (spooled after a rewind) and gen 1; the topic has gen 0 up to 30.
    batches = [_batch([(0, 10), (0, 20)], _state(1, (0, 20)), 5),
               _batch([(0, 30), (0, 40)], _state(2, (0, 40), (1, 0)), 9),
               _batch([(1, 7)], _state(2, (1, 7)), 12)]
    plan = plan_replay(batches, {SOURCE: (0, 30)}, 1000, 0)
    assert [(line.generation, line.end) for _, _, line, _ in plan.lines] == [(0, 40), (1, 7)]
    assert all(topic == "t" and time_ms == 1234 for topic, _, _, time_ms in plan.lines)
    assert plan.states == {SOURCE: _state(2, (1, 7))}  # the newest; (0, 20) would have moved it back
    assert plan.baseline == {SOURCE: (1, 7)} and plan.end == 12


def test_replay_of_what_the_topic_already_has_writes_nothing_but_moves_past_it() -> None:
    batches = [_batch([(0, 10), (0, 20)], _state(1, (0, 20)), 5)]
    plan = plan_replay(batches, {SOURCE: (0, 20)}, 1000, 0)
    assert plan.lines == [] and plan.states == {SOURCE: _state(1, (0, 20))} and plan.end == 5
    plan = plan_replay(batches, {SOURCE: (1, 0)}, 1000, 0)
    assert plan.lines == [] and plan.states == {} and plan.baseline == {SOURCE: (1, 0)}


def test_replay_takes_whole_batches_up_to_the_record_limit_and_a_source_unknown_to_the_topic_whole() -> None:
    batches = [_batch([(0, 1), (0, 2)], _state(1, (0, 2)), 3), _batch([(0, 3)], _state(1, (0, 3)), 5)]
    plan = plan_replay(batches, {}, 2, 0)
    assert len(plan.lines) == 2 and plan.end == 3


def test_spooled_batches_read_back_with_their_time_in_order(tmp_path: Path) -> None:
    spool = OutageSpool(tmp_path, 1 << 20)
    spool.append(_batch([(0, 10)], _state(1, (0, 10)), 0))
    spool.append(_batch([(0, 20)], _state(1, (0, 20)), 0))
    spool.close()
    spool = OutageSpool(tmp_path, 1 << 20)
    batches = spool.next_batches(1 << 20)
    assert [b.time_ms for b in batches] == [1234, 1234]
    plan = plan_replay(batches, {}, 100, spool.replayed)
    assert [line.end for _, _, line, _ in plan.lines] == [10, 20] and plan.end == spool.spool.end_offset
    spool.close()
