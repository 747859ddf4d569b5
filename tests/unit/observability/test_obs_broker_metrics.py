"""The broker's hooks: request phases, per-topic traffic, connections, and scrape-time log gauges."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tidelog.observability.broker_metrics import BrokerMetrics, api_name
from tidelog.observability.registry import Registry
from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager


def sample(text: str, line_prefix: str) -> float:
    """The value of the one exposition line starting with ``line_prefix``."""
    matches = [line for line in text.splitlines() if line.startswith(line_prefix + " ")]
    assert len(matches) == 1, f"{line_prefix!r} in:\n{text}"
    return float(matches[0].rsplit(" ", 1)[1])


@pytest.mark.parametrize(
    ("key", "name"),
    [(0, "Produce"), (18, "ApiVersions"), (22, "InitProducerId"), (23, "OffsetForLeaderEpoch"), (32, "DescribeConfigs"), (9999, "ApiKey9999")],
)
def test_api_keys_are_named_as_kafka_names_them(key: int, name: str) -> None:
    assert api_name(key) == name


def test_a_request_records_every_phase_under_its_api_and_version() -> None:
    metrics = BrokerMetrics(Registry())
    received = time.perf_counter() - 0.030  # the frame arrived 30 ms ago
    timer = metrics.request_received("PLAINTEXT", received)
    timer.decoded(0, 9, request_bytes=1200)
    timer.add_remote(0.020)  # acks=all wait in purgatory
    timer.handled()
    timer.add_throttle(0.0)
    timer.sent(response_bytes=80)
    labels = ("Produce", "9")
    assert metrics.requests.value(labels) == 1
    assert metrics.request_bytes.value(labels) == 1200
    assert metrics.response_bytes.value(labels) == 80
    queue = metrics.queue_time.sum(labels)
    assert 0.030 <= queue < 0.5
    assert metrics.remote_time.sum(labels) == pytest.approx(0.020)
    assert metrics.local_time.sum(labels) >= 0  # remote is taken out of local, never below zero
    total = metrics.total_time.sum(labels)
    assert total >= queue + metrics.local_time.sum(labels) + metrics.send_time.sum(labels) - 1e-9
    text = metrics.registry.render()
    assert sample(text, 'tidelog_requests_total{api="Produce",version="9"}') == 1
    assert sample(text, 'tidelog_request_total_time_seconds_count{api="Produce",version="9"}') == 1
    assert sample(text, 'tidelog_request_remote_time_seconds_bucket{api="Produce",version="9",le="0.025"}') == 1


def test_a_request_that_never_decoded_is_not_counted_as_answered() -> None:
    metrics = BrokerMetrics(Registry())
    metrics.request_received("PLAINTEXT").sent(0)
    metrics.protocol_error("PLAINTEXT", "UnsupportedVersion")
    assert metrics.requests.values == {}
    assert metrics.protocol_errors.value(("PLAINTEXT", "UnsupportedVersion")) == 1


def test_topic_traffic_counts_bytes_and_messages_and_is_forgotten_with_the_topic() -> None:
    metrics = BrokerMetrics(Registry())
    metrics.produced("orders", 1000, 10)
    metrics.produced("orders", 500, 5)
    metrics.fetched("orders", 1500)
    metrics.produce_failed("orders")
    text = metrics.registry.render()
    assert sample(text, 'tidelog_topic_bytes_in_total{topic="orders"}') == 1500
    assert sample(text, 'tidelog_topic_messages_in_total{topic="orders"}') == 15
    assert sample(text, 'tidelog_topic_bytes_out_total{topic="orders"}') == 1500
    assert sample(text, 'tidelog_topic_failed_produce_requests_total{topic="orders"}') == 1
    metrics.topic_deleted("orders")
    assert "orders" not in metrics.registry.render()


def test_connections_gauge_follows_opens_and_closes_per_listener() -> None:
    metrics = BrokerMetrics(Registry())
    for _ in range(3):
        metrics.connection_opened("PLAINTEXT")
    metrics.connection_opened("INTERNAL")
    metrics.connection_closed("PLAINTEXT")
    text = metrics.registry.render()
    assert sample(text, 'tidelog_connections{listener="PLAINTEXT"}') == 2
    assert sample(text, 'tidelog_connections{listener="INTERNAL"}') == 1
    assert sample(text, 'tidelog_connections_opened_total{listener="PLAINTEXT"}') == 3
    assert sample(text, 'tidelog_connections_closed_total{listener="PLAINTEXT"}') == 1


def test_authentication_outcomes_are_counted_by_mechanism() -> None:
    metrics = BrokerMetrics(Registry())
    metrics.authentication_failed("SASL_PLAINTEXT", "SCRAM-SHA-256")
    metrics.authentication_succeeded("SASL_PLAINTEXT", "PLAIN")
    text = metrics.registry.render()
    assert sample(text, 'tidelog_authentication_failures_total{listener="SASL_PLAINTEXT",mechanism="SCRAM-SHA-256"}') == 1
    assert sample(text, 'tidelog_authentication_successes_total{listener="SASL_PLAINTEXT",mechanism="PLAIN"}') == 1


def test_log_gauges_are_read_from_a_real_log_manager_at_scrape_time(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "d1"])
    manager.startup()
    try:
        metrics = BrokerMetrics(Registry())
        metrics.watch_logs(manager)
        log = manager.create_log("orders", 1, LogConfig())
        batch = build_batch([Record(i, 1_700_000_000_000, None, b"x" * 10) for i in range(5)])
        log.append_as_leader(batch, leader_epoch=0, now_ms=1_700_000_000_000)
        log.append_as_leader(batch, leader_epoch=0, now_ms=1_700_000_000_000)
        log.delete_records_before(5, now_ms=1_700_000_000_000)
        text = metrics.registry.render()
        tp = '{topic="orders",partition="1"}'
        assert sample(text, "tidelog_log_start_offset" + tp) == 5
        assert sample(text, "tidelog_log_end_offset" + tp) == 10
        assert sample(text, "tidelog_log_high_watermark" + tp) == 10
        assert sample(text, "tidelog_log_size_bytes" + tp) == log.size_bytes > 0
        assert sample(text, "tidelog_log_producer_ids" + tp) == 0
        assert sample(text, "tidelog_offline_partitions") == 0
        d = f'{{dir="{tmp_path / "d1"}"}}'
        assert sample(text, "tidelog_log_dir_partitions" + d) == 1
        assert sample(text, "tidelog_log_dir_partition_bytes" + d) == log.size_bytes
        assert sample(text, "tidelog_log_dir_offline" + d) == 0
        assert 0 < sample(text, "tidelog_log_dir_usable_bytes" + d) <= sample(text, "tidelog_log_dir_total_bytes" + d)
        log.append_as_leader(batch, leader_epoch=0, now_ms=1_700_000_000_000)
        assert sample(metrics.registry.render(), "tidelog_log_end_offset" + tp) == 15
    finally:
        manager.shutdown()


def test_group_counts_and_lag_come_from_the_given_sources() -> None:
    metrics = BrokerMetrics(Registry())
    rows = [("billing", "orders", 0, 42)]
    metrics.watch_groups(lambda: {"Stable": 2, "Empty": 1}, lambda: rows)
    text = metrics.registry.render()
    assert sample(text, 'tidelog_groups{state="Stable"}') == 2
    assert sample(text, 'tidelog_groups{state="Empty"}') == 1
    assert sample(text, 'tidelog_consumer_lag{group="billing",topic="orders",partition="0"}') == 42
