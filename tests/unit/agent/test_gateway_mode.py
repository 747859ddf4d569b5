"""Gateway mode's pure pieces: the [gateway] section, seqnos, request bodies, the positions file and
the outage spool (what a restart reads back from it)."""

from __future__ import annotations

import json
import threading
import tomllib
from pathlib import Path

import pytest

from tidelog.agent import positions, state_file
from tidelog.agent.config import GatewayTarget, parse_config
from tidelog.agent.files import SavedGeneration
from tidelog.agent.gateway_client import GatewayClient, GatewayRejected, seqno_of, split_seqno
from tidelog.agent.outage_spool import Handoff, OutageSpool, Pending
from tidelog.agent.shipper import AgentError
from tidelog.agent.via_gateway import GatewayAgent
from tidelog.common.errors import ConfigError

GATEWAY = """
[agent]
id = "web-1"
state.dir = "/var/lib/tidelog-agent"
[gateway]
url = "http://gw:8080/"
token = "s3cret"
request.max.bytes = 4096
[[files]]
paths = ["/var/log/*.log"]
topic = "logs"
"""


def test_a_gateway_section_picks_gateway_mode_with_a_spool_by_default() -> None:
    config = parse_config(tomllib.loads(GATEWAY))
    assert config.gateway == GatewayTarget("http://gw:8080", "s3cret", 4096, 30_000, 1000)
    assert config.state_dir == Path("/var/lib/tidelog-agent") and config.spool_max_bytes == 256 << 20
    assert config.kafka == {}


def test_a_token_file_is_read_and_an_empty_one_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    config = parse_config(tomllib.loads(GATEWAY.replace('token = "s3cret"', f'token.file = "{token}"')))
    assert config.gateway is not None and config.gateway.token == "abc"
    token.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        parse_config(tomllib.loads(GATEWAY.replace('token = "s3cret"', f'token.file = "{token}"')))


@pytest.mark.parametrize(("edit", "message"), [
    (('url = "http://gw:8080/"', 'url = "gw:8080"'), "gateway.url: expected http://HOST:PORT"),
    (('state.dir = "/var/lib/tidelog-agent"', ""), "agent.state.dir: required in gateway mode"),
    (('token = "s3cret"', 'token = "s3cret"\nspeed = 1'), "gateway.speed: unknown setting"),
    (("request.max.bytes = 4096", "request.max.bytes = 10"), "gateway.request.max.bytes: expected an integer >= 1024"),
    (('[gateway]', '[kafka]\nbootstrap.servers = "k:9092"\n[gateway]'), "kafka and gateway: give one of them"),
])
def test_a_bad_gateway_setting_is_named(edit: tuple[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(tomllib.loads(GATEWAY.replace(*edit)))


def test_seqnos_grow_across_generations_and_are_the_offset_in_the_first_file() -> None:
    assert seqno_of(0, 8192) == 8192
    assert seqno_of(1, 5) > seqno_of(0, (1 << 40) - 1)
    assert split_seqno(seqno_of(7, 123)) == (7, 123)
    with pytest.raises(GatewayRejected, match="past 1 TiB"):
        seqno_of(0, 1 << 40)


def test_a_body_has_one_chunk_per_line_and_batches_fit_the_request_size() -> None:
    client = GatewayClient(GatewayTarget("http://gw:1", request_max_bytes=1024), "h1")
    try:
        lines = [Pending(0, 6 * (i + 1), b"x" * 200) for i in range(10)] + [Pending(1, 4, b"\xffab", 9)]
        body = json.loads(client.body("h1:/a.log", "/a.log", lines))
        assert body["meta"] == {"host": "h1", "file": "/a.log"} and len(body["chunks"]) == 11
        assert body["chunks"][0] == {"seqno": 6, "records": [
            {"value": "x" * 200, "key": "h1:/a.log", "headers": {"tidelog-generation": "0"}}]}
        last = body["chunks"][-1]
        assert last["seqno"] == (1 << 40) + 4 and last["records"][0]["value"] == "\ufffdab"
        assert last["records"][0]["headers"]["tidelog-original-size"] == "9" and client.replaced_lines == 1
        batches = list(client.batches(lines))
        assert [len(b) for b in batches] == [3, 3, 3, 2] and [x for b in batches for x in b] == lines
    finally:
        client.close()


def _state(offset: int, next_generation: int = 1) -> str:
    saved = positions.SavedSource("h1:/a.log", "/a.log", "logs", next_generation,
                                  [SavedGeneration(0, 1, 2, offset, 0, 0)])
    return positions.encode("web-1", saved).decode()


def test_the_positions_file_round_trips_and_names_itself_when_broken(tmp_path: Path) -> None:
    assert state_file.load(tmp_path, "web-1") == ({}, 0)
    state_file.save(tmp_path, [_state(10)], spool=7)
    saved, covered = state_file.load(tmp_path, "web-1")
    assert covered == 7 and saved["h1:/a.log"].generations[0].offset == 10
    assert state_file.load(tmp_path, "other") == ({}, 7)
    (tmp_path / "positions.json").write_text("{")
    with pytest.raises(state_file.StateFileError, match=r"positions\.json: unreadable"):
        state_file.load(tmp_path, "web-1")


def test_the_spool_gives_back_lines_in_order_and_the_newest_state_after_a_reopen(tmp_path: Path) -> None:
    spool = OutageSpool(tmp_path, 1 << 20)
    first = Handoff({"h1:/a.log": ("logs", [Pending(0, 2, b"a"), Pending(0, 4, b"b", 7)])}, {"h1:/a.log": _state(4)})
    second = Handoff({"h1:/a.log": ("logs", [Pending(1, 2, b"c")])}, {"h1:/a.log": _state(2, 2)})
    spool.append(first)
    spool.append(second)
    assert spool.backlog and not spool.full
    batches = spool.next_batches(1 << 20)
    assert [b.lines for b in batches] == [first.lines, second.lines]
    spool.replayed = batches[0].next_offset
    spool.close()
    spool = OutageSpool(tmp_path, 1 << 20)  # a restart: everything not released is there again
    assert json.loads(spool.states()["h1:/a.log"])["next_generation"] == 2
    spool.release(batches[0].next_offset)  # what the positions file covers
    assert [b.lines for b in spool.next_batches(1 << 20)] == [second.lines]
    spool.release(batches[1].next_offset)
    assert not spool.backlog and spool.states() == {}
    spool.close()


def _agent(tmp_path: Path, spool_bytes: int = 1 << 20) -> GatewayAgent:
    (tmp_path / "logs").mkdir(exist_ok=True)
    text = (f'[agent]\nid = "a"\nhost = "h"\nstate.dir = "{tmp_path / "state"}"\nspool.max.bytes = {spool_bytes}\n'
            f'[gateway]\nurl = "http://127.0.0.1:1"\n[[files]]\npaths = ["{tmp_path}/logs/*.log"]\ntopic = "t"\n')
    agent = GatewayAgent(parse_config(tomllib.loads(text)))
    agent.start()
    return agent


def _ship(agent: GatewayAgent) -> None:
    agent.step(agent.clock())
    agent.commit(threading.Event())


def test_lines_go_to_the_spool_when_the_gateway_is_unreachable_and_come_back_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "logs" / "app.log"
    (tmp_path / "logs").mkdir()
    log.write_bytes(b"one\ntwo\n")
    agent = _agent(tmp_path)
    _ship(agent)  # nothing listens on port 1: the first write fails, the lines are spooled
    assert agent.spool is not None and agent.spool.backlog
    # The disk refuses the next hand-off: the lines wait in memory, the positions do not move.
    with log.open("ab") as out:
        out.write(b"three\n")

    def refuse(handoff: Handoff) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(agent.spool, "append", refuse)
    _ship(agent)
    source = next(iter(agent.sources.values()))
    assert agent._spool_stuck and source.generations[0].committed == 8
    assert agent.step(agent.clock() + 2) == 0  # the files wait while it is stuck
    monkeypatch.undo()
    agent.step(agent.clock() + 4)  # tried again: to the gateway (down), then to the spool
    assert not agent._spool_stuck and source.generations[0].committed == 14
    agent.close()
    log.unlink()  # deleted while the agent is down: the spool still has every line
    again = _agent(tmp_path)
    assert again.spool is not None
    values = [line.value for batch in again.spool.next_batches(1 << 20) for _, (_, lines) in batch.lines.items()
              for line in lines]
    assert values == [b"one", b"two", b"three"]
    again.close()


def test_a_second_agent_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    first = _agent(tmp_path)
    try:
        with pytest.raises(AgentError, match="in use by another agent"):
            _agent(tmp_path)
    finally:
        first.close()
