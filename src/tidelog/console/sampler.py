"""The lag sampler: polls every group's committed offsets and the log end offsets, keeps a window of
samples per (group, topic, partition), and evaluates Burrow's rules (``lag``) on every poll.

One poll (``poll``, blocking; ``run`` calls it in a worker thread every ``console.lag.interval.ms``):

1. ListGroups, then OffsetFetch for every group (requests in flight together) and DescribeGroups
   (members and their assignments: who owns each partition);
2. ListOffsets(latest) for every partition any group committed on (in requests of 1,000 partitions,
   and DescribeGroups of 100 groups, so that pages' requests are answered between them);
3. for each partition: ``lag = max(0, end - committed)``; the sample's ``timestamp_ms`` is the poll
   time while a member owns the partition (a live consumer counts as committing), else the time the
   committed offset was last seen to move (carried forward, so a consumer that left reads as STOP once
   its silence outlasts the window);
4. the timestamp of the first unconsumed record of each lagging partition (read once per offset and
   cached: a record's timestamp never changes) gives lag in seconds;
5. every window is evaluated at the poll time; results replace the previous ones atomically (a reader
   sees one poll or the next, never a mix), and each group's total lag and worst lag in seconds are
   appended to its history (``console.lag.history.s``, one hour by default) for the lag chart.

A group that disappears (deleted, or its offsets expired) is dropped with its windows. A group whose
offsets could not be read in one poll (a coordinator moving or loading, a timeout) keeps its windows,
history and last result until a poll reads it again: a transient error must not erase a rewind.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tidelog.console.config import ConsoleConfig
from tidelog.console.kafka import GroupInfo, KafkaView
from tidelog.console.lag import (
    GroupResult,
    PartitionResult,
    Sample,
    Status,
    evaluate_group,
    evaluate_partition,
    lag_seconds,
)
from tidelog.observability.registry import MetricFamily

log = logging.getLogger(__name__)
Key = tuple[str, str, int]  # (group, topic, partition)
TimestampReader = Callable[[list[tuple[str, int, int]]], dict[tuple[str, int, int], int]]
MAX_TIMESTAMP_READS = 2000  # per poll; the rest wait for the next poll
# A broker answers a request whole before the next one of any connection gets its turn on a busy
# machine: a poll asks in requests of these sizes, so that a page's small requests are answered
# between them rather than after a 10,000-partition ListOffsets (bench/console_bench.py).
OFFSETS_CHUNK = 1000
DESCRIBE_CHUNK = 100
T = TypeVar("T")


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


@dataclass(frozen=True)
class HistoryPoint:
    at_ms: int
    total_lag: int
    max_lag_seconds: float


class LagSampler:
    def __init__(self, config: ConsoleConfig, view: KafkaView, read_timestamps: TimestampReader,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.view = view
        self.read_timestamps = read_timestamps
        self.clock = clock
        self.windows: dict[Key, deque[Sample]] = {}
        self.moved_at: dict[Key, tuple[int, int]] = {}  # key -> (offset, time it was first seen)
        self.timestamps: dict[tuple[str, int, int], int] = {}
        self.results: dict[str, GroupResult] = {}
        self.history: dict[str, deque[HistoryPoint]] = {}
        self.groups: dict[str, GroupInfo] = {}
        self.polls = 0
        self.last_poll_s = 0.0
        self.last_error = ""

    def poll(self) -> None:
        started = time.perf_counter()
        now_ms = int(self.clock() * 1000)
        group_ids = [g.group_id for g in self.view.list_groups()]
        committed, unread = self.view.committed_many(group_ids)
        described = {}
        for names in _chunks(group_ids, DESCRIBE_CHUNK):
            described.update(self.view.describe_groups(names))
        partitions = sorted({tp for offsets in committed.values() for tp in offsets})
        ends = {}
        for tps in _chunks(partitions, OFFSETS_CHUNK):
            ends.update(self.view.offsets(tps))
        lagging = sorted({(t, p, o) for offsets in committed.values() for (t, p), o in offsets.items()
                          if ends.get((t, p), o) > o})
        self._read_timestamps(lagging)
        results = {g: self.results[g] for g in unread if g in self.results}
        for n, (group_id, offsets) in enumerate(committed.items()):
            results[group_id] = self._evaluate(group_id, offsets, ends, described.get(group_id), now_ms)
            if n % 50 == 49:
                time.sleep(0.0005)  # let page handlers have the GIL now, not at the next 5 ms switch
        gone = [k for k in self.windows
                if k[0] not in unread and (k[0] not in committed or (k[1], k[2]) not in committed[k[0]])]
        for key in gone:
            del self.windows[key]
            self.moved_at.pop(key, None)
        for group_id in [g for g in self.history if g not in committed and g not in unread]:
            del self.history[group_id]
        still = set(lagging)
        self.timestamps = {k: v for k, v in self.timestamps.items() if k in still}
        self.results, self.groups = results, described
        self.polls += 1
        self.last_poll_s = time.perf_counter() - started

    def _read_timestamps(self, lagging: list[tuple[str, int, int]]) -> None:
        unknown = [k for k in lagging if k not in self.timestamps][:MAX_TIMESTAMP_READS]
        if unknown:
            self.timestamps.update(self.read_timestamps(unknown))

    def _evaluate(self, group_id: str, offsets: dict[tuple[str, int], int], ends: dict[tuple[str, int], int],
                  info: GroupInfo | None, now_ms: int) -> GroupResult:
        parts = []
        owners = {tp: m for m in reversed(info.members) for tp in m.assignment} if info is not None else {}
        for (topic, partition), offset in sorted(offsets.items()):
            key = (group_id, topic, partition)
            end = ends.get((topic, partition))
            lag = max(0, end - offset) if end is not None else 0
            owner = owners.get((topic, partition))
            seen = self.moved_at.get(key)
            if seen is None or seen[0] != offset:
                seen = self.moved_at[key] = (offset, now_ms)
            sample = Sample(offset, lag, now_ms if owner is not None else seen[1], now_ms)
            window = self.windows.setdefault(key, deque(maxlen=self.config.lag_window))
            window.append(sample)
            status = evaluate_partition(window, now_ms)
            seconds = lag_seconds(lag, self.timestamps.get((topic, partition, offset)), now_ms)
            parts.append(PartitionResult(topic, partition, status, tuple(window), lag,
                                         len(window) / self.config.lag_window, seconds,
                                         owner.host if owner else "", owner.client_id if owner else ""))
        result = evaluate_group(group_id, parts)
        points = self.history.setdefault(group_id, deque(maxlen=self._history_len()))
        points.append(HistoryPoint(now_ms, result.total_lag, max((p.lag_seconds for p in parts), default=0.0)))
        return result

    def _history_len(self) -> int:
        return max(2, self.config.lag_history_s * 1000 // self.config.lag_interval_ms)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.poll)
                self.last_error = ""
            except Exception as exc:  # the cluster may be away for a while: keep sampling
                self.last_error = str(exc)
                log.warning("lag sampling failed: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), self.config.lag_interval_ms / 1000)
            except TimeoutError:
                pass

    def collect(self) -> Iterable[MetricFamily]:
        """Prometheus families for the last poll: status and lag per group; status, lag in records and
        lag in seconds per partition that lags or is not OK (a caught-up partition has no series).
        Status values are Burrow's numbers (OK=1, WARN=2, ERR=3, STOP=4, STALL=5, REWIND=6)."""
        group_status = MetricFamily("tidelog_console_group_status", "Burrow status of a consumer group "
                                    "(1 OK, 2 WARN, 3 ERR).", "gauge", ("cluster", "group"))
        group_lag = MetricFamily("tidelog_console_group_lag", "Total lag of a consumer group, in records.",
                                 "gauge", ("cluster", "group"))
        labels = ("cluster", "group", "topic", "partition")
        part_status = MetricFamily("tidelog_console_partition_status", "Burrow status of a group's partition "
                                   "(1 OK, 2 WARN, 4 STOP, 5 STALL, 6 REWIND).", "gauge", labels)
        part_lag = MetricFamily("tidelog_console_partition_lag", "Lag of a group on a partition, in records.",
                                "gauge", labels)
        part_seconds = MetricFamily("tidelog_console_partition_lag_seconds", "Age of the first unconsumed "
                                    "record of a group on a partition.", "gauge", labels)
        cluster = self.config.cluster_name
        for group_id, result in self.results.items():
            group_status.add((cluster, group_id), float(result.status))
            group_lag.add((cluster, group_id), float(result.total_lag))
            for p in result.partitions:
                if p.current_lag == 0 and p.status is Status.OK:
                    continue  # caught up: nothing to alert on, and 100k idle series would swamp a scrape
                key = (cluster, group_id, p.topic, str(p.partition))
                part_status.add(key, float(p.status))
                part_lag.add(key, float(p.current_lag))
                part_seconds.add(key, p.lag_seconds)
        polls = MetricFamily("tidelog_console_lag_polls_total", "Lag sampler polls completed.", "counter")
        polls.add((), float(self.polls))
        poll_time = MetricFamily("tidelog_console_lag_poll_seconds", "Duration of the last lag poll.", "gauge")
        poll_time.add((), self.last_poll_s)
        return [group_status, group_lag, part_status, part_lag, part_seconds, polls, poll_time]


def status_name(status: Status) -> str:
    return status.name
