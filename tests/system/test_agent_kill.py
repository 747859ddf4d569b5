"""tidelog agent against a tidelog broker: a file written, rotated both ways and truncated, the agent
killed -9 twice; every line lands exactly once, in order (the scenario: helpers/agent_run.py).
Straight to Kafka (with and without the outage spool), and through ``tidelog gateway`` (gateway mode), where the gateway's dedup keeps
the lines sent again after a kill (positions are saved lazily there) from landing twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.agent_run import kafka_target, rotate_and_kill_scenario
from helpers.broker_process import BrokerProcess
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess


def test_every_line_lands_exactly_once_through_rotations_truncation_and_two_kills(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "broker") as broker:
        rotate_and_kill_scenario(broker.bootstrap, tmp_path)


def test_with_the_outage_spool_on_every_line_lands_exactly_once_through_rotations_and_two_kills(
    tmp_path: Path,
) -> None:
    # agent.state.dir straight to Kafka: the spooling agent, live all along (no outage here), starts
    # from the positions topic and its (empty) spool after each kill.
    with BrokerProcess(tmp_path / "broker") as broker:
        rotate_and_kill_scenario(broker.bootstrap, tmp_path, kafka_target(broker.bootstrap))


@pytest.mark.slow  # 35 to 80 s on the shared machine
def test_every_line_lands_once_through_the_gateway_across_rotations_and_two_kills(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret User:agent\n")
    with BrokerProcess(tmp_path / "broker", GATEWAY_TEST_BROKER) as broker, \
            GatewayProcess(tmp_path / "gw", broker.bootstrap, {"gateway.auth.tokens.file": str(tokens)}) as gateway:
        # Positions saved every 2 s: a kill -9 always finds lines shipped past them, sent again.
        rotate_and_kill_scenario(broker.bootstrap, tmp_path, f'[gateway]\nurl = "{gateway.url}"\ntoken = "s3cret"\n'
                                                             f'positions.save.interval.ms = 2000\n')
        assert "already at the gateway" in (tmp_path / "agent.log").read_text()
