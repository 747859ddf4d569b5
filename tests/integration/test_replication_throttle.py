"""Replication throttles (KIP-73) measured on a two-broker cluster driven by confluent-kafka.

Broker 2 is stopped, loses both of its partition logs, and starts again: it must copy two 16 MiB
partitions from broker 1. One topic is throttled at 2 MB/s on both sides (leader and follower lists,
rates set on broker 1's resource and as the cluster default), the other is not. The copy of the
throttled partition is measured on broker 2's disk; the unthrottled one must finish at full speed
meanwhile.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.static.primitive import i8

from helpers.broker_process import free_port, register_failure_report
from helpers.cluster import Cluster
from helpers.hostile import metric
from helpers.raw_client import RawClient

LIMIT = 2_000_000  # bytes/s
SIZE = 16 * 1024 * 1024
VALUE = 64 * 1024
BROKER = 4  # ConfigResource type


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[Cluster]:
    register_failure_report(pytestconfig)
    # Smaller replica fetches than Kafka's 1 MiB: the throttle holds to within one fetch of the rate.
    started = Cluster(tmp_path_factory.mktemp("throttle"), size=2, overrides={"replica.fetch.max.bytes": 262144}).start()
    yield started
    started.close()


def _alter(cluster: Cluster, kind: ResourceType, name: str, **values: str) -> None:
    if kind is ResourceType.BROKER and name == "":
        _alter_cluster_default(cluster, values)
        return
    admin = cluster.admin()
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET) for key, value in values.items()
    ])
    admin.incremental_alter_configs([resource])[resource].result(15)


def _alter_cluster_default(cluster: Cluster, values: dict[str, str]) -> None:
    """The cluster-wide default (empty broker name), which confluent-kafka's admin cannot name."""
    request = IncrementalAlterConfigsRequest(validate_only=False, resources=(AlterConfigsResource(
        resource_type=i8(BROKER), resource_name="",
        configs=tuple(AlterableConfig(name=k, config_operation=i8(0), value=v) for k, v in values.items())),))
    broker = cluster.brokers[1]
    with RawClient(broker.host, broker.port) as client:
        error = int(client.call(request).responses[0].error_code)
    if error:
        raise KafkaException(KafkaError(error))


def _fill(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 262144})
    for i in range(SIZE // VALUE):
        producer.produce(topic, value=bytes([i % 256]) * VALUE, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def _copied(broker_dir: Path, topic: str) -> int:
    return sum(p.stat().st_size for p in (broker_dir / f"{topic}-0").glob("*.log")) if (broker_dir / f"{topic}-0").exists() else 0


def test_a_negative_throttle_rate_is_refused_with_invalid_config(cluster: Cluster) -> None:
    for name in ("1", ""):
        with pytest.raises(KafkaException) as refused:
            _alter(cluster, ResourceType.BROKER, name, **{"leader.replication.throttled.rate": "-1"})
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as refused:
        _alter(cluster, ResourceType.BROKER, "1", **{"follower.replication.throttled.rate": "-5"})
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_each_throttled_side_holds_its_copy_to_the_rate_while_an_unthrottled_one_runs_at_full_speed(
    cluster: Cluster,
) -> None:
    """Three partitions copied at once: one in broker 1's leader list, one in broker 2's follower list,
    one in neither; each side's quota alone must hold its partition to the rate."""
    admin = cluster.admin()
    topics = ("leader-side", "follower-side", "free")
    for topic in topics:
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(15)
        cluster.wait_for_isr(topic, 0, {1, 2})
        _fill(cluster.bootstrap, topic)
    follower = cluster.brokers[2]
    follower.stop()
    for topic in topics:
        cluster.wait_for_isr(topic, 0, {1})
        shutil.rmtree(follower.data_dir / f"{topic}-0")
    _alter(cluster, ResourceType.TOPIC, "leader-side", **{"leader.replication.throttled.replicas": "0:1"})
    _alter(cluster, ResourceType.TOPIC, "follower-side", **{"follower.replication.throttled.replicas": "0:2"})
    _alter(cluster, ResourceType.BROKER, "1", **{"leader.replication.throttled.rate": str(LIMIT)})
    _alter(cluster, ResourceType.BROKER, "", **{"follower.replication.throttled.rate": str(LIMIT)})

    metrics_port = free_port()
    follower.properties["metrics.port"] = str(metrics_port)
    follower.start()
    samples: list[tuple[float, list[int]]] = []
    deadline = time.monotonic() + 3 * SIZE / LIMIT
    while time.monotonic() < deadline:
        samples.append((time.monotonic(), [_copied(follower.data_dir, topic) for topic in topics]))
        if min(samples[-1][1]) >= SIZE:
            break
        time.sleep(0.1)
    follower_bytes = metric(metrics_port, "tidelog_replication_throttled_bytes_total", side="follower")

    def done(column: int) -> float:
        return next(t for t, sizes in samples if sizes[column] >= SIZE)

    # A move's rate as an operator sees it: the partition's bytes over the time from the follower's
    # start to its last byte (the throttle lets one window's worth through at once, then holds).
    started = samples[0][0]
    rates = [samples[-1][1][column] / (done(column) - started) for column in range(3)]
    figures = ", ".join(f"{topic} {rate / 1e6:.2f} MB/s" for topic, rate in zip(topics, rates, strict=True))
    print(f"copy rates with a {LIMIT / 1e6:.1f} MB/s throttle: {figures}")
    assert rates[0] == pytest.approx(LIMIT, rel=0.10), figures
    assert rates[1] == pytest.approx(LIMIT, rel=0.10), figures
    assert rates[2] > 3 * LIMIT and done(2) < started + SIZE / LIMIT / 2, figures  # not held back by the others
    assert SIZE <= follower_bytes < 1.2 * SIZE  # the follower counted what it copied for its listed partition
    for topic in topics:
        cluster.wait_for_isr(topic, 0, {1, 2})
