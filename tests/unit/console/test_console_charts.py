"""The brokers' time charts: the bounded history, rates from scrapes, and the SVG path builder."""

from __future__ import annotations

import pytest

from tidelog.console.charts import Box, BrokerCharts, Ring, chart_document, nice_ceiling, svg_path
from tidelog.console.config import parse_config
from tidelog.console.scrape import Scrape, Scraper, parse_exposition

BOX = Box(width=110, height=60, left=10, right=0, top=0, bottom=10)  # 100 wide, 50 high: easy numbers


def test_a_ring_keeps_the_newest_points_in_time_order_and_refuses_a_step_back() -> None:
    ring = Ring(3)
    for t in (1, 2, 3, 4):
        assert ring.append(t * 1000, float(t))
    assert ring.points() == [(2000, 2.0), (3000, 3.0), (4000, 4.0)]
    assert not ring.append(4000, 9.0) and not ring.append(3500, 9.0)
    assert ring.points(since_ms=3000) == [(3000, 3.0), (4000, 4.0)]
    assert ring.last == 4.0 and len(ring) == 3
    with pytest.raises(ValueError, match="at least 2"):
        Ring(1)


@pytest.mark.parametrize(("value", "ceiling"), [
    (0, 1.0), (-3, 1.0), (0.7, 1.0), (1, 1.0), (1.01, 2.0), (3, 5.0), (7, 10.0), (1024, 2000.0), (5e6, 5e6),
    (float("nan"), 1.0), (float("inf"), 1.0),
])
def test_the_y_axis_top_is_one_two_or_five_times_a_power_of_ten(value: float, ceiling: float) -> None:
    assert nice_ceiling(value) == ceiling


@pytest.mark.parametrize(("value", "ceiling"), [
    (900, 1000.0), (1000, 1000.0), (1500, 2048.0), (1.02e6, 1000 * 1024), (1.03e6, 2**20), (5.6e6, 10 * 2**20), (2**20, 2**20), (3 * 2**30, 5 * 2**30), (0, 1.0),
])
def test_a_bytes_axis_top_is_round_in_binary_units(value: float, ceiling: float) -> None:
    assert nice_ceiling(value, 1024) == ceiling


def test_a_path_starts_with_move_continues_with_lines_and_scales_time_and_value() -> None:
    points = [(0, 0.0), (500, 50.0), (1000, 100.0)]
    assert svg_path(points, 0, 1000, 100.0, BOX) == "M10.0 50.0 L60.0 25.0 L110.0 0.0"


def test_a_gap_breaks_the_line_and_a_lone_point_is_a_dot() -> None:
    points = [(0, 10.0), (100, 20.0), (200, None), (300, 30.0), (400, None), (500, 40.0), (600, 50.0)]
    path = svg_path(points, 0, 1000, 100.0, BOX)
    assert path == "M10.0 45.0 L20.0 40.0 M40.0 35.0 h0 M60.0 30.0 L70.0 25.0"


def test_values_above_the_top_are_clipped_and_an_empty_series_draws_nothing() -> None:
    assert svg_path([(0, 500.0)], 0, 10, 100.0, BOX) == "M10.0 0.0 h0"
    assert svg_path([], 0, 10, 100.0, BOX) == ""
    assert svg_path([(0, None), (5, None)], 0, 10, 100.0, BOX) == ""


def test_a_chart_document_shares_one_time_axis_and_top_across_its_lines() -> None:
    doc = chart_document({"a:1": [(1000, 30.0), (2000, None)], "b:2": [(1500, 140.0), (3000, 70.0)]}, BOX)
    assert (doc["t0"], doc["t1"], doc["top"]) == (1000, 3000, 200.0)
    assert [line["name"] for line in doc["lines"]] == ["a:1", "b:2"]
    assert doc["lines"][0]["d"] == "M10.0 42.5 h0" and doc["lines"][0]["last"] == 30.0
    assert doc["lines"][1]["d"] == "M35.0 15.0 L110.0 32.5" and doc["lines"][1]["last"] == 70.0
    assert chart_document({}, BOX)["lines"] == []


def exposition(bytes_in: float, bytes_out: float, *, used: float = 0.0) -> str:
    return (f'tidelog_topic_bytes_in_total{{topic="a"}} {bytes_in / 2}\n'
            f'tidelog_topic_bytes_in_total{{topic="b"}} {bytes_in / 2}\n'
            f'tidelog_topic_bytes_out_total{{topic="a"}} {bytes_out}\n'
            f'tidelog_log_dir_total_bytes{{log_dir="/d1"}} 1000\ntidelog_log_dir_usable_bytes{{log_dir="/d1"}} {1000 - used}\n'
            f'tidelog_log_dir_total_bytes{{log_dir="/d2"}} 500\ntidelog_log_dir_usable_bytes{{log_dir="/d2"}} 500\n'
            f'tidelog_log_size_bytes{{topic="a",partition="0"}} {used / 4}\ntidelog_log_size_bytes{{topic="a",partition="1"}} {used / 4}\n')


def test_rates_come_from_this_samplers_consecutive_readings_of_each_endpoint_and_a_reset_is_a_gap() -> None:
    urls = ("http://b1:9100/metrics", "http://b2:9100/metrics")
    config = parse_config({"console.chart.interval.ms": "1000", "console.chart.history.s": "5"})
    now = [100.0]
    charts = BrokerCharts(config, Scraper(urls), clock=lambda: now[0])
    assert charts.capacity == 5
    readings = [  # (monotonic at, b1 exposition or None when it did not answer, b2)
        (10.0, exposition(0, 0, used=100), exposition(1000, 0)),
        (12.0, exposition(4000, 2000, used=150), None),
        (13.0, exposition(7000, 2000, used=150), exposition(2000, 10)),
        (14.0, exposition(100, 0, used=150), exposition(3000, 20)),  # b1 restarted: its counters went down
    ]
    for at, b1, b2 in readings:
        scrape = Scrape(at, {url: parse_exposition(text) for url, text in zip(urls, (b1, b2), strict=True) if text})
        charts.record(scrape)
        now[0] += 1
    assert [v for _, v in charts.rings[("bytes_in", urls[0])].points()] == [None, 2000.0, 3000.0, None]
    assert [v for _, v in charts.rings[("bytes_out", urls[0])].points()] == [None, 1000.0, 0.0, None]
    assert [v for _, v in charts.rings[("bytes_in", urls[1])].points()] == [None, None, None, 1000.0]
    assert [v for _, v in charts.rings[("disk", urls[0])].points()] == [100.0, 150.0, 150.0, 150.0]
    assert [v for _, v in charts.rings[("disk", urls[1])].points()] == [0.0, None, 0.0, 0.0]
    assert [v for _, v in charts.rings[("log_size", urls[0])].points()] == [50.0, 75.0, 75.0, 75.0]
    assert [t for t, _ in charts.rings[("disk", urls[1])].points()] == [100_000, 101_000, 102_000, 103_000]
    doc = charts.document()
    assert [line["name"] for line in doc["bytes_in"]["lines"]] == ["b1:9100", "b2:9100"]
    assert doc["bytes_in"]["top"] == 5 * 1024 and doc["disk"]["lines"][0]["last"] == 150.0


def test_an_endpoint_without_tidelogs_series_gets_gaps_not_zeros() -> None:
    url = "http://kafka:7071/metrics"
    charts = BrokerCharts(parse_config({}), Scraper([url]), clock=lambda: 1.0)
    charts.record(Scrape(1.0, {url: parse_exposition('kafka_server_brokertopicmetrics_bytesin_total 5\n')}))
    assert all(charts.rings[(name, url)].points() == [(1000, None)]
               for name in ("bytes_in", "bytes_out", "disk", "log_size"))


def test_a_tidelog_endpoint_before_any_traffic_reads_as_zero_not_as_a_gap() -> None:
    url = "http://idle:9100/metrics"
    now = [1.0]
    charts = BrokerCharts(parse_config({}), Scraper([url]), clock=lambda: now[0])
    for at in (1.0, 2.0):
        charts.record(Scrape(at, {url: parse_exposition('tidelog_build_info{version="1"} 1\n')}))
        now[0] += 1
    assert charts.rings[("bytes_in", url)].points() == [(1000, None), (2000, 0.0)]
    assert charts.rings[("log_size", url)].points() == [(1000, 0.0), (2000, 0.0)]
