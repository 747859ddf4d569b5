"""tidelog mirror between two tidelog brokers, in-process: renamed topics with their configs, topics and
partitions added while it runs, keys/headers/timestamps kept, status, /metrics and /healthz, and a
consumer group moved to the destination by translate-offsets resuming at the right record."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, ResourceType

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess, free_port, wait_until
from helpers.cli_runner import run_cli
from helpers.clients import admin_client, create_topic, unique_topic
from helpers.mirror_run import assert_same, produce_mixed, read_all, write_config
from tidelog.mirror import LinkError, Mirror, load_config
from tidelog.mirror.app import run
from tidelog.mirror.translate import execute, translate_group

PARTITIONS = 4


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("mirror")
    with BrokerProcess(base / "a", GROUP_TEST_BROKER) as a, BrokerProcess(base / "b", GROUP_TEST_BROKER) as b:
        yield a, b


class Running:
    def __init__(self, config: Path) -> None:
        self.stop = threading.Event()
        self.result: list[Mirror] = []
        self.thread = threading.Thread(target=lambda: self.result.append(run(load_config(config), self.stop)))

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def committed_to(bootstrap: str, config: Path, topic: str, partitions: int) -> bool:
    from helpers.mirror_run import caught_up
    return caught_up(config, bootstrap, topic, partitions)


def http_get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def test_renamed_topics_follow_the_source_with_configs_partitions_and_records(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = clusters
    prefix = unique_topic("app")
    first = create_topic(a.bootstrap, f"{prefix}.orders", PARTITIONS, {"retention.ms": "86400000"})
    produce_mixed(a.bootstrap, first, PARTITIONS, 3000)
    port = free_port()
    config = write_config(tmp_path / "link.toml", name=unique_topic("rename"), source=a.bootstrap,
                          destination=b.bootstrap, include=[f"{prefix}\\..*"], rename="dc1.{topic}",
                          link={"metrics.listen": f"127.0.0.1:{port}"})
    with Running(config):
        wait_until(lambda: committed_to(a.bootstrap, config, first, PARTITIONS), timeout=60, message="caught up")
        # a topic created and partitions added while the link runs are followed
        second = create_topic(a.bootstrap, f"{prefix}.payments", 2, {"cleanup.policy": "compact"})
        admin = admin_client(a.bootstrap)
        admin.create_partitions([NewPartitions(first, PARTITIONS + 2)])[first].result(30)
        produce_mixed(a.bootstrap, first, PARTITIONS + 2, 1200, seed=3)
        producer = Producer({"bootstrap.servers": a.bootstrap})
        for i in range(50):
            producer.produce(second, b"v%d" % i, b"k%d" % (i % 7), partition=i % 2)
        producer.flush(30)
        wait_until(lambda: committed_to(a.bootstrap, config, first, PARTITIONS + 2)
                   and committed_to(a.bootstrap, config, second, 2), timeout=60, message="new topic and partitions")
        # The gauges are set once a second on the mirror's thread: they follow the commit, not with it.
        caught_up = f'tidelog_mirror_lag_records{{topic="{first}",partition="5"}} 0\n'
        wait_until(lambda: caught_up in http_get(f"http://127.0.0.1:{port}/metrics")[1], timeout=30, interval=0.3,
                   message="lag 0 in the metrics")
        status, body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert "tidelog_mirror_transactions_total" in body
        assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        shown = run_cli(capsys, "mirror", "status", "--config", str(config))
        assert shown.code == 0, shown.err
        assert f"dc1.{first}" in shown.out and "total lag 0 records" in shown.out
    assert_same(read_all(a.bootstrap, first, PARTITIONS + 2),
                read_all(b.bootstrap, f"dc1.{first}", PARTITIONS + 2, strip_header=True))
    assert_same(read_all(a.bootstrap, second, 2), read_all(b.bootstrap, f"dc1.{second}", 2, strip_header=True))
    destination_admin = admin_client(b.bootstrap)
    described = destination_admin.describe_configs([ConfigResource(ResourceType.TOPIC, f"dc1.{second}"),
                                                            ConfigResource(ResourceType.TOPIC, f"dc1.{first}")])
    configs = {r.name: f.result(30) for r, f in described.items()}
    assert configs[f"dc1.{second}"]["cleanup.policy"].value == "compact"
    assert configs[f"dc1.{first}"]["retention.ms"].value == "86400000"


def test_a_group_moved_with_translate_offsets_resumes_at_the_same_record(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = clusters
    topic = create_topic(a.bootstrap, unique_topic("moved"), 2)
    produce_mixed(a.bootstrap, topic, 2, 13_000, seed=5)  # transactions, one aborted: offsets drift apart
    config_path = write_config(tmp_path / "link.toml", name=unique_topic("moved"), source=a.bootstrap,
                               destination=b.bootstrap, include=[topic], link={"transaction.interval.ms": 50})
    group = unique_topic("billing")
    consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    read: list[tuple[int, bytes | None]] = []
    last: dict[int, int] = {}
    counts = {0: 0, 1: 0}
    deadline = time.monotonic() + 30
    while min(counts.values()) < 4500:
        assert time.monotonic() < deadline, "the group did not read its 4,500 records per partition"
        for m in consumer.consume(500, 0.5):
            partition = m.partition() or 0
            if m.error() is None and counts[partition] < 4500:
                read.append((partition, m.value()))
                counts[partition] += 1
                last[partition] = m.offset() or 0
    consumer.commit(offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False)
    consumer.close()
    with Running(config_path):
        wait_until(lambda: committed_to(a.bootstrap, config_path, topic, 2), timeout=60, message="caught up")
    config = load_config(config_path)
    translations = translate_group(config, group)
    assert [t.how for t in translations] == ["exact", "exact"]
    assert any(t.source_offset != t.destination_offset for t in translations)  # markers and aborted data are not copied
    execute(config, group, translations)
    shown = run_cli(capsys, "mirror", "translate-offsets", "--config", str(config_path), "--group", group)
    assert shown.code == 0 and "(exact)" in shown.out, shown.err
    source = read_all(a.bootstrap, topic, 2)
    moved = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False,
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        for t in translations:
            already = counts[t.partition]
            committed = moved.committed([TopicPartition(topic, t.partition)], timeout=10)[0].offset
            assert committed == t.destination_offset
            moved.assign([TopicPartition(topic, t.partition, committed)])
            first = wait_until(lambda: next((m for m in moved.consume(1, 0.5) if m.error() is None), None),
                               timeout=20, message="the first record after the moved offset")
            assert first.value() == source[t.partition][already][1]  # no gap, no duplicate
    finally:
        moved.close()


def test_a_link_without_link_shards_keeps_the_shard_count_its_link_topic_has(
        clusters: tuple[BrokerProcess, BrokerProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A link created when the default was another count goes on with that count; a count set in the
    file that differs from the link topic's is refused."""
    a, b = clusters
    topic = create_topic(a.bootstrap, unique_topic("kept"), 3)
    produce_mixed(a.bootstrap, topic, 3, 600, seed=11)
    name = unique_topic("kept")
    create_topic(b.bootstrap, f"__tidelog_mirror.{name}", 5, {"cleanup.policy": "compact"})
    fixed = write_config(tmp_path / "fixed.toml", name=name, source=a.bootstrap, destination=b.bootstrap,
                         include=[topic], link={"shards": 4})
    with pytest.raises(LinkError, match=r"has 5 partitions but link\.shards is 4"):
        Mirror(load_config(fixed)).start()
    config_path = write_config(tmp_path / "kept.toml", name=name, source=a.bootstrap, destination=b.bootstrap,
                               include=[topic], link={"shards": None})
    assert not load_config(config_path).shards_set
    with Running(config_path) as running:
        wait_until(lambda: committed_to(a.bootstrap, config_path, topic, 3), timeout=60, message="caught up")
    assert running.result[0].config.shards == 5
    assert_same(read_all(a.bootstrap, topic, 3), read_all(b.bootstrap, topic, 3, strip_header=True))
    shown = run_cli(capsys, "mirror", "status", "--config", str(config_path), "--json")
    assert shown.code == 0, shown.err
    rows = json.loads(shown.out)
    assert {row["shard"] for row in rows} <= set(range(5)) and len(rows) == 3
