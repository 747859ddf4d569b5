"""kill -9 of the gateway in the middle of a stream: every chunk lands exactly once, in order per source.

50 sources send their chunks (5 per request, 2 records each) with retries through one gateway; the
gateway is killed with SIGKILL twice mid-stream and started again each time. A ``read_committed``
checker then finds every record of every source exactly once, in seqno order, in one partition.
``TIDELOG_GATEWAY_KILL_CHUNKS`` sets the chunks per source (default 100: 5,000 chunks; the issue's
100,000 chunks is 2000, about ten minutes on two cores).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.broker_process import BrokerProcess
from helpers.clients import create_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess
from helpers.gateway_stream import check_exactly_once, send_stream

SOURCES = 50
CHUNKS = int(os.environ.get("TIDELOG_GATEWAY_KILL_CHUNKS", "100"))
PARTITIONS = 4


@pytest.mark.slow
def test_gateway_killed_mid_stream_loses_and_duplicates_nothing(
        tmp_path: Path, fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker(GATEWAY_TEST_BROKER)
    topic = create_topic(broker.bootstrap, "kill-stream", PARTITIONS)
    gateway = GatewayProcess(tmp_path, broker.bootstrap).start()
    kills = [0.3, 0.65]
    restarts: list[threading.Thread] = []

    def on_progress(fraction: float) -> None:
        if kills and fraction >= kills[0]:
            kills.pop(0)
            gateway.kill9()
            restart = threading.Thread(target=gateway.start)  # the stream keeps retrying meanwhile
            restart.start()
            restarts.append(restart)

    try:
        retries = send_stream([gateway.url], topic, SOURCES, CHUNKS, on_progress=on_progress)
        for restart in restarts:
            restart.join(60)
        assert not kills and len(restarts) == 2
        assert retries > 0  # the kills were felt
    finally:
        gateway.close()
    assert check_exactly_once(broker.bootstrap, topic, PARTITIONS, SOURCES, CHUNKS) == SOURCES * CHUNKS * 2
