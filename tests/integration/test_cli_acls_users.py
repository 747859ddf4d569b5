"""`tidelog acls ...` and `tidelog users ...` against a broker with Kafka's StandardAuthorizer, over
SASL_PLAINTEXT: ACLs added, listed and removed the kafka-acls.sh way and then enforced; SCRAM users
added, used to log in, listed and deleted; the audit-mode report, its suggestions and their application.

Listeners: ADMIN enforces ACLs, APPS is in audit mode. ``admin`` (PLAIN) is the super user."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.cli_runner import Run, run_cli
from helpers.clients import FAST_CLIENT, DeliveryLog, producer, unique_topic
from tidelog.cli.main import main
from tidelog.security.audit import FILE_NAME, read_report

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


@dataclass
class Cluster:
    broker: BrokerProcess
    bootstraps: dict[str, str]
    workdir: Path

    def plain(self, user: str) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": PASSWORDS[user]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("cli-acls")
    users = workdir / "users"
    users.write_text("".join(f"{user} = {password}\n" for user, password in PASSWORDS.items()))
    broker = BrokerProcess(workdir, {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.plain.users.file": users,
        "auto.create.topics.enable": "false",
        "authorizer.audit.flush.interval.ms": 100,
        "listener.name.apps.authorizer.mode": "audit",
        # Deliberate wrong passwords from 127.0.0.1 would back off later logins: the throttle has its
        # own test (tests/system/hostile/test_hostile_authentication.py).
        "connection.failed.authentication.backoff.max.ms": 0,
    })
    ports = {"ADMIN": broker.port, "APPS": free_port()}
    broker.properties["listeners"] = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    broker.properties["listener.security.protocol.map"] = "ADMIN:SASL_PLAINTEXT,APPS:SASL_PLAINTEXT"
    broker.start()
    yield Cluster(broker, {name: f"127.0.0.1:{port}" for name, port in ports.items()}, workdir)
    broker.close()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], cluster: Cluster) -> Callable[..., Run]:
    """``cli(*argv, user="admin", listener="ADMIN")``: tidelog in process, logged in as ``user``."""

    def run(*argv: str, user: str = "admin", listener: str = "ADMIN") -> Run:
        config = cluster.workdir / f"{user}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in cluster.plain(user).items()))
        return run_cli(capsys, *argv, "-b", cluster.bootstraps[listener], "--command-config", str(config))

    return run


def admin_as(cluster: Cluster, user: str = "admin", listener: str = "ADMIN") -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstraps[listener], **FAST_CLIENT, **cluster.plain(user)})


def new_topic(cluster: Cluster) -> str:
    name = unique_topic()
    client = admin_as(cluster)  # must outlive the future
    for future in client.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=10)
    return name


def produce_errors(cluster: Cluster, topic: str, config: dict[str, Any], listener: str = "ADMIN") -> list[int]:
    log = DeliveryLog()
    prod = producer(cluster.bootstraps[listener], {**config, "message.timeout.ms": 5000})
    prod.produce(topic, b"x", on_delivery=log)
    prod.flush(10)
    assert len(log.acked) + len(log.errors) == 1
    return [e.code() for e in log.errors]


def table_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("─")) + 1
    return [line.split() for line in lines[start:] if line.strip()]


def acl(resource_type: str, name: str, principal: str, operation: str, pattern: str = "LITERAL",
        permission: str = "ALLOW", host: str = "*") -> dict[str, str]:
    return {"resource_type": resource_type, "resource_name": name, "pattern_type": pattern, "principal": principal,
            "host": host, "operation": operation, "permission_type": permission}


# -- acls ------------------------------------------------------------------------------------------------


def test_an_acl_added_by_the_cli_is_listed_and_enforced_and_removing_it_takes_the_access_away(
        cli: Callable[..., Run], cluster: Cluster) -> None:
    topic = new_topic(cluster)
    assert produce_errors(cluster, topic, cluster.plain("alice")) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    added = cli("acls", "add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "describe", "--topic", topic)
    assert added.code == 0 and added.out.startswith("Added 2 ACLs:")
    assert sorted(r[5] for r in table_rows(added.out)) == ["DESCRIBE", "WRITE"]
    assert produce_errors(cluster, topic, cluster.plain("alice")) == []

    listed = cli("acls", "list", "--topic", topic, "--json")
    assert listed.json() == [acl("TOPIC", topic, "User:alice", "DESCRIBE"), acl("TOPIC", topic, "User:alice", "WRITE")]

    unconfirmed = cli("acls", "remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic)
    assert unconfirmed.code == 1 and "--force" in unconfirmed.err and f"ALLOW User:alice WRITE on TOPIC {topic}" in unconfirmed.err
    assert len(cli("acls", "list", "--topic", topic, "--json").json()) == 2

    removed = cli("acls", "remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic, "--force", "--json")
    assert removed.code == 0 and removed.json() == {"deleted": [acl("TOPIC", topic, "User:alice", "WRITE")], "errors": []}
    assert cli("acls", "list", "--topic", topic, "--json").json() == [acl("TOPIC", topic, "User:alice", "DESCRIBE")]
    assert produce_errors(cluster, topic, cluster.plain("alice")) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_producer_and_consumer_bundles_create_kafka_acls_sets(cli: Callable[..., Run]) -> None:
    topic, group, txn = unique_topic(), unique_topic("g"), unique_topic("tx")
    producer_run = cli("acls", "add", "--allow-principal", "User:svc", "--producer", "--topic", topic,
                       "--transactional-id", txn, "--idempotent", "--json")
    assert producer_run.code == 0
    assert producer_run.json()["created"] == sorted([
        acl("CLUSTER", "kafka-cluster", "User:svc", "IDEMPOTENT_WRITE"),
        acl("TOPIC", topic, "User:svc", "CREATE"), acl("TOPIC", topic, "User:svc", "DESCRIBE"),
        acl("TOPIC", topic, "User:svc", "WRITE"),
        acl("TRANSACTIONAL_ID", txn, "User:svc", "DESCRIBE"), acl("TRANSACTIONAL_ID", txn, "User:svc", "WRITE"),
    ], key=lambda d: tuple(d.values()))
    consumer_run = cli("acls", "add", "--allow-principal", "User:app", "--consumer", "--topic", topic, "--group", group, "--json")
    assert {(d["resource_type"], d["operation"]) for d in consumer_run.json()["created"]} == {
        ("TOPIC", "READ"), ("TOPIC", "DESCRIBE"), ("GROUP", "READ")}
    assert cli("acls", "add", "--allow-principal", "User:app", "--consumer", "--topic", topic).code == 2  # needs --group

    by_principal = cli("acls", "list", "--principal", "User:app", "--json").json()
    assert {d["principal"] for d in by_principal} == {"User:app"} and len(by_principal) == 3


def test_match_finds_prefixed_acls_and_deny_hosts_are_kept(cli: Callable[..., Run]) -> None:
    prefix = unique_topic("pre") + "-"
    assert cli("acls", "add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9", "--operation", "All",
               "--topic", prefix, "--resource-pattern-type", "prefixed").code == 0
    expected = [acl("TOPIC", prefix, "User:mallory", "ALL", "PREFIXED", "DENY", "10.0.0.9")]
    assert cli("acls", "list", "--topic", prefix + "orders", "--resource-pattern-type", "match", "--json").json() == expected
    assert cli("acls", "list", "--topic", prefix + "orders", "--json").json() == []  # literal by default
    human = cli("acls", "list", "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert table_rows(human.out) == [["TOPIC", prefix, "PREFIXED", "User:mallory", "10.0.0.9", "ALL", "DENY"]]


def test_the_broker_refusals_and_usage_errors_are_reported(cli: Callable[..., Run]) -> None:
    wrong = cli("acls", "add", "--allow-principal", "User:x", "--operation", "Write", "--group", "g")
    assert wrong.code == 1 and "INVALID_REQUEST" in wrong.err and "GROUP" in wrong.err
    assert cli("acls", "add", "--allow-principal", "x", "--operation", "Read", "--topic", "t").code == 2
    assert cli("acls", "add", "--allow-principal", "User:x", "--operation", "Fly", "--topic", "t").code == 2
    denied = cli("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t", user="alice")
    assert denied.code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in denied.err
    hidden = cli("acls", "list", user="alice")
    assert hidden.code == 0 and hidden.out == "" and "DESCRIBE on the cluster" in hidden.err


# -- users -----------------------------------------------------------------------------------------------


def login_works(cluster: Cluster, user: str, password: str, mechanism: str) -> bool:
    client = AdminClient({"bootstrap.servers": cluster.bootstraps["ADMIN"], **FAST_CLIENT, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    try:
        client.list_topics(timeout=3)
    except Exception:
        return False
    return True


def test_a_scram_user_is_added_logs_in_is_listed_and_deleted(
        cli: Callable[..., Run], cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    user = unique_topic("user")
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret-512\n"))
    added = cli("users", "add", user)
    assert added.code == 0 and added.out == f"Stored the SCRAM-SHA-512 credential of {user} (8192 iterations).\n"
    secret_file = tmp_path / "pw"
    secret_file.write_text("s3cret-256\n")
    assert cli("users", "add", user, "--mechanism", "scram-sha-256", "--iterations", "4096", "--password-file", str(secret_file)).code == 0
    assert login_works(cluster, user, "s3cret-512", "SCRAM-SHA-512")
    assert login_works(cluster, user, "s3cret-256", "SCRAM-SHA-256")
    assert not login_works(cluster, user, "wrong", "SCRAM-SHA-512")

    assert [user, "SCRAM-SHA-256", "4096"] in table_rows(cli("users", "list").out)
    assert cli("users", "list", user, "--json").json() == [{"user": user, "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096}, {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]

    assert cli("users", "delete", user, "--mechanism", "SCRAM-SHA-256").code == 0
    assert not login_works(cluster, user, "s3cret-256", "SCRAM-SHA-256")
    everything = cli("users", "delete", user, "--json")
    assert everything.json() == {"user": user, "status": "deleted", "mechanisms": ["SCRAM-SHA-512"], "error": None}
    missing = cli("users", "list", user)
    assert missing.code == 1 and "RESOURCE_NOT_FOUND" in missing.err
    assert cli("users", "delete", user).code == 1


def test_hash_password_makes_a_plain_users_file_line_the_broker_accepts(
        capsys: pytest.CaptureFixture[str], cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    user = unique_topic("plain")
    monkeypatch.setattr("sys.stdin", io.StringIO("plain-pw\n"))
    assert main(["users", "hash-password", user]) == 0  # offline: no connection options
    line = capsys.readouterr().out
    assert line.startswith(f"{user} = pbkdf2_sha256$") and "plain-pw" not in line
    assert not login_works(cluster, user, "plain-pw", "PLAIN")
    with (cluster.workdir / "users").open("a") as users_file:
        users_file.write(line)
    # The broker re-reads the file when it changes; a login may time out on a loaded machine (3 s each).
    wait_until(lambda: login_works(cluster, user, "plain-pw", "PLAIN"), timeout=20, interval=0.5,
               message="a login with the new PLAIN user")
    assert not login_works(cluster, user, "other", "PLAIN")
    assert main(["users", "hash-password", "a b", "--password", "x"]) == 2


def test_users_refuse_bad_iterations_and_unprivileged_callers(cli: Callable[..., Run]) -> None:
    few = cli("users", "add", "bob", "--password", "pw", "--iterations", "100")
    assert few.code == 2 and "4096" in few.err
    denied = cli("users", "add", "bob", "--password", "pw", user="alice")
    assert denied.code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in denied.err


# -- audit report ----------------------------------------------------------------------------------------


def test_the_audit_report_names_who_would_be_refused_and_its_suggestions_fix_it(cli: Callable[..., Run], cluster: Cluster) -> None:
    topic = new_topic(cluster)
    report_path = cluster.broker.data_dir / FILE_NAME
    # alice writes through the audited listener without any ACL: served, and recorded
    assert produce_errors(cluster, topic, {**cluster.plain("alice"), "client.id": "billing-app"}, listener="APPS") == []

    def alice_rows() -> list[dict[str, Any]]:
        if not report_path.exists():
            return []
        return [e for e in read_report(report_path)["entries"] if e["resource_name"] == topic and e["still_denied"]]

    wait_until(lambda: {e["operation"] for e in alice_rows()} >= {"WRITE"}, message="alice in the audit report")
    human = cli("acls", "audit-report", "--log-dir", str(cluster.broker.data_dir))
    assert human.code == 0 and "APPS=audit" in human.out and "ADMIN=enforce" in human.out
    assert any(r[:5] == ["User:alice", "billing-app", "127.0.0.1", "APPS", f"TOPIC:{topic}"] and r[5] == "WRITE"
               for r in table_rows(human.out.split("Requests enforcement would still refuse")[1]))

    doc = cli("acls", "audit-report", "--file", str(report_path), "--json").json()
    assert all(e["still_denied"] for e in doc["entries"])
    suggestion = f"tidelog acls add --allow-principal User:alice --operation Write --topic {topic}"
    assert suggestion in cli("acls", "audit-report", "--log-dir", str(cluster.broker.data_dir), "--suggest").out.splitlines()

    applied = cli("acls", "audit-report", "--log-dir", str(cluster.broker.data_dir), "--apply", "--force", "--json")
    assert applied.code == 0 and "Created" in applied.err
    assert acl("TOPIC", topic, "User:alice", "WRITE") in cli("acls", "list", "--topic", topic, "--json").json()
    wait_until(lambda: not alice_rows(), message="alice no longer denied in the report")
    assert produce_errors(cluster, topic, cluster.plain("alice"), listener="ADMIN") == []  # enforced listener too

    locked = cli("acls", "enforce", "--listener", "APPS", "--json")
    assert locked.code == 0 and locked.json() == [
        {"broker": 1, "setting": "listener.name.apps.authorizer.mode", "value": "enforce", "error": None}]
    assert produce_errors(cluster, topic, cluster.plain("alice"), listener="APPS") == []  # her client keeps working
    other = new_topic(cluster)
    assert produce_errors(cluster, other, cluster.plain("alice"), listener="APPS") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert cli("acls", "audit", "--listener", "APPS").out == "Broker 1: listener.name.apps.authorizer.mode=audit\n"
    assert produce_errors(cluster, other, cluster.plain("alice"), listener="APPS") == []

    missing = cli("acls", "audit-report", "--log-dir", str(cluster.workdir / "nowhere"))
    assert missing.code == 1 and "no audit report" in missing.err
