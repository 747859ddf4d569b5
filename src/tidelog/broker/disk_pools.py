"""Disk work off the event loop: one bounded thread pool per log dir, and slow lanes for slow connections.

One event loop serves every connection, so any call on it that waits for a disk (a ``pread`` of a
segment that is not in the page cache, an ``fsync``) holds up every client of the broker, whatever
disk their partitions live on. This module decides where the disk work of a request runs:

- **inline**, on the loop: a read of a *healthy* log dir that is *hot*: it starts in the active
  segment (just written), or in an older one that the page-cache estimate calls hot
  (``broker/read_throttle.py``: within ``MessageInRate x T`` of the log end); and every read at the
  log end (nothing to read, no file touched). This is the common case, a consumer keeping up, and it
  stays as it was: the bytes still go out with ``sendfile``. Followers' reads are not classified
  (replication stays inline unless the dir is slow).
- **the log dir's pool** (``tidelog.log.dir.io.threads`` threads per dir): cold reads, every read of a
  dir marked *slow*, produce's fsyncs (``flush.messages``/``flush.ms``), and the segment rolls of
  produce (``roll_before_append``: the new segment's files, the sealed segment's index writes, the
  producer-state snapshot and its fsyncs; storage/roll_plan.py). A roll is planned on the loop (no
  system call) and completed on the pool; the partition's appends await it, so they stay in order,
  while every other partition is served. The snapshot is written by a second pool job that nobody
  awaits. Followers' appends roll the same way (the replica fetcher's ``roll_ahead``). A roll made
  inside another kind of append (a transaction marker's, a coordinator's) still runs in that
  append, and only its snapshot fsyncs come here (``sync_snapshots_later``; storage/log.py, "Durability"). A pooled read does the
  whole disk part in the worker, the batch lookup and the ``pread`` of the bytes, so the response
  carries bytes and the loop never touches the file. A request that touches a slow dir then waits
  on that dir's threads only: requests for partitions on other dirs are served meanwhile.
- **the slow lanes** (``tidelog.slow.fetch.threads``, ``tidelog.slow.produce.threads``): the same
  work for a connection marked slow (``broker/slow_connections.py``), whatever its dir, so clients
  whose requests keep taking long do not take the dir pools' threads from the others.

Bounds: a dir's pool has ``tidelog.log.dir.io.threads`` threads; what waits for them is at most one
read or flush per connection (a connection's requests are served one at a time), so the queue is
bounded by the connections, and a waiting request holds nothing on the loop.

A dir is marked **slow** when one of its reads (inline or pooled, timed here) takes longer than
``tidelog.log.dir.slow.read.ms``, and unmarked when the moving average of its pooled reads has
fallen below half of that: the probe is the pooled reads themselves, so a dir recovers without a
read ever going back on the loop before it is fast. ``tidelog.log.dir.io.threads=0`` turns the
pools off: every read and flush is done as before this module existed (inline reads, flushes on the
loop's default executor).

Admin and coordinator work (group and transaction state flushes, topic creation) keeps the loop's
default executor, which no data request uses any more: it never queues behind produce flushes or
cold reads.

Test seam (clearly not for production): ``tidelog.test.log.dir.read.delay`` is a list of
``<log dir>:<ms>``; every read of that dir that finds bytes to return, and every flush, segment roll
and snapshot sync of it, sleeps that long first, where it runs (on the loop when inline). Disk
faults cannot be made on this VM (no device-mapper, no FUSE), and a sleep at the point the disk
would be waited on is what a slow disk does to the broker.

Settings are read once per second (``refresh``), not per request. Metrics:
``tidelog_log_dir_slow{dir}`` (1 while marked), ``tidelog_log_dir_read_ms{dir}`` (moving average),
``tidelog_disk_work_total{lane,kind}`` (lane: inline, dir, slow).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tidelog.broker.slow_connections import SlowMarker
from tidelog.common.config import BrokerConfig
from tidelog.observability.registry import Registry
from tidelog.storage.log import Buffer, FetchData, PartitionLog, PreparedAppend
from tidelog.storage.manager import LogManager

log = logging.getLogger(__name__)

T = TypeVar("T")
EWMA_WEIGHT = 0.3  # share of the newest read in a dir's moving average


@dataclass(slots=True)
class DirState:
    path: Path
    pool: ThreadPoolExecutor | None = None
    slow: bool = False
    read_ms: float = 0.0  # moving average of this dir's timed reads
    delay_s: float = 0.0  # the test seam's injected latency
    label: tuple[str] = field(default=("",))


@dataclass(slots=True)
class PooledRead:
    """What a read done off the loop hands back: the storage answer and its bytes, already read."""

    data: FetchData
    payload: bytes


class DiskPools:
    def __init__(self, config: BrokerConfig, logs: LogManager, registry: Registry) -> None:
        self.config = config
        self.logs = logs
        self._dirs: dict[Path, DirState] = {}
        self._by_log: dict[Path, DirState] = {}
        self.threads = 0
        self.slow_read_s = 0.05
        self._slow_fetch: ThreadPoolExecutor | None = None
        self._slow_produce: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._rolls: dict[PartitionLog, asyncio.Future[None]] = {}  # rolls in flight on the pools
        self.m_slow = registry.gauge("tidelog_log_dir_slow", "1 while the log dir is marked slow (its reads all go to its pool).", ("dir",))
        self.m_read_ms = registry.gauge("tidelog_log_dir_read_ms", "Moving average of the log dir's timed reads, in ms.", ("dir",))
        self.marker = SlowMarker(config, registry)
        self.m_work = registry.counter("tidelog_disk_work_total", "Disk work by where it ran (inline on the event loop, the log dir's pool, a slow lane).", ("lane", "kind"))
        self.refresh()

    # -- settings ---------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Take the settings (they are dynamic); pools are made on first use and kept."""
        c = self.config
        self._by_log.clear()
        self.threads = c.get_int("tidelog.log.dir.io.threads")
        self.slow_read_s = c.get_int("tidelog.log.dir.slow.read.ms") / 1000
        if hasattr(self, "marker"):
            self.marker.refresh()
        delays = _parse_delays(c.get("tidelog.test.log.dir.read.delay"))
        for d in self.logs.dirs:
            state = self._state(d.path)
            state.delay_s = delays.get(str(d.path), delays.get(str(d.path.resolve()), 0.0))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.refresh()

    def shutdown(self) -> None:
        pools = [d.pool for d in self._dirs.values()] + [self._slow_fetch, self._slow_produce]
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def _state(self, path: Path) -> DirState:
        state = self._dirs.get(path)
        if state is None:
            state = self._dirs[path] = DirState(path, label=(str(path),))
        return state

    def dir_of(self, plog: PartitionLog) -> DirState | None:
        # Keyed by the partition's own directory (whose parent is its log dir, so a moved log is a
        # new key): one dict lookup per read instead of the log manager's lock. Cleared by refresh.
        state = self._by_log.get(plog.dir)
        if state is None:
            path = self.logs.log_dir_of(plog.topic, plog.partition)
            state = None if path is None else self._dirs.get(path)
            if state is not None:
                self._by_log[plog.dir] = state
        return state

    # -- reads ------------------------------------------------------------------------------------

    def offloaded(self, state: DirState | None, cold: bool, slow_connection: bool) -> bool:
        """Whether a read that finds bytes must run off the loop."""
        return self.threads > 0 and state is not None and (cold or state.slow or slow_connection)

    def read_inline(self, state: DirState | None, read: Callable[[], FetchData]) -> FetchData:
        """A hot read on the loop, timed: one over ``tidelog.log.dir.slow.read.ms`` marks its dir slow."""
        if state is None:
            return read()
        started = time.perf_counter()
        data = read()
        if data.ranges:
            if state.delay_s:
                time.sleep(state.delay_s)  # the test seam: a slow disk, waited for on the loop
            took = time.perf_counter() - started
            if took > self.slow_read_s:
                self._timed(state, took, pooled=False)
        return data

    async def read_pooled(self, state: DirState, read: Callable[[], FetchData], slow_connection: bool) -> PooledRead:
        """The read and its bytes on the dir's pool (a slow connection's on the slow fetch lane)."""
        pool = self._slow_pool("fetch") if slow_connection else self._dir_pool(state)
        self.m_work.inc(("slow" if slow_connection else "dir", "read"))
        delay = state.delay_s

        def work() -> tuple[PooledRead, float]:
            started = time.perf_counter()
            data = read()
            if data.ranges and delay:
                time.sleep(delay)
            payload = data.read_bytes() if data.ranges else b""
            return PooledRead(data, payload), time.perf_counter() - started

        result, took = await asyncio.get_running_loop().run_in_executor(pool, work)
        if result.data.ranges:
            self._timed(state, took, pooled=True)
        return result

    def _timed(self, state: DirState, took_s: float, *, pooled: bool) -> None:
        took_ms = took_s * 1000
        state.read_ms = took_ms if not state.read_ms else (1 - EWMA_WEIGHT) * state.read_ms + EWMA_WEIGHT * took_ms
        self.m_read_ms.set(state.label, state.read_ms)
        threshold_ms = self.slow_read_s * 1000
        if not state.slow and took_ms > threshold_ms:
            state.slow = True
            self.m_slow.set(state.label, 1)
            log.warning("log dir %s is slow (a read took %.0f ms): its reads now run on its own pool", state.path, took_ms)
        elif state.slow and pooled and state.read_ms < threshold_ms / 2:
            state.slow = False
            self.m_slow.set(state.label, 0)
            log.info("log dir %s is fast again (reads average %.1f ms)", state.path, state.read_ms)

    # -- flushes ----------------------------------------------------------------------------------

    async def flush(self, plog: PartitionLog, slow_connection: bool = False) -> None:
        """``plog.flush`` (fsync) on its dir's pool, or the slow produce lane."""
        loop = asyncio.get_running_loop()
        state = self.dir_of(plog)
        if self.threads <= 0 or state is None:
            await loop.run_in_executor(None, plog.flush)
            return
        pool = self._slow_pool("produce") if slow_connection else self._dir_pool(state)
        self.m_work.inc(("slow" if slow_connection else "dir", "flush"))
        delay = state.delay_s

        def work() -> None:
            if delay:
                time.sleep(delay)
            plog.flush()

        await loop.run_in_executor(pool, work)

    # -- rolls ------------------------------------------------------------------------------------

    async def roll_before_append(self, plog: PartitionLog, records: Buffer | PreparedAppend, now_ms: int) -> None:
        """Before ``records`` are appended to ``plog`` on the loop: wait for the partition's roll in
        flight, if any; if the append would roll, roll on the log dir's pool and wait for that. The
        caller appends right after, with no await in between, so no append of the partition can
        overtake a roll. Raises the roll's error (KAFKA_STORAGE_ERROR). With the pools off the append
        rolls inline, as before (the test seam's delay is then slept here, on the loop)."""
        state = self.dir_of(plog)
        if state is None:
            return
        while (running := self._rolls.get(plog)) is not None:
            await asyncio.wait([running])  # not cancelled with this request: others wait on it too
        if not plog.would_roll(records, now_ms):
            return
        if self.threads <= 0:
            if state.delay_s:
                time.sleep(state.delay_s)  # the test seam: a slow disk's roll, waited for on the loop
            return
        plan = plog.begin_roll(now_ms)
        if plan is None:
            return
        delay = state.delay_s

        def work() -> None:
            if delay:
                time.sleep(delay)
            plog.complete_roll(plan, write_snapshot=False)

        def write_snapshot() -> None:
            if delay:
                time.sleep(delay)
            plog.write_pending_snapshots()

        loop = asyncio.get_running_loop()
        pool = self._dir_pool(state)
        try:
            future = loop.run_in_executor(pool, work)
        except RuntimeError:  # shut down: the append settles the plan itself
            return
        self.m_work.inc(("dir", "roll"))
        self._rolls[plog] = future
        future.add_done_callback(functools.partial(self._roll_done, plog))
        await asyncio.wait([future])
        if future.cancelled():  # by shutdown: the append settles the plan itself
            return
        future.result()
        # The snapshot (written, fsynced, renamed, the directory fsynced) is not awaited: the
        # partition's appends go on meanwhile, as they did when a roll only queued its fsyncs.
        try:
            pool.submit(write_snapshot).add_done_callback(functools.partial(_report_sync, plog))
        except RuntimeError:
            return  # shut down: the log's clean close (a flush) writes it

    def _roll_done(self, plog: PartitionLog, future: asyncio.Future[None]) -> None:
        if self._rolls.get(plog) is future:
            del self._rolls[plog]
        if not future.cancelled():
            future.exception()  # retrieved here: a waiter that went away must not leave it unreported

    # -- snapshots of rolls -----------------------------------------------------------------------

    def sync_snapshots_later(self, plog: PartitionLog) -> bool:
        """The log manager's ``snapshot_syncer``: a roll of ``plog`` wrote its producer-state snapshot
        without fsync; make it durable (``plog.sync_snapshots``) on the log's dir pool. Called by the
        roll with the log's lock held, on whatever thread rolled: it only queues the work. False when
        the pools are off or shut down (the roll then syncs itself, as before)."""
        state = self.dir_of(plog)
        if self.threads <= 0 or state is None:
            return False
        delay = state.delay_s

        def work() -> None:
            if delay:
                time.sleep(delay)
            plog.sync_snapshots()

        try:
            future = self._dir_pool(state).submit(work)
        except RuntimeError:  # shut down: the log's clean close (a flush) makes it durable
            return False
        self.m_work.inc(("dir", "snapshot"))
        future.add_done_callback(functools.partial(_report_sync, plog))
        return True

    # -- pools ------------------------------------------------------------------------------------

    def _dir_pool(self, state: DirState) -> ThreadPoolExecutor:
        if state.pool is None:
            with self._pool_lock:  # rolls ask from any thread
                if state.pool is None:
                    name = state.path.name or "dir"
                    state.pool = ThreadPoolExecutor(max(1, self.threads), thread_name_prefix=f"disk-{name}")
        return state.pool

    def _slow_pool(self, kind: str) -> ThreadPoolExecutor:
        if kind == "fetch":
            if self._slow_fetch is None:
                threads = max(1, self.config.get_int("tidelog.slow.fetch.threads"))
                self._slow_fetch = ThreadPoolExecutor(threads, thread_name_prefix="slow-fetch")
            return self._slow_fetch
        if self._slow_produce is None:
            threads = max(1, self.config.get_int("tidelog.slow.produce.threads"))
            self._slow_produce = ThreadPoolExecutor(threads, thread_name_prefix="slow-produce")
        return self._slow_produce


def _report_sync(plog: PartitionLog, future: Future[None]) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        # sync_snapshots took the dir offline for an I/O error; the log says so on its next use
        log.error("making %s-%d's rolled snapshot durable failed: %s", plog.topic, plog.partition, exc)


def _parse_delays(value: object) -> dict[str, float]:
    """``["/data/a:200", ...]`` → {"/data/a": 0.2}; the dir is everything before the last colon."""
    delays: dict[str, float] = {}
    items = value if isinstance(value, list) else [p for p in str(value or "").split(",") if p]
    for item in items:
        path, _, ms = str(item).strip().rpartition(":")
        if path and ms.strip().isdigit():
            delays[path] = int(ms) / 1000
    return delays
