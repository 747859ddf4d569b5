"""Kafka ACLs enforced by a broker subprocess, as clients see them; ACLs and SCRAM users surviving a
restart; and the audit mode that takes an open cluster to a locked one without a client noticing.

Principals authenticate with SASL/PLAIN from a users file (``admin`` is the super user, which is how
a new cluster is bootstrapped: no ACL and no SCRAM user is needed to administer it) or with SCRAM.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import (
    FAST_CLIENT,
    DeliveryLog,
    consume,
    produce_all,
    producer,
    unique_topic,
)
from tidelog.security.audit import FILE_NAME, read_report

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "billing": "billing-secret",
             "intruder": "intruder-secret"}


def plain(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": PASSWORDS[user]}


def secured_broker(workdir: Path, listeners: list[str], overrides: dict[str, object] | None = None) -> tuple[BrokerProcess, dict[str, str]]:
    """SASL_PLAINTEXT listeners (the first on the broker's main port), PLAIN users from a file, ACLs on.
    Returns the broker (not started) and each listener's bootstrap address."""
    users = workdir / "users"
    workdir.mkdir(parents=True, exist_ok=True)
    users.write_text("".join(f"{user} = {password}\n" for user, password in PASSWORDS.items()))
    broker = BrokerProcess(workdir, {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.plain.users.file": users,
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 2,
        "auto.create.topics.enable": "false",
        **(overrides or {}),
    })
    ports = {name: broker.port if i == 0 else free_port() for i, name in enumerate(listeners)}
    broker.properties["listeners"] = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    broker.properties["listener.security.protocol.map"] = ",".join(f"{name}:SASL_PLAINTEXT" for name in listeners)
    return broker, {name: f"127.0.0.1:{port}" for name, port in ports.items()}


def admin(bootstrap: str, user: str = "admin") -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT, **plain(user)})


def topic_acl(principal: str, name: str, op: AclOperation, *, prefixed: bool = False,
              permission: AclPermissionType = AclPermissionType.ALLOW, resource: ResourceType = ResourceType.TOPIC) -> AclBinding:
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    return AclBinding(resource, name, pattern, principal, "*", op, permission)


def create_acls(client: AdminClient, bindings: list[AclBinding]) -> None:
    for future in client.create_acls(bindings).values():
        future.result(timeout=10)


def delivery_errors(bootstrap: str, user: str, topic: str, **config: Any) -> list[int]:
    log = DeliveryLog()
    prod = producer(bootstrap, {**plain(user), "message.timeout.ms": 5000, **config})
    try:
        prod.produce(topic, b"x", on_delivery=log)
    except KafkaException as exc:
        # librdkafka refuses at once when its metadata already says the topic is not authorized.
        return [exc.args[0].code()]
    prod.flush(10)
    return [e.code() for e in log.errors]


# -- enforcement ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[tuple[BrokerProcess, dict[str, str]]]:
    """alice may write and read app-* and join app-* groups, but never write app-frozen; bob has nothing."""
    register_failure_report(pytestconfig)
    broker, _ = secured_broker(tmp_path_factory.mktemp("acl-broker"), ["CLIENTS"])
    broker.start()
    topics = {"orders": "app-orders", "frozen": "app-frozen", "secret": "secret-" + unique_topic()}
    for topic in topics.values():
        create_topic_as_admin(broker.bootstrap, topic)
    root = admin(broker.bootstrap)
    create_acls(root, [
        topic_acl("User:alice", "app-", AclOperation.WRITE, prefixed=True),
        topic_acl("User:alice", "app-", AclOperation.READ, prefixed=True),
        topic_acl("User:alice", "app-", AclOperation.READ, prefixed=True, resource=ResourceType.GROUP),
        topic_acl("User:alice", "app-frozen", AclOperation.WRITE, permission=AclPermissionType.DENY),
    ])
    yield broker, topics
    broker.close()


def test_prefixed_allow_lets_alice_write_and_an_idempotent_producer_start(locked: tuple[BrokerProcess, dict[str, str]]) -> None:
    broker, topics = locked
    produce_all(producer(broker.bootstrap, {**plain("alice"), "enable.idempotence": True}), topics["orders"], [b"ok"])


def test_deny_overrides_allow(locked: tuple[BrokerProcess, dict[str, str]]) -> None:
    broker, topics = locked
    assert delivery_errors(broker.bootstrap, "alice", topics["frozen"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_without_acls_a_client_can_neither_write_read_see_nor_join(locked: tuple[BrokerProcess, dict[str, str]]) -> None:
    broker, topics = locked
    assert delivery_errors(broker.bootstrap, "bob", topics["orders"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert delivery_errors(broker.bootstrap, "alice", topics["secret"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert set(admin(broker.bootstrap, "bob").list_topics(timeout=10).topics) == set(), "metadata hides every topic"
    assert set(admin(broker.bootstrap, "alice").list_topics(timeout=10).topics) == {topics["orders"], topics["frozen"]}
    assert set(admin(broker.bootstrap).list_topics(timeout=10).topics) >= set(topics.values()), "the super user sees all"
    described = admin(broker.bootstrap, "bob").list_topics(topics["orders"], timeout=10).topics[topics["orders"]]
    assert described.error is not None and described.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert group_outcome(broker.bootstrap, "bob", topics["orders"], "app-bobs-group") == KafkaError.GROUP_AUTHORIZATION_FAILED
    # Seeing a topic is not reading it: with DESCRIBE (and his throw-away "g-..." groups let
    # through), the fetch itself is what gets refused.
    create_acls(admin(broker.bootstrap), [
        topic_acl("User:bob", "g-", AclOperation.READ, prefixed=True, resource=ResourceType.GROUP),
        topic_acl("User:bob", topics["orders"], AclOperation.DESCRIBE),
    ])
    with pytest.raises(AssertionError, match="TOPIC_AUTHORIZATION_FAILED"):
        consume(broker.bootstrap, topics["orders"], 1, timeout=5, config=plain("bob"))


def group_outcome(bootstrap: str, user: str, topic: str, group: str) -> int | None:
    """Subscribe in ``group``: None once a message arrives, else the first error's code."""
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **FAST_CLIENT, **plain(user)})
    try:
        cons.subscribe([topic])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = cons.poll(0.2)
            if message is not None:
                error = message.error()
                return None if error is None else int(error.code())
        raise AssertionError(f"{user} got neither a message nor an error from {topic}")
    finally:
        cons.close()


def test_alice_consumes_in_her_group(locked: tuple[BrokerProcess, dict[str, str]]) -> None:
    broker, topics = locked
    produce_all(producer(broker.bootstrap, plain("alice")), topics["orders"], [b"for the group"])
    assert group_outcome(broker.bootstrap, "alice", topics["orders"], "app-group") is None


def test_a_regex_subscription_gets_only_the_topics_its_member_may_describe(locked: tuple[BrokerProcess, dict[str, str]]) -> None:
    broker, topics = locked
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "app-regex", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", **FAST_CLIENT, **plain("alice")})
    try:
        consumer.subscribe(["^.*"])  # every topic matches; alice may describe the app-* ones only
        deadline = time.monotonic() + 15
        while {tp.topic for tp in consumer.assignment()} != {topics["orders"], topics["frozen"]}:
            assert time.monotonic() < deadline, f"assigned {consumer.assignment()}"
            consumer.poll(0.2)
        # What the broker assigned (librdkafka's own view leaves out topics it cannot describe).
        root = admin(broker.bootstrap)
        described = root.describe_consumer_groups(["app-regex"])["app-regex"].result(10)
        [member] = described.members
        assert {tp.topic for tp in member.assignment.topic_partitions} == {topics["orders"], topics["frozen"]}
    finally:
        consumer.close()


def test_acl_admin_needs_cluster_permission_and_deleting_a_deny_takes_effect(locked: tuple[BrokerProcess, dict[str, str]]) -> None:
    broker, topics = locked
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)
    alice = admin(broker.bootstrap, "alice")  # clients must outlive their futures
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        create_acls(alice, [topic_acl("User:alice", "secret-", AclOperation.ALL, prefixed=True)])
    # librdkafka drops DescribeAcls' top-level error code (it does so against Kafka too): an empty list.
    assert alice.describe_acls(everything).result(timeout=10) == []
    root = admin(broker.bootstrap)
    assert len(root.describe_acls(everything).result(timeout=10)) >= 4
    deny = AclBindingFilter(ResourceType.TOPIC, topics["frozen"], ResourcePatternType.MATCH, "User:alice", None,
                            AclOperation.ANY, AclPermissionType.DENY)
    [deleted] = [f.result(timeout=10) for f in root.delete_acls([deny]).values()]
    assert [b.name for b in deleted] == ["app-frozen"]
    try:
        assert delivery_errors(broker.bootstrap, "alice", topics["frozen"]) == []
    finally:
        create_acls(root, [topic_acl("User:alice", "app-frozen", AclOperation.WRITE, permission=AclPermissionType.DENY)])


# -- persistence ---------------------------------------------------------------------------------------


def test_acls_and_scram_users_survive_a_restart(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    register_failure_report(pytestconfig)
    broker, _ = secured_broker(tmp_path / "broker", ["CLIENTS"])
    broker.start()
    try:
        topic = create_topic_as_admin(broker.bootstrap, unique_topic("kept"))
        root = admin(broker.bootstrap)
        upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret")
        for future in root.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=10)
        create_acls(root, [topic_acl("User:carol", topic, AclOperation.WRITE)])
        del root
        broker.restart()
        carol = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol",
                 "sasl.password": "carol-secret"}
        produce_all(producer(broker.bootstrap, carol), topic, [b"after restart"])
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY)
        root = admin(broker.bootstrap)
        assert [(b.principal, b.name) for b in root.describe_acls(everything).result(timeout=10)] == [("User:carol", topic)]
    finally:
        broker.close()


def create_topic_as_admin(bootstrap: str, topic: str) -> str:
    client = admin(bootstrap)
    for future in client.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=10)
    return topic


# -- audit mode: from open to locked --------------------------------------------------------------------


def set_mode(client: AdminClient, listener: str, mode: str) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry(f"listener.name.{listener}.authorizer.mode", mode, incremental_operation=AlterConfigOpType.SET)
    ])
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def billing_workload(bootstrap: str, topic: str, user: str = "billing") -> None:
    """What the billing service does every time: idempotent produce, then consume in its group and commit."""
    config = {**plain(user), "client.id": "billing-app"}
    marker = unique_topic("m").encode()
    produce_all(producer(bootstrap, {**config, "enable.idempotence": True}), topic, [marker])
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing-group", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **FAST_CLIENT, **config})
    try:
        cons.subscribe([topic])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = cons.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            if message.value() == marker:
                cons.commit(message, asynchronous=False)
                return
        raise AssertionError("the billing consumer did not get its message")
    finally:
        cons.close()


def wait_for_report(path: Path, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    def current() -> dict[str, Any] | None:
        if not path.exists():
            return None
        report = read_report(path)
        return report if condition(report) else None

    found = wait_until(current, timeout=10, message=f"audit report {path.name}")
    assert found is not None
    return found


def binding_from_report(row: dict[str, str]) -> AclBinding:
    # confluent-kafka calls the CLUSTER resource type BROKER (same code, 4).
    resource_type = ResourceType.BROKER if row["resource_type"] == "CLUSTER" else ResourceType[row["resource_type"]]
    return AclBinding(resource_type, row["resource_name"], ResourcePatternType[row["pattern_type"]],
                      row["principal"], row["host"], AclOperation[row["operation"]], AclPermissionType[row["permission_type"]])


def test_audit_mode_records_what_enforcement_would_deny_and_its_acls_lock_the_cluster(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    register_failure_report(pytestconfig)
    broker, bootstraps = secured_broker(tmp_path / "broker", ["ADMIN", "APPS"], {"authorizer.audit.flush.interval.ms": 100})
    broker.start()
    apps = bootstraps["APPS"]
    report_path = broker.data_dir / FILE_NAME
    try:
        topic = create_topic_as_admin(broker.bootstrap, "billing-events")
        root = admin(broker.bootstrap)

        # 1. An open cluster: the apps' listener only audits; the service runs as it always did.
        set_mode(root, "apps", "audit")
        billing_workload(apps, topic)
        expected = {("TOPIC", topic, "WRITE"), ("TOPIC", topic, "READ"), ("GROUP", "billing-group", "READ"),
                    ("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")}
        report = wait_for_report(
            report_path, lambda r: expected <= {(e["resource_type"], e["resource_name"], e["operation"]) for e in r["entries"]}
        )
        assert report["modes"] == {"ADMIN": "enforce", "APPS": "audit"}
        entries = report["entries"]
        assert {e["principal"] for e in entries} == {"User:billing"}, "the super user is never recorded"
        assert {e["listener"] for e in entries} == {"APPS"} and {e["host"] for e in entries} == {"127.0.0.1"}
        assert {e["client_id"] for e in entries} == {"billing-app"}
        assert all(e["count"] >= 1 and e["first_seen_ms"] <= e["last_seen_ms"] for e in entries)
        assert all(e["still_denied"] for e in entries)

        # 2. Review and apply the suggested ACLs: nothing would be denied any more.
        suggested = [binding_from_report(row) for row in report["suggested_acls"]]
        assert {b.principal for b in suggested} == {"User:billing"}
        create_acls(root, suggested)
        wait_for_report(report_path, lambda r: not any(e["still_denied"] for e in r["entries"]) and not r["suggested_acls"])

        # 3. Lock: enforce on the apps' listener, at run time. The same service keeps working...
        set_mode(root, "apps", "enforce")
        billing_workload(apps, topic)
        # ...and a client nobody vouched for is refused.
        assert delivery_errors(apps, "intruder", topic) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        time.sleep(0.3)
        final = read_report(report_path)
        assert {e["principal"] for e in final["entries"]} == {"User:billing"}, "enforce mode records nothing"
    finally:
        broker.close()


def test_create_acls_refuses_what_kafka_refuses(locked: tuple[BrokerProcess, dict[str, str]]) -> None:
    broker, _ = locked
    root = admin(broker.bootstrap)
    bad = [
        topic_acl("User:alice", "not-kafka-cluster", AclOperation.ALTER, resource=ResourceType.BROKER),
        topic_acl("User:alice", "some-group", AclOperation.WRITE, resource=ResourceType.GROUP),
        topic_acl("alice-without-type", "t", AclOperation.READ),
    ]
    for binding, future in root.create_acls(bad).items():
        with pytest.raises(KafkaException, match="INVALID_REQUEST") as caught:
            future.result(timeout=10)
        assert caught.value.args[0].str(), f"{binding} refused without a reason"
