"""tidelog agent in gateway mode: broker, ``tidelog gateway`` and agent as subprocesses.

The agent writes through the gateway (one chunk per line, sourceId = host:path, seqno from the
generation and the line's end offset) and saves its positions lazily in a local file; the rotate and
kill scenario (helpers/agent_run.py: two kill -9s, renames and copytruncates while it runs and while
it is down, a truncation) must leave every line exactly once, in order. The gateway's dedup is what
keeps the lines sent again after a kill from landing twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.agent_run import rotate_and_kill_scenario
from helpers.broker_process import BrokerProcess, module_broker
from helpers.cli_runner import run_cli
from helpers.clients import create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess

agent_gateway_broker = module_broker("agent_gateway_broker", GATEWAY_TEST_BROKER)


def gateway_section(url: str, extra: str = "") -> str:
    # Saved every 2 s: a kill -9 always finds lines shipped past the saved positions, sent again.
    return f'[gateway]\nurl = "{url}"\npositions.save.interval.ms = 2000\n{extra}'


def test_every_line_lands_once_through_the_gateway_across_rotations_and_two_kills(
    agent_gateway_broker: BrokerProcess, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret User:agent\n")
    with GatewayProcess(tmp_path / "gw", agent_gateway_broker.bootstrap,
                        {"gateway.auth.tokens.file": str(tokens)}) as gateway:
        rotate_and_kill_scenario(agent_gateway_broker.bootstrap, tmp_path,
                                 gateway_section(gateway.url, 'token = "s3cret"'))
        log = (tmp_path / "agent.log").read_text()
        assert "already at the gateway" in log


def test_a_refused_token_and_a_missing_topic_stop_the_agent_with_the_gateways_message(
    agent_gateway_broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("good User:agent\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "app.log").write_text("one\ntwo\n")
    topic = create_topic(agent_gateway_broker.bootstrap, unique_topic("gwagent"), 1)
    with GatewayProcess(tmp_path / "gw", agent_gateway_broker.bootstrap,
                        {"gateway.auth.tokens.file": str(tokens)}) as gateway:
        for name, token, to, expected in (
                ("bad-token", "wrong", topic, "(HTTP 401)"),
                ("no-topic", "good", unique_topic("absent"), "(HTTP 404): UNKNOWN_TOPIC_OR_PARTITION")):
            config = tmp_path / f"{name}.toml"
            config.write_text(f'[agent]\nid = "{name}"\nstate.dir = "{tmp_path / name}"\n'
                              f'{gateway_section(gateway.url, f"token = {token!r}")}\n'
                              f'[[files]]\npaths = ["{logs}/*.log"]\ntopic = "{to}"\n')
            run = run_cli(capsys, "agent", "--config", str(config))
            assert run.code == 1 and expected in run.err, run.err


def test_gateway_mode_needs_a_state_dir_and_refuses_a_kafka_section_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = f'[[files]]\npaths = ["{tmp_path}/*.log"]\ntopic = "t"\n'
    no_state = tmp_path / "a.toml"
    no_state.write_text(f'{gateway_section("http://127.0.0.1:1")}\n{files}')
    run = run_cli(capsys, "agent", "--config", str(no_state))
    assert run.code == 2 and "agent.state.dir: required in gateway mode" in run.err
    both = tmp_path / "b.toml"
    both.write_text(f'[agent]\nstate.dir = "{tmp_path}"\n[kafka]\nbootstrap.servers = "x:1"\n'
                    f'{gateway_section("http://127.0.0.1:1")}\n{files}')
    run = run_cli(capsys, "agent", "--config", str(both))
    assert run.code == 2 and "kafka and gateway: give one of them" in run.err


