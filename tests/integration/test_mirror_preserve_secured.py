"""``offsets = "preserve"`` over secured listeners: TLS and SASL on the mode's own connections.

Two tidelog brokers with SASL_SSL listeners (a throw-away CA, unit/security/pki.py). The source knows
the mirror as a SCRAM-SHA-512 user; the destination as a PLAIN user with only the ACLs docs/mirror.md
lists for this mode (Create on the cluster; Describe, DescribeConfigs, AlterConfigs and Alter on the
mirrored topics; Describe and Read on the link topic and the link group). Each broker's PLAINTEXT listener is the tests' administration port (its ANONYMOUS a
super user there). The mirror only gets the SASL_SSL addresses, so its raw Fetch and MirrorProduce
requests travel over TLS after the SASL exchange, and are authorised as the mirror's principal.

- the link copies a topic with transactions (some aborted) at its source offsets; ``tidelog mirror
  status`` reads the destination's log end over the same secured connections: "not created yet"
  before the link ran, lag 0 after, the new records' count once the source grew;
- a wrong password stops ``tidelog mirror run`` at start, with the broker, the mechanism and the
  user named, before anything is created on the destination.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.cli_runner import run_cli
from helpers.clients import admin_client, create_topic, unique_topic
from helpers.mirror_run import MirrorProcess, produce_mixed, write_config
from unit.security.pki import Pki

PARTITIONS = 2
PREFIX = "sec-"
SOURCE_USER, SOURCE_SECRET = "reader", "reader-secret"
DEST_USER, DEST_SECRET = "mirror", "mirror-secret"


@dataclass
class Secured:
    source: BrokerProcess
    dest: BrokerProcess
    source_sasl: str
    dest_sasl: str
    ca: Path

    def source_settings(self) -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": SOURCE_USER,
                "sasl.password": SOURCE_SECRET, "ssl.ca.location": str(self.ca)}

    def dest_settings(self, password: str = DEST_SECRET) -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": DEST_USER,
                "sasl.password": password, "ssl.ca.location": str(self.ca)}

    def config(self, path: Path, link: str, topic: str, password: str = DEST_SECRET) -> Path:
        return write_config(path, name=link, source=self.source_sasl, destination=self.dest_sasl, include=[topic],
                            link={"offsets": "preserve"}, source_extra=self.source_settings(),
                            destination_extra=self.dest_settings(password))


def sasl_ssl_broker(workdir: Path, pki: Pki, overrides: dict[str, object]) -> tuple[BrokerProcess, str]:
    broker = BrokerProcess(workdir, {
        "ssl.keystore.location": pki.server().bundle, "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500, "offsets.topic.num.partitions": 1,
        "connection.failed.authentication.delay.ms": 0, "connection.failed.authentication.backoff.max.ms": 0,
        **overrides})
    port = free_port()
    broker.properties["listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{port}"
    broker.start()
    return broker, f"127.0.0.1:{port}"


def mirror_acls(principal: str) -> list[AclBinding]:
    """The destination rights of a preserve-mode mirror (docs/mirror.md)."""
    allow = AclPermissionType.ALLOW
    cluster = [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal, "*",
                          AclOperation.CREATE, allow)]
    topics = [AclBinding(ResourceType.TOPIC, PREFIX, ResourcePatternType.PREFIXED, principal, "*", op, allow)
              for op in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                         AclOperation.ALTER)]
    link = [AclBinding(ResourceType.TOPIC, "__tidelog_mirror.", ResourcePatternType.PREFIXED, principal, "*", op, allow)
            for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    group = [AclBinding(ResourceType.GROUP, "tidelog-mirror.", ResourcePatternType.PREFIXED, principal, "*", op, allow)
             for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    return cluster + topics + link + group


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Secured]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("preserve-secured")
    pki = Pki(workdir / "pki")
    users = workdir / "plain-users"
    users.write_text(f"{DEST_USER} = {DEST_SECRET}\n")
    source, source_sasl = sasl_ssl_broker(workdir / "source", pki, {"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    try:
        dest, dest_sasl = sasl_ssl_broker(workdir / "dest", pki, {
            "sasl.enabled.mechanisms": "PLAIN", "sasl.plain.users.file": users,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS"})
    except BaseException:
        source.close()
        raise
    try:
        upsert = UserScramCredentialUpsertion(SOURCE_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              SOURCE_SECRET.encode())
        source_admin = admin_client(source.bootstrap)
        for future in source_admin.alter_user_scram_credentials([upsert]).values():
            future.result(15)
        dest_admin = admin_client(dest.bootstrap)
        for future in dest_admin.create_acls(mirror_acls(f"User:{DEST_USER}")).values():
            future.result(15)
        yield Secured(source, dest, source_sasl, dest_sasl, pki.ca_cert)
    finally:
        source.close()
        dest.close()


def committed_entries(bootstrap: str, topic: str, partition: int, end: int) -> list[tuple[int, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"),
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    out: list[tuple[int, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 30
        while consumer.position([TopicPartition(topic, partition)])[0].offset < end:
            assert time.monotonic() < deadline, f"{topic}-{partition} not read to {end}"
            out += [(m.offset() or 0, m.value()) for m in consumer.consume(1000, 0.2) if m.error() is None]
        return out
    finally:
        consumer.close()


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("w")})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    except Exception:  # the topic is not there yet
        return -1
    finally:
        consumer.close()


def status_rows(capsys: pytest.CaptureFixture[str], config: Path) -> list[dict[str, Any]]:
    run = run_cli(capsys, "mirror", "status", "--config", str(config), "--json")
    assert run.code == 0, run.out + run.err
    rows: list[dict[str, Any]] = run.json()
    return rows


def test_preserve_mode_mirrors_over_sasl_ssl_and_status_reads_the_destination_log_end(
        secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = create_topic(secured.source.bootstrap, unique_topic(PREFIX), PARTITIONS)
    produce_mixed(secured.source.bootstrap, topic, PARTITIONS, 600, abort_every=3)
    ends = [high_watermark(secured.source.bootstrap, topic, p) for p in range(PARTITIONS)]
    config = secured.config(tmp_path / "link.toml", unique_topic("keep"), topic)

    before = status_rows(capsys, config)
    assert [(r["partition"], r["source_end"], r["destination_end"], r["lag"], r["note"]) for r in before] == [
        (p, ends[p], -1, ends[p], "not created yet") for p in range(PARTITIONS)]

    mirror = MirrorProcess(config, tmp_path / "mirror.log").start()
    try:
        wait_until(lambda: [high_watermark(secured.dest.bootstrap, topic, p) for p in range(PARTITIONS)] == ends,
                   timeout=60, message=f"mirrored over SASL_SSL:\n{mirror.tail()}")
        after = status_rows(capsys, config)
        assert [(r["source_end"], r["destination_end"], r["lag"], r["note"]) for r in after] == [
            (ends[p], ends[p], 0, "") for p in range(PARTITIONS)]
        for p in range(PARTITIONS):
            assert committed_entries(secured.dest.bootstrap, topic, p, ends[p]) == committed_entries(
                secured.source.bootstrap, topic, p, ends[p])
        assert mirror.stop() == 0, mirror.tail()
    finally:
        mirror.close()

    producer = Producer({"bootstrap.servers": secured.source.bootstrap})
    for i in range(7):
        producer.produce(topic, b"later-%d" % i, partition=0)
    assert producer.flush(15) == 0
    text = run_cli(capsys, "mirror", "status", "--config", str(config))
    assert text.code == 0, text.err
    assert text.out.splitlines()[0].endswith(f"(offsets preserved): {PARTITIONS} partitions, total lag 7 offsets")
    assert text.out.splitlines()[1].split() == ["TOPIC", "PARTITION", "DESTINATION", "SHARD", "SOURCE-START",
                                                "SOURCE-END", "DEST-START", "DEST-END", "LAG", "OWNER", "NOTE"]
    assert text.out.splitlines()[2].split()[5:] == [str(ends[0] + 7), "0", str(ends[0]), "7", "-"]


def test_a_refused_password_stops_the_link_at_start_naming_the_user(
        secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = create_topic(secured.source.bootstrap, unique_topic(PREFIX), 1)
    config = secured.config(tmp_path / "wrong.toml", unique_topic("keep"), topic, password="not-the-password")
    started = time.monotonic()
    run = run_cli(capsys, "mirror", "run", "--config", str(config))
    assert run.code != 0
    assert time.monotonic() - started < 20
    assert f"the destination broker at {secured.dest_sasl} (SASL_SSL, PLAIN as 'mirror')" in run.err, run.err
    assert "SASL_AUTHENTICATION_FAILED" in run.err, run.err
    assert high_watermark(secured.dest.bootstrap, topic, 0) == -1  # nothing created
    status = run_cli(capsys, "mirror", "status", "--config", str(config))
    assert status.code != 0 and "'mirror'" in status.err, status.out + status.err
