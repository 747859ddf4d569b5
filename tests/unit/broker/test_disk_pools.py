"""Disk pools and slow-connection marking on real logs: where a read runs, and when a dir or a connection is slow."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.broker.disk_pools import DiskPools
from tidelog.broker.slow_connections import ConnectionScore, SlowMarker
from tidelog.common.config import BROKER_SETTINGS, BrokerConfig
from tidelog.observability.registry import Registry
from tidelog.protocol.records import Record, build_batch
from tidelog.storage.log import FetchData, PartitionLog
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager

NOW = 1_700_000_000_000


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path / "a", tmp_path / "b"])
    manager.startup()
    yield manager
    manager.shutdown()


def filled(logs: LogManager, topic: str) -> PartitionLog:
    log = logs.create_log(topic, 0, LogConfig())
    log.append_as_leader(build_batch([Record(i, NOW, None, b"x" * 100) for i in range(10)]), leader_epoch=0, now_ms=NOW)
    return log


def pools(logs: LogManager, registry: Registry | None = None, **settings: str) -> DiskPools:
    config = BrokerConfig.from_properties({"tidelog.log.dir.slow.read.ms": "30", **settings})
    return DiskPools(config, logs, registry or Registry())


def test_a_slow_inline_read_marks_its_dir_slow_and_fast_pooled_reads_unmark_it(logs: LogManager) -> None:
    log = filled(logs, "t")
    disk = pools(logs, **{"tidelog.test.log.dir.read.delay": f"{logs.log_dir_of('t', 0)}:40"})
    state = disk.dir_of(log)
    assert state is not None and not disk.offloaded(state, cold=False, slow_connection=False)
    data = disk.read_inline(state, lambda: log.read(0, 1 << 20))
    assert data.size > 0
    assert state.slow and disk.offloaded(state, cold=False, slow_connection=False)

    disk.config.dynamic["tidelog.test.log.dir.read.delay"] = []  # the disk is fast again
    disk.refresh()

    async def pooled() -> list[bytes]:
        return [(await disk.read_pooled(state, lambda: log.read(0, 1 << 20), False)).payload for _ in range(12)]

    payloads = asyncio.run(pooled())
    assert payloads[-1] == data.read_bytes()
    assert not state.slow and state.read_ms < 15
    disk.shutdown()


def test_cold_reads_and_slow_connections_are_offloaded_unless_the_pools_are_off(logs: LogManager) -> None:
    filled(logs, "t")
    disk = pools(logs)
    state = disk.dir_of(logs.get_log("t", 0))  # type: ignore[arg-type]
    assert disk.offloaded(state, cold=True, slow_connection=False)
    assert disk.offloaded(state, cold=False, slow_connection=True)
    assert not disk.offloaded(state, cold=False, slow_connection=False)
    off = pools(logs, **{"tidelog.log.dir.io.threads": "0"})
    assert not off.offloaded(off.dir_of(logs.get_log("t", 0)), cold=True, slow_connection=True)  # type: ignore[arg-type]


def test_reads_and_flushes_run_on_their_own_dirs_pool_or_the_slow_lane(logs: LogManager) -> None:
    log_a, log_b = filled(logs, "t1"), filled(logs, "t2")
    assert logs.log_dir_of("t1", 0) != logs.log_dir_of("t2", 0)
    registry = Registry()
    disk = pools(logs, registry)
    seen: list[str] = []

    def read(log: PartitionLog) -> FetchData:
        seen.append(threading.current_thread().name)
        return log.read(0, 1 << 20)

    async def run() -> None:
        for log in (log_a, log_b):
            state = disk.dir_of(log)
            assert state is not None
            await disk.read_pooled(state, lambda log=log: read(log), False)  # type: ignore[misc]
        state = disk.dir_of(log_a)
        assert state is not None
        await disk.read_pooled(state, lambda: read(log_a), True)
        await disk.flush(log_a)
        await disk.flush(log_b, slow_connection=True)

    asyncio.run(run())
    dir_a, dir_b = (str(logs.log_dir_of(t, 0)).rsplit("/", 1)[1] for t in ("t1", "t2"))
    assert [name.rsplit("_", 1)[0] for name in seen] == [f"disk-{dir_a}", f"disk-{dir_b}", "slow-fetch"]
    assert log_a.recovery_point == log_a.log_end_offset and log_b.recovery_point == log_b.log_end_offset
    text = registry.render()
    assert 'tidelog_disk_work_total{lane="slow",kind="flush"} 1' in text
    assert 'tidelog_disk_work_total{lane="dir",kind="read"} 2' in text
    disk.shutdown()


def test_a_roll_on_a_slow_dir_queues_its_snapshot_sync_on_that_dirs_pool(logs: LogManager) -> None:
    slowed = logs.create_log("rolls", 0, LogConfig(segment_bytes=300))
    registry = Registry()
    disk = pools(logs, registry, **{"tidelog.test.log.dir.read.delay": f"{logs.log_dir_of('rolls', 0)}:300"})
    logs.snapshot_syncer = disk.sync_snapshots_later
    synced_on: list[str] = []
    sync = slowed.sync_snapshots

    def traced() -> None:
        synced_on.append(threading.current_thread().name)
        sync()

    slowed.sync_snapshots = traced  # type: ignore[method-assign]
    started = time.perf_counter()
    for i in range(6):  # each append past 300 bytes rolls
        slowed.append_as_leader(build_batch([Record(0, NOW, None, b"x" * 200)], producer_id=3, producer_epoch=0,
                                            base_sequence=i), leader_epoch=0, now_ms=NOW)
    took = time.perf_counter() - started
    assert took < 0.25, f"the appends that rolled waited for the slow dir ({took:.2f} s)"
    assert len(slowed.snapshot_files()) >= 5
    deadline = time.monotonic() + 10
    while slowed._unsynced_snapshots and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not slowed._unsynced_snapshots, "the dir's pool made every rolled snapshot durable"
    dir_name = str(logs.log_dir_of("rolls", 0)).rsplit("/", 1)[1]
    assert synced_on and {name.rsplit("_", 1)[0] for name in synced_on} == {f"disk-{dir_name}"}
    assert 'tidelog_disk_work_total{lane="dir",kind="snapshot"}' in registry.render()

    disk.config.dynamic["tidelog.log.dir.io.threads"] = 0  # pools off: the roll syncs itself, as before
    disk.refresh()
    synced_on.clear()
    slowed.append_as_leader(build_batch([Record(0, NOW, None, b"x" * 200)], producer_id=3, producer_epoch=0,
                                        base_sequence=6), leader_epoch=0, now_ms=NOW)
    # (a sync job queued earlier may still run on the pool and find nothing left: not counted)
    assert [n for n in synced_on if not n.startswith("disk-")] == [threading.current_thread().name]
    assert not slowed._unsynced_snapshots
    disk.shutdown()


def test_produce_rolls_on_a_slow_dir_run_on_its_pool_in_order_while_the_loop_keeps_serving(logs: LogManager) -> None:
    slowed = logs.create_log("slowrolls", 0, LogConfig(segment_bytes=300))
    healthy = logs.create_log("healthy", 0, LogConfig())
    assert logs.log_dir_of("slowrolls", 0) != logs.log_dir_of("healthy", 0)
    registry = Registry()
    disk = pools(logs, registry, **{"tidelog.test.log.dir.read.delay": f"{logs.log_dir_of('slowrolls', 0)}:500"})
    completed_on: list[str] = []
    complete = slowed.complete_roll

    def traced(plan: object, **kwargs: bool) -> None:
        completed_on.append(threading.current_thread().name)
        complete(plan, **kwargs)  # type: ignore[arg-type]

    slowed.complete_roll = traced  # type: ignore[method-assign]

    async def produce(log: PartitionLog) -> int:
        batch = build_batch([Record(0, NOW, None, b"x" * 200)])
        await disk.roll_before_append(log, batch, NOW)
        return log.append_as_leader(batch, leader_epoch=0, now_ms=NOW).first_offset

    async def run() -> tuple[list[int], float, int]:
        stop = asyncio.Event()
        gaps: list[float] = []

        async def tick() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        healthy_appends = 0

        async def keep_producing() -> None:
            nonlocal healthy_appends
            while not stop.is_set():
                await produce(healthy)
                healthy_appends += 1
                await asyncio.sleep(0.002)

        other = asyncio.create_task(keep_producing())
        offsets = await asyncio.gather(*(produce(slowed) for _ in range(5)))  # racing appends to one partition
        stop.set()
        await asyncio.gather(ticker, other)
        return offsets, max(gaps), healthy_appends

    offsets, worst_gap, healthy_appends = asyncio.run(run())
    assert offsets == [0, 1, 2, 3, 4], "each append waited for the roll before it, in the order they came"
    assert len(slowed.segments) == 5 and len(completed_on) == 4, "every append after the first rolled"
    dir_name = str(logs.log_dir_of("slowrolls", 0)).rsplit("/", 1)[1]
    assert {name.rsplit("_", 1)[0] for name in completed_on} == {f"disk-{dir_name}"}
    # A roll on the loop would stall it 500 ms; 350 leaves room for a loaded scheduler (the suite runs at nice 19).
    assert worst_gap < 0.35, f"the loop stalled {worst_gap * 1000:.0f} ms during 2 s of slow rolls"
    assert healthy_appends > 20, "the healthy dir's partition was written meanwhile"
    deadline = time.monotonic() + 10  # the snapshots are written by pool jobs nobody awaits
    while len(slowed.snapshot_files()) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(slowed.snapshot_files()) == 4, "each roll's snapshot written by the dir's pool"
    assert 'tidelog_disk_work_total{lane="dir",kind="roll"} 4' in registry.render()

    disk.config.dynamic["tidelog.log.dir.io.threads"] = 0  # pools off: the roll waits on the loop, as before
    disk.refresh()
    started = time.perf_counter()
    asyncio.run(produce(slowed))
    assert time.perf_counter() - started >= 0.5 and len(slowed.segments) == 6
    disk.shutdown()


def test_a_connection_is_marked_slow_past_the_threshold_and_unmarked_below_half() -> None:
    marker = SlowMarker(BrokerConfig.from_properties({"tidelog.connection.slow.request.ms": "100"}), Registry())
    score = ConnectionScore()
    for _ in range(3):
        marker.observe(score, 0.010)
    assert not score.slow
    marker.observe(score, 2.0)  # one very slow request lifts the average past 100 ms
    assert score.slow and marker.marked == 1
    marker.observe(score, 0.010)
    assert score.slow, "not unmarked while the average is above half the threshold"
    for _ in range(20):
        marker.observe(score, 0.010)
    assert not score.slow and marker.marked == 0
    marker.observe(score, 2.0)
    marker.forget(score)  # the connection closed
    assert marker.marked == 0


def test_one_slow_first_request_does_not_mark_a_connection() -> None:
    marker = SlowMarker(BrokerConfig.from_properties({"tidelog.connection.slow.request.ms": "100"}), Registry())
    score = ConnectionScore()
    marker.observe(score, 1.0)
    assert not score.slow
    marker.observe(score, 1.0)
    marker.observe(score, 1.0)
    assert score.slow


def test_marking_is_off_at_zero() -> None:
    marker = SlowMarker(BrokerConfig.from_properties({"tidelog.connection.slow.request.ms": "0"}), Registry())
    score = ConnectionScore()
    for _ in range(5):
        marker.observe(score, 5.0)
    assert not score.slow and marker.marked == 0


def test_a_read_delay_entry_without_milliseconds_is_refused() -> None:
    setting = BROKER_SETTINGS["tidelog.test.log.dir.read.delay"]
    assert setting.validator is not None
    assert setting.validator(["/data/a:200"]) is None
    assert "expected <log dir>:<milliseconds>" in str(setting.validator(["/data/a"]))
