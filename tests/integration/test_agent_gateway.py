"""tidelog agent in gateway mode: broker, ``tidelog gateway`` and agent as subprocesses.

The outage test stops the gateway, renames the file away and deletes it while the agent is killed
-9 and down: only the outage spool still has those lines.

The agent writes through the gateway (one chunk per line, sourceId = host:path, seqno from the
generation and the line's end offset) and saves its positions lazily in a local file. The rotate
and kill scenario in gateway mode is in tests/system/test_agent_kill.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers.agent_run import AgentRun, Reader, Writer
from helpers.broker_process import BrokerProcess, module_broker, wait_until
from helpers.cli_runner import run_cli
from helpers.clients import create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess

agent_gateway_broker = module_broker("agent_gateway_broker", GATEWAY_TEST_BROKER)


def gateway_section(url: str, extra: str = "") -> str:
    return f'[gateway]\nurl = "{url}"\npositions.save.interval.ms = 2000\n{extra}'


def agent_config(tmp_path: Path, topic: str, logs: Path, gateway: str) -> Path:
    """A quick agent (state in ``tmp_path/state``) shipping ``logs/*.log`` to ``topic`` through ``gateway``."""
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\nid = "{topic}"\nhost = "h1"\ntransaction.interval.ms = 100\n'
                      f'poll.interval.ms = 20\nrotate.wait.ms = 300\nstate.dir = "{tmp_path / "state"}"\n'
                      f'{gateway}\n[[files]]\npaths = ["{logs}/*.log"]\ntopic = "{topic}"\n')
    return config


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




@pytest.mark.slow  # about 50 s: an outage, a kill and a restart of the agent, the gateway restarted
def test_lines_spooled_during_a_gateway_outage_survive_a_kill_and_a_deleted_file(
    agent_gateway_broker: BrokerProcess, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    app = logs / "app.log"
    broker = agent_gateway_broker
    with GatewayProcess(tmp_path / "gw", broker.bootstrap) as gateway:
        topic = create_topic(broker.bootstrap, unique_topic("spool"), 1)
        config = agent_config(tmp_path, topic, logs, gateway_section(gateway.url, "request.timeout.ms = 3000"))
        agent = AgentRun(config, tmp_path / "agent.log")
        reader = Reader(broker.bootstrap, topic, partitions=1)
        writer = Writer(app)
        try:
            agent.start()
            writer.write(1000, pace=0.002)
            wait_until(lambda: reader.count() >= 1000, timeout=60, interval=0.1, message="shipping")
            gateway.kill9()
            writer.write(1000)
            wait_until(lambda: "lines go to the spool" in agent.log.read_text(), timeout=60, interval=0.2,
                       message="the agent meets the outage")
            app.rename(logs / "app.log.1")
            writer.write(500)
            time.sleep(2)  # the renamed file is read to its end (rotate.wait.ms) into the spool
            agent.kill9()
            (logs / "app.log.1").unlink()  # while the agent is down: its lines are only in the spool now
            writer.write(500)
            agent.start()
            time.sleep(2)
            gateway.start()
            wait_until(lambda: reader.count() >= writer.next, timeout=90, interval=0.2,
                       message=f"all {writer.next} lines after the outage")
            assert agent.stop() == 0
            time.sleep(0.3)
            reader.count()
            assert reader.values == list(range(writer.next)), agent.log.read_text()[-3000:]
            log = agent.log.read_text()
            assert "lines from before the restart, sent first" in log and "is lost" not in log
        finally:
            reader.consumer.close()
            agent.close()


def test_a_positions_file_the_disk_refuses_holds_new_generations_back_and_loses_nothing(
    agent_gateway_broker: BrokerProcess, tmp_path: Path
) -> None:
    """The positions file cannot be written (a directory stands where its temporary file goes, as a
    full or read-only disk would refuse it): the agent keeps running, lines of the file's current
    generation still leave, a rotated file's new generation waits (its number is not saved yet), and
    once the file can be written every line is in the topic once, in order."""
    logs, state = tmp_path / "logs", tmp_path / "state"
    logs.mkdir()
    app = logs / "app.log"
    broker = agent_gateway_broker
    with GatewayProcess(tmp_path / "gw", broker.bootstrap) as gateway:
        topic = create_topic(broker.bootstrap, unique_topic("refused"), 1)
        config = agent_config(tmp_path, topic, logs, gateway_section(gateway.url))
        agent = AgentRun(config, tmp_path / "agent.log")
        reader = Reader(broker.bootstrap, topic, partitions=1)
        writer = Writer(app)
        try:
            agent.start()
            writer.write(300, pace=0.002)
            wait_until(lambda: reader.count() >= 300, timeout=60, interval=0.1, message="shipping")
            blocker = state / "positions.json.tmp"
            blocker.mkdir()  # every save fails from now on: open() of the temporary file is refused
            writer.write(200, pace=1.0)  # the same generation, over 4 s (saves are due every 2 s): these leave
            wait_until(lambda: reader.count() >= 500, timeout=60, interval=0.1, message="same generation")
            wait_until(lambda: "cannot write the positions file" in agent.log.read_text(), timeout=30,
                       interval=0.2, message="the refused save is reported")
            app.rename(logs / "app.log.1")
            writer.write(200)  # a new app.log: a new generation, which must wait for the file
            time.sleep(3)
            assert agent.process is not None and agent.process.poll() is None, agent.log.read_text()[-2000:]
            assert reader.count() == 500, "lines of an unsaved generation left"
            blocker.rmdir()
            wait_until(lambda: reader.count() >= writer.next, timeout=60, interval=0.2,
                       message=f"all {writer.next} lines once the file can be written")
            assert agent.stop() == 0
            time.sleep(0.3)
            reader.count()
            assert reader.values == list(range(writer.next)), agent.log.read_text()[-3000:]
            assert "written again" in agent.log.read_text()
        finally:
            reader.consumer.close()
            agent.close()
