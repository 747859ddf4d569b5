"""tidelog side by side with Apache Kafka and Tansu: the same workloads, the same tools, one table.

    python bench/compare.py                              # everything, full sizes (about 15-25 minutes)
    python bench/compare.py --quick                      # smaller counts (a few minutes)
    python bench/compare.py --quick --only tidelog,kafka --workloads 1,3
    python bench/compare.py --json results.json          # also write every figure and tool run
    python bench/compare.py --workloads cluster --only tidelog,kafka   # the 3-broker group alone (about 5 minutes)

Brokers (``bench/peers.py``) run on free ports with their data under ``--workdir``. With ``--order
interleaved`` (the default) the selected workloads are split into groups: 1 and 2 together (2 consumes
what 1 produced), every other workload alone. For each group every broker in turn is started afresh
(its own folder, ``<name>-g<group>``), runs the group's workloads, and is stopped; the brokers' order
is reversed every other group. So a workload's figures for the brokers are taken minutes apart, not
tens of minutes: on this shared 2-core VM every broker's figures come out lower late in a long run,
and a ratio of figures from different moments compares the moments. ``--order sequential`` is the
old way: each broker started once and running every workload before the next broker starts.
A broker that cannot start is left out of that group (listed under the table); the others go on.
Workloads (issue 9):

1. produce 500,000 x 1 KiB and 2,000,000 x 100 B; acks=all, linger 5 ms, batch 1 MiB, idempotent;
   with Kafka's ProducerPerformance and with a confluent-kafka process; and the broker's own intake
   ceiling: the same 1 KiB records sent as one prebuilt ~1 MB Produce request over and over, 8 in
   flight, by a raw-socket client that costs almost nothing per byte (``workloads.py raw-produce``),
   measured first on the fresh broker after one unmeasured run (a JVM's warm-up), each run on
   warmed memory (``warm_memory``: on this VM a write into memory the host has taken back costs
   ten times more), and set against the page cache's write speed measured the same way (``dd``'s
   way: 1 MiB writes to a new file);
2. consume the same from offset 0 (Kafka's ConsumerPerformance; a confluent-kafka process); and the
   broker's own read ceiling for the 1 KiB records: plain Fetch requests one at a time with the
   consumers' default limits, by a raw-socket client that only walks batch headers
   (``workloads.py raw-consume``);
3. end-to-end latency: a confluent-kafka process producing 2,000 records/s of 200 B for 20 s
   (acks=all, linger 0) and consuming them (p50, p99, p99.9, max), and Kafka's EndToEndLatency
   (one record at a time, round trip);
4. 64 partitions, keyed records (confluent-kafka produce and consume, 500,000 x 1 KiB; raw-consume);
5. 1,000 idle connections (ApiVersions answered, then silence) held open during a ProducerPerformance
   1 KiB run, alternating with the same run without them (the slowdown compares the two);
6. 10,000 partitions: time to create them, RSS, then restart: time until Metadata shows every
   partition led, and RSS (Tansu's memory engine loses its topics on restart: creation only).
7. (``--workloads cluster``) three brokers on this machine (``bench/clusters.py``): tidelog's three
   brokers and one etcd against Kafka's three brokers and one dedicated KRaft controller (Tansu has
   no replicated mode and sits it out). Every topic has replication factor 3 and
   ``min.insync.replicas=2``, every producer acks=all, every record 1 KiB: the raw intake of one
   partition's leader; ProducerPerformance and confluent-kafka produce to 3 partitions (one led by
   each broker); end-to-end latency at 2,000 records/s (confluent-kafka) and EndToEndLatency; then
   failover: a paced acks=all producer (``workloads.py failover``) kills the leader of its partition
   with SIGKILL, and the figure is the time from the kill to the first acknowledged record produced
   after it, with both systems at the same ``broker.session.timeout.ms``/``broker.heartbeat.interval.ms``
   (``--cluster-sessions``: 9000:2000, both defaults, for the whole group; then 3000:500 on a fresh
   cluster for one more failover). The cluster's CPU seconds and peak RSS are summed over its four
   processes. The group runs alone for each system, the two systems in turn.

Per workload the broker's CPU seconds and peak RSS are read from ``/proc``. Each load tool's CPU use
is recorded; a figure is marked ``c`` (client-bound) when the tool used >= 0.9 of a core on average,
or when it reaches 80% of the tool's own ceiling (confluent-kafka produce against librdkafka's mock
cluster, measured first). Ratios are tidelog / peer: above 1 is better for throughput, below 1 for
latency, CPU, memory and times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clusters
import peers
import workloads as wl
from confluent_kafka import KafkaException

BROKERS = ("tidelog", "kafka", "tansu")
CLUSTER = 7  # the 3-broker workload: --workloads cluster (or 7)
CLUSTER_BROKERS = ("tidelog", "kafka")  # Tansu has no replicated cluster mode
CLUSTER_TOPIC = {"min.insync.replicas": "2"}  # every cluster topic: replication factor 3
CLIENT_BOUND_CORES = 0.9
CLIENT_BOUND_SHARE = 0.8


@dataclass
class Scale:
    big: int = 500_000  # 1 KiB records
    small: int = 2_000_000  # 100 B records
    latency_s: float = 20.0
    e2e_records: int = 2_000
    keyed: int = 500_000
    many_partitions: int = 10_000
    idle: int = 1_000
    cluster: int = 300_000  # 1 KiB records per produce run of the cluster group
    cluster_latency_s: float = 15.0
    failover_rate: int = 1_000  # records/s of the failover run's paced producer


QUICK = Scale(big=100_000, small=400_000, latency_s=5.0, e2e_records=500, keyed=100_000, many_partitions=2_000, idle=1_000,
              cluster=50_000, cluster_latency_s=5.0)


@dataclass
class Figure:
    key: str  # stable id, e.g. "1.java.1k.mb_s"
    label: str
    unit: str
    higher_is_better: bool
    value: float
    client_bound: bool = False
    runs: list[float] = field(default_factory=list)


@dataclass
class Context:
    args: argparse.Namespace
    scale: Scale
    libs: Path
    ceilings: dict[str, float]
    target: peers.Target  # what the group runs against: a Broker (workloads 1-6) or a Cluster (7)
    workdir: Path  # the run's folder: the brokers' folders, and the files that warm memory
    figures: dict[str, Figure] = field(default_factory=dict)
    tool_runs: list[dict[str, Any]] = field(default_factory=list)
    topics: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def broker(self) -> peers.Broker:
        assert isinstance(self.target, peers.Broker), "a single-broker workload in the cluster group"
        return self.target

    @property
    def cluster(self) -> clusters.Cluster:
        assert isinstance(self.target, clusters.Cluster), "the cluster workload on a single broker"
        return self.target

    def topic(self, label: str, partitions: int = 1, replication: int = 1, configs: dict[str, str] | None = None) -> str:
        name = f"{label}-{uuid.uuid4().hex[:6]}"
        create_topics(self.target.bootstrap, {name: partitions}, replication=replication, configs=configs)
        return name

    def record(self, key: str, label: str, unit: str, higher: bool, runs: list[wl.ToolRun], metric: str,
               ceiling: float | None = None) -> Figure:
        values = [run.figures[metric] for run in runs]
        value = statistics.median(values)
        cores = statistics.median(run.client_cores for run in runs)
        # Only throughput can be client-bound: a latency tool's CPU is mostly its JVM warming up.
        bound = higher and (cores >= CLIENT_BOUND_CORES or (ceiling is not None and value >= CLIENT_BOUND_SHARE * ceiling))
        figure = Figure(key, label, unit, higher, value, bound, values)
        self.figures[key] = figure
        for run in runs:
            self.tool_runs.append({"broker": self.target.name, "figure": key, "tool": run.tool, "wall_s": run.wall_s,
                                   "cpu_s": run.cpu_s, "client_cores": run.client_cores, "figures": run.figures})
        return figure

    def plain(self, key: str, label: str, unit: str, higher: bool, value: float, runs: list[float] | None = None) -> None:
        self.figures[key] = Figure(key, label, unit, higher, value, runs=runs or [value])

    def repeat(self, make: Callable[[], wl.ToolRun]) -> list[wl.ToolRun]:
        return [make() for _ in range(self.args.repeat)]

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """A tool that fails loses its own figures only: the failure is listed under the table."""
        try:
            yield
        except (wl.ToolFailed, TimeoutError, OSError, KafkaException) as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            detail = [line for line in str(exc).splitlines() if "Exception" in line or "timed out" in line]
            self.failures.append(f"{self.target.name}: {what}: {first}" + (f" ({detail[0].strip()})" if detail else ""))
            print(f"  FAILED {what}: {exc}"[:3000], file=sys.stderr)


def create_topics(bootstrap: str, topics: dict[str, int], timeout: float = 300, per_request: int = 0,
                  replication: int = 1, configs: dict[str, str] | None = None) -> None:
    """Create ``topics`` (name: partitions), ``per_request`` topics per CreateTopics (0: all in one);
    return once every partition has a leader and its whole replica set in sync."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    items = list(topics.items())
    step = per_request or len(items)
    for start in range(0, len(items), step):
        futures = admin.create_topics([NewTopic(name, n, replication, config=configs or {})
                                       for name, n in items[start:start + step]],
                                      request_timeout=timeout, operation_timeout=timeout)
        for future in futures.values():
            future.result(timeout)
    del admin  # a librdkafka handle left alive logs reconnects once the broker stops
    wait_for_leaders(bootstrap, topics, timeout, in_sync=replication)


def wait_for_leaders(bootstrap: str, topics: dict[str, int], timeout: float, in_sync: int = 1) -> float:
    """Seconds until Metadata shows every partition of ``topics`` with a leader and ``in_sync`` replicas in its ISR."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            metadata = admin.list_topics(timeout=30)
        except Exception:
            time.sleep(0.1)
            continue
        ready = all(
            name in metadata.topics and len(metadata.topics[name].partitions) == n
            and all(p.leader >= 0 and len(p.isrs) >= in_sync for p in metadata.topics[name].partitions.values())
            for name, n in topics.items()
        )
        if ready:
            return time.monotonic() - started
        time.sleep(0.1)
    raise TimeoutError(f"partitions without a leader after {timeout:.0f} s")


PRODUCER_PROPS = {"acks": "all", "linger.ms": "5", "batch.size": str(wl.MIB), "enable.idempotence": "true",
                  "max.request.size": str(wl.MIB + 4096)}


# --- workloads -----------------------------------------------------------------------------------------

# This VM hands the pages its guest frees back to the host (virtio-balloon free page reporting),
# seconds to minutes after they are freed, depending on how much was; the first write into such a
# page faults into the host. Page-cache writes then run at 290-460 MB/s instead of 3-4.7 GB/s, for
# every broker, and which a run gets depends on what happened to be freed before it (RESULTS.md,
# session 6): the raw intake swung 2-3x between runs. The kernel reuses the pages freed last first,
# so a file as large as a run's writes, written and deleted unsynced just before it, gives the run
# memory the host still backs: the state of a broker whose page cache has filled the machine.
WARM_MARGIN = 1.4  # the warming file's size, per byte the run will write


def write_file_mb_s(path: Path, total: int, chunk: int = wl.MIB) -> float:
    """Write ``total`` bytes to a new file in ``chunk``-sized writes from one buffer (``dd
    if=/dev/zero bs=1M``), unsynced: the page cache's write speed."""
    block = b"\x00" * chunk
    started = time.perf_counter()
    with open(path, "wb", buffering=0) as file:
        for _ in range(total // chunk):
            file.write(block)
    return total // chunk * chunk / (time.perf_counter() - started) / wl.MB


def warm_memory(folder: Path, run_bytes: int) -> None:
    """Before a run that writes ``run_bytes``: earlier writes synced, then memory the host backs on top
    of the free lists (see ``WARM_MARGIN``)."""
    os.sync()
    path = folder / "warm-memory"
    write_file_mb_s(path, int(run_bytes * WARM_MARGIN))
    path.unlink()  # dirty pages of an unlinked file are dropped, never written


def buffered_write_mb_s(folder: Path, total: int) -> float:
    """The page cache's buffered sequential write speed in the state the raw runs see (warmed)."""
    warm_memory(folder, total)
    path = folder / "buffered-write-reference"
    speed = write_file_mb_s(path, total)
    path.unlink()
    return speed


def produce_runs(ctx: Context, tool: str, tag: str, count: int, size: int, partitions: int = 1,
                 keys: int = 0, repeat: int | None = None) -> tuple[list[wl.ToolRun], str]:
    """``--repeat`` (or ``repeat``) produce runs, each to a new topic; (runs, the first run's topic)."""
    runs, topics = [], []
    for _ in range(ctx.args.repeat if repeat is None else repeat):
        # Every run starts with the earlier runs' writes on disk: otherwise a run late in a group
        # measures the disk's writeback of the gigabytes before it (for every broker that writes);
        # and on warmed memory (``warm_memory``).
        warm_memory(ctx.workdir, count * size)
        topics.append(ctx.topic(f"{tool}-{tag}", partitions))
        if tool == "java":
            runs.append(wl.java_produce(ctx.libs, ctx.broker.bootstrap, topics[-1], count, size, PRODUCER_PROPS))
        else:
            runs.append(wl.confluent("produce", ctx.broker.bootstrap, topics[-1], count=count, size=size, keys=keys))
    return runs, topics[0]


def w1_produce(ctx: Context) -> None:
    s = ctx.scale
    # Issue 9 sets the raw intake's goal as a share of this ("70% of this disk's buffered sequential
    # write speed"); measured in the run, per broker, in the raw runs' state.
    folder = ctx.workdir
    disk = [buffered_write_mb_s(folder, s.big * 1024) for _ in range(ctx.args.repeat)]
    ctx.plain("1.page_cache.write.reference", f"1 the page cache's write speed, {s.big * 1024 // wl.MB:,} MB in 1 MiB "
              "writes to a new file (reference)", "MB/s", True, statistics.median(disk), disk)
    with ctx.guard("workload 1 raw produce (broker intake ceiling)"):
        # First, on the fresh broker: this figure is the broker's intake, not the disk's writeback of
        # the gigabytes the other runs write (which throttles every broker's writes alike), and one
        # unmeasured run first warms a JVM broker's JIT up (Kafka's first run is up to 2x slower).
        def raw() -> wl.ToolRun:
            warm_memory(folder, s.big * 1024)
            return wl.raw_produce(ctx.broker.bootstrap, ctx.topic("raw-1k"), s.big, 1024)

        raw()
        runs = ctx.repeat(raw)
        raw_figure = ctx.record("1.raw.1k.mb_s", f"1 produce {s.big:,}x1024 B, prebuilt 1 MB requests, 8 in flight (raw)",
                                "MB/s", True, runs, "mb_s")
        ctx.plain("1.raw.1k.page_cache_ratio", "1   raw intake / the page cache's write speed", "x", True,
                  raw_figure.value / ctx.figures["1.page_cache.write.reference"].value)
    for tag, count, size in (("1k", s.big, 1024), ("100b", s.small, 100)):
        with ctx.guard(f"workload 1 ProducerPerformance {tag}"):
            runs, ctx.topics[f"java-{tag}"] = produce_runs(ctx, "java", tag, count, size)
            ctx.record(f"1.java.{tag}.mb_s", f"1 produce {count:,}x{size} B (ProducerPerformance)", "MB/s", True, runs,
                       "mb_s")
            ctx.record(f"1.java.{tag}.p99", f"1   its ack latency p99 ({tag})", "ms", False, runs, "lat_p99_ms")
        with ctx.guard(f"workload 1 confluent-kafka produce {tag}"):
            runs, ctx.topics[f"ck-{tag}"] = produce_runs(ctx, "ck", tag, count, size)
            ctx.record(f"1.ck.{tag}.mb_s", f"1 produce {count:,}x{size} B (confluent-kafka)", "MB/s", True, runs,
                       "mb_s", ctx.ceilings.get(f"produce-{tag}"))


def synced(tool: Callable[..., wl.ToolRun]) -> Callable[..., wl.ToolRun]:
    """``tool`` run after ``os.sync()``: a consume then measures reading, not the disk's writeback of
    what was produced just before it (which took up to a third off a run in session 5)."""
    def run(*args: Any, **kwargs: Any) -> wl.ToolRun:
        os.sync()
        return tool(*args, **kwargs)
    return run


def w2_consume(ctx: Context) -> None:
    s = ctx.scale
    for tag, count, size in (("1k", s.big, 1024), ("100b", s.small, 100)):
        with ctx.guard(f"workload 2 ConsumerPerformance {tag}"):
            topic = ctx.topics.get(f"java-{tag}")
            if topic is None:  # workload 1 not selected (or failed): fill a topic first, not measured
                topic = ctx.topic(f"java-{tag}")
                wl.confluent("produce", ctx.broker.bootstrap, topic, count=count, size=size)
                ctx.topics[f"java-{tag}"] = topic
            runs = ctx.repeat(lambda topic=topic, count=count, size=size: synced(wl.java_consume)(  # type: ignore[misc]
                ctx.libs, ctx.broker.bootstrap, topic, count, size))
            ctx.record(f"2.java.{tag}.mb_s", f"2 consume {count:,}x{size} B (ConsumerPerformance)", "MB/s", True,
                       runs, "mb_s")
        with ctx.guard(f"workload 2 confluent-kafka consume {tag}"):
            ctopic = ctx.topics.get(f"ck-{tag}", ctx.topics.get(f"java-{tag}"))
            if ctopic is None:
                continue
            if tag == "1k":
                runs = ctx.repeat(lambda ctopic=ctopic, count=count: synced(wl.raw_consume)(  # type: ignore[misc]
                    ctx.broker.bootstrap, ctopic, count))
                ctx.record("2.raw.1k.mb_s", f"2 consume {count:,}x1024 B, plain Fetch requests (raw)", "MB/s", True,
                           runs, "mb_s")
            runs = ctx.repeat(lambda ctopic=ctopic, count=count, size=size: synced(wl.confluent)(  # type: ignore[misc]
                "consume", ctx.broker.bootstrap, ctopic, count=count, size=size))
            ctx.record(f"2.ck.{tag}.mb_s", f"2 consume {count:,}x{size} B (confluent-kafka)", "MB/s", True, runs,
                       "mb_s")


def w3_latency(ctx: Context) -> None:
    """Each figure is the median of ``--repeat`` runs (a run's p50 moves by a third between runs)."""
    s = ctx.scale
    with ctx.guard("workload 3 confluent-kafka latency"):
        runs = ctx.repeat(lambda: wl.confluent("latency", ctx.broker.bootstrap, ctx.topic("lat"), rate=2000,
                                               seconds=s.latency_s, size=200, linger_ms=0, timeout=s.latency_s + 120))
        for metric, name in (("lat_p50_ms", "p50"), ("lat_p99_ms", "p99"), ("lat_p999_ms", "p99.9"),
                             ("lat_max_ms", "max")):
            ctx.record(f"3.ck.{name}", f"3 e2e 2,000/s x 200 B {name} (confluent-kafka)", "ms", False, runs, metric)
    with ctx.guard("workload 3 EndToEndLatency"):
        runs = ctx.repeat(lambda: wl.java_end_to_end(ctx.libs, ctx.broker.bootstrap, ctx.topic("e2e"), s.e2e_records,
                                                     200))
        for metric, name in (("lat_p50_ms", "p50"), ("lat_p99_ms", "p99"), ("lat_p999_ms", "p99.9")):
            ctx.record(f"3.java.{name}", f"3 e2e round trip {name} (EndToEndLatency)", "ms", False, runs, metric)


def w4_partitions(ctx: Context) -> None:
    count = ctx.scale.keyed
    topic = None
    figures: list[tuple[Figure, str]] = []
    with ctx.guard("workload 4 keyed produce"):
        runs, topic = produce_runs(ctx, "ck", "keyed64", count, 1024, partitions=64, keys=10_000)
        figures.append((ctx.record("4.ck.produce.mb_s", f"4 produce {count:,}x1 KiB keyed, 64 partitions (confluent)",
                                   "MB/s", True, runs, "mb_s", ctx.ceilings.get("produce-1k")), "1.ck.1k.mb_s"))
    with ctx.guard("workload 4 consume"):
        if topic is not None:
            runs = ctx.repeat(lambda: synced(wl.confluent)("consume", ctx.broker.bootstrap, topic, count=count,
                                                           size=1024))
            figures.append((ctx.record("4.ck.consume.mb_s", "4 consume the same (confluent)", "MB/s", True, runs,
                                       "mb_s"), "2.ck.1k.mb_s"))
            runs = ctx.repeat(lambda: synced(wl.raw_consume)(ctx.broker.bootstrap, topic, count, partitions=64))
            figures.append((ctx.record("4.raw.consume.mb_s", "4 consume the same, plain Fetch requests (raw)", "MB/s",
                                       True, runs, "mb_s"), "2.raw.1k.mb_s"))
    for fig, base in figures:
        if base in ctx.figures:
            what = fig.key.split('.')[2] + (" (raw)" if fig.key.startswith("4.raw") else "")
            ctx.plain(fig.key.replace("mb_s", "ratio"), f"4   {what}: 64 partitions / 1 partition", "x",
                      True, fig.value / ctx.figures[base].value)


def w5_idle(ctx: Context) -> None:
    """ProducerPerformance with and without 1,000 idle connections, alternating, on the same broker.

    The baseline is measured here rather than taken from workload 1: workload 1 ran at another moment
    (with ``--order sequential`` on the same broker, which has since written gigabytes and, for a JVM,
    warmed up), so runs from different moments would compare the moments, not the connections.
    """
    count = ctx.scale.big
    with ctx.guard("workload 5"):
        plain: list[wl.ToolRun] = []
        loaded: list[wl.ToolRun] = []
        for _ in range(ctx.args.repeat):  # produce_runs syncs the disk before each run
            plain.extend(produce_runs(ctx, "java", "no-idle", count, 1024, repeat=1)[0])
            idle = wl.open_idle_connections(ctx.broker.host, ctx.broker.port, ctx.scale.idle)
            try:
                loaded.extend(produce_runs(ctx, "java", "idle", count, 1024, repeat=1)[0])
                if not wl.idle_connections_alive(idle):
                    ctx.failures.append(f"{ctx.broker.name}: workload 5: the broker closed idle connections")
            finally:
                for sock in idle:
                    sock.close()
        base = ctx.record("5.java.plain.mb_s", f"5 produce {count:,}x1 KiB, no idle connections (alternating)", "MB/s",
                          True, plain, "mb_s")
        fig = ctx.record("5.java.1k.mb_s", f"5 produce {count:,}x1 KiB, {ctx.scale.idle:,} idle connections", "MB/s",
                         True, loaded, "mb_s")
        ctx.plain("5.slowdown", "5   slowdown from the idle connections (negative: faster)", "%", False,
                  (1 - fig.value / base.value) * 100)


def w6_many_partitions(ctx: Context) -> None:
    n = ctx.scale.many_partitions
    # Topics of 100 partitions, 10 topics per CreateTopics: Kafka's controller refuses one request
    # that makes more than 10,000 metadata records (POLICY_VIOLATION).
    prefix = f"many-{uuid.uuid4().hex[:6]}"
    topics = {f"{prefix}-{i}": min(100, n - i * 100) for i in range((n + 99) // 100)}
    with ctx.guard("workload 6 create"):
        started = time.monotonic()
        create_topics(ctx.broker.bootstrap, topics, timeout=600, per_request=10)
        ctx.plain("6.create_s", f"6 create {n:,} partitions, until all led", "s", False, time.monotonic() - started)
        ctx.plain("6.rss_created", "6   RSS after creating them", "MiB", False, ctx.broker.rss_bytes() / wl.MIB)
        ctx.plain("6.fds", "6   open file descriptors", "", False, ctx.broker.open_fds())
    if "6.create_s" not in ctx.figures:
        with contextlib.suppress(OSError):
            ctx.plain("6.fds", "6   open file descriptors", "", False, ctx.broker.open_fds())
        return
    if ctx.broker.name == "tansu":
        return  # Tansu's memory engine starts empty after a restart
    assert ctx.broker.restart is not None
    with ctx.guard("workload 6 restart"):
        ctx.broker.stop(timeout=300)
        started = time.monotonic()
        ctx.target = ctx.broker.restart()
        wait_for_leaders(ctx.broker.bootstrap, topics, timeout=600)
        ctx.plain("6.restart_s", f"6 restart with {n:,} partitions: until all led", "s", False,
                  time.monotonic() - started)
        ctx.plain("6.rss_restarted", "6   RSS after restart", "MiB", False, ctx.broker.rss_bytes() / wl.MIB)


def cluster_failover(ctx: Context, cluster: clusters.Cluster) -> None:
    """kill -9 of a partition's leader under a paced acks=all producer (``workloads.py failover``).

    The topic has 3 partitions, one led by each broker; the producer writes to one whose leader is not
    tidelog's controller (Kafka's controller is a process of its own), so the run measures a broker's
    death alone: noticed when its session expires, then the election and the client's metadata refresh.
    """
    seconds = f"{cluster.session_ms / 1000:g} s"
    key = f"{CLUSTER}.failover.{cluster.session_ms}"
    with ctx.guard(f"workload {CLUSTER} failover (session {seconds})"):
        topic = f"c-failover-{uuid.uuid4().hex[:6]}"
        create_topics(cluster.bootstrap, {topic: clusters.SIZE}, replication=clusters.SIZE, configs=CLUSTER_TOPIC)
        for partition in range(clusters.SIZE):
            leader, _, isr, controller = cluster.partition(topic, partition)
            if not (cluster.controller_is_broker and leader == controller):
                break
        cluster.cpu_seconds()  # the leader's CPU so far, before it dies
        run = wl.failover(cluster.bootstrap, topic, partition, cluster.brokers[leader].pid, leader,
                          rate=ctx.scale.failover_rate, size=1024)
        cluster.cpu_seconds()  # the killed broker is a zombie until reaped: its CPU seconds are still readable
        cluster.notes.append(f"failover (session {seconds}): killed node {leader}, leader of {topic}-{partition}, "
                             f"ISR {isr}, controller {controller}; {run.figures}")
        ctx.record(key, f"{CLUSTER} failover, session {seconds}: leader kill -9 to the next acks=all write "
                   f"acknowledged ({ctx.scale.failover_rate:,}/s)", "s", False, [run], "failover_s")
        if "new_leader_s" in run.figures:
            ctx.plain(f"{key}.metadata", f"{CLUSTER}   until Metadata names the new leader", "s", False,
                      run.figures["new_leader_s"])
        if run.figures["errors"] or run.figures["unacknowledged"]:
            ctx.failures.append(f"{ctx.target.name}: failover (session {seconds}): {run.figures['errors']:.0f} delivery "
                                f"errors, {run.figures['unacknowledged']:.0f} never acknowledged")


def w7_cluster(ctx: Context) -> None:
    """Three brokers, RF=3, min.insync.replicas=2, acks=all, 1 KiB records: throughput, latency, failover.

    Each topic is created with replication factor 3 and waited for until every replica is in sync.
    """
    s, cluster = ctx.scale, ctx.cluster
    n = s.cluster
    ctx.plain(f"{CLUSTER}.startup_s", f"{CLUSTER} start-up, 3 brokers at once, until Metadata lists all three", "s",
              False, cluster.startup_s)

    def replicated(label: str, partitions: int = 1) -> str:
        return ctx.topic(label, partitions, clusters.SIZE, CLUSTER_TOPIC)

    with ctx.guard(f"workload {CLUSTER} raw produce"):
        def raw(count: int) -> wl.ToolRun:
            warm_memory(ctx.workdir, count * 1024 * clusters.SIZE)
            topic = replicated("c-raw")
            leader = cluster.partition(topic, 0)[0]
            return wl.raw_produce(cluster.brokers[leader].bootstrap, topic, count, 1024)

        raw(n // 4)  # unmeasured: a JVM's warm-up
        ctx.record(f"{CLUSTER}.raw.mb_s", f"{CLUSTER} produce {n:,}x1 KiB to one partition's leader, prebuilt 1 MB "
                   "requests, 8 in flight (raw)", "MB/s", True, ctx.repeat(lambda: raw(n)), "mb_s")
    for tool in ("java", "ck"):
        name = "ProducerPerformance" if tool == "java" else "confluent-kafka"
        with ctx.guard(f"workload {CLUSTER} {name}"):
            def produce(tool: str = tool) -> wl.ToolRun:
                warm_memory(ctx.workdir, n * 1024 * clusters.SIZE)
                topic = replicated(f"c-{tool}", clusters.SIZE)
                if tool == "java":
                    return wl.java_produce(ctx.libs, cluster.bootstrap, topic, n, 1024, PRODUCER_PROPS)
                return wl.confluent("produce", cluster.bootstrap, topic, count=n, size=1024)

            runs = ctx.repeat(produce)
            ctx.record(f"{CLUSTER}.{tool}.mb_s", f"{CLUSTER} produce {n:,}x1 KiB, 3 partitions ({name})", "MB/s", True,
                       runs, "mb_s", ctx.ceilings.get("produce-1k") if tool == "ck" else None)
            if tool == "java":
                ctx.record(f"{CLUSTER}.java.p99", f"{CLUSTER}   its ack latency p99", "ms", False, runs, "lat_p99_ms")
    with ctx.guard(f"workload {CLUSTER} confluent-kafka latency"):
        runs = ctx.repeat(lambda: wl.confluent(
            "latency", cluster.bootstrap, replicated("c-lat"), rate=2000, seconds=s.cluster_latency_s, size=1024, linger_ms=0, timeout=s.cluster_latency_s + 120))
        for metric, label in (("lat_p50_ms", "p50"), ("lat_p99_ms", "p99"), ("lat_p999_ms", "p99.9"),
                              ("lat_max_ms", "max")):
            ctx.record(f"{CLUSTER}.ck.{label}", f"{CLUSTER} e2e 2,000/s x 1 KiB {label} (confluent-kafka)", "ms", False,
                       runs, metric)
    with ctx.guard(f"workload {CLUSTER} EndToEndLatency"):
        runs = ctx.repeat(lambda: wl.java_end_to_end(ctx.libs, cluster.bootstrap, replicated("c-e2e"),
                                                     s.e2e_records, 1024))
        for metric, label in (("lat_p50_ms", "p50"), ("lat_p99_ms", "p99"), ("lat_p999_ms", "p99.9")):
            ctx.record(f"{CLUSTER}.e2e.{label}", f"{CLUSTER} e2e round trip 1 KiB {label} (EndToEndLatency)", "ms",
                       False, runs, metric)
    cluster_failover(ctx, cluster)  # last: it leaves the cluster a broker short
    for index, (session, heartbeat) in enumerate(ctx.args.cluster_sessions[1:], 2):
        folder = ctx.workdir / f"{cluster.name}-cluster-{index}"
        try:
            other = start_cluster(cluster.name, folder, ctx.libs, ctx.args, session, heartbeat)
        except peers.BrokerUnavailable as exc:
            ctx.failures.append(f"{cluster.name}: cluster with session {session} ms: {exc}".splitlines()[0])
            continue
        try:
            cluster_failover(ctx, other)
            cluster.notes += other.notes
        finally:
            other.stop()
            if not ctx.args.keep:
                shutil.rmtree(folder, ignore_errors=True)


def start_cluster(name: str, folder: Path, libs: Path, args: argparse.Namespace, session_ms: int,
                  heartbeat_ms: int) -> clusters.Cluster:
    if name == "tidelog":
        return clusters.start_tidelog_cluster(folder, session_ms, heartbeat_ms, loop=args.tidelog_loop)
    return clusters.start_kafka_cluster(folder, libs, session_ms, heartbeat_ms)


WORKLOADS: dict[int, Callable[[Context], None]] = {
    1: w1_produce, 2: w2_consume, 3: w3_latency, 4: w4_partitions, 5: w5_idle, 6: w6_many_partitions,
    CLUSTER: w7_cluster,
}


# --- driver ----------------------------------------------------------------------------------------------

def measure_ceilings(scale: Scale, workloads: list[int]) -> dict[str, float]:
    """confluent-kafka produce against librdkafka's mock cluster: the tool's own ceiling (only the 1 KiB
    one, at the cluster group's count, when the cluster group runs alone)."""
    ceilings = {}
    loads = [("1k", scale.cluster, 1024)] if workloads == [CLUSTER] else [("1k", scale.big, 1024), ("100b", scale.small, 100)]
    for tag, count, size in loads:
        run = wl.confluent("produce", "mock", f"ceiling-{tag}", count=count, size=size)
        ceilings[f"produce-{tag}"] = run.figures["mb_s"]
        print(f"  ceiling: confluent-kafka produce {tag} against the mock cluster: {run.figures['mb_s']:.0f} MB/s "
              f"({run.client_cores:.2f} cores)", file=sys.stderr)
    return ceilings


def start(name: str, folder: Path, libs: Path, args: argparse.Namespace, group: tuple[int, ...]) -> peers.Target:
    """``name`` started afresh with its data and logs in ``folder``: one broker, or for the cluster
    group a 3-broker cluster with the first of ``--cluster-sessions``."""
    if CLUSTER in group:
        session, heartbeat = args.cluster_sessions[0]
        return start_cluster(name, folder, libs, args, session, heartbeat)
    if name == "tidelog":
        return peers.start_tidelog(folder, loop=args.tidelog_loop)
    if name == "kafka":
        return peers.start_kafka(folder, libs)
    return peers.start_tansu(folder)


def workload_groups(selected: list[int], order: str) -> list[tuple[int, ...]]:
    """The workloads one broker start runs: all of them (sequential), or 1 and 2 together and the rest alone.

    Workload 2 consumes the topics workload 1 produced (``ctx.topics``), so the two share a broker.
    The cluster workload (7) is always a group of its own: it runs on three brokers, not one.
    """
    if order == "sequential":
        single = tuple(n for n in selected if n != CLUSTER)
        return [group for group in (single, (CLUSTER,) if CLUSTER in selected else ()) if group]
    groups: list[tuple[int, ...]] = []
    for number in selected:
        if number == 2 and groups and groups[-1] == (1,):
            groups[-1] = (1, 2)
        else:
            groups.append((number,))
    return groups


def run_workloads(ctx: Context, group: tuple[int, ...]) -> None:
    """``group`` against ``ctx.target``, each workload with the broker's CPU seconds and peak RSS."""
    for number in group:
        ctx.target.reset_peak_rss()
        cpu = ctx.target.cpu_seconds()
        began = time.monotonic()
        WORKLOADS[number](ctx)
        whose = "the cluster's (3 brokers + etcd / controller, summed)" if number == CLUSTER else "broker"
        if number != 6:  # workload 6 restarts the broker: its own figures say it
            ctx.plain(f"{number}.cpu_s", f"{number}   {whose} CPU seconds (whole workload)", "s", False,
                      ctx.target.cpu_seconds() - cpu)
            ctx.plain(f"{number}.peak_rss", f"{number}   {whose} peak RSS", "MiB", False,
                      ctx.target.peak_rss_bytes() / wl.MIB)
        print(f"  workload {number} done in {time.monotonic() - began:.0f} s", file=sys.stderr)


def run_group(name: str, index: int, count: int, group: tuple[int, ...], contexts: dict[str, Context],
              args: argparse.Namespace, scale: Scale, libs: Path, ceilings: dict[str, float], tmp: Path) -> None:
    """A fresh ``name`` in ``<tmp>/<name>-g<index>`` runs ``group``; its figures go to ``contexts[name]``.

    The broker's first start makes its Context and gives the start-up figures; ``9.load`` is rewritten
    after every group, so it ends as the load after the broker's last one.
    Raises ``peers.BrokerUnavailable`` when the broker cannot start.
    """
    folder = tmp / f"{name}-g{index}"
    load_before = os.getloadavg()
    target = start(name, folder, libs, args, group)
    print(f"== {name} on {target.bootstrap}, group {index}/{count}: workloads {', '.join(map(str, group))} "
          f"(started in {target.startup_s:.1f} s; load {load_before[0]:.2f})", file=sys.stderr)
    ctx = contexts.get(name)
    if ctx is None:
        ctx = contexts[name] = Context(args, scale, libs, ceilings, target, tmp)
    if isinstance(target, peers.Broker) and "0.startup_s" not in ctx.figures:
        ctx.plain("0.startup_s", "0 start-up, empty (until ApiVersions)", "s", False, target.startup_s)
        ctx.plain("0.rss", "0 RSS idle after start", "MiB", False, target.rss_bytes() / wl.MIB)
    ctx.target = target
    ctx.topics.clear()  # the previous group's topics were on another broker
    try:
        run_workloads(ctx, group)
    finally:
        ctx.target.stop()
        ctx.notes += [note for note in ctx.target.notes if note not in ctx.notes]
        if not args.keep:  # its data is of no further use: leave the next group a disk without it
            shutil.rmtree(folder, ignore_errors=True)
    ctx.plain("9.load", "load average (1 min) after the run", "", False, os.getloadavg()[0])


def raise_fd_limit() -> None:
    """Brokers inherit this: many partitions need several descriptors each."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"RLIMIT_NOFILE {soft} -> {hard}", file=sys.stderr)


def fmt(figure: Figure | None) -> str:
    if figure is None:
        return "-"
    v = figure.value
    text = f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"
    return text + (" c" if figure.client_bound else "")


def table(results: dict[str, Context]) -> str:
    names = list(results)
    keys: list[str] = []
    for ctx in results.values():
        keys += [k for k in ctx.figures if k not in keys]
    keys.sort(key=lambda k: (k.split(".")[0], list(next(c for c in results.values() if k in c.figures).figures).index(k)))
    peers_ = [n for n in names if n != "tidelog"] if "tidelog" in names else []
    header = ["figure", "unit", *names, *[f"tidelog/{p}" for p in peers_]]
    rows = [header]
    for key in keys:
        first = next(c.figures[key] for c in results.values() if key in c.figures)
        row = [first.label + ("" if first.higher_is_better else " (lower is better)" if first.unit else ""),
               first.unit, *[fmt(results[n].figures.get(key)) for n in names]]
        mine = results["tidelog"].figures.get(key) if "tidelog" in results else None
        for p in peers_:
            theirs = results[p].figures.get(key)
            if mine is None or theirs is None or theirs.value == 0 or key.endswith(("ratio", "slowdown", "load", "reference")):
                row.append("-")
            else:
                row.append(f"{mine.value / theirs.value:.2f}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts (see QUICK)")
    parser.add_argument("--only", default=",".join(BROKERS), help="brokers, comma separated: tidelog,kafka,tansu")
    parser.add_argument("--workloads", default="1,2,3,4,5,6,cluster",
                        help="workload numbers, comma separated; 'cluster' (or 7) is the 3-broker group")
    parser.add_argument("--repeat", type=int, default=1, help="runs per throughput and latency figure; the median is shown")
    parser.add_argument("--workdir", help="where brokers keep their data (default: a temporary folder under /var/tmp)")
    parser.add_argument("--json", help="write all figures and tool runs to this file")
    parser.add_argument("--tidelog-loop", choices=["asyncio", "uvloop"], default="uvloop",
                        help="the tidelog broker's event loop (default: uvloop, what `tidelog serve` runs when it is installed)")
    parser.add_argument("--partitions", type=int, help="partitions of workload 6 (default 10,000; --quick 2,000)")
    parser.add_argument("--cluster-sessions", default="9000:2000,3000:500",
                        help="the cluster group's broker.session.timeout.ms:broker.heartbeat.interval.ms, both sides; "
                             "the first for every cluster figure, each further one for one more failover on a fresh "
                             "cluster (default 9000:2000,3000:500; 9000:2000 are both systems' defaults)")
    parser.add_argument("--keep", action="store_true", help="keep the brokers' folders (data and logs)")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the mock-cluster ceiling runs")
    parser.add_argument("--order", choices=["interleaved", "sequential"], default="interleaved",
                        help="interleaved (default): per group of workloads, every broker in turn, each started "
                             "afresh; sequential: each broker runs every workload before the next starts")
    args = parser.parse_args()
    try:
        args.workloads = sorted({CLUSTER if w.strip() == "cluster" else int(w) for w in args.workloads.split(",")})
    except ValueError:
        parser.error(f"--workloads: numbers 1-{CLUSTER} or 'cluster', not {args.workloads!r}")
    if unknown_workloads := set(args.workloads) - set(WORKLOADS):
        parser.error(f"unknown workloads: {', '.join(map(str, sorted(unknown_workloads)))}")
    try:
        args.cluster_sessions = [tuple(int(v) for v in pair.split(":")) for pair in args.cluster_sessions.split(",")]
    except ValueError:
        parser.error(f"--cluster-sessions: SESSION_MS:HEARTBEAT_MS pairs, not {args.cluster_sessions!r}")
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if unknown := set(names) - set(BROKERS):
        parser.error(f"unknown brokers: {', '.join(sorted(unknown))}")
    scale = QUICK if args.quick else Scale()
    if args.partitions:
        scale.many_partitions = args.partitions
    raise_fd_limit()

    libs = peers.kafka_libs()
    print(f"Apache Kafka {peers.kafka_version(libs)} tools from {libs}; load {os.getloadavg()}", file=sys.stderr)
    ceilings = {} if args.no_ceiling else measure_ceilings(scale, args.workloads)
    contexts: dict[str, Context] = {}
    groups = workload_groups(args.workloads, args.order)
    skipped: dict[str, list[str]] = {name: [] for name in names}  # groups a broker could not start for
    tmp = tempfile.mkdtemp(prefix="tidelog-compare-", dir=args.workdir or "/var/tmp")
    try:
        for index, group in enumerate(groups, 1):
            # Every other group in the reverse order: no broker always runs first (or last).
            for name in names if index % 2 else names[::-1]:
                if CLUSTER in group and name not in CLUSTER_BROKERS:
                    print(f"{name}: not in the cluster group (no replicated cluster mode)", file=sys.stderr)
                    continue
                try:
                    run_group(name, index, len(groups), group, contexts, args, scale, libs, ceilings, Path(tmp))
                except peers.BrokerUnavailable as exc:
                    print(f"{name} unavailable for group {index} (workloads {', '.join(map(str, group))}): {exc}",
                          file=sys.stderr)
                    first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
                    skipped[name].append(f"{name}: workloads {', '.join(map(str, group))}: unavailable: {first}")
    finally:
        if args.keep:
            print(f"broker folders kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    results = {name: contexts[name] for name in names if name in contexts}  # the table's columns: --only's order
    for name, ctx in results.items():
        ctx.failures.extend(skipped[name])
    print(table(results))
    print(f"\nRLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}; load average {os.getloadavg()}")
    print(f"c = client-bound (tool >= {CLIENT_BOUND_CORES} core, or >= {CLIENT_BOUND_SHARE:.0%} of its mock ceiling); "
          f"ceilings: " + ", ".join(f"{k} {v:.0f} MB/s" for k, v in ceilings.items()))
    for ctx in results.values():
        for failure in ctx.failures:
            print(f"FAILED {failure}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "scale": asdict(scale), "ceilings": ceilings, "args": {k: v for k, v in vars(args).items()},
            "brokers": {n: {"figures": {k: asdict(f) for k, f in c.figures.items()}, "tool_runs": c.tool_runs,
                            "notes": c.notes, "failures": c.failures} for n, c in results.items()},
        }, indent=1))


if __name__ == "__main__":
    main()
