"""The log manager: every partition log of a broker, across its log dirs, and their schedules.

Each log dir holds one directory per partition (``<topic>-<partition>``, see log.py) plus::

    recovery-point-offset-checkpoint   offsets below which each partition is fsynced (checkpoint.py)
    log-start-offset-checkpoint        each partition's log start offset (checkpoint.py)
    replication-offset-checkpoint      each partition's high watermark (clusters only: written when
                                       the high watermark does not simply follow the log end)
    scrubber-checkpoint                the scrubber's pass and cursor per partition (scrubber.py)
    .kafka_cleanshutdown               present only between a clean shutdown and the next start
    <topic>-<partition>.<32 hex>-delete   a deleted partition whose files are being removed
    <topic>-<partition>.<32 hex>-future   a replica being moved here from another dir (dir_mover.py)

Start: logs of all dirs open concurrently (``num.recovery.threads.per.data.dir`` threads per dir). A
dir without the clean-shutdown marker is recovered (every segment after the recovery point scanned);
the marker is removed once the dir is loaded, so a later crash is seen as unclean.

Background (:meth:`LogManager.start_background`), each in its own daemon thread:

* retention every ``log.retention.check.interval.ms``: retention.ms / retention.bytes / log start,
  deferred deletion of ``.deleted`` files, producer-id expiry;
* flusher every ``log.flush.scheduler.interval.ms`` (at most 1 s): fsyncs each log whose ``flush.ms``
  elapsed since its last flush;
* checkpoints every ``log.flush.offset.checkpoint.interval.ms``: both offset checkpoint files;
* the cleaner every ``log.cleaner.backoff.ms`` (when ``log.cleaner.enable`` and cleaner.py is present);
* the scrubber (when ``log.scrubber.enable``): re-verifies closed segments at
  ``log.scrubber.bytes.per.second`` and records damaged ranges (scrubber.py, damage.py).

Moves between dirs (AlterReplicaLogDirs): :meth:`LogManager.alter_log_dir` creates the future
replica; the ``log-dir-mover`` thread (or :meth:`LogManager.run_moves`) copies and swaps; see
dir_mover.py for the steps and what a restart does with a move it interrupted.

Failures: an I/O error other than ENOSPC on a log takes its whole log dir offline; its partitions then
raise StorageError (KAFKA_STORAGE_ERROR) while other dirs keep working. ENOSPC fails only the append
that hit it (KafkaError KAFKA_STORAGE_ERROR); the partial write is cut back, the dir stays online, and
appends succeed again once space returns.

Producer-state snapshots written by segment rolls are made durable by ``snapshot_syncer`` when one
is set (the broker sets its disk pools: the fsyncs run on the partition's log dir pool, not in the
append); without one the roll makes them durable itself (log.py, "Durability").

Thread-safety: a manager lock guards the log map and dir states; each log has its own lock.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidelog.common.config import BrokerConfig
from tidelog.common.errors import ErrorCode, KafkaError, StorageError
from tidelog.storage import dir_mover
from tidelog.storage.checkpoint import CheckpointError, OffsetCheckpointFile, fsync_dir
from tidelog.storage.dir_mover import FUTURE_SUFFIX, is_future_dir
from tidelog.storage.log import PartitionLog, parse_dir_name
from tidelog.storage.log_config import LogConfig
from tidelog.storage.scrubber import Scrubber

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
DELETE_SUFFIX = "-delete"
_NEVER = 2**63 - 1
MOVE_INTERVAL_MS = 100  # the log-dir-mover's pass; each copies at most rate * interval bytes


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class LogDirInfo:
    """DescribeLogDirs' view of one log dir."""

    path: Path
    offline: bool
    partition_sizes: dict[tuple[str, int], int] = field(default_factory=dict)
    error: str | None = None
    total_bytes: int = -1
    usable_bytes: int = -1
    # future replicas being copied into this dir: partition → (size, offsets still to copy)
    futures: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)


@dataclass
class _LogDir:
    path: Path
    offline: bool = False
    error: str | None = None
    clean: bool = False


class _Periodic(threading.Thread):
    """Runs ``fn`` every ``interval_s`` until stopped; exceptions are logged, never fatal."""

    def __init__(self, name: str, interval_s: float, fn: Callable[[], object], stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.interval_s = interval_s
        self.fn = fn
        self.stop_event = stop

    def run(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            try:
                self.fn()
            except Exception:
                log.exception("background task %s failed", self.name)


def _is_partition_dir(path: Path) -> bool:
    if not path.is_dir() or path.name.endswith((DELETE_SUFFIX, FUTURE_SUFFIX)):
        return False
    try:
        parse_dir_name(path.name)
    except ValueError:
        return False
    return True


class LogManager:
    """All partition logs of one broker (see the module docstring)."""

    def __init__(
        self,
        log_dirs: Iterable[Path],
        *,
        default_config: LogConfig | None = None,
        retention_check_interval_ms: int = 300_000,
        flush_scheduler_interval_ms: int = _NEVER,
        checkpoint_interval_ms: int = 60_000,
        recovery_threads_per_dir: int = 2,
        cleaner_enable: bool = True,
        cleaner_backoff_ms: int = 15_000,
        producer_id_expiration_ms: int = 86_400_000,
        hw_follows_leo: bool = True,
        scrubber_enable: bool = True,
        scrubber_bytes_per_second: int = 10 * 1024 * 1024,
        scrubber_interval_ms: int = 7 * 86_400_000,
        clock: Callable[[], int] = _now_ms,
        move_bytes_per_second: Callable[[], int] = lambda: _NEVER,
    ) -> None:
        self.dirs = [_LogDir(Path(p)) for p in log_dirs]
        if not self.dirs:
            raise ValueError("at least one log dir is needed")
        self.default_config = default_config or LogConfig()
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_scheduler_interval_ms = flush_scheduler_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.recovery_threads_per_dir = recovery_threads_per_dir
        self.cleaner_enable = cleaner_enable
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.hw_follows_leo = hw_follows_leo
        self.clock = clock
        self.scrubber_enable = scrubber_enable
        # Where rolls' snapshot fsyncs run (PartitionLog.sync_snapshots); None: in the roll itself.
        self.snapshot_syncer: Callable[[PartitionLog], bool] | None = None
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._log_dir: dict[tuple[str, int], _LogDir] = {}
        self._stop = threading.Event()
        self.scrubber = Scrubber(self._scrubbed_logs, bytes_per_second=scrubber_bytes_per_second,
                                 interval_ms=scrubber_interval_ms, stop=self._stop, clock_ms=clock)
        self._threads: list[threading.Thread] = []
        self._cleaner: Any = None
        self._started = False
        self.move_bytes_per_second = move_bytes_per_second
        self._futures: dict[tuple[str, int], tuple[_LogDir, PartitionLog]] = {}
        self._move_credit = 0  # bytes the mover may still copy (negative: it copied ahead of the rate)

    @classmethod
    def from_broker_config(
        cls, log_dirs: list[Path], config: BrokerConfig, **overrides: object
    ) -> LogManager:
        """Build from broker keys; ``overrides`` (constructor keywords) win."""

        def num(key: str) -> int:
            return config.get_int(key)

        flush_ms = min(num("log.flush.scheduler.interval.ms"), num("log.flush.interval.ms"))
        kwargs: dict[str, object] = {
            "retention_check_interval_ms": num("log.retention.check.interval.ms"),
            "flush_scheduler_interval_ms": flush_ms,
            "checkpoint_interval_ms": num("log.flush.offset.checkpoint.interval.ms"),
            "recovery_threads_per_dir": num("num.recovery.threads.per.data.dir"),
            "cleaner_enable": bool(config.get("log.cleaner.enable")),
            "cleaner_backoff_ms": num("log.cleaner.backoff.ms"),
            "producer_id_expiration_ms": num("producer.id.expiration.ms"),
            "scrubber_enable": bool(config.get("log.scrubber.enable")),
            "scrubber_bytes_per_second": num("log.scrubber.bytes.per.second"),
            "scrubber_interval_ms": num("log.scrubber.interval.ms"),
            "move_bytes_per_second": lambda: config.get_int("replica.alter.log.dirs.io.max.bytes.per.second"),
        }
        kwargs.update(overrides)
        return cls(log_dirs, **kwargs)  # type: ignore[arg-type]

    # -- start ----------------------------------------------------------------------------------

    def startup(self, config_for: Callable[[str], LogConfig] | None = None) -> None:
        """Open every log found in the log dirs, concurrently; recover unclean ones."""
        get_config = config_for or (lambda _topic: self.default_config)
        jobs: list[tuple[_LogDir, Path, int, int, int | None]] = []
        future_dirs: list[tuple[_LogDir, Path]] = []
        for d in self.dirs:
            try:
                d.path.mkdir(parents=True, exist_ok=True)
                d.clean = (d.path / CLEAN_SHUTDOWN_MARKER).exists()
                points = self._read_checkpoint(d.path / RECOVERY_POINT_CHECKPOINT)
                starts = self._read_checkpoint(d.path / LOG_START_CHECKPOINT)
                marks = {} if self.hw_follows_leo else self._read_checkpoint(d.path / HIGH_WATERMARK_CHECKPOINT)
                for child in sorted(d.path.iterdir()):
                    if child.is_dir() and child.name.endswith(DELETE_SUFFIX):
                        threading.Thread(target=shutil.rmtree, args=(child, True), daemon=True).start()
                    elif is_future_dir(child):
                        future_dirs.append((d, child))
                    elif _is_partition_dir(child):
                        key = parse_dir_name(child.name)
                        jobs.append((d, child, points.get(key, 0), starts.get(key, 0), marks.get(key)))
            except OSError as exc:
                self._take_offline(d, exc)
        # Opening a cleanly shut down log is pure-Python bookkeeping: threads would only fight over the
        # GIL (measured: 10,000 logs in 4 s on one thread, 10 s on two). Recovery is I/O and CRC
        # work in C, which threads do overlap.
        recovering = any(not d.clean for d in self.dirs)
        workers = max(1, self.recovery_threads_per_dir * len(self.dirs)) if recovering else 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-recovery") as pool:
            futures = [
                (d, path, pool.submit(self._open_log, d, path, get_config(parse_dir_name(path.name)[0]), rp, ls, hw))
                for d, path, rp, ls, hw in jobs
            ]
            for d, path, future in futures:
                try:
                    opened = future.result()
                except OSError as exc:
                    self._take_offline(d, exc)
                    continue
                except Exception:
                    log.exception("could not open log %s", path)
                    continue
                key = (opened.topic, opened.partition)
                with self._lock:
                    if key in self._logs:
                        log.error("partition %s-%d found in two log dirs; keeping %s", *key, self._log_dir[key].path)
                        opened.close(clean=False)
                        continue
                    self._logs[key] = opened
                    self._log_dir[key] = d
        for d, path in future_dirs:
            self._resume_move(d, path, get_config)
        for d in self.dirs:
            if d.offline:
                continue
            try:
                (d.path / CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
                fsync_dir(d.path)
            except OSError as exc:
                self._take_offline(d, exc)
        self.write_checkpoints()
        self._started = True

    def _read_checkpoint(self, path: Path) -> dict[tuple[str, int], int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CheckpointError:
            log.warning("ignoring unreadable checkpoint %s", path)
            return {}

    def _open_log(
        self, d: _LogDir, path: Path, config: LogConfig, recovery_point: int, log_start: int, high_watermark: int | None,
    ) -> PartitionLog:
        return PartitionLog(
            path, config, recovery_point=recovery_point, log_start_offset=log_start, clean_shutdown=d.clean,
            producer_id_expiration_ms=self.producer_id_expiration_ms, hw_follows_leo=self.hw_follows_leo,
            high_watermark=high_watermark,
            now_ms=self.clock(), on_io_error=self._on_io_error, on_roll_snapshot=self._on_roll_snapshot,
        )  # fmt: skip

    def _on_roll_snapshot(self, rolled: PartitionLog) -> bool:
        """A roll wrote its snapshot without fsync: hand ``rolled.sync_snapshots`` to the syncer (the
        broker's disk pools); False (no syncer, or it declined) and the roll syncs at once."""
        syncer = self.snapshot_syncer
        return syncer is not None and syncer(rolled)

    # -- failures -------------------------------------------------------------------------------

    def _on_io_error(self, failed: PartitionLog, exc: OSError) -> None:
        with self._lock:
            d = self._log_dir.get((failed.topic, failed.partition))
        if d is not None:
            self._take_offline(d, exc)

    def _take_offline(self, d: _LogDir, exc: OSError) -> None:
        with self._lock:
            if d.offline:
                return
            d.offline = True
            d.error = f"{type(exc).__name__}: {exc}"
            for key, owner in self._log_dir.items():
                if owner is d:
                    self._logs[key].offline = True
        log.error("log dir %s is offline: %s", d.path, d.error)

    # -- logs -----------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def all_partitions(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._logs)

    def all_logs(self) -> list[PartitionLog]:
        with self._lock:
            return [self._logs[k] for k in sorted(self._logs)]

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        """The partition's log, created in the least-loaded online dir if it does not exist."""
        return self.create_logs(topic, [partition], config)[0]

    def create_logs(self, topic: str, partitions: Iterable[int], config: LogConfig | None = None) -> list[PartitionLog]:
        """Logs of several partitions of ``topic`` (existing ones returned as they are), each new one
        in the least-loaded online dir; every dir that got a new log is fsynced once at the end."""
        with self._lock:
            online = [d for d in self.dirs if not d.offline]
            counts = {id(d): 0 for d in online}
            for owner in self._log_dir.values():
                if id(owner) in counts:
                    counts[id(owner)] += 1
            touched: dict[int, _LogDir] = {}
            logs: list[PartitionLog] = []
            for partition in partitions:
                key = (topic, partition)
                existing = self._logs.get(key)
                if existing is not None:
                    logs.append(existing)
                    continue
                if not online:
                    raise StorageError("every log dir is offline")
                d = min(online, key=lambda x: counts[id(x)])
                try:
                    created = self._open_log(d, d.path / f"{topic}-{partition}", config or self.default_config, 0, 0, None)
                except OSError as exc:
                    self._take_offline(d, exc)
                    raise StorageError(f"cannot create {topic}-{partition} in {d.path}: {exc}") from exc
                self._logs[key] = created
                self._log_dir[key] = d
                counts[id(d)] += 1
                touched[id(d)] = d
                logs.append(created)
            for d in touched.values():
                try:
                    fsync_dir(d.path)  # the new partition folders are durable names from here on
                except OSError as exc:
                    self._take_offline(d, exc)
                    raise StorageError(f"cannot create logs of {topic} in {d.path}: {exc}") from exc
            return logs

    def delete_log(self, topic: str, partition: int) -> None:
        """Close the log, rename its dir ``<topic>-<p>.<uuid>-delete`` and remove it in the background."""
        key = (topic, partition)
        self._cancel_move(key)
        with self._lock:
            doomed = self._logs.pop(key, None)
            d = self._log_dir.pop(key, None)
        if doomed is None or d is None:
            return
        doomed.close(clean=False)
        if d.offline:
            return
        self._discard(d, doomed)

    def _discard(self, d: _LogDir, doomed: PartitionLog) -> None:
        """Rename a closed log's dir ``<topic>-<p>.<uuid>-delete`` and remove it in the background."""
        target = doomed.dir.with_name(f"{doomed.topic}-{doomed.partition}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            os.replace(doomed.dir, target)
            fsync_dir(d.path)
        except OSError as exc:
            self._take_offline(d, exc)
            return
        threading.Thread(target=shutil.rmtree, args=(target, True), name="delete-log", daemon=True).start()

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Apply new settings to every partition of ``topic`` (takes effect on the next operation)."""
        with self._lock:
            for (t, _), partition_log in self._logs.items():
                if t == topic:
                    partition_log.config = config

    # -- schedules ------------------------------------------------------------------------------

    def _online_logs(self) -> list[PartitionLog]:
        return [pl for pl in self.all_logs() if not pl.offline]

    def run_retention(self) -> int:
        """One retention pass over every log; returns the number of segments removed."""
        now = self.clock()
        removed = 0
        for pl in self._online_logs():
            try:
                removed += pl.apply_retention(now)
                pl.delete_expired_files(now)
                pl.remove_expired_producers(now)
            except KafkaError as exc:
                log.warning("retention of %s failed: %s", pl.dir.name, exc)
        return removed

    def run_flusher(self) -> int:
        """fsync every log whose ``flush.ms`` elapsed since its last flush; return how many."""
        now = self.clock()
        flushed = 0
        for pl in self._online_logs():
            if pl.flush_due(now):
                try:
                    pl.flush(now)
                    flushed += 1
                except KafkaError as exc:
                    log.warning("flush of %s failed: %s", pl.dir.name, exc)
        return flushed

    def write_checkpoints(self) -> None:
        """Write both offset checkpoint files in every online dir."""
        with self._lock:
            by_dir: dict[int, list[PartitionLog]] = {id(d): [] for d in self.dirs}
            for key, d in self._log_dir.items():
                by_dir[id(d)].append(self._logs[key])
        for d in self.dirs:
            if d.offline:
                continue
            logs = by_dir[id(d)]
            try:
                OffsetCheckpointFile(d.path / RECOVERY_POINT_CHECKPOINT).write(
                    {(pl.topic, pl.partition): pl.recovery_point for pl in logs}
                )
                OffsetCheckpointFile(d.path / LOG_START_CHECKPOINT).write(
                    {(pl.topic, pl.partition): pl.log_start_offset for pl in logs}
                )
                if not self.hw_follows_leo:
                    OffsetCheckpointFile(d.path / HIGH_WATERMARK_CHECKPOINT).write(
                        {(pl.topic, pl.partition): pl.high_watermark for pl in logs}
                    )
            except OSError as exc:
                self._take_offline(d, exc)

    def run_cleaner(self) -> None:
        """One pass of the log cleaner over compacted logs (when cleaner.py is present)."""
        if self._cleaner is None:
            try:
                module = importlib.import_module("tidelog.storage.cleaner")
            except ModuleNotFoundError:
                return
            self._cleaner = module.LogCleaner()
        compacted = [pl for pl in self._online_logs() if pl.config.compact]
        self._cleaner.run_once(compacted, self.clock())

    def start_background(self) -> None:
        """Start the retention, flusher, checkpoint and cleaner threads."""
        if self._threads:
            return
        self._stop.clear()
        tasks: list[tuple[str, int, Callable[[], object]]] = [
            ("log-retention", self.retention_check_interval_ms, self.run_retention),
            ("log-flusher", min(self.flush_scheduler_interval_ms, 1000), self.run_flusher),
            ("log-checkpoints", self.checkpoint_interval_ms, self.write_checkpoints),
        ]
        if self.cleaner_enable:
            tasks.append(("log-cleaner", self.cleaner_backoff_ms, self.run_cleaner))
        tasks.append(("log-dir-mover", MOVE_INTERVAL_MS, self._move_tick))
        for name, interval_ms, fn in tasks:
            thread = _Periodic(name, interval_ms / 1000, fn, self._stop)
            thread.start()
            self._threads.append(thread)
        if self.scrubber_enable:
            scrub = threading.Thread(target=self.scrubber.run, name="log-scrubber", daemon=True)
            scrub.start()
            self._threads.append(scrub)

    def _scrubbed_logs(self) -> list[tuple[Path, PartitionLog]]:
        """(log dir, log) of every log in an online dir, for the scrubber."""
        with self._lock:
            return [(d.path, self._logs[key]) for key, d in sorted(self._log_dir.items(), key=lambda kv: kv[0])
                    if not d.offline]

    def _move_tick(self) -> None:
        """One mover pass within ``replica.alter.log.dirs.io.max.bytes.per.second``: a pass earns
        rate * interval bytes (saved up to one second's worth) and pays for what it copied, whole
        batches included, so batches larger than a pass's share still average out to the rate."""
        rate = self.move_bytes_per_second()
        if rate >= _NEVER:
            self._move_credit = 0
            self.run_moves()
            return
        self._move_credit = min(rate, self._move_credit + rate * MOVE_INTERVAL_MS // 1000)
        if self._move_credit > 0:
            self._move_credit -= self.run_moves(self._move_credit)

    def stop_background(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()

    def shutdown(self) -> None:
        """Stop schedules, flush and close every log, write checkpoints and the clean-shutdown marker."""
        self.stop_background()

        def close(pl: PartitionLog) -> None:
            with contextlib.suppress(OSError, KafkaError):
                pl.close(clean=True)

        # Closing is mostly fsync, which releases the GIL: several threads overlap the disk waits.
        with self._lock:
            futures = [future for _d, future in self._futures.values()]
            self._futures.clear()
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="log-close") as pool:
            list(pool.map(close, self.all_logs() + futures))
        self.write_checkpoints()
        for d in self.dirs:
            if d.offline:
                continue
            try:
                marker = d.path / CLEAN_SHUTDOWN_MARKER
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.fsync(fd)
                os.close(fd)
                fsync_dir(d.path)
            except OSError as exc:
                self._take_offline(d, exc)
        with self._lock:
            self._logs.clear()
            self._log_dir.clear()

    # -- description ----------------------------------------------------------------------------

    def describe_log_dirs(self) -> list[LogDirInfo]:
        with self._lock:
            owned = [(key, d, self._logs[key]) for key, d in self._log_dir.items()]
            moving = [(key, d, future) for key, (d, future) in self._futures.items()]
        out = []
        for d in self.dirs:
            info = LogDirInfo(d.path, d.offline, error=d.error)
            if not d.offline:
                info.partition_sizes = {key: pl.size_bytes for key, owner, pl in owned if owner is d}
                info.futures = {key: (future.size_bytes, self._move_lag(key, future)) for key, owner, future in moving if owner is d}
                with contextlib.suppress(OSError):
                    usage = shutil.disk_usage(d.path)
                    info.total_bytes, info.usable_bytes = usage.total, usage.free
            out.append(info)
        return out

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        with self._lock:
            d = self._log_dir.get((topic, partition))
            return d.path if d else None

    def check_online(self, topic: str, partition: int) -> None:
        """Raise StorageError if the partition's dir is offline, KafkaError if it is unknown."""
        with self._lock:
            d = self._log_dir.get((topic, partition))
        if d is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        if d.offline:
            raise StorageError(f"log dir {d.path} is offline")

    # -- moves between log dirs (dir_mover.py) ---------------------------------------------------

    def _dir_named(self, path: str) -> _LogDir:
        """The configured log dir at ``path``; LOG_DIR_NOT_FOUND when it is not one of log.dirs."""
        wanted = os.path.abspath(path)
        for d in self.dirs:
            if os.path.abspath(d.path) == wanted:
                return d
        raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"Log dir {path} is not configured in log.dirs")

    def alter_log_dir(self, topic: str, partition: int, path: str) -> None:
        """Move the partition's replica to the log dir ``path`` (Kafka's AlterReplicaLogDirs, one partition).

        Errors: LOG_DIR_NOT_FOUND (not one of log.dirs), KAFKA_STORAGE_ERROR (that dir or the replica's
        is offline), REPLICA_NOT_AVAILABLE (no replica of the partition here). The replica's own dir
        cancels a move in progress; a move to another dir replaces it.
        """
        key = (topic, partition)
        dest = self._dir_named(path)
        if dest.offline:
            raise StorageError(f"Log dir {dest.path} is offline")
        with self._lock:
            current = self._logs.get(key)
            home = self._log_dir.get(key)
            moving = self._futures.get(key)
        if current is None or home is None:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"Replica of {topic}-{partition} is not on this broker")
        if home.offline:
            raise StorageError(f"Partition {topic}-{partition} is offline")
        if moving is not None and moving[0] is dest:
            return
        self._cancel_move(key)
        if home is dest:
            return
        future_dir = dest.path / f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"
        try:
            future = self._open_future(dest, future_dir, current.config)
            fsync_dir(dest.path)
        except OSError as exc:
            self._take_offline(dest, exc)
            raise StorageError(f"cannot create {future_dir}: {exc}") from exc
        with self._lock:
            self._futures[key] = (dest, future)
        log.info("moving %s-%d from %s to %s", topic, partition, home.path, dest.path)

    def _open_future(self, d: _LogDir, path: Path, config: LogConfig) -> PartitionLog:
        future = self._open_log(d, path, config, 0, 0, None)
        # An I/O error on the copy takes the destination offline, not the dir of the partition's log.
        future.on_io_error = lambda _failed, exc: self._take_offline(d, exc)
        return future

    def moves(self) -> dict[tuple[str, int], Path]:
        """Partitions being moved, with their destination dir."""
        with self._lock:
            return {key: d.path for key, (d, _f) in self._futures.items()}

    def _move_lag(self, key: tuple[str, int], future: PartitionLog) -> int:
        current = self.get_log(*key)
        return 0 if current is None else max(0, current.log_end_offset - future.log_end_offset)

    def _cancel_move(self, key: tuple[str, int]) -> None:
        with self._lock:
            moving = self._futures.pop(key, None)
        if moving is None:
            return
        d, future = moving
        future.close(clean=False)
        if not d.offline:
            self._discard(d, future)

    def run_moves(self, budget: int = _NEVER) -> int:
        """One pass of every move: copy up to ``budget`` bytes in all, swap the caught-up ones; bytes copied."""
        with self._lock:
            moving = list(self._futures.items())
        copied = 0
        for key, (d, future) in moving:
            current = self.get_log(*key)
            if current is None or d.offline or current.offline:
                continue
            try:
                dir_mover.reconcile(current, future)
                copied += dir_mover.copy(current, future, max(0, budget - copied))
                if future.log_end_offset >= current.log_end_offset:
                    self._swap(key, d, current, future)
            except OSError as exc:
                self._take_offline(d, exc)
            except KafkaError as exc:
                log.warning("moving %s-%d to %s: %s; trying again", *key, d.path, exc)
        return copied

    def _swap(self, key: tuple[str, int], dest: _LogDir, current: PartitionLog, future: PartitionLog) -> None:
        """Make the caught-up future the partition's log (dir_mover.py, steps 1-3)."""
        with current._lock:  # no append between the last copy and the switch
            with self._lock:
                if self._futures.get(key, (None, None))[1] is not future or self._logs.get(key) is not current:
                    return
                home = self._log_dir[key]
            dir_mover.reconcile(current, future)
            dir_mover.copy(current, future, _NEVER)
            future.update_high_watermark(current.high_watermark)
            dir_mover.copy_partition_metadata(current.dir, future.dir)
            log_start, high_watermark = current.log_start_offset, current.high_watermark
            future.close(clean=True)
            current.close(clean=True)
            current.offline, current.on_io_error = True, None  # a stale reference fails, and takes no dir offline
            self._discard(home, current)
            final = dest.path / f"{key[0]}-{key[1]}"
            os.replace(future.dir, final)
            fsync_dir(dest.path)
            moved = self._open_log(dest, final, current.config, future.log_end_offset, log_start, high_watermark)
            with self._lock:
                self._logs[key] = moved
                self._log_dir[key] = dest
                self._futures.pop(key, None)
        self.write_checkpoints()
        log.info("moved %s-%d from %s to %s", *key, home.path, dest.path)

    def _resume_move(self, d: _LogDir, path: Path, config_for: Callable[[str], LogConfig]) -> None:
        """A future dir found at start: resume its copy, or promote it when its swap was interrupted."""
        try:
            key = parse_dir_name(path.name)
            with self._lock:
                current, home = self._logs.get(key), self._log_dir.get(key)
            if current is None:
                final = d.path / f"{key[0]}-{key[1]}"
                log.warning("%s has no current log: finishing its interrupted move", path)
                os.replace(path, final)
                fsync_dir(d.path)
                opened = self._open_log(d, final, config_for(key[0]), 0, 0, None)
                with self._lock:
                    self._logs[key], self._log_dir[key] = opened, d
                return
            if home is d or key in self._futures:
                log.warning("dropping %s: not a move to another dir", path)
                shutil.rmtree(path, ignore_errors=True)
                return
            future = self._open_future(d, path, current.config)
            with self._lock:
                self._futures[key] = (d, future)
            log.info("resuming the move of %s-%d to %s from offset %d", *key, d.path, future.log_end_offset)
        except OSError as exc:
            self._take_offline(d, exc)
        except Exception:
            log.exception("could not open future log %s", path)
