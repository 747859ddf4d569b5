"""Reading load and latency from Prometheus text: tidelog's own series and Kafka's JMX exporter's."""

from __future__ import annotations

import pytest

from tidelog.governor.metrics import FLAVOURS, Scrape, broker_load, parse, quantile

TIDELOG_T0 = """# HELP tidelog_topic_bytes_in_total x
# TYPE tidelog_topic_bytes_in_total counter
tidelog_topic_bytes_in_total{topic="orders"} 1000
tidelog_topic_bytes_out_total{topic="orders"} 0
tidelog_topic_messages_in_total{topic="orders"} 10
tidelog_request_total_time_seconds_bucket{api="Produce",version="9",le="0.001"} 0
tidelog_request_total_time_seconds_bucket{api="Produce",version="9",le="0.01"} 90
tidelog_request_total_time_seconds_bucket{api="Produce",version="9",le="0.1"} 100
tidelog_request_total_time_seconds_bucket{api="Produce",version="9",le="+Inf"} 100
tidelog_request_total_time_seconds_bucket{api="Fetch",version="12",le="+Inf"} 7
"""
TIDELOG_T1 = TIDELOG_T0.replace('"orders"} 1000', '"orders"} 21000').replace('"orders"} 10', '"orders"} 210')

KAFKA = """kafka_server_brokertopicmetrics_bytesin_total{topic="orders",} 5000.0
kafka_network_requestmetrics_99thpercentile{name="TotalTimeMs",request="Produce",} 12.5
kafka_network_requestmetrics_99thpercentile{name="TotalTimeMs",request="Fetch",} 500.0
"""


def test_tidelog_rates_and_p99_come_from_two_scrapes() -> None:
    load = broker_load(Scrape(0.0, parse(TIDELOG_T0)), Scrape(10.0, parse(TIDELOG_T1)), FLAVOURS["tidelog"])
    assert load.bytes_in == {"orders": 2000.0} and load.messages_in == {"orders": 20.0}
    assert load.p99_ms == pytest.approx(91.0)  # 99th of 100 lies in (10 ms, 100 ms]: 10 + 90 * (99-90)/10


def test_kafka_jmx_p99_is_read_from_the_produce_quantile() -> None:
    load = broker_load(None, Scrape(0.0, parse(KAFKA)), FLAVOURS["kafka-jmx"])
    assert load.p99_ms == 12.5 and load.bytes_in == {}


def test_a_counter_reset_counts_from_zero() -> None:
    later = TIDELOG_T0.replace('"orders"} 1000', '"orders"} 300')
    load = broker_load(Scrape(0.0, parse(TIDELOG_T0)), Scrape(3.0, parse(later)), FLAVOURS["tidelog"])
    assert load.bytes_in == {"orders": 100.0}


def test_histogram_quantile_interpolates_within_the_bucket() -> None:
    assert quantile([(1.0, 50.0), (2.0, 100.0), (float("inf"), 100.0)], 0.5) == 1.0
    assert quantile([(1.0, 0.0), (2.0, 100.0)], 0.25) == 1.25
