"""The lag sampler's bookkeeping across polls, over a fake KafkaView (the seam the console owns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from tidelog.console.config import ConsoleConfig
from tidelog.console.kafka import GroupInfo, GroupListing, KafkaView
from tidelog.console.lag import Status
from tidelog.console.sampler import LagSampler

TP = tuple[str, int]


class FakeView:
    """One group on one partition of topic ``t``; ``committed`` None makes its offset read fail."""

    def __init__(self) -> None:
        self.committed: int | None = 0
        self.end = 200

    def list_groups(self) -> list[GroupListing]:
        return [GroupListing("g", "Stable", "consumer")]

    def committed_many(self, group_ids: Sequence[str]) -> tuple[dict[str, dict[TP, int]], set[str]]:
        if self.committed is None:
            return {}, set(group_ids)
        return {"g": {("t", 0): self.committed}}, set()

    def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupInfo]:
        return {}

    def offsets(self, partitions: Sequence[TP], spec: str = "latest") -> dict[TP, int]:
        return {tp: self.end for tp in partitions}


def sampler(view: FakeView) -> tuple[LagSampler, list[float]]:
    now = [1000.0]
    config = ConsoleConfig(lag_interval_ms=500, lag_window=10)
    return LagSampler(config, cast(KafkaView, view), lambda keys: {}, clock=lambda: now[0]), now


def status(s: LagSampler) -> Any:
    return s.results["g"].partitions[0].status


def test_a_poll_that_cannot_read_a_group_keeps_its_window_and_result() -> None:
    view = FakeView()
    s, now = sampler(view)
    view.committed = 200
    s.poll()
    assert status(s) is Status.OK
    view.committed = 0
    now[0] += 0.5
    s.poll()
    assert status(s) is Status.REWIND
    view.committed = None  # the coordinator is moving: OffsetFetch fails this time
    now[0] += 0.5
    s.poll()
    assert status(s) is Status.REWIND and len(s.windows[("g", "t", 0)]) == 2 and len(s.history["g"]) == 2
    view.committed = 1
    now[0] += 0.5
    s.poll()
    assert status(s) is Status.REWIND  # the 200 -> 0 step is still in the window
    assert [sample.offset for sample in s.windows[("g", "t", 0)]] == [200, 0, 1]


def test_a_group_whose_offsets_are_gone_is_dropped() -> None:
    view = FakeView()
    s, _ = sampler(view)
    s.poll()
    view.committed_many = lambda group_ids: ({}, set())  # type: ignore[method-assign]
    s.poll()
    assert "g" not in s.results and not s.windows and "g" not in s.history
