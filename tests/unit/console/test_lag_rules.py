"""Burrow's lag rules on recorded windows: one window per status, and the group's worst-partition rule.

Each window is (offset, lag, seconds) triples as a sampler polling every 10 s records them.
"""

from __future__ import annotations

import pytest

from tidelog.console.lag import (
    PartitionResult,
    Sample,
    Status,
    evaluate_group,
    evaluate_partition,
    group_status,
    lag_seconds,
)


def window(*rows: tuple[int, int, int]) -> list[Sample]:
    return [Sample(offset, lag, seconds * 1000) for offset, lag, seconds in rows]


CAUGHT_UP = window((100, 0, 0), (150, 0, 10), (200, 0, 20), (250, 0, 30))
KEEPING_UP = window((100, 5, 0), (150, 9, 10), (200, 4, 20), (250, 6, 30))  # lag goes up and down
SLOW = window((100, 10, 0), (110, 25, 10), (120, 40, 10 * 2), (130, 40, 30))  # moves, lag never drops
STALLED = window((100, 10, 0), (100, 20, 10), (100, 30, 20), (100, 30, 30))  # commits, never advances
STOPPED = window((100, 10, 0), (100, 20, 0), (100, 30, 0), (100, 40, 0))  # no commit since t=0
REWOUND = window((500, 0, 0), (500, 0, 10), (0, 500, 20), (50, 450, 30))  # moved back to the start
BRIEFLY_CAUGHT_UP = window((100, 10, 0), (120, 0, 10), (130, 5, 20), (140, 8, 30))


@pytest.mark.parametrize(("name", "samples", "now_s", "expected"), [
    ("caught up", CAUGHT_UP, 30, Status.OK),
    ("keeping up", KEEPING_UP, 30, Status.OK),
    ("slow consumer", SLOW, 30, Status.WARN),
    ("stalled consumer", STALLED, 30, Status.STALL),
    ("stopped consumer", STOPPED, 30, Status.STOP),
    ("rewound consumer", REWOUND, 30, Status.REWIND),
    ("lag was zero inside the window", BRIEFLY_CAUGHT_UP, 30, Status.OK),
])
def test_each_recorded_window_gets_burrows_status(name: str, samples: list[Sample], now_s: int,
                                                  expected: Status) -> None:
    assert evaluate_partition(samples, now_s * 1000) is expected, name


def test_a_live_consumer_becomes_stopped_once_its_silence_outlasts_the_window() -> None:
    live = window((100, 10, 0), (110, 5, 10), (120, 8, 20), (130, 4, 30))
    assert evaluate_partition(live, 45_000) is Status.OK  # 15 s of silence < 30 s span
    assert evaluate_partition(live, 61_000) is Status.STOP  # 31 s > 30 s


def test_a_caught_up_consumer_is_never_in_error_even_when_silent() -> None:
    silent = window((100, 10, 0), (100, 0, 0))
    assert evaluate_partition(silent, 10_000_000) is Status.OK


def test_too_short_a_window_is_ok() -> None:
    assert evaluate_partition([], 0) is Status.OK
    assert evaluate_partition(window((100, 50, 0)), 100_000) is Status.OK


def test_group_status_is_its_worst_partition_with_errors_folded_into_err() -> None:
    assert group_status([]) is Status.NOTFOUND
    assert group_status([Status.OK, Status.OK]) is Status.OK
    assert group_status([Status.OK, Status.WARN]) is Status.WARN
    for bad in (Status.STOP, Status.STALL, Status.REWIND):
        assert group_status([Status.WARN, bad, Status.OK]) is Status.ERR


def test_group_result_sums_lag_and_names_the_partition_with_most_lag() -> None:
    def part(partition: int, status: Status, lag: int, complete: float) -> PartitionResult:
        return PartitionResult("orders", partition, status, (), lag, complete)

    result = evaluate_group("billing", [part(0, Status.OK, 3, 1.0), part(1, Status.STALL, 30, 0.5)])
    assert result.status is Status.ERR
    assert result.total_lag == 33
    assert result.max_lag is not None and result.max_lag.partition == 1
    assert result.complete == 0.5


def test_lag_in_seconds_counts_from_the_first_unconsumed_record() -> None:
    assert lag_seconds(10, 1_000, 61_000) == 60.0
    assert lag_seconds(0, 1_000, 61_000) == 0.0  # nothing waiting
    assert lag_seconds(10, None, 61_000) == 0.0  # record already deleted by retention
    assert lag_seconds(10, 70_000, 61_000) == 0.0  # producer clock ahead of ours: never negative
