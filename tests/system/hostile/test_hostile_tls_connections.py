"""Connection limits on a TLS listener, against a broker subprocess: a connection past a limit is
closed before the TLS handshake, so refusing it costs the broker no TLS work.

A refused client here is a raw socket that sends a real ClientHello (made by Python's ssl module over
memory buffers) and reads what comes back: a handshake that had started would answer with a
ServerHello (a TLS record, first byte 0x16); a refusal before it is an end of stream with no byte.
Admitted connections are full TLS clients (the test CA's trust, ApiVersions answered). Covered:
``max.connections.per.ip`` and its overrides, ``max.connection.creation.rate`` and the per-address
``connection_creation_rate`` quota (KIP-612, held unread and closed after the throttle time).
"""

from __future__ import annotations

import ssl
import struct
import time
from collections.abc import Iterator

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from helpers.broker_process import BrokerProcess, free_port, register_failure_report
from helpers.hostile import connect_from, metric
from helpers.raw_client import encode_request
from tidelog.cli.main import main as cli_main
from unit.security.pki import Pki

PER_IP = 2
TLS_RECORD_HANDSHAKE = 0x16
BROKER_CONFIG = ["configs", "alter", "--entity-type", "brokers", "--entity-name", "1"]


class TlsBroker:
    def __init__(self, broker: BrokerProcess, tls_port: int, ca: str) -> None:
        self.broker, self.tls_port = broker, tls_port
        self.client_context = ssl.create_default_context(cafile=ca)

    def tls_connection(self, source: str) -> ssl.SSLSocket:
        """A TLS connection from ``source`` that completed its handshake (raises if it could not)."""
        sock = connect_from(source, self.broker.host, self.tls_port)
        return self.client_context.wrap_socket(sock, server_hostname="localhost")

    def refusals(self, limit: str) -> float:
        return metric(int(self.broker.properties["metrics.port"]), "tidelog_connections_refused_total", limit=limit)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[TlsBroker]:
    register_failure_report(pytestconfig)
    pki = Pki(tmp_path_factory.mktemp("pki"))
    broker = BrokerProcess(tmp_path_factory.mktemp("hostile-tls"), {
        "ssl.keystore.location": pki.server().bundle, "metrics.port": free_port(),
        "max.connections.per.ip": PER_IP, "max.connections.per.ip.overrides": "127.0.0.52:0",
        "quota.window.num": 2, "quota.window.size.seconds": 1,
    })
    tls_port = free_port()
    broker.properties["listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{tls_port}"
    broker.properties["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,SSL:SSL"
    broker.start()
    yield TlsBroker(broker, tls_port, str(pki.ca_cert))
    broker.close()


def client_hello() -> bytes:
    """The first flight of a TLS client: its ClientHello record(s)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    hello = outgoing.read()
    assert hello[0] == TLS_RECORD_HANDSHAKE
    return hello


def answer_to_hello(tls: TlsBroker, source: str, within: float = 2.0) -> bytes:
    """Send a ClientHello from ``source``; what the broker sent back before closing (b"" if nothing),
    or b"?" if it neither answered nor closed within ``within`` seconds."""
    with connect_from(source, tls.broker.host, tls.tls_port) as sock:
        sock.sendall(client_hello())
        sock.settimeout(within)
        try:
            return sock.recv(5)
        except ConnectionResetError:
            return b""
        except TimeoutError:
            return b"?"


def answers(sock: ssl.SSLSocket) -> bool:
    frame = encode_request(ApiVersionsRequest(), correlation_id=3)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    sock.settimeout(5)
    try:
        return len(sock.recv(4)) == 4
    except OSError:
        return False


def test_a_tls_connection_past_the_per_address_limit_is_closed_before_any_server_hello(tls: TlsBroker) -> None:
    kept = [tls.tls_connection("127.0.0.51") for _ in range(PER_IP)]
    try:
        refused_before_any_hello(tls, kept)
    finally:
        for sock in kept:
            sock.close()


def refused_before_any_hello(tls: TlsBroker, kept: list[ssl.SSLSocket]) -> None:
    assert all(answers(sock) for sock in kept)
    before = tls.refusals("max.connections.per.ip")
    for _ in range(5):
        assert answer_to_hello(tls, "127.0.0.51") == b"", "the broker began a TLS handshake with a refused connection"
    assert answer_to_hello(tls, "127.0.0.52") == b""  # its override is 0
    assert tls.refusals("max.connections.per.ip") - before == 6
    print("\nmax.connections.per.ip=2 on TLS: 6 ClientHellos past the limit met an end of stream, no ServerHello")
    assert answer_to_hello(tls, "127.0.0.53")[:1] == bytes([TLS_RECORD_HANDSHAKE])  # another address is answered
    assert all(answers(sock) for sock in kept), "a connection within the limit stopped being served"
    kept.pop().close()
    time.sleep(0.2)
    kept.append(tls.tls_connection("127.0.0.51"))
    assert answers(kept[-1]), "a freed slot was not usable over TLS"
    log = tls.broker.log_text()
    assert log.count("refused a connection from 127.0.0.51 on SSL") == 1


def test_a_tls_connection_past_the_creation_rate_is_closed_before_any_server_hello(tls: TlsBroker) -> None:
    assert cli_main([*BROKER_CONFIG, "--add-config", "max.connection.creation.rate=2", "-b", tls.broker.bootstrap]) == 0
    try:
        time.sleep(1.1)  # the bucket refills to one second's worth
        before = tls.refusals("max.connection.creation.rate")
        answered = [answer_to_hello(tls, f"127.0.0.{n}", within=1.0) for n in range(60, 66)]
    finally:
        assert cli_main([*BROKER_CONFIG, "--delete-config", "max.connection.creation.rate",
                         "-b", tls.broker.bootstrap]) == 0
    handshakes = sum(1 for first in answered if first[:1] == bytes([TLS_RECORD_HANDSHAKE]))
    refused = answered.count(b"")
    print(f"\nmax.connection.creation.rate=2 on TLS: {handshakes} of 6 began a handshake, {refused} closed before one")
    assert handshakes + refused == 6 and 2 <= handshakes <= 3
    assert tls.refusals("max.connection.creation.rate") - before == refused


def test_a_tls_connection_past_its_address_quota_is_held_and_closed_without_a_handshake(tls: TlsBroker) -> None:
    rate = 2
    assert cli_main(["quotas", "alter", "--ip", "127.0.0.70", "--add-config", f"connection_creation_rate={rate}",
                     "-b", tls.broker.bootstrap]) == 0
    time.sleep(0.5)
    before = tls.refusals("connection_creation_rate")
    started = time.monotonic()
    burst = [connect_from("127.0.0.70", tls.broker.host, tls.tls_port) for _ in range(6)]
    outcomes: list[tuple[bytes, float]] = []
    for sock in burst:
        sock.sendall(client_hello())
    for sock in burst:
        sock.settimeout(3)
        try:
            first = sock.recv(1)
        except ConnectionResetError:
            first = b""
        outcomes.append((first, time.monotonic() - started))
        sock.close()
    handshakes = sum(1 for first, _ in outcomes if first == bytes([TLS_RECORD_HANDSHAKE]))
    closes = [took for first, took in outcomes if first == b""]
    print(f"\nconnection_creation_rate={rate} on TLS: {handshakes} of 6 began a handshake; the others were closed "
          f"without one after {', '.join(f'{t * 1000:.0f}' for t in closes)} ms")
    assert handshakes + len(closes) == 6
    assert rate <= handshakes <= rate + 1
    assert all(0.1 < took <= 1.5 for took in closes)  # Kafka's delayed close: held unread, not closed at once
    assert tls.refusals("connection_creation_rate") - before == len(closes)


def test_failed_handshakes_give_their_place_in_the_limits_back(tls: TlsBroker) -> None:
    for _ in range(PER_IP + 3):  # plaintext Kafka on the TLS port: the handshake fails, the connection is dropped
        with connect_from("127.0.0.90", tls.broker.host, tls.tls_port) as sock:
            frame = encode_request(ApiVersionsRequest(), correlation_id=1)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            sock.settimeout(5)
            try:
                while sock.recv(4096):  # a TLS alert at most, then the end (a timeout here fails the test)
                    pass
            except ConnectionResetError:
                pass
    time.sleep(0.2)
    kept = [tls.tls_connection("127.0.0.90") for _ in range(PER_IP)]
    try:
        assert all(answers(sock) for sock in kept), "failed handshakes kept their places in max.connections.per.ip"
    finally:
        for sock in kept:
            sock.close()
