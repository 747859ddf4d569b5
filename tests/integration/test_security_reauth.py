"""SASL re-authentication (KIP-368, ``connections.max.reauth.ms``) against a broker subprocess.

The broker gives every SASL session 1.5 s. On the wire: SaslAuthenticate v1 tells the client so; a
connection that does not re-authenticate in time is closed at its next request; one that does
(SaslHandshake and SaslAuthenticate again, same user and mechanism) keeps serving; re-authenticating
as someone else is refused and closes the connection. With librdkafka, which re-authenticates by
itself, a producer keeps producing across several sessions and the broker counts re-authentications.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

import pytest
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.schema.metadata.v4.request import MetadataRequest
from kio.schema.metadata.v4.response import MetadataResponse
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from helpers.broker_process import BrokerProcess, free_port, register_failure_report
from helpers.clients import FAST_CLIENT, admin_client, create_topic, produce_all, producer, unique_topic
from helpers.raw_client import RawClient
from tidelog.protocol.sasl import SCRAM_SHA_256, ScramClient

SESSION_MS = 1500
PLAIN_USERS = "alice = alice-secret\nbob = bob-secret\n"


class ReauthBroker:
    def __init__(self, broker: BrokerProcess, sasl_port: int, metrics_port: int) -> None:
        self.broker, self.sasl_port, self.metrics_port = broker, sasl_port, metrics_port

    def raw(self) -> RawClient:
        return RawClient("127.0.0.1", self.sasl_port)

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


@pytest.fixture(scope="module")
def reauth(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[ReauthBroker]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("reauth-broker")
    users = workdir / "plain-users"
    users.write_text(PLAIN_USERS)
    metrics_port, sasl_port = free_port(), free_port()
    broker = BrokerProcess(workdir, {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.plain.users.file": users,
        "connections.max.reauth.ms": SESSION_MS,
        "connection.failed.authentication.delay.ms": 0,
        "metrics.port": metrics_port,
        "offsets.topic.num.partitions": 1,
    })
    broker.properties["listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    broker.start()
    admin = admin_client(broker.bootstrap)
    upsert = UserScramCredentialUpsertion("sam", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"sam-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=10)
    yield ReauthBroker(broker, sasl_port, metrics_port)
    broker.close()


def login(client: RawClient, user: str, password: str) -> timedelta:
    """PLAIN over SaslHandshake v1 + SaslAuthenticate v1; the session lifetime the broker grants."""
    assert client.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    answer = client.call(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()))
    assert answer.error_code == 0, answer.error_message
    return answer.session_lifetime


def metadata_answered(client: RawClient) -> bool:
    return isinstance(client.call(MetadataRequest(topics=None, allow_auto_topic_creation=False)), MetadataResponse)


def test_the_session_lifetime_is_told_and_an_expired_session_is_closed_at_its_next_request(reauth: ReauthBroker) -> None:
    with reauth.raw() as client:
        assert login(client, "alice", "alice-secret") == timedelta(milliseconds=SESSION_MS)
        assert metadata_answered(client)
        time.sleep(SESSION_MS / 1000 + 0.2)
        client.send_request(MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert client.wait_closed(), "a request after the session's end closes the connection"


def test_re_authenticating_in_time_keeps_the_connection(reauth: ReauthBroker) -> None:
    with reauth.raw() as client:
        login(client, "alice", "alice-secret")
        for _ in range(3):  # three sessions back to back: 3 x 1 s > one session
            time.sleep(SESSION_MS / 1000 - 0.5)
            assert login(client, "alice", "alice-secret") == timedelta(milliseconds=SESSION_MS)
            assert metadata_answered(client)


def test_re_authenticating_as_someone_else_is_refused_and_closes(reauth: ReauthBroker) -> None:
    with reauth.raw() as client:
        login(client, "alice", "alice-secret")
        assert client.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        answer = client.call(SaslAuthenticateRequest(auth_bytes=b"\0bob\0bob-secret"))
        assert answer.error_code == 58 and "User:alice" in (answer.error_message or "")
        assert client.wait_closed()


def test_re_authenticating_with_scram_keeps_the_connection(reauth: ReauthBroker) -> None:
    with reauth.raw() as client:
        for _ in range(2):
            assert client.call(SaslHandshakeRequest(mechanism=SCRAM_SHA_256)).error_code == 0
            scram = ScramClient(SCRAM_SHA_256, "sam", "sam-secret", f"nonce{time.monotonic_ns()}")
            first = client.call(SaslAuthenticateRequest(auth_bytes=scram.first()))
            final = client.call(SaslAuthenticateRequest(auth_bytes=scram.final(first.auth_bytes)))
            assert final.error_code == 0 and scram.verify(final.auth_bytes)
            assert final.session_lifetime == timedelta(milliseconds=SESSION_MS)
            assert metadata_answered(client)
            time.sleep(SESSION_MS / 1000 - 0.5)


def test_librdkafka_re_authenticates_by_itself_and_keeps_producing(reauth: ReauthBroker) -> None:
    topic = create_topic(reauth.broker.bootstrap, unique_topic("reauth"))
    before = reauth.metric("tidelog_reauthentication_successes_total")
    prod = producer(f"127.0.0.1:{reauth.sasl_port}", {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "sam", "sasl.password": "sam-secret", **FAST_CLIENT,
    })
    deadline = time.monotonic() + 3 * SESSION_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        produce_all(prod, topic, [b"%d" % sent])
        sent += 1
        time.sleep(0.1)
    assert sent > 20
    assert reauth.metric("tidelog_reauthentication_successes_total") - before >= 2
