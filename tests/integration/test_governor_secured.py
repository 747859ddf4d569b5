"""The governor against a secured three-broker tidelog cluster: SASL_SSL listeners (a throw-away CA,
unit/security/pki.py), SCRAM users in the cluster's metadata, ACLs enforced; and MTLS listeners
(SSL with required client certificates, the principal from the certificate's CN).

Each broker's PLAINTEXT listener stands for the internal network: brokers replicate over it and the
test administers users, ACLs and topics through it (``User:ANONYMOUS`` is a super user there, as in
a Kafka cluster whose inter-broker listener is private). The governor only ever gets the SASL_SSL
addresses, as the SCRAM user ``governor`` holding just the ACLs docs/governor.md lists, so every call
it makes (librdkafka's and the reassignment/log-dir calls over its own connection) is TLS, then SCRAM,
then authorised.

- ``plan`` then ``execute`` (CLI, ``--command-config``) move a topic skewed onto brokers 1 and 2 onto
  broker 3, with the partition sizes DescribeLogDirs reported over the governor's own connection;
- leadership: a topic whose partitions are all led by broker 1 is balanced by a ``--leadership-only``
  plan: reordered replica lists and preferred-leader elections (ElectLeaders, cluster ALTER), nothing
  copied;
- ``cancel`` ends a plan whose throttled moves are in flight: the cluster puts the replicas back, the
  throttles go; every test starts by cancelling what a failed one left;
- mutual TLS: ``plan`` with a client certificate (``ssl.certificate.location``/``ssl.key.location``)
  as the principal ``gov-mtls``; without the certificate the broker refuses the connection;
- a wrong password is refused with an error naming the mechanism and the user, both by the CLI and by
  the governor's own connection (SaslHandshake/SaslAuthenticate);
- a user allowed to describe the cluster but not to alter it reads the model (log dirs included) and
  gets CLUSTER_AUTHORIZATION_FAILED for a reassignment;
- no plaintext fallback: TLS to a PLAINTEXT port, or a CA the brokers' certificates do not chain to,
  fail the connection before any request is sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from helpers.broker_process import register_failure_report
from helpers.checker import QUIET
from helpers.cli_runner import run_cli
from helpers.cluster import STEADY_SESSION, Cluster
from tidelog.clients.security import ClientSecurity
from tidelog.governor.cluster import Cluster as GovernedCluster
from tidelog.governor.cluster import ClusterError
from tidelog.net.kafka_connection import BrokerUnreachable
from unit.security.pki import Pki

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
STATE_TOPIC = "__tidelog_governor"
USERS = {"governor": (ScramMechanism.SCRAM_SHA_512, "governor-secret"),
         "gov256": (ScramMechanism.SCRAM_SHA_256, "gov256-secret"),
         "outsider": (ScramMechanism.SCRAM_SHA_512, "outsider-secret")}
# a breaker pause (any under-replicated partition in the cluster, which a loaded CI machine can cause for
# a moment) lifts after 2 s of health here, not the default minute that would outlast --max-wait
FAST = ["--override", "governor.interval.ms=500", "--override", "governor.moves.per.broker=8",
        "--override", "governor.breaker.resume.after.ms=2000", "--interval", "0.5", "--max-wait", "60"]


@dataclass
class Secured:
    cluster: Cluster
    pki: Pki
    workdir: Path

    @property
    def sasl_ssl(self) -> str:
        return self.cluster.listener_bootstrap("SASL_SSL")

    def client(self, user: str = "governor", password: str | None = None, **extra: str) -> dict[str, str]:
        mechanism, secret = USERS[user]
        return {"bootstrap.servers": self.sasl_ssl, "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism.name.replace("_", "-"), "sasl.username": user,
                "sasl.password": secret if password is None else password, "ssl.ca.location": str(self.pki.ca_cert),
                **extra}

    def mtls_client(self, *, certificate: bool = True) -> dict[str, str]:
        config = {"bootstrap.servers": self.cluster.listener_bootstrap("MTLS"), "security.protocol": "SSL",
                  "ssl.ca.location": str(self.pki.ca_cert)}
        if certificate:
            issued = self.pki.client("/O=tidelog/CN=gov-mtls", "gov-mtls")
            config |= {"ssl.certificate.location": str(issued.cert), "ssl.key.location": str(issued.key)}
        return config

    def command_config(self, **settings: str) -> str:
        path = self.workdir / f"client-{uuid.uuid4().hex[:6]}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if k != "bootstrap.servers"))
        return str(path)


def governor_acls(principal: str) -> list[AclBinding]:
    """What the governor needs: describe/alter the cluster (reassignments, elections, log dirs, broker
    throttles), describe and alter topic configs (topic throttles), its state topic and its reader's group."""
    allow = AclPermissionType.ALLOW
    cluster = [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal, "*", op, allow)
               for op in (AclOperation.DESCRIBE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                          AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE)]
    topics = [AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, principal, "*", op, allow)
              for op in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)]
    state = [AclBinding(ResourceType.TOPIC, STATE_TOPIC, ResourcePatternType.LITERAL, principal, "*", AclOperation.ALL,
                        allow)]
    # the state topic's reader is a confluent-kafka consumer: it needs a group.id (tidelog-governor-<random>),
    # and librdkafka looks its coordinator up although it only assigns
    group = [AclBinding(ResourceType.GROUP, "tidelog-governor-", ResourcePatternType.PREFIXED, principal, "*",
                        AclOperation.DESCRIBE, allow)]
    return cluster + topics + state + group


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Secured]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("governor-secured")
    pki = Pki(workdir / "pki")
    cluster = Cluster(workdir, size=3, listeners=["SASL_SSL", "MTLS"], overrides={
        **STEADY_SESSION, "offsets.topic.num.partitions": 1, "auto.create.topics.enable": "false",
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512", "ssl.keystore.location": pki.server().bundle,
        # MTLS: TLS with required client certificates, the principal is the certificate's CN
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
        "listener.name.mtls.ssl.truststore.location": pki.ca_cert, "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",
        # the wrong-password test must not get 127.0.0.1 throttled for the tests after it
        "connection.failed.authentication.backoff.max.ms": 0, "connection.failed.authentication.delay.ms": 0,
    })
    cluster.start()
    try:
        admin = cluster.admin()
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), secret.encode())
                   for user, (mechanism, secret) in USERS.items()]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(15)
        bindings = governor_acls("User:governor") + governor_acls("User:gov256") + governor_acls("User:gov-mtls")
        # the outsider may describe the cluster and its topics, and alter nothing
        bindings += [AclBinding(resource, name, ResourcePatternType.LITERAL, "User:outsider", "*", AclOperation.DESCRIBE,
                                AclPermissionType.ALLOW)
                     for resource, name in ((ResourceType.TOPIC, "*"), (ResourceType.BROKER, "kafka-cluster"))]
        for future in admin.create_acls(bindings).values():
            future.result(15)
        yield Secured(cluster, pki, workdir)
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def no_plan_left(secured: Secured, capsys: pytest.CaptureFixture[str]) -> None:
    """A test starts with no running plan: ``governor cancel`` (over SASL_SSL, as the governor) ends one
    that a failed test left, which would otherwise fail a rerun with "plan ... is already running"."""
    cancel = run_cli(capsys, "governor", "cancel", "--reason", "left by an earlier test",
                     *cli_options(secured, secured.client()))
    assert cancel.code == 0, cancel.out + cancel.err


def skewed_topic(cluster: Cluster, records: int = 200) -> str:
    name = f"gov-sec-{uuid.uuid4().hex[:8]}"
    admin: AdminClient = cluster.admin()
    admin.create_topics([NewTopic(name, 4, -1, replica_assignment=[[1, 2], [2, 1]] * 2)])[name].result(15)
    for p in range(4):
        cluster.wait_for_leader(name, p)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    for i in range(records):
        producer.produce(name, value=b"v" * 2000, partition=i % 4)
    assert producer.flush(30) == 0
    return name


def cli_options(secured: Secured, config: dict[str, str]) -> list[str]:
    return ["-b", config["bootstrap.servers"], "--command-config", secured.command_config(**config)]


@pytest.mark.parametrize("user", ["governor", "gov256"])
def test_plan_and_execute_over_sasl_ssl_scram_with_acls(secured: Secured, capsys: pytest.CaptureFixture[str],
                                                       user: str) -> None:
    topic = skewed_topic(secured.cluster)
    options = cli_options(secured, secured.client(user))
    plan = run_cli(capsys, "governor", "plan", "--json", *options)
    assert plan.code == 0, plan.err
    proposal = plan.json()
    mine = [m for m in proposal["moves"] if m["topic"] == topic]
    assert mine and all(3 in m["after"] for m in mine), proposal["moves"]
    # the sizes came from DescribeLogDirs over the governor's own TLS+SCRAM connection
    assert sum(m["size"] for m in mine) >= 2000 * 200 // 4
    run = run_cli(capsys, "governor", "execute", *options, *FAST)
    assert run.code == 0, run.out + run.err
    placed = {b for p in range(4) for b in secured.cluster.partition(topic, p)[1]}
    assert placed == {1, 2, 3}
    status = run_cli(capsys, "governor", "status", "--json", *options)
    assert status.code == 0 and status.json()["plan"] is None, status.out + status.err


def test_leadership_is_balanced_by_preferred_leader_changes_without_copying(
        secured: Secured, capsys: pytest.CaptureFixture[str]) -> None:
    # six partitions on all three brokers, every one led by broker 1: only leadership needs to move
    name = f"gov-lead-{uuid.uuid4().hex[:8]}"
    admin = secured.cluster.admin()
    admin.create_topics([NewTopic(name, 6, -1, replica_assignment=[[1, 2, 3]] * 6)])[name].result(15)
    for p in range(6):
        secured.cluster.wait_for_leader(name, p)
    options = cli_options(secured, secured.client())
    saved = secured.workdir / f"{name}.json"
    proposal = run_cli(capsys, "governor", "plan", "--leadership-only", "--json", "--output", str(saved),
                       *options).json()
    assert proposal["replicaMoves"] == 0 and proposal["bytesToCopy"] == 0
    assert all(sorted(m["after"]) == sorted(m["before"]) for m in proposal["moves"]), proposal["moves"]
    mine = [m for m in proposal["moves"] if m["topic"] == name]
    assert mine and all(m["after"][0] != 1 for m in mine), mine
    run = run_cli(capsys, "governor", "execute", "--plan", str(saved), *options, *FAST)
    assert run.code == 0, run.out + run.err
    final = {p: secured.cluster.partition(name, p) for p in range(6)}
    assert all(sorted(replicas) == [1, 2, 3] for _, replicas, _ in final.values())
    # the reordered replica lists were followed by ElectLeaders (preferred): leadership moved
    assert {leader for leader, _, _ in final.values()} != {1}, final
    for m in mine:
        assert final[m["partition"]][:2] == (m["after"][0], m["after"]), (m, final[m["partition"]])


def test_cancel_ends_a_throttled_plan_in_flight_and_the_cluster_restores_the_replicas(
        secured: Secured, capsys: pytest.CaptureFixture[str]) -> None:
    # 1.2 MB a partition: more than one replica fetch (replica.fetch.max.bytes, 1 MiB), so that the
    # 20 KB/s throttle holds the rest back
    topic = skewed_topic(secured.cluster, records=2400)
    before = {p: sorted(secured.cluster.partition(topic, p)[1]) for p in range(4)}
    options = cli_options(secured, secured.client())
    slow = ["--override", "governor.throttle.bytes.per.second=20000", "--override", "governor.moves.per.broker=8",
            "--interval", "0.5", "--max-wait", "1"]
    run = run_cli(capsys, "governor", "execute", *options, *slow)
    assert run.code == 3 and "in flight" in run.out, run.out + run.err  # still copying at 20 KB/s
    cancel = run_cli(capsys, "governor", "cancel", "--reason", "too slow", *options)
    assert cancel.code == 0 and " cancelled: " in cancel.out and cancel.out.endswith("throttles removed\n"), cancel.out
    status = run_cli(capsys, "governor", "status", "--json", *options).json()
    assert status["plan"] is None and status["last"]["error"] == "cancelled by the operator: too slow", status["last"]
    # the cancelled reassignments leave the partitions on their original replicas (Kafka's rule; a
    # leadership-only reorder that was already done stays done)
    deadline = time.monotonic() + 30
    while (now := {p: sorted(secured.cluster.partition(topic, p)[1]) for p in range(4)}) != before:
        assert time.monotonic() < deadline, (before, now)
        time.sleep(0.2)
    again = run_cli(capsys, "governor", "cancel", *options)
    assert again.code == 0 and again.out == "no plan running\n", again.out


def test_mutual_tls_with_a_client_certificate_plans_and_without_one_is_refused(
        secured: Secured, capsys: pytest.CaptureFixture[str]) -> None:
    skewed_topic(secured.cluster, records=40)
    options = cli_options(secured, secured.mtls_client())
    run = run_cli(capsys, "governor", "plan", "--json", *options)
    assert run.code == 0 and run.json()["ok"], run.err
    # ApiVersions, ListPartitionReassignments and DescribeLogDirs answered over its own mutual-TLS connection
    status = run_cli(capsys, "governor", "status", "--json", *options)
    assert status.code == 0, status.err
    state = status.json()
    assert state["reassignmentSupported"] is True and state["health"]["maxDiskRatio"] > 0, state
    with pytest.raises(ClusterError, match=r"no client certificate is configured: a listener with "
                                           r"ssl\.client\.auth=required closes such connections"):
        asyncio.run(GovernedCluster(secured.mtls_client(certificate=False), timeout_s=10).check_access())


def test_a_wrong_password_is_refused_naming_the_mechanism(secured: Secured, capsys: pytest.CaptureFixture[str]) -> None:
    config = secured.client(password="not-the-password")
    run = run_cli(capsys, "governor", "plan", *cli_options(secured, config), "--timeout", "10")
    assert run.code == 1 and run.err.startswith("tidelog: SASL SCRAM-SHA-512 authentication as 'governor' at broker"), run.err
    assert "SASL_AUTHENTICATION_FAILED" in run.err, run.err
    # what the CLI ran first: the governor's own connection, before librdkafka would retry for a while
    with pytest.raises(ClusterError, match="SCRAM-SHA-512 authentication as 'governor'") as caught:
        asyncio.run(GovernedCluster(config, timeout_s=10).check_access())
    assert caught.value.error == "SASL_AUTHENTICATION_FAILED"


def test_a_mechanism_the_brokers_do_not_offer_is_named_with_those_they_do(secured: Secured) -> None:
    config = {**secured.client(), "sasl.mechanism": "PLAIN"}
    with pytest.raises(ClusterError, match=r"SASL PLAIN: .*UNSUPPORTED_SASL_MECHANISM \(mechanisms it offers: "
                                           r"SCRAM-SHA-256, SCRAM-SHA-512\)") as caught:
        asyncio.run(GovernedCluster(config, timeout_s=10).check_access())
    assert caught.value.error == "UNSUPPORTED_SASL_MECHANISM"


def test_a_user_allowed_to_describe_but_not_alter_gets_cluster_authorization_failed(secured: Secured) -> None:
    topic = skewed_topic(secured.cluster, records=10)
    governed = GovernedCluster(secured.client("outsider"), timeout_s=10)
    snapshot = asyncio.run(governed.snapshot())  # DescribeLogDirs and ListPartitionReassignments: DESCRIBE suffices
    assert all(snapshot.log_dirs[b] for b in (1, 2, 3))
    assert any(key[0] == topic for d in snapshot.log_dirs[1] for key in d.sizes)
    with pytest.raises(ClusterError, match="AlterPartitionReassignments: CLUSTER_AUTHORIZATION_FAILED") as caught:
        asyncio.run(governed.alter_reassignments({(topic, 0): (1, 3)}))
    assert caught.value.error == "CLUSTER_AUTHORIZATION_FAILED"
    assert secured.cluster.partition(topic, 0)[1] == [1, 2]


@pytest.mark.parametrize("case", ["tls to a plaintext port", "a foreign CA"])
def test_no_plaintext_fallback_and_no_unverified_broker(secured: Secured, tmp_path: Path, case: str) -> None:
    broker = secured.cluster.brokers[1]
    if case == "tls to a plaintext port":
        config, port = secured.client(), broker.port
    else:
        config, port = secured.client(**{"ssl.ca.location": str(Pki(tmp_path / "other").ca_cert)}), \
            secured.cluster.listener_ports[1]["SASL_SSL"]
    connection = ClientSecurity.from_config(config).connection(broker.host, port, "test", timeout_s=5)
    # the broker drops a ClientHello read as a Kafka frame; a foreign CA fails the certificate check
    with pytest.raises(BrokerUnreachable, match=r"over TLS: .*(CERTIFICATE_VERIFY_FAILED|ConnectionResetError|EOF)"):
        asyncio.run(connection.call(ApiVersionsRequest()))
    assert not connection.connected
