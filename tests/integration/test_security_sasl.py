"""SASL against a broker subprocess: PLAIN (users file) and SCRAM-SHA-256/512 (users in the cluster
metadata, managed with the Kafka admin API), over SASL_PLAINTEXT and SASL_SSL, with confluent-kafka,
kafka-python and aiokafka; and what a client that gets it wrong sees on the wire (wrong password,
unknown mechanism, requests before authentication, garbage tokens): a clean error after
``connection.failed.authentication.delay.ms``, then a closed connection, while others keep working.

The broker's main port is PLAINTEXT, without an authorizer: the test administers users through it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.create_acls.v1.request import AclCreation, CreateAclsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.metadata.v4.request import MetadataRequest
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v1.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from helpers.broker_process import BrokerProcess, free_port, register_failure_report
from helpers.cli_runner import run_cli
from helpers.clients import (
    FAST_CLIENT,
    admin_client,
    consume,
    create_topic,
    produce_all,
    producer,
    unique_topic,
)
from helpers.raw_client import RawClient
from tidelog.protocol.sasl import SCRAM_SHA_256, ScramClient
from unit.security.pki import Pki

with warnings.catch_warnings():  # kafka-python 3.0.12 loads its schemas with importlib.resources.read_text
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition

FAILED_AUTH_DELAY_MS = 300
USERS = {"plain": ("alice", "alice-secret"), "SCRAM-SHA-256": ("sam", "sam-secret"), "SCRAM-SHA-512": ("sue", "sue-secret")}


class SaslBroker:
    def __init__(self, broker: BrokerProcess, ports: dict[str, int], ca: Path) -> None:
        self.broker, self.ports, self.ca = broker, ports, ca

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_config(self, listener: str, mechanism: str, password: str | None = None) -> dict[str, Any]:
        user, secret = USERS["plain" if mechanism == "PLAIN" else mechanism]
        config = {
            "security.protocol": listener, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": secret if password is None else password,
        }
        if listener == "SASL_SSL":
            config["ssl.ca.location"] = str(self.ca)
        return config


@pytest.fixture(scope="module")
def sasl(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[SaslBroker]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("sasl-broker")
    pki = Pki(workdir / "pki")
    users_file = workdir / "plain-users"
    users_file.write_text("# test users\nalice = alice-secret\n")
    broker = BrokerProcess(workdir, {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.plain.users.file": users_file,
        "ssl.keystore.location": pki.server().bundle,
        "connection.failed.authentication.delay.ms": FAILED_AUTH_DELAY_MS,
        "connection.failed.authentication.backoff.max.ms": 0,  # the throttle: tests/system/hostile/test_hostile_authentication.py
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 2,
        "auto.create.topics.enable": "false",
    })
    ports = {"SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    broker.properties["listeners"] = ",".join(
        [f"PLAINTEXT://127.0.0.1:{broker.port}"] + [f"{name}://127.0.0.1:{port}" for name, port in ports.items()]
    )
    broker.start()
    admin = admin_client(broker.bootstrap)
    upserts = [
        UserScramCredentialUpsertion("sam", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"sam-secret"),
        UserScramCredentialUpsertion("sue", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"sue-secret"),
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout=10)
    yield SaslBroker(broker, ports, pki.ca_cert)
    broker.close()


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256")],
)
def test_confluent_kafka_produces_and_consumes_in_a_group(sasl: SaslBroker, listener: str, mechanism: str) -> None:
    topic = create_topic(sasl.broker.bootstrap, unique_topic("sasl"))
    config = sasl.client_config(listener, mechanism)
    bootstrap = sasl.bootstrap(listener)
    produce_all(producer(bootstrap, config), topic, [b"a", b"b", b"c"])
    group = Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000, **FAST_CLIENT, **config,
    })
    try:
        group.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < 3 and time.monotonic() < deadline:
            message = group.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert values == [b"a", b"b", b"c"]
        group.commit(asynchronous=False)
    finally:
        group.close()


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256")],
)
def test_the_clis_own_protocol_requests_authenticate(sasl: SaslBroker, capsys: pytest.CaptureFixture[str],
                                                     listener: str, mechanism: str) -> None:
    # delete-offsets and transactions list/describe speak the protocol themselves (cli/wire.py).
    topic = create_topic(sasl.broker.bootstrap, unique_topic("cli"))
    group = unique_topic("g")
    committer = Consumer({"bootstrap.servers": sasl.broker.bootstrap, "group.id": group, **FAST_CLIENT})
    committer.commit(offsets=[CkTopicPartition(topic, 0, 1)], asynchronous=False)
    committer.close()
    options = ["-b", sasl.bootstrap(listener)]
    for key, value in sasl.client_config(listener, mechanism).items():
        options += ["-X", f"{key}={value}"]
    listed = run_cli(capsys, "transactions", "list", "--json", *options)
    assert listed.code == 0 and listed.json() == [], listed.err
    described = run_cli(capsys, "transactions", "describe", "nobody", "--json", *options)
    assert described.json()[0]["transactional_id"] == "nobody", described.err
    deleted = run_cli(capsys, "groups", "delete-offsets", "--group", group, "--topic", f"{topic}:0", "--json", *options)
    assert deleted.code == 0 and deleted.json() == [{"group": group, "topic": topic, "partition": 0, "error": None}], deleted.err


def test_the_clis_own_protocol_requests_report_a_wrong_password(sasl: SaslBroker, capsys: pytest.CaptureFixture[str]) -> None:
    options = ["-b", sasl.bootstrap("SASL_SSL"), "--timeout", "5"]
    for key, value in sasl.client_config("SASL_SSL", "SCRAM-SHA-256", password="wrong").items():
        options += ["-X", f"{key}={value}"]
    refused = run_cli(capsys, "transactions", "list", *options)
    assert refused.code != 0 and "authentication as 'sam' failed" in refused.err


def test_admin_calls_over_sasl_ssl(sasl: SaslBroker) -> None:
    admin = AdminClient({"bootstrap.servers": sasl.bootstrap("SASL_SSL"), **FAST_CLIENT, **sasl.client_config("SASL_SSL", "SCRAM-SHA-512")})
    described = {user: f.result(timeout=10) for user, f in admin.describe_user_scram_credentials(["sue", "sam"]).items()}
    infos = {user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for user, d in described.items()}
    assert infos == {"sue": [(ScramMechanism.SCRAM_SHA_512, 8192)], "sam": [(ScramMechanism.SCRAM_SHA_256, 4096)]}
    assert admin.list_topics(timeout=10).brokers[1].port == sasl.ports["SASL_SSL"], "metadata names this listener"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_over_sasl_ssl(sasl: SaslBroker, mechanism: str) -> None:
    topic = create_topic(sasl.broker.bootstrap, unique_topic("sasl-kp"))
    user, secret = USERS["plain" if mechanism == "PLAIN" else mechanism]
    settings = {
        "bootstrap_servers": sasl.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL", "ssl_cafile": str(sasl.ca),
        "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": secret,
        "request_timeout_ms": 10_000,
    }
    prod = KafkaProducer(enable_idempotence=False, **settings)
    try:
        prod.send(topic, b"via kafka-python").get(timeout=15)
    finally:
        prod.close(timeout=5)
    cons = KafkaConsumer(group_id=None, auto_offset_reset="earliest", **settings)
    try:
        cons.assign([KpTopicPartition(topic, 0)])
        records = [r for batch in cons.poll(timeout_ms=10_000).values() for r in batch]
        assert [r.value for r in records] == [b"via kafka-python"]
    finally:
        cons.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_aiokafka_over_sasl_ssl(sasl: SaslBroker, mechanism: str) -> None:
    topic = create_topic(sasl.broker.bootstrap, unique_topic("sasl-aio"))
    user, secret = USERS["plain" if mechanism == "PLAIN" else mechanism]
    settings = {
        "bootstrap_servers": sasl.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
        "ssl_context": create_ssl_context(cafile=str(sasl.ca)), "sasl_mechanism": mechanism,
        "sasl_plain_username": user, "sasl_plain_password": secret,
    }

    async def round_trip() -> list[bytes]:
        prod = AIOKafkaProducer(request_timeout_ms=10_000, **settings)
        await prod.start()
        try:
            await prod.send_and_wait(topic, b"via aiokafka")
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(group_id=None, auto_offset_reset="earliest", **settings)
        await cons.start()
        try:
            cons.assign([TopicPartition(topic, 0)])
            batch = await cons.getmany(timeout_ms=10_000)
            return [r.value for records in batch.values() for r in records if r.value is not None]
        finally:
            await cons.stop()

    assert asyncio.run(asyncio.wait_for(round_trip(), 60)) == [b"via aiokafka"]


def authentication_errors(bootstrap: str, config: dict[str, Any]) -> list[str]:
    """What librdkafka reports to an AdminClient with ``config`` that tries Metadata for 2 s."""
    seen: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT, **config, "error_cb": seen.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)
    admin.poll(0.5)  # error callbacks are served by poll
    return [e.str() for e in seen if e.code() == KafkaError._AUTHENTICATION]


def test_wrong_password_is_refused_and_others_keep_working(sasl: SaslBroker) -> None:
    topic = create_topic(sasl.broker.bootstrap, unique_topic("sasl-bad"))
    errors = authentication_errors(sasl.bootstrap("SASL_SSL"), sasl.client_config("SASL_SSL", "SCRAM-SHA-512", "nope"))
    assert errors and "invalid credentials" in errors[0]
    produce_all(producer(sasl.bootstrap("SASL_SSL"), sasl.client_config("SASL_SSL", "SCRAM-SHA-512")), topic, [b"still fine"])
    assert len(consume(sasl.bootstrap("SASL_SSL"), topic, 1, config=sasl.client_config("SASL_SSL", "SCRAM-SHA-512"))) == 1


# -- on the wire -------------------------------------------------------------------------------------


def raw(sasl: SaslBroker) -> RawClient:
    return RawClient("127.0.0.1", sasl.ports["SASL_PLAINTEXT"])


def test_failed_authentication_answers_after_the_delay_then_closes(sasl: SaslBroker) -> None:
    with raw(sasl) as client:
        assert client.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        started = time.monotonic()
        correlation = client.send_request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00wrong"))
        client.send_request(MetadataRequest(topics=None, allow_auto_topic_creation=False))  # pipelined: never served
        response = client.receive_response(SaslAuthenticateResponse, correlation)
        elapsed = time.monotonic() - started
        assert response.error_code == 58 and "Invalid username or password" in (response.error_message or "")
        assert elapsed >= FAILED_AUTH_DELAY_MS / 1000 * 0.9
        assert client.wait_closed(), "the connection closes; the pipelined Metadata gets no answer"


def test_requests_before_authentication_close_the_connection(sasl: SaslBroker) -> None:
    with raw(sasl) as client:
        client.send_request(MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert client.wait_closed()


def test_unsupported_mechanism_is_refused_with_the_enabled_list(sasl: SaslBroker) -> None:
    with raw(sasl) as client:
        response = client.call(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert response.error_code == 33
        assert set(response.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert client.wait_closed()


def test_handshake_v0_then_bare_tokens(sasl: SaslBroker) -> None:
    with raw(sasl) as client:
        assert client.call(SaslHandshakeV0(mechanism=SCRAM_SHA_256)).error_code == 0
        scram = ScramClient(SCRAM_SHA_256, "sam", "sam-secret", "rawclientnonce")
        client.send_frame(scram.first())
        server_first = client.receive_frame()
        client.send_frame(scram.final(server_first))
        assert scram.verify(client.receive_frame())
        metadata = client.call(MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert metadata.brokers[0].port == sasl.ports["SASL_PLAINTEXT"], "authenticated: served, on this listener"


@pytest.mark.parametrize(
    "tokens",
    [
        [b"\xff\xfe garbage"],
        [b"n,,n=sam,r=abc", b"c=biws,r=abc-not-the-nonce,p=AAAA"],
        [b"n,,n=sam,r=abc", b"\x00" * 70_000],
    ],
)
def test_garbage_scram_tokens_fail_cleanly(sasl: SaslBroker, tokens: list[bytes]) -> None:
    with raw(sasl) as client:
        assert client.call(SaslHandshakeRequest(mechanism=SCRAM_SHA_256)).error_code == 0
        errors = [client.call(SaslAuthenticateRequest(auth_bytes=token)).error_code for token in tokens]
        assert errors[-1] == 58 and all(e == 0 for e in errors[:-1])
        assert client.wait_closed()
    with raw(sasl) as client:
        assert client.call(SaslHandshakeRequest(mechanism=SCRAM_SHA_256)).error_code == 0, "the broker still serves"


def test_oversized_frame_before_authentication_is_refused(sasl: SaslBroker) -> None:
    with socket.create_connection(("127.0.0.1", sasl.ports["SASL_PLAINTEXT"]), timeout=5) as sock:
        sock.sendall(struct.pack(">i", 10_000_000) + b"\x00" * 1024)
        try:
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass


def test_deleted_scram_user_can_no_longer_authenticate(sasl: SaslBroker) -> None:
    admin = admin_client(sasl.broker.bootstrap)
    add = UserScramCredentialUpsertion("temp", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"temp-pw")
    for future in admin.alter_user_scram_credentials([add]).values():
        future.result(timeout=10)
    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "temp", "sasl.password": "temp-pw"}
    assert AdminClient({"bootstrap.servers": sasl.bootstrap("SASL_PLAINTEXT"), **FAST_CLIENT, **config}).list_topics(timeout=10)
    delete = UserScramCredentialDeletion("temp", ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([delete]).values():
        future.result(timeout=10)
    assert authentication_errors(sasl.bootstrap("SASL_PLAINTEXT"), config)


# -- the credential and ACL admin APIs, as Kafka answers them ----------------------------------------


def test_scram_credential_changes_are_validated_per_user(sasl: SaslBroker) -> None:
    salt, salted = b"0123456789abcdef", b"\x01" * 32
    with RawClient(sasl.broker.host, sasl.broker.port) as client:
        response = client.call(AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="nobody", mechanism=1), ScramCredentialDeletion(name="twice", mechanism=1)),
            upsertions=(
                ScramCredentialUpsertion(name="weak", mechanism=1, iterations=1000, salt=salt, salted_password=salted),
                ScramCredentialUpsertion(name="odd", mechanism=9, iterations=4096, salt=salt, salted_password=salted),
                ScramCredentialUpsertion(name="twice", mechanism=1, iterations=4096, salt=salt, salted_password=salted),
                ScramCredentialUpsertion(name="fine", mechanism=2, iterations=4096, salt=salt, salted_password=salted),
            ),
        ))
        errors = {r.user: r.error_code for r in response.results}
        assert errors == {"nobody": 91, "twice": 92, "weak": 93, "odd": 33, "fine": 0}
        described = client.call(DescribeUserScramCredentialsRequest(users=(UserName(name="fine"), UserName(name="ghost"))))
        by_user = {r.user: r for r in described.results}
        assert by_user["ghost"].error_code == 91
        assert [(c.mechanism, c.iterations) for c in by_user["fine"].credential_infos] == [(2, 4096)]


def test_acl_requests_without_an_authorizer_answer_security_disabled(sasl: SaslBroker) -> None:
    with RawClient(sasl.broker.host, sasl.broker.port) as client:
        creation = AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a", host="*",
                               operation=3, permission_type=3)
        [result] = client.call(CreateAclsRequest(creations=(creation,))).results
        assert result.error_code == 54 and result.error_message == "No Authorizer is configured."
