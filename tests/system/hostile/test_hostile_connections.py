"""Connection limits (max.connections, max.connections.per.ip and its overrides,
max.connection.creation.rate) against a broker subprocess, with clients on many loopback addresses.

Past a limit a new connection is closed at once, before any request, and the refusal is logged once
per address and minute however many follow; connections already open keep working, and a bystander
producer's latency is measured while one address floods the broker with connection attempts.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from helpers.broker_process import BrokerProcess, free_port, register_failure_report
from helpers.clients import admin_client, create_topic
from helpers.hostile import Bystander, closed_by_peer, connect_from, metric, peak_rss
from helpers.raw_client import encode_request

MIB = 1 << 20
P99_LIMIT_MS = 50.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    process = BrokerProcess(tmp_path_factory.mktemp("hostile-connections"), {
        "auto.create.topics.enable": "false", "metrics.port": free_port(),
        "max.connections": 12, "max.connections.per.ip": 3,
        "max.connections.per.ip.overrides": "127.0.0.2:1,127.0.0.3:0",
    })
    process.start()
    create_topic(process.bootstrap, "bystander")
    yield process
    process.close()


def refused(sock: socket.socket) -> bool:
    """Closed by the broker at once, before any request."""
    return closed_by_peer(sock, 1.0)


def answers(sock: socket.socket) -> bool:
    frame = encode_request(ApiVersionsRequest(), correlation_id=7)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    sock.settimeout(5)
    try:
        return len(sock.recv(4)) == 4
    except OSError:
        return False


def refusals(broker: BrokerProcess, limit: str) -> float:
    return metric(int(broker.properties["metrics.port"]), "tidelog_connections_refused_total", limit=limit)


def test_connections_past_the_per_address_and_broker_limits_are_closed_at_once(broker: BrokerProcess) -> None:
    host, port = broker.host, broker.port
    with Bystander(broker.bootstrap, "bystander") as bystander:  # its connections come from 127.0.0.1 too
        time.sleep(0.5)
        kept: list[socket.socket] = []
        while True:  # fill 127.0.0.1's three
            sock = connect_from("127.0.0.1", host, port)
            if not answers(sock):
                sock.close()
                break
            kept.append(sock)
        before = refusals(broker, "max.connections.per.ip")
        flood = 0
        started = time.monotonic()
        while time.monotonic() - started < 3:  # one address opening connections as fast as it can
            with connect_from("127.0.0.1", host, port) as extra:
                assert refused(extra)
            flood += 1
        assert refusals(broker, "max.connections.per.ip") - before == flood
        assert all(answers(sock) for sock in kept), "a connection within the limit stopped being served"
        # An override lowers one address's limit, and 0 refuses it altogether.
        kept.append(connect_from("127.0.0.2", host, port))
        assert answers(kept[-1])
        with connect_from("127.0.0.2", host, port) as extra:
            assert refused(extra)
        with connect_from("127.0.0.3", host, port) as extra:
            assert refused(extra)
        # max.connections=12: fill it from other addresses; the next is refused.
        open_now = int(metric(int(broker.properties["metrics.port"]), "tidelog_connections"))
        for n in range(10, 10 + 12 - open_now):
            kept.append(connect_from(f"127.0.0.{n}", host, port))
            assert answers(kept[-1])
        with connect_from("127.0.0.30", host, port) as extra:
            assert refused(extra)
        assert refusals(broker, "max.connections") == 1
        kept.pop().close()
        time.sleep(0.2)
        kept.append(connect_from("127.0.0.30", host, port))
        assert answers(kept[-1]), "a freed slot was not reusable"
        for sock in kept:
            sock.close()
        time.sleep(0.3)
    print(f"\n{flood} refused connections from one address in 3 s; bystander p99 {bystander.p99_ms():.1f} ms "
          f"over {len(bystander.latencies)} records; broker peak RSS {peak_rss(broker.pid) / MIB:.0f} MiB")
    assert flood > 50
    assert not bystander.errors and bystander.p99_ms() < P99_LIMIT_MS
    log = broker.log_text()
    assert log.count("refused a connection from 127.0.0.1 ") == 1, "refusals of one address flooded the log"
    assert log.count("refused a connection from 127.0.0.2 ") == 1


def test_the_creation_rate_set_at_run_time_refuses_a_burst_of_new_connections(broker: BrokerProcess) -> None:
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("max.connection.creation.rate", "5", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)
    time.sleep(1.1)  # the bucket refills to one second's worth
    burst = [connect_from(f"127.0.0.{n}", broker.host, broker.port) for n in range(40, 60)]
    time.sleep(0.5)
    admitted = sum(0 if closed_by_peer(sock, 0.05) else 1 for sock in burst)
    for sock in burst:
        sock.close()
    print(f"\nmax.connection.creation.rate=5: {admitted} of 20 connections opened at once were admitted")
    assert 5 <= admitted <= 7  # one second's worth, and what refilled meanwhile
    assert refusals(broker, "max.connection.creation.rate") == 20 - admitted
