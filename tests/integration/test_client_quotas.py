"""Kafka's client quotas on a broker subprocess: DescribeClientQuotas / AlterClientQuotas on the wire,
confluent-kafka clients held to their byte rates by throttle times and muted connections, and
priority tiers (a paused tier held while high flows; the saturation rule escalating and lifting).

Accuracy: both clients run at once, the producer trying to send half as much again as its quota
(paced on the client side, as a steady application would be), the consumer reading a backlog as fast
as it may (pausing librdkafka's fetches would make it drop bytes already counted), and their rates are measured from the start over
22 s: two whole spans of the quota's windows (``quota.window.num`` x ``quota.window.size.seconds`` =
11 s), over which Kafka's sampled rate holds a client to its quota; inside one span a client may
burst (a fresh rate is measured over at least 10 s, so up to ten seconds of quota may go at once and
is then waited out). Each client's span starts with its first byte. The issue asks for 30 s; 22 s
keeps the test short. Requests and fetches are kept to Java's default sizes (16 KB batches, 100 KB
per fetched partition): with 1 MB requests Kafka's rule lets a producer past its quota by about 10%
(the request that crosses it is taken whole) and holds a consumer about 10% under it (a throttled
fetch is answered empty and taken back off the rate), on Kafka as here (docs/quotas.md).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, OpData
from kio.schema.alter_client_quotas.v1.request import EntityData as AlterEntity
from kio.schema.alter_client_quotas.v1.request import EntryData as AlterEntry
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import FAST_CLIENT, admin_client, create_topic, unique_topic
from helpers.raw_client import RawClient
from tidelog.cli.main import main as cli_main

QUOTA = 1_000_000  # bytes per second
MEASURE_S = 22.0
VALUE = b"q" * 10_000
OFFERED = 1.5 * QUOTA  # what the clients try to move


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    proc = BrokerProcess(tmp_path_factory.mktemp("quotas"), {"metrics.port": free_port()})
    proc.start()
    yield proc
    proc.close()


def alter(broker: BrokerProcess, entity: dict[str, str | None], ops: dict[str, float | None],
          validate_only: bool = False) -> tuple[int, str | None]:
    entry = AlterEntry(
        entity=tuple(AlterEntity(entity_type=k, entity_name=v) for k, v in entity.items()),
        ops=tuple(OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()),
    )
    with RawClient(broker.host, broker.port) as client:
        response = client.call(AlterClientQuotasRequest(entries=(entry,), validate_only=validate_only))
    (result,) = response.entries
    return int(result.error_code), result.error_message


def describe(broker: BrokerProcess, *components: tuple[str, int, str | None], strict: bool = False) -> Any:
    request = DescribeClientQuotasRequest(
        components=tuple(ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components), strict=strict,
    )
    with RawClient(broker.host, broker.port) as client:
        return client.call(request)


def quotas_of(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


def test_altered_quotas_are_described_and_removed(broker: BrokerProcess) -> None:
    assert alter(broker, {"user": "alice", "client-id": None}, {"producer_byte_rate": 2048, "request_percentage": 12.5}) == (0, None)
    assert alter(broker, {"user": None}, {"consumer_byte_rate": 4096}) == (0, None)
    found = quotas_of(describe(broker, ("user", 0, "alice")))
    assert found == {(("client-id", None), ("user", "alice")): {"producer_byte_rate": 2048.0, "request_percentage": 12.5}}
    assert quotas_of(describe(broker, ("user", 1, None), strict=True)) == {(("user", None),): {"consumer_byte_rate": 4096.0}}
    assert alter(broker, {"user": "alice", "client-id": None}, {"producer_byte_rate": None, "request_percentage": None}) == (0, None)
    assert alter(broker, {"user": None}, {"consumer_byte_rate": None}) == (0, None)
    assert quotas_of(describe(broker, ("user", 2, None))) == {}


def test_validate_only_changes_nothing(broker: BrokerProcess) -> None:
    assert alter(broker, {"client-id": "dry"}, {"producer_byte_rate": 10}, validate_only=True) == (0, None)
    assert quotas_of(describe(broker, ("client-id", 0, "dry"))) == {}


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ({"user": "a"}, {"producer_byte_rate": -1}, "Quota producer_byte_rate must be greater than 0"),
    ({"user": "a"}, {"no_such_rate": 1}, "Invalid configuration key no_such_rate"),
    ({"group": "a"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
    ({"ip": "10.0.0.1", "user": "a"}, {"connection_creation_rate": 1},
     "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
])
def test_bad_alterations_get_kafkas_errors(broker: BrokerProcess, entity: dict[str, str | None], ops: dict[str, float | None], message: str) -> None:
    assert alter(broker, entity, ops) == (42, message)  # INVALID_REQUEST
    assert quotas_of(describe(broker)) == {}


def test_bad_filters_are_refused(broker: BrokerProcess) -> None:
    response = describe(broker, ("user", 0, None))
    assert (response.error_code, response.entries) == (42, None)
    assert describe(broker, ("topic", 2, None)).error_code == 35  # UNSUPPORTED_VERSION, as Kafka answers


def _produce_for(bootstrap: str, topic: str, client_id: str, seconds: float, acked: list[tuple[float, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 16384,
                         **FAST_CLIENT})

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    start = time.monotonic()
    offered = 0
    while (elapsed := time.monotonic() - start) < seconds:
        if offered > OFFERED * elapsed:
            producer.poll(0.01)
            continue
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
            offered += len(VALUE)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(10)


def _consume_for(bootstrap: str, topic: str, client_id: str, seconds: float, got: list[tuple[float, int]]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": unique_topic("g"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 100_000, **FAST_CLIENT})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.01)
        if msg is not None and msg.error() is None:
            got.append((time.monotonic(), len(msg.value() or b"")))
    consumer.close()


def _rate(events: list[tuple[float, int]]) -> float:
    start = events[0][0]
    return sum(size for at, size in events if at < start + MEASURE_S) / MEASURE_S


def _metric(broker: BrokerProcess, name: str, **labels: str) -> float:
    port = broker.properties["metrics.port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and wanted in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not exported")


@pytest.mark.slow
def test_a_producer_and_a_consumer_are_held_to_their_byte_rates(broker: BrokerProcess, tmp_path: Path) -> None:
    produced_topic = create_topic(broker.bootstrap, unique_topic("quota-in"))
    backlog_topic = create_topic(broker.bootstrap, unique_topic("quota-out"))
    filler = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **FAST_CLIENT})
    for _ in range(int(QUOTA * (MEASURE_S + 4) / len(VALUE))):
        while True:
            try:
                filler.produce(backlog_topic, VALUE)
                break
            except BufferError:
                filler.poll(0.05)
    assert filler.flush(30) == 0
    del filler
    assert alter(broker, {"client-id": "held-producer"}, {"producer_byte_rate": QUOTA}) == (0, None)
    assert alter(broker, {"client-id": "held-consumer"}, {"consumer_byte_rate": QUOTA}) == (0, None)
    acked: list[tuple[float, int]] = []
    got: list[tuple[float, int]] = []
    run_s = MEASURE_S + 1.5
    threads = [
        threading.Thread(target=_produce_for, args=(broker.bootstrap, produced_topic, "held-producer", run_s, acked)),
        threading.Thread(target=_consume_for, args=(broker.bootstrap, backlog_topic, "held-consumer", run_s, got)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    produced, consumed = _rate(acked), _rate(got)
    print(f"produce {produced / 1e6:.3f} MB/s, consume {consumed / 1e6:.3f} MB/s against {QUOTA / 1e6} MB/s")
    assert produced == pytest.approx(QUOTA, rel=0.10)
    assert consumed == pytest.approx(QUOTA, rel=0.10)
    labels = {"quota": "producer_byte_rate", "user": "", "client_id": "held-producer"}
    assert _metric(broker, "tidelog_client_quota_throttle_seconds_total", **labels) > 1.0
    assert _metric(broker, "tidelog_client_quota_bound", **labels) == QUOTA


def _tidelog(broker: BrokerProcess, *args: str) -> None:
    assert cli_main([*args, "-b", broker.bootstrap]) == 0


def _delivered_within(producer: Producer, topic: str, seconds: float) -> bool:
    done: list[Any] = []
    producer.produce(topic, b"tiered", on_delivery=lambda err, msg: done.append(err))
    deadline = time.monotonic() + seconds
    while not done and time.monotonic() < deadline:
        producer.poll(0.05)
    return bool(done) and done[0] is None


def test_a_paused_tier_is_held_until_resumed_while_high_keeps_flowing(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique_topic("tiers"))
    _tidelog(broker, "quotas", "alter", "--client-id", "tier-low", "--add-config", "tidelog.tier=2")
    _tidelog(broker, "quotas", "alter", "--client-id", "tier-high", "--add-config", "tidelog.tier=0")
    low = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "tier-low", **FAST_CLIENT})
    high = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "tier-high", **FAST_CLIENT})
    try:
        assert _delivered_within(low, topic, 10) and _delivered_within(high, topic, 10)  # connected, metadata known
        _tidelog(broker, "quotas", "tier", "pause", "low")
        assert not _delivered_within(low, topic, 2.0)
        assert _delivered_within(high, topic, 5.0)
        _tidelog(broker, "quotas", "tier", "resume", "low")
        low.flush(10)
        assert low.flush(0) == 0  # the held message went through once the tier was resumed
        assert _delivered_within(low, topic, 5.0)
    finally:
        _tidelog(broker, "quotas", "tier", "resume", "low")
        _tidelog(broker, "quotas", "delete", "--client-id", "tier-low")
        _tidelog(broker, "quotas", "delete", "--client-id", "tier-high")


def _saturation_level(broker: BrokerProcess) -> float:
    return _gauge(broker, "tidelog_quota_tier_saturation_level")


def _gauge(broker: BrokerProcess, name: str) -> float:
    port = broker.properties["metrics.port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(f"{name} "))


def test_saturation_throttles_the_low_tier_first_and_lifts_as_load_falls(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, unique_topic("saturate"))
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("quota.tier.auto.enable", "true", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("quota.tier.auto.network.bytes.per.sec", "20000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("quota.tier.auto.disk.enable", "false", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([resource])[resource].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **FAST_CLIENT})
    try:
        deadline = time.monotonic() + 15
        while _saturation_level(broker) < 2 and time.monotonic() < deadline:
            for _ in range(20):  # about 200 KB/s: ten times the capacity told to the broker
                producer.produce(topic, VALUE)
            producer.poll(0.1)
        assert _saturation_level(broker) >= 2
        port = broker.properties["metrics.port"]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'tidelog_quota_tier_held{tier="low",reason="saturation: network utilisation' in text
        producer.flush(10)
        wait_until(lambda: _saturation_level(broker) == 0, timeout=15, interval=0.2, message="tier throttles lifted")
    finally:
        undo = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            for key in ("quota.tier.auto.enable", "quota.tier.auto.network.bytes.per.sec", "quota.tier.auto.disk.enable")
        ])
        admin.incremental_alter_configs([undo])[undo].result(15)


def test_the_cli_alters_describes_and_deletes_like_kafka_configs(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    user = unique_topic("cli-user")
    _tidelog(broker, "quotas", "alter", "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
             "--entity-default", "--add-config", "producer_byte_rate=4096,request_percentage=25")
    _tidelog(broker, "quotas", "alter", "--user", user, "--add-config", "consumer_byte_rate=8192")
    capsys.readouterr()
    _tidelog(broker, "quotas", "describe", "--user", user, "--any", "--json")
    described = json.loads(capsys.readouterr().out)
    assert described == [
        {"entity": {"client-id": None, "user": user}, "values": {"producer_byte_rate": 4096.0, "request_percentage": 25.0}},
        {"entity": {"user": user}, "values": {"consumer_byte_rate": 8192.0}},
    ]
    assert cli_main(["quotas", "alter", "--user", user, "--add-config", "consumer_byte_rate=0.5", "-b", broker.bootstrap]) == 1
    assert "INVALID_REQUEST: consumer_byte_rate cannot be a fractional value." in capsys.readouterr().err
    _tidelog(broker, "quotas", "delete", "--user", user)
    _tidelog(broker, "quotas", "delete", "--user", user, "--client-default")
    capsys.readouterr()
    _tidelog(broker, "quotas", "describe", "--user", user, "--any", "--json")
    assert json.loads(capsys.readouterr().out) == []
