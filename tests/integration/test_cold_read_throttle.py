"""Cold-read throttling from the page-cache estimate, on a broker subprocess with a disk we drive.

The broker reads meminfo and diskstats from ``tidelog.read.throttle.procfs.path``: here a directory
this test writes, standing for the log dir's disk (found as the broker finds it, from /sys). The
disk's reads run at 100 MiB/s against 100 MiB available, so the cache horizon T is 1 s; the test
sets its utilisation to 0 % or 100 %. A backlog topic read from its start is cold (no messages come
in, so anything below its log end is older than T); a topic taking ~200 messages/s read at its tail
is hot. While the disk is busy the cold reader's partition is throttled (held entirely,
``tidelog.read.throttle.partition.bytes.per.sec=0``) and the hot reader keeps going; once the disk
is calm the throttle is lifted and the cold reader resumes. The segment file of the backlog is
dropped from the page cache first, and every read's residency is checked with mincore, so the
estimate is compared with the page cache.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from helpers.broker_process import BrokerProcess, free_port, register_failure_report, wait_until
from helpers.clients import FAST_CLIENT, create_topic, unique_topic
from tidelog.broker.read_throttle import resident_fraction
from tidelog.broker.tier_runtime import device_of

MIB = 1 << 20


class FakeDisk:
    """Writes <dir>/meminfo and <dir>/diskstats every 50 ms: 100 MiB/s read, ``busy`` of the time busy."""

    def __init__(self, procfs: Path, device: str) -> None:
        self.procfs, self.device = procfs, device
        self.busy = 0.0
        self._sectors = self._io_ms = 0.0
        self._stop = threading.Event()
        (procfs / "meminfo").write_text(f"MemTotal: {1 << 22} kB\nMemAvailable: {100 * 1024} kB\n")
        self._write()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        s, ms = int(self._sectors), int(self._io_ms)
        line = f" 254 0 {self.device} {s // 8} 0 {s} {ms} 0 0 0 0 0 {ms} {ms} 0 0 0 0 0 0\n"
        tmp = self.procfs / "diskstats.tmp"
        tmp.write_text(line)
        tmp.replace(self.procfs / "diskstats")

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.05):
            now = time.monotonic()
            self._sectors += 100 * MIB / 512 * (now - last)
            # twice the wall time when busy: a write of this file made late by CPU load still reads as
            # fully busy (the broker caps utilisation at 1)
            self._io_ms += (now - last) * 2000 * self.busy
            last = now
            self._write()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[tuple[BrokerProcess, FakeDisk]]:
    register_failure_report(pytestconfig)
    workdir = tmp_path_factory.mktemp("coldreads")
    device = device_of(workdir)
    if device is None:
        pytest.skip("the temporary directory is on no block device /sys/dev/block knows")
    procfs = workdir / "procfs"
    procfs.mkdir()
    disk = FakeDisk(procfs, device)
    proc = BrokerProcess(workdir, {
        "metrics.port": free_port(),
        "tidelog.read.throttle.enable": "true",
        "tidelog.read.throttle.interval.ms": 200,
        "tidelog.read.throttle.procfs.path": str(procfs),
        "tidelog.read.throttle.partition.bytes.per.sec": 0,
        "tidelog.read.throttle.residency.check.enable": "true",
    })
    proc.start()
    yield proc, disk
    proc.close()
    disk.close()


def metrics(broker: BrokerProcess) -> str:
    port = broker.properties["metrics.port"]
    return str(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())


def metric(broker: BrokerProcess, name: str, **labels: str) -> float | None:
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in metrics(broker).splitlines():
        if line.startswith(f"{name}{{") and all(w in line for w in wanted):
            return float(line.rsplit(" ", 1)[1])
    return None


def evict(data_dir: Path, topic: str) -> float | None:
    """Drop the partition's segment file from the page cache (written back first); what is left of it."""
    (segment,) = (data_dir / f"{topic}-0").glob("*.log")
    fd = os.open(segment, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return resident_fraction(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


class Reader(threading.Thread):
    """A consumer counting what it gets, with small fetches and little prefetch."""

    def __init__(self, bootstrap: str, topic: str, offset: int, pace_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.count = 0
        self.pace_s = pace_s  # time the application spends on each message
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False,
                                  "max.partition.fetch.bytes": 8192,
                                  "queued.max.messages.kbytes": 16, "fetch.wait.max.ms": 100, **FAST_CLIENT})
        self.consumer.assign([TopicPartition(topic, 0, offset)])

    def run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.count += 1
                if self.pace_s:
                    time.sleep(self.pace_s)
        self.consumer.close()


def test_resident_fraction_sees_pages_dropped_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(256 * 1024))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert resident_fraction(fd, 1000, 200_000) == 0.0
        os.pread(fd, 256 * 1024, 0)
        assert resident_fraction(fd, 1000, 200_000) == 1.0
    finally:
        os.close(fd)


def test_cold_reads_are_throttled_on_a_busy_disk_and_hot_reads_are_not(setup: tuple[BrokerProcess, FakeDisk]) -> None:
    broker, disk = setup
    cold_topic = create_topic(broker.bootstrap, unique_topic("backlog"))
    hot_topic = create_topic(broker.bootstrap, unique_topic("live"))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 8192, **FAST_CLIENT})
    for _ in range(6000):
        producer.produce(cold_topic, b"c" * 1000)
        producer.poll(0)
    assert producer.flush(30) == 0
    time.sleep(2.5)  # ten intervals: the backlog's MessageInRate falls to 0, so all of it is older than T
    assert evict(broker.data_dir, cold_topic) == 0.0

    stop = threading.Event()

    def feed() -> None:
        while not stop.wait(0.005):
            producer.produce(hot_topic, b"h" * 100)
            producer.poll(0)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    cold = Reader(broker.bootstrap, cold_topic, 0, pace_s=0.001)  # about 6 s for the backlog, unthrottled
    hot = Reader(broker.bootstrap, hot_topic, OFFSET_END)
    try:
        cold.start()
        hot.start()
        assert wait_until(lambda: cold.count > 100 and hot.count > 100, 15)
        cold_bytes = metric(broker, "tidelog_read_bytes_total", temperature="cold")
        assert cold_bytes is not None and cold_bytes > 0, [m for m in metrics(broker).splitlines() if "tidelog_read_" in m]

        disk.busy = 1.0
        labels = {"topic": cold_topic, "partition": "0"}
        assert wait_until(lambda: metric(broker, "tidelog_read_throttled", **labels) == 1, 10)
        reason = next(line for line in metrics(broker).splitlines() if line.startswith("tidelog_read_throttled{") and cold_topic in line)
        assert "disk utilisation" in reason and "above 0.90; cold reads" in reason
        assert metric(broker, "tidelog_read_throttled", topic=hot_topic) is None, "a hot reader is no offender"
        time.sleep(1.0)  # what librdkafka had queued drains
        cold_before, hot_before = cold.count, hot.count
        time.sleep(2.0)
        assert cold.count == cold_before, "the cold reads were held"
        assert hot.count - hot_before > 100, "the hot reads on the same disk went on"
        assert (metric(broker, "tidelog_read_throttle_held_total", **labels) or 0) > 0

        disk.busy = 0.0
        assert wait_until(lambda: metric(broker, "tidelog_read_throttled", **labels) is None, 10), "lifted on recovery"
        assert wait_until(lambda: cold.count > cold_before + 100, 10), "the cold reader resumed"
    finally:
        stop.set()
        feeder.join(5)
        producer.flush(10)
        cold.stop.set()
        hot.stop.set()
        cold.join(10)
        hot.join(10)
    checks = {(e, r): metric(broker, "tidelog_read_residency_checks_total", estimate=e, resident=r) or 0
              for e in ("cold", "hot") for r in ("yes", "no")}
    print("estimate vs mincore:", checks)
    assert checks[("cold", "no")] > 0, "cold reads of the evicted backlog found it out of the cache"
    assert checks[("hot", "yes")] > 0 and checks[("hot", "no")] == 0, "hot reads were all in the cache"
