"""The registry and its Prometheus text exposition."""

from __future__ import annotations

import math

import pytest

from tidelog.observability.registry import MetricFamily, Registry, format_value, render


def test_counter_renders_help_type_and_one_line_per_label_set() -> None:
    registry = Registry()
    requests = registry.counter("tidelog_requests_total", "Requests answered.", ("api", "version"))
    requests.inc(("Produce", "9"))
    requests.inc(("Produce", "9"), 2)
    requests.inc(("Fetch", "12"))
    assert registry.render() == (
        "# HELP tidelog_requests_total Requests answered.\n"
        "# TYPE tidelog_requests_total counter\n"
        'tidelog_requests_total{api="Produce",version="9"} 3\n'
        'tidelog_requests_total{api="Fetch",version="12"} 1\n'
    )


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    registry = Registry()
    latency = registry.histogram("lat_seconds", "Latency.", ("api",), buckets=(0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        latency.observe(("Produce",), value)
    lines = registry.render().splitlines()
    assert lines[:2] == ["# HELP lat_seconds Latency.", "# TYPE lat_seconds histogram"]
    assert lines[2:] == [
        'lat_seconds_bucket{api="Produce",le="0.1"} 2',  # 0.1 itself falls in le=0.1
        'lat_seconds_bucket{api="Produce",le="1"} 3',
        'lat_seconds_bucket{api="Produce",le="+Inf"} 4',
        'lat_seconds_sum{api="Produce"} 3.65',
        'lat_seconds_count{api="Produce"} 4',
    ]
    assert latency.count(("Produce",)) == 4
    assert latency.sum(("Produce",)) == pytest.approx(3.65)


def test_gauge_goes_up_and_down_and_can_be_set() -> None:
    registry = Registry()
    connections = registry.gauge("conns", "Open connections.", ("listener",))
    connections.inc(("PLAINTEXT",))
    connections.inc(("PLAINTEXT",))
    connections.dec(("PLAINTEXT",))
    assert connections.value(("PLAINTEXT",)) == 1
    connections.set(("PLAINTEXT",), 7)
    assert 'conns{listener="PLAINTEXT"} 7' in registry.render()


def test_label_values_and_help_are_escaped() -> None:
    family = MetricFamily("m", 'Help with \\ and\nnewline.', "gauge", ("topic",)).add(('we"ird\\to\npic',), 1)
    assert render([family]).splitlines() == [
        "# HELP m Help with \\\\ and\\nnewline.",
        "# TYPE m gauge",
        'm{topic="we\\"ird\\\\to\\npic"} 1',
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [(3.0, "3"), (0.25, "0.25"), (math.inf, "+Inf"), (-math.inf, "-Inf"), (math.nan, "NaN"), (1e300, "1e+300"), (-2, "-2")],
)
def test_sample_values_use_prometheus_spelling(value: float, text: str) -> None:
    assert format_value(value) == text


@pytest.mark.parametrize(
    ("name", "labels"),
    [("1bad", ()), ("bad-name", ()), ("ok", ("le",)), ("ok", ("__reserved",)), ("ok", ("a", "a")), ("ok", ("bad-label",))],
)
def test_invalid_names_are_refused(name: str, labels: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        Registry().counter(name, "help", labels)


def test_a_name_registers_once() -> None:
    registry = Registry()
    registry.counter("x_total", "X.")
    with pytest.raises(ValueError, match="already registered"):
        registry.gauge("x_total", "X again.")


def test_collectors_run_at_scrape_time_and_a_failing_one_is_skipped() -> None:
    registry = Registry()
    reads = []

    def sizes() -> list[MetricFamily]:
        reads.append(1)
        return [MetricFamily("size_bytes", "Size.", "gauge", ("topic",)).add(("a",), 10 * len(reads))]

    def broken() -> list[MetricFamily]:
        raise OSError("disk gone")

    registry.add_collector(broken)
    registry.add_collector(sizes)
    assert 'size_bytes{topic="a"} 10' in registry.render()
    assert 'size_bytes{topic="a"} 20' in registry.render()


def test_families_of_one_name_from_several_collectors_share_one_header() -> None:
    a = MetricFamily("groups", "Groups.", "gauge", ("state",)).add(("Stable",), 2)
    b = MetricFamily("groups", "Groups.", "gauge", ("state",)).add(("Empty",), 1)
    text = render([a, b])
    assert text.count("# TYPE groups gauge") == 1
    assert 'groups{state="Stable"} 2' in text and 'groups{state="Empty"} 1' in text


def test_removed_series_disappear_from_the_exposition() -> None:
    registry = Registry()
    bytes_in = registry.counter("bytes_in_total", "Bytes in.", ("topic",))
    bytes_in.inc(("gone",), 5)
    bytes_in.remove(("gone",))
    assert "gone" not in registry.render()


def test_empty_registry_renders_nothing() -> None:
    assert Registry().render() == ""
