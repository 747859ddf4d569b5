"""tidelog agent against a tidelog broker: a file written, rotated both ways and truncated, the agent
killed -9 twice; every line lands exactly once, in order (the scenario: helpers/agent_run.py)."""

from __future__ import annotations

from pathlib import Path

from helpers.agent_run import rotate_and_kill_scenario
from helpers.broker_process import BrokerProcess


def test_every_line_lands_exactly_once_through_rotations_truncation_and_two_kills(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "broker") as broker:
        rotate_and_kill_scenario(broker.bootstrap, tmp_path)
