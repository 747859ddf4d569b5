"""Log lines about a client carry its context (address, client id, listener) as JSON fields."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable

from helpers.broker_process import BrokerProcess, wait_until


def test_a_closed_bad_connection_is_logged_with_the_client_context(fresh_broker: Callable[..., BrokerProcess]) -> None:
    broker = fresh_broker({"log.format": "json"})
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        client_port = sock.getsockname()[1]
        # A request header naming API key 999 with client id "garbler": closed as Kafka does.
        body = struct.pack(">hhih", 999, 0, 7, 7) + b"garbler"
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(1) == b""

    def closing_event() -> dict[str, object] | None:
        for line in broker.log_text().splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if "closing connection" in str(event.get("msg")):
                    return dict(event)
        return None

    event = wait_until(closing_event, timeout=5)
    assert event is not None
    assert event["peer"] == f"127.0.0.1:{client_port}"
    assert event["listener"] == "PLAINTEXT"
    assert event["level"] == "WARNING"
