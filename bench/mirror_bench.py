"""tidelog mirror's speed and footprint, alone or side by side with Apache Kafka's MirrorMaker 2.

Not a test: it prints numbers. Two tidelog brokers run as subprocesses (tests/helpers) on free ports
in a temporary folder, the source and the destination cluster.

``--mode footprint`` (many partitions): the source topic gets ``--partitions`` partitions with
``--per-partition`` records of ``--size`` bytes; one ``tidelog mirror run`` process (budget
``--budget-mib``) copies them, its RSS sampled every 0.2 s, until every partition's checkpoint is at
the source's end. Printed: peak RSS and seconds from the process start (start-up included)::

    python bench/mirror_bench.py --mode footprint [--partitions 10000] [--per-partition 10]

``--mode compare`` (the default): the same source data is mirrored by ``tidelog mirror`` and then by
MirrorMaker 2 (``org.apache.kafka.connect.mirror.MirrorMaker``, dedicated mode, jars from Maven
Central through bench/mm2/install.sh), one after the other, each into its own destination topics
(``tl.<topic>`` and MM2's default ``src.<topic>``). For each:

- **throughput**: ``--records`` records of ``--size`` bytes over ``--partitions`` partitions are in
  the source before the mirror starts; records/s and MB/s over the time from the first record
  visible on the destination to the last (tidelog: every checkpoint at the source's end; MM2: the
  destination's end offsets sum to the record count), so neither side's start-up counts;
- **lag**: then a producer writes ``--lag-rate`` records/s for ``--lag-seconds`` s into a topic of
  its own (4 partitions); a read_committed consumer on the destination takes, for every copy, the
  time it is received minus its CreateTime (both mirrors keep timestamps): p50, p99, max;
- **RSS**: peak resident memory of the mirror process (the JVM for MM2) over both phases, sampled
  every 0.2 s, and its CPU seconds.

::

    python bench/mirror_bench.py [--records 60000] [--partitions 8] [--lag-rate 2000] [--lag-seconds 15]

Each mirror runs with its defaults except what the bench needs (tidelog: ``metadata.refresh.ms``;
MM2: replication factors 1, the one replication flow, ``tasks.max`` = ``--mm2-tasks``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from confluent_kafka import Consumer, Producer  # noqa: E402

from helpers.broker_process import GROUP_TEST_BROKER, BrokerProcess  # noqa: E402
from helpers.mirror_run import (  # noqa: E402
    MirrorProcess,
    caught_up,
    create_wide_topic,
    end_offsets,
    fill_partitions,
    footprint,
    write_config,
)
from tidelog.mirror.config import DEFAULT_SHARDS  # noqa: E402

LAG_PARTITIONS = 4
MM2_LOG4J = """rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


@dataclass
class Result:
    name: str
    records_per_s: float
    mb_per_s: float
    copy_s: float
    startup_s: float
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    lag_records: int
    peak_rss_mib: float
    cpu_s: float


class Sampler:
    """Peak RSS and CPU seconds of one process, sampled every 0.2 s on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self.cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(0.2):
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
                fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
                self.cpu = (int(fields[11]) + int(fields[12])) / ticks
            except (FileNotFoundError, ProcessLookupError):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def copy_phase(source: str, destination: str, topic: str, dest_topic: str, partitions: int, records: int,
               done: Callable[[], bool], started: float, timeout: float) -> tuple[float, float]:
    """(seconds from the mirror's start to its first copy, seconds from the first copy to ``done``)."""
    first: float | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if first is None:
            try:
                ends = end_offsets(destination, dest_topic, partitions)
            except Exception:  # the topic is not created yet
                ends = {}
            if sum(max(0, e) for e in ends.values()) > 0:
                first = time.monotonic()
        if first is not None and done():
            return first - started, time.monotonic() - first
        time.sleep(0.25)
    raise SystemExit(f"{dest_topic}: not copied in {timeout} s")


def lag_phase(source: str, destination: str, topic: str, dest_topic: str, rate: int, seconds: float,
              size: int) -> list[float]:
    """Write ``rate`` records/s for ``seconds`` into ``topic``; the lag (ms) of each copy read back."""
    consumer = Consumer({"bootstrap.servers": destination, "group.id": f"bench-lag-{dest_topic}",
                         "isolation.level": "read_committed", "auto.offset.reset": "latest",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10, "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([dest_topic])
    joined = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < joined:
        consumer.poll(0.1)
    for _ in range(10):
        consumer.poll(0.05)  # positions at the current end before the writer starts
    producer = Producer({"bootstrap.servers": source, "linger.ms": 1, "enable.idempotence": True})
    lags: list[float] = []
    total = int(rate * seconds)
    value = b"l" * size
    writer_done = threading.Event()

    def write() -> None:
        start = time.monotonic()
        for i in range(total):
            due = start + i / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            producer.produce(topic, value, partition=i % LAG_PARTITIONS, timestamp=int(time.time() * 1000))
            producer.poll(0)
        producer.flush(30)
        writer_done.set()

    threading.Thread(target=write, daemon=True).start()
    deadline: float | None = None
    while len(lags) < total:
        if writer_done.is_set() and deadline is None:
            deadline = time.monotonic() + 30
        if deadline is not None and time.monotonic() > deadline:
            break
        for message in consumer.consume(1000, 0.05):
            if message.error() is None:
                lags.append(time.time() * 1000 - message.timestamp()[1])
    consumer.close()
    return lags


def summary(name: str, records: int, size: int, startup: float, copy: float, lags: list[float],
            sampler: Sampler) -> Result:
    ordered = sorted(lags) or [float("nan")]
    return Result(name, records / copy, records * size / copy / 1e6, copy, startup,
                  statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                  ordered[-1], len(lags), sampler.peak / (1 << 20), sampler.cpu)


def run_tidelog(args: argparse.Namespace, work: Path, source: str, destination: str) -> Result:
    config = write_config(work / "tidelog-link.toml", name="bench", source=source, destination=destination,
                          include=["bench", "lag-tidelog"], rename="tl.{topic}",
                          link={"shards": args.shards, "transaction.interval.ms": args.transaction_interval_ms,
                                "session.timeout.ms": 10_000, "metadata.refresh.ms": 10_000,
                                "transaction.timeout.ms": 60_000})
    mirror = MirrorProcess(config, work / "tidelog-mirror.log").start()
    started = time.monotonic()
    sampler = Sampler(mirror.pid)
    try:
        startup, copy = copy_phase(source, destination, "bench", "tl.bench", args.partitions, args.records,
                                   lambda: caught_up(config, source, "bench", args.partitions), started, 300)
        print(f"tidelog mirror: {args.records} records copied in {copy:.1f} s", flush=True)
        lags = lag_phase(source, destination, "lag-tidelog", "tl.lag-tidelog", args.lag_rate, args.lag_seconds,
                         args.size)
    finally:
        sampler.stop()
        mirror.close()
    return summary("tidelog mirror", args.records, args.size, startup, copy, lags, sampler)


def mm2_libs() -> str:
    return subprocess.run([str(REPO / "bench" / "mm2" / "install.sh")], check=True, capture_output=True,
                          text=True).stdout.strip()


def run_mm2(args: argparse.Namespace, work: Path, source: str, destination: str) -> Result:
    libs = mm2_libs()
    properties = work / "mm2.properties"
    rf = ("replication.factor", "checkpoints.topic.replication.factor", "heartbeats.topic.replication.factor",
          "offset-syncs.topic.replication.factor", "offset.storage.replication.factor",
          "status.storage.replication.factor", "config.storage.replication.factor")
    lines = ["clusters = src, dst", f"src.bootstrap.servers = {source}", f"dst.bootstrap.servers = {destination}",
             "src->dst.enabled = true", "src->dst.topics = bench, lag-mm2", "dst->src.enabled = false",
             f"tasks.max = {args.mm2_tasks}", "sync.topic.acls.enabled = false",
             "plugin.discovery = service_load", *(f"{key} = 1" for key in rf)]
    properties.write_text("\n".join(lines) + "\n")
    (work / "mm2-log4j2.properties").write_text(MM2_LOG4J.format(path=work / "mm2.log"))
    command = ["java", "-Xms256M", "-Xmx2G", f"-Dlog4j2.configurationFile={work / 'mm2-log4j2.properties'}",
               "-cp", f"{libs}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(properties)]
    with (work / "mm2.out").open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    started = time.monotonic()
    sampler = Sampler(process.pid)
    try:
        def done() -> bool:
            return sum(end_offsets(destination, "src.bench", args.partitions).values()) >= args.records

        startup, copy = copy_phase(source, destination, "bench", "src.bench", args.partitions, args.records,
                                   done, started, 300)
        print(f"MirrorMaker 2: {args.records} records copied in {copy:.1f} s", flush=True)
        lags = lag_phase(source, destination, "lag-mm2", "src.lag-mm2", args.lag_rate, args.lag_seconds, args.size)
    finally:
        sampler.stop()
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return summary("MirrorMaker 2", args.records, args.size, startup, copy, lags, sampler)


def compare(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as folder:
        work = Path(folder)
        with BrokerProcess(work / "a", GROUP_TEST_BROKER) as a, BrokerProcess(work / "b", GROUP_TEST_BROKER) as b:
            create_wide_topic(a.bootstrap, "bench", args.partitions)
            for topic in ("lag-tidelog", "lag-mm2"):
                create_wide_topic(a.bootstrap, topic, LAG_PARTITIONS)
            per_partition = args.records // args.partitions
            args.records = fill_partitions(a.bootstrap, "bench", args.partitions, per_partition, args.size)
            print(f"source ready: {args.records} records of {args.size} B over {args.partitions} partitions",
                  flush=True)
            results = []
            if not args.skip_tidelog:
                results.append(run_tidelog(args, work, a.bootstrap, b.bootstrap))
            if not args.skip_mm2:
                results.append(run_mm2(args, work, a.bootstrap, b.bootstrap))
    print(f"\n{args.records} records of {args.size} B over {args.partitions} partitions; lag at "
          f"{args.lag_rate} records/s for {args.lag_seconds:.0f} s; load average {os.getloadavg()[0]:.1f}")
    print(f"{'mirror':<16}{'records/s':>10}{'MB/s':>7}{'copy s':>8}{'start s':>8}{'lag p50':>9}{'lag p99':>9}"
          f"{'lag max':>9}{'peak RSS':>10}{'CPU s':>7}")
    for r in results:
        print(f"{r.name:<16}{r.records_per_s:>10.0f}{r.mb_per_s:>7.2f}{r.copy_s:>8.1f}{r.startup_s:>8.1f}"
              f"{r.lag_p50_ms:>7.0f}ms{r.lag_p99_ms:>7.0f}ms{r.lag_max_ms:>7.0f}ms{r.peak_rss_mib:>7.0f}MiB"
              f"{r.cpu_s:>7.1f}")
    if len(results) == 2:
        tl, mm = results
        print(f"tidelog / MM2: throughput {tl.records_per_s / mm.records_per_s:.2f}x, "
              f"memory {tl.peak_rss_mib / mm.peak_rss_mib:.2f}x, lag p99 {tl.lag_p99_ms / mm.lag_p99_ms:.2f}x")


def footprint_mode(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as folder:
        work = Path(folder)
        with BrokerProcess(work / "a", GROUP_TEST_BROKER) as a, BrokerProcess(work / "b", GROUP_TEST_BROKER) as b:
            started = time.monotonic()
            topic = create_wide_topic(a.bootstrap, "bench-wide", args.partitions, timeout=600)
            records = fill_partitions(a.bootstrap, topic, args.partitions, args.per_partition, args.size)
            print(f"source ready: {records} records over {args.partitions} partitions in "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            peak, seconds = footprint(a.bootstrap, b.bootstrap, work, topic=topic, partitions=args.partitions,
                                      records=records, budget_bytes=args.budget_mib << 20, timeout=1800,
                                      offsets=args.offsets, shards=args.shards)
    volume = records * args.size
    print(f"offsets={args.offsets} partitions={args.partitions} records={records} size={args.size} "
          f"budget={args.budget_mib}MiB shards={args.shards} "
          f"peak_rss={peak:.0f}MiB seconds={seconds:.1f} records/s={records / seconds:.0f} "
          f"MB/s={volume / seconds / 1e6:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mode", choices=("compare", "footprint"), default="compare")
    parser.add_argument("--size", type=int, default=1024, help="value bytes per record")
    parser.add_argument("--partitions", type=int, help="8 (compare) or 10,000 (footprint)")
    parser.add_argument("--records", type=int, default=60_000, help="compare: records in the source")
    parser.add_argument("--lag-rate", type=int, default=2000, help="compare: records/s of the lag phase")
    parser.add_argument("--lag-seconds", type=float, default=15.0)
    parser.add_argument("--transaction-interval-ms", type=int, default=500, help="compare: tidelog mirror's")
    parser.add_argument("--mm2-tasks", type=int, default=1, help="compare: MM2's tasks.max")
    parser.add_argument("--skip-mm2", action="store_true")
    parser.add_argument("--skip-tidelog", action="store_true")
    parser.add_argument("--per-partition", type=int, default=10, help="footprint: records per partition")
    parser.add_argument("--budget-mib", type=int, default=64, help="footprint: the link's budget.bytes")
    parser.add_argument("--shards", type=int, default=DEFAULT_SHARDS,
                        help=f"the link's shards (default: link.shards' own, {DEFAULT_SHARDS}); transactional mode: "
                        "one producer each, and each holds state for every partition of the topic")
    parser.add_argument("--offsets", choices=("translate", "preserve"), default="translate",
                        help="footprint: the link's mode")
    args = parser.parse_args()
    if args.mode == "compare":
        args.partitions = args.partitions or 8
        compare(args)
    else:
        args.partitions = args.partitions or 10_000
        footprint_mode(args)


if __name__ == "__main__":
    main()
