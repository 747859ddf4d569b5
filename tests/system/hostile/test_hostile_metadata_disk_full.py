"""Creating a topic (or changing broker configs or SCRAM users) when the metadata disk is full: Kafka's
error, no stray file, the broker serving on.

The broker's log dir (which holds ``__cluster_metadata.json``) is a small tmpfs mounted for the test
(needs root or CAP_SYS_ADMIN; skipped otherwise), filled to the last byte. Before the fix the client saw
its connection dropped and an empty ``__cluster_metadata.json.tmp`` stayed behind.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.metadata.v4.request import MetadataRequest

from helpers.broker_process import BrokerProcess, register_failure_report
from helpers.clients import admin_client, create_topic
from helpers.hostile import peak_rss
from helpers.raw_client import RawClient

MIB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    return filler


def test_creating_a_topic_on_a_full_metadata_disk_answers_kafka_storage_error_and_keeps_serving(
    small_disk: Path, tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    register_failure_report(pytestconfig)
    broker = BrokerProcess(tmp_path / "broker", {"auto.create.topics.enable": "false"})
    broker.properties["log.dirs"] = str(small_disk / "data")
    broker.start()
    try:
        create_topic(broker.bootstrap, "before")
        admin = admin_client(broker.bootstrap)
        filler = fill(small_disk)
        rss_before = peak_rss(broker.pid)
        with RawClient(broker.host, broker.port) as other:
            other.call(MetadataRequest(topics=None, allow_auto_topic_creation=False))  # warm up
            errors, metadata_ms = [], []
            for attempt in range(5):
                future = admin.create_topics([NewTopic(f"after-{attempt}", 1, 1)], request_timeout=10)[f"after-{attempt}"]
                with pytest.raises(KafkaException) as refused:
                    future.result(timeout=15)
                errors.append(refused.value.args[0])
                started = time.perf_counter()
                other.call(MetadataRequest(topics=None, allow_auto_topic_creation=False))
                metadata_ms.append((time.perf_counter() - started) * 1000)
            # Broker configs and SCRAM credentials live in the same file: refused the same way, nothing dropped.
            config = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
                ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
            with pytest.raises(KafkaException) as config_refused:
                admin.incremental_alter_configs([config])[config].result(15)
            upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
            with pytest.raises(KafkaException) as scram_refused:
                admin.alter_user_scram_credentials([upsert])["alice"].result(15)
            errors += [config_refused.value.args[0], scram_refused.value.args[0]]
        print(f"\nfull metadata disk: {[e.name() for e in errors]}; another client's Metadata took at most "
              f"{max(metadata_ms):.1f} ms; broker peak RSS {rss_before / MIB:.0f} -> {peak_rss(broker.pid) / MIB:.0f} MiB")
        assert all(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in errors), errors
        assert "could not be written" in errors[0].str()
        assert not list((small_disk / "data").glob("*.tmp")), "a temporary metadata file was left behind"
        assert max(metadata_ms) < 50
        assert peak_rss(broker.pid) - rss_before < 10 * MIB
        assert "before" in admin.list_topics(timeout=10).topics  # the same admin connection still works

        filler.unlink()
        create_topic(broker.bootstrap, "after-space-returned")
        broker.restart()
        topics = admin_client(broker.bootstrap).list_topics(timeout=10).topics
        assert {"before", "after-space-returned"} <= set(topics) and "after-0" not in topics
    finally:
        broker.close()
