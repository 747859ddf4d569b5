"""TLS listeners against a broker subprocess: confluent-kafka and kafka-python over SSL, mutual TLS
with the principal taken from the client certificate (and ACLs on it), and what a plaintext client
gets from a TLS port (nothing, and the broker keeps serving).

Certificates come from a CA made for the test session (``unit.security.pki``, the openssl command).
The broker's main port stays PLAINTEXT because BrokerProcess probes readiness with plain ApiVersions.
"""

from __future__ import annotations

import socket
import ssl
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from helpers.broker_process import BrokerProcess, api_versions_answered, free_port, register_failure_report
from helpers.clients import (
    FAST_CLIENT,
    DeliveryLog,
    admin_client,
    consume,
    create_topic,
    produce_all,
    producer,
    unique_topic,
)
from unit.security.pki import Issued, Pki

with warnings.catch_warnings():  # kafka-python 3.0.12 loads its schemas with importlib.resources.read_text
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def start_broker(workdir: Path, overrides: dict[str, object], extra_listeners: dict[str, str]) -> tuple[BrokerProcess, dict[str, int]]:
    """A broker with PLAINTEXT on its main port plus ``extra_listeners`` (name → security protocol)."""
    broker = BrokerProcess(workdir, overrides)
    ports = {name: free_port() for name in extra_listeners}
    broker.properties["listeners"] = ",".join(
        [f"PLAINTEXT://127.0.0.1:{broker.port}"] + [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
    )
    broker.properties["listener.security.protocol.map"] = ",".join(
        ["PLAINTEXT:PLAINTEXT"] + [f"{name}:{protocol}" for name, protocol in extra_listeners.items()]
    )
    return broker.start(), ports


@pytest.fixture(scope="module")
def tls_broker(
    pki: Pki, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[tuple[BrokerProcess, str]]:
    register_failure_report(pytestconfig)
    server = pki.server()
    broker, ports = start_broker(
        tmp_path_factory.mktemp("tls-broker"),
        {"ssl.keystore.location": server.bundle, "auto.create.topics.enable": "false"},
        {"SSL": "SSL"},
    )
    yield broker, f"127.0.0.1:{ports['SSL']}"
    broker.close()


def ssl_config(pki: Pki, client: Issued | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert)}
    if client is not None:
        config |= {"ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)}
    return config


def test_confluent_kafka_produces_and_consumes_over_tls(tls_broker: tuple[BrokerProcess, str], pki: Pki) -> None:
    broker, ssl_bootstrap = tls_broker
    topic = create_topic(broker.bootstrap, unique_topic("tls"))
    produce_all(producer(ssl_bootstrap, ssl_config(pki)), topic, [b"one", b"two"])
    assert [m.value() for m in consume(ssl_bootstrap, topic, 2, config=ssl_config(pki))] == [b"one", b"two"]


def test_kafka_python_produces_and_consumes_over_tls(tls_broker: tuple[BrokerProcess, str], pki: Pki) -> None:
    broker, ssl_bootstrap = tls_broker
    topic = create_topic(broker.bootstrap, unique_topic("tls-kp"))
    tls = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca_cert), "request_timeout_ms": 10_000}
    prod = KafkaProducer(bootstrap_servers=ssl_bootstrap, enable_idempotence=False, **tls)
    try:
        prod.send(topic, b"hello").get(timeout=15)
    finally:
        prod.close(timeout=5)
    cons = KafkaConsumer(bootstrap_servers=ssl_bootstrap, group_id=None, auto_offset_reset="earliest", **tls)
    try:
        cons.assign([TopicPartition(topic, 0)])
        records = [r for batch in cons.poll(timeout_ms=10_000).values() for r in batch]
        assert [r.value for r in records] == [b"hello"]
    finally:
        cons.close()


def test_a_client_that_does_not_trust_the_ca_is_refused(tls_broker: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    _, ssl_bootstrap = tls_broker
    stranger = Pki(tmp_path / "stranger", "unrelated CA")
    config = {"bootstrap.servers": ssl_bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(stranger.ca_cert), **FAST_CLIENT}
    with pytest.raises(Exception, match=r"(?i)ssl|certificate|transport"):
        AdminClient(config).list_topics(timeout=3)


def test_plaintext_bytes_on_the_tls_port_get_no_answer(tls_broker: tuple[BrokerProcess, str]) -> None:
    broker, ssl_bootstrap = tls_broker
    host, port = ssl_bootstrap.split(":")
    # An ApiVersions v0 request in clear text: the TLS layer sees garbage and drops the connection
    # without a Kafka answer (a TLS alert at most, never a response frame).
    request = bytes.fromhex("0000000e" "0012" "0000" "00000001" "0004" "74657374")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request)
        received = b""
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert not received or received[0] == 0x15, f"expected nothing or a TLS alert, got {received[:16]!r}"
    assert api_versions_answered(broker.host, broker.port), "the broker keeps serving"
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((host, int(port)), timeout=5) as raw, context.wrap_socket(raw) as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3"), "the TLS port still completes handshakes"


# -- mutual TLS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mtls_broker(
    pki: Pki, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[tuple[BrokerProcess, str]]:
    """SSL with required client certificates; principals are the certificates' CN; ACLs enforced.
    The PLAINTEXT listener's ANONYMOUS is the super user that administers it."""
    register_failure_report(pytestconfig)
    server = pki.server("mtls-server")
    broker, ports = start_broker(
        tmp_path_factory.mktemp("mtls-broker"),
        {
            "listener.name.mtls.ssl.keystore.location": server.bundle,
            "listener.name.mtls.ssl.truststore.location": pki.ca_cert,
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": "User:ANONYMOUS",
            "auto.create.topics.enable": "false",
        },
        {"MTLS": "SSL"},
    )
    yield broker, f"127.0.0.1:{ports['MTLS']}"
    broker.close()


def allow(principal: str, topic: str, *operations: AclOperation) -> list[AclBinding]:
    return [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for op in operations
    ]


def create_acls(bootstrap: str, bindings: list[AclBinding]) -> None:
    admin = admin_client(bootstrap)  # must outlive the futures
    for future in admin.create_acls(bindings).values():
        future.result(timeout=10)


def test_mutual_tls_principal_comes_from_the_certificate(mtls_broker: tuple[BrokerProcess, str], pki: Pki) -> None:
    broker, mtls_bootstrap = mtls_broker
    topic = create_topic(broker.bootstrap, unique_topic("mtls"))
    alice = pki.client("/C=US/O=Acme/OU=eng/CN=Alice", "alice")
    bob = pki.client("/C=US/O=Acme/CN=bob", "bob")
    # The helpers' consumers carry a group id "g-<random>" (librdkafka asks for its coordinator even
    # when partitions are assigned by hand): a prefixed ACL covers them.
    group_read = AclBinding(ResourceType.GROUP, "g-", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    create_acls(broker.bootstrap, [*allow("User:alice", topic, AclOperation.WRITE, AclOperation.READ), group_read])

    produce_all(producer(mtls_bootstrap, ssl_config(pki, alice)), topic, [b"from alice"])
    assert [m.value() for m in consume(mtls_bootstrap, topic, 1, config=ssl_config(pki, alice))] == [b"from alice"]

    log = DeliveryLog()
    bob_producer = producer(mtls_bootstrap, ssl_config(pki, bob) | {"message.timeout.ms": 5000})
    bob_producer.produce(topic, b"from bob", on_delivery=log)
    bob_producer.flush(10)
    assert [e.code() for e in log.errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_mutual_tls_refuses_a_client_without_certificate(mtls_broker: tuple[BrokerProcess, str], pki: Pki) -> None:
    broker, mtls_bootstrap = mtls_broker
    config = {"bootstrap.servers": mtls_bootstrap, **ssl_config(pki), **FAST_CLIENT}
    with pytest.raises(Exception, match=r"(?i)ssl|handshake|transport"):
        AdminClient(config).list_topics(timeout=3)
    assert api_versions_answered(broker.host, broker.port)
