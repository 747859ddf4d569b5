"""A durability checker for fault tests: numbered records in, every acknowledged one read back once.

While a scenario breaks the cluster, ``Checker`` runs:

- ``producers`` threads, each its own confluent-kafka producer (acks=all, enable.idempotence=true,
  message.timeout.ms long enough to ride out any failover), writing records ``b"<producer>:<seq>"`` at
  a steady rate, record ``seq`` to partition ``seq % partitions``. Every delivery report is kept:
  acknowledged (with its partition, offset and the moment it arrived) or failed (with the error).
- A metadata poller (every 100 ms, Metadata v9 to every broker, the answer with the highest leader
  epoch per partition winning): a partition is *without a live leader* while that answer names no
  leader or names a broker the scenario has taken down (``mark_down``). The longest such stretch of
  any partition is ``no_leader_s``.

``stop`` ends production (each producer flushes what it has queued). After the scenario has brought
the cluster back (every replica in sync), ``verify`` reads every partition from offset 0 to its high
watermark (a consumer reads from the leaders) and compares:

- lost: acknowledged values not read back; duplicated: values read more than once;
- misplaced: acknowledged values read at another offset than their delivery report said;
- offset_gaps: offsets missing between 0 and the high watermark (a partition's offsets must be
  0, 1, 2, ... with no control records: these producers are not transactional);
- reordered: a producer's records in one partition not in the order it sent them (idempotence keeps it);
- diverged: partitions whose replicas do not hold the same batches (base offset, count, CRC) on disk;
- write_gap_s: the longest time between two acknowledgements on one partition, what a client felt.

The figures go in a :class:`Figures`; ``Figures.row`` is the scenario's line of the table in
docs/cluster.md ("Faults").
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from helpers.clients import watermark_offsets
from helpers.raw_client import RawClient

POLL_INTERVAL_S = 0.1
QUIET = {"log_level": 2}  # librdkafka's per-connection complaints while brokers die are expected here


@dataclass
class Figures:
    scenario: str
    produced: int = 0
    acknowledged: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    misplaced: int = 0
    offset_gaps: int = 0
    reordered: int = 0
    diverged: int = 0
    no_leader_s: float = 0.0
    write_gap_s: float = 0.0
    errors: list[str] = field(default_factory=list)  # the first few failed deliveries, for the report
    notes: dict[str, float] = field(default_factory=dict)  # scenario-specific figures

    HEADER = ("| scenario | acknowledged | lost | duplicated | failed | seconds without a leader "
              "| longest write gap (s) | other |\n|---|---|---|---|---|---|---|---|")

    def row(self) -> str:
        other = ", ".join(f"{key} {value:.2f}" if "(s)" in key else f"{key} {value:g}"
                          for key, value in self.notes.items()) or "-"
        return (f"| {self.scenario} | {self.acknowledged} | {self.lost} | {self.duplicated} | {self.failed} "
                f"| {self.no_leader_s:.2f} | {self.write_gap_s:.2f} | {other} |")

    def problems(self) -> list[str]:
        """Everything that breaks the durability contract; empty when the scenario passed."""
        found = [f"{name} = {value}" for name in ("lost", "duplicated", "misplaced", "offset_gaps", "reordered",
                                                  "diverged", "failed")
                 if (value := getattr(self, name))]
        if self.acknowledged == 0:
            found.append("nothing was acknowledged")
        return found + self.errors[:5]


@dataclass(frozen=True, slots=True)
class Ack:
    partition: int
    offset: int
    at: float  # time.monotonic() when the delivery report arrived


class _ProducerThread(threading.Thread):
    def __init__(self, checker: Checker, number: int) -> None:
        super().__init__(daemon=True, name=f"checker-producer-{number}")
        self.checker = checker
        self.number = number
        self.sent = 0
        self.unflushed = 0

    def run(self) -> None:
        c = self.checker
        config: dict[str, object] = {
            "bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120_000, "client.id": f"checker-{self.number}", **QUIET,
        }
        if c.client_log is not None:
            # librdkafka's idempotence story (PIDs, epoch bumps and why, drains) into the file
            config |= {"debug": "eos", "log_level": 7, "logger": c.client_logger(self.number)}
        producer = Producer(config)
        interval = 1.0 / c.rate
        next_at = time.monotonic()
        while not c._stop.is_set():
            value = b"%d:%d" % (self.number, self.sent)
            producer.produce(c.topic, value=value, partition=self.sent % c.partitions, on_delivery=c._delivered)
            self.sent += 1
            next_at += interval
            while (wait := next_at - time.monotonic()) > 0:
                producer.poll(wait)
            producer.poll(0)
        self.unflushed = producer.flush(150)


class Checker:
    def __init__(self, bootstrap: str, topic: str, partitions: int, *, producers: int = 3, rate: float = 150.0,
                 client_log: Path | None = None) -> None:
        self.bootstrap = bootstrap
        self.client_log = client_log  # the producers' librdkafka eos debug lines go here when set
        self._log_handler: logging.Handler | None = None
        self.topic = topic
        self.partitions = partitions
        self.rate = rate  # records per second per producer
        self.acks: dict[bytes, Ack] = {}
        self.failures: list[tuple[bytes, KafkaError]] = []
        self._down: set[int] = set()
        self._stop = threading.Event()
        self._threads = [_ProducerThread(self, n) for n in range(producers)]
        self._poller = threading.Thread(target=self._poll_metadata, daemon=True, name="checker-metadata")
        self._no_leader_since: dict[int, float] = {}
        self.no_leader_s = 0.0
        self.started_at = 0.0
        self.stopped_at = 0.0

    # -- the run ------------------------------------------------------------------------------------

    def client_logger(self, number: int) -> logging.Logger:
        assert self.client_log is not None
        if self._log_handler is None:
            self._log_handler = logging.FileHandler(self.client_log)
            self._log_handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        logger = logging.getLogger(f"checker-{self.client_log.parent.name}-{number}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        if self._log_handler not in logger.handlers:
            logger.addHandler(self._log_handler)
        return logger

    def start(self) -> Checker:
        self.started_at = time.monotonic()
        for thread in self._threads:
            thread.start()
        self._poller.start()
        return self

    def mark_down(self, node: int) -> None:
        """From now on a partition that Metadata says ``node`` leads counts as without a live leader."""
        self._down.add(node)

    def mark_up(self, node: int) -> None:
        self._down.discard(node)

    def acknowledged_since(self, moment: float) -> int:
        return sum(1 for ack in list(self.acks.values()) if ack.at >= moment)

    def wait_for_acks(self, count: int, *, since: float, timeout: float = 30.0) -> float:
        """Block until ``count`` records were acknowledged after ``since``; the seconds it took."""
        deadline = time.monotonic() + timeout
        while self.acknowledged_since(since) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {count} acknowledgements within {timeout} s of the fault")
            time.sleep(0.05)
        return time.monotonic() - since

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(180)
        self.stopped_at = time.monotonic()
        self._poller.join(10)
        if self._log_handler is not None:
            self._log_handler.close()

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        value = message.value()
        assert value is not None
        if error is None:
            self.acks[value] = Ack(int(message.partition()), int(message.offset()), time.monotonic())
        else:
            self.failures.append((value, error))

    def _poll_metadata(self) -> None:
        addresses = [(host, int(port)) for host, _, port in (a.rpartition(":") for a in self.bootstrap.split(","))]
        clients: dict[tuple[str, int], RawClient] = {}
        while not self._stop.is_set():
            views = [view for address in addresses if (view := _leaders_seen_by(clients, address, self.topic))]
            now = time.monotonic()
            for index in range(self.partitions):
                # The freshest view wins (highest leader epoch), as clients do (KIP-320): a broker cut
                # off from etcd keeps answering with the image it had.
                seen = [view[index] for view in views if index in view]
                if not seen:
                    continue
                _epoch, leader = max(seen)
                if leader < 0 or leader in self._down:
                    self._no_leader_since.setdefault(index, now)
                elif index in self._no_leader_since:
                    self.no_leader_s = max(self.no_leader_s, now - self._no_leader_since.pop(index))
            time.sleep(POLL_INTERVAL_S)
        for client in clients.values():
            client.close()
        now = time.monotonic()
        for since in self._no_leader_since.values():
            self.no_leader_s = max(self.no_leader_s, now - since)

    # -- the verdict ----------------------------------------------------------------------------------

    def verify(self, scenario: str, replica_dirs: dict[int, Iterable[Path]] | None = None) -> Figures:
        """Read everything back and count. ``replica_dirs``: partition → the data dirs of its replicas,
        to compare what each holds on disk."""
        figures = Figures(scenario, no_leader_s=self.no_leader_s)
        figures.produced = sum(t.sent for t in self._threads)
        figures.acknowledged = len(self.acks)
        figures.failed = len(self.failures) + sum(t.unflushed for t in self._threads)
        figures.errors = [f"{value!r}: {error}" for value, error in self.failures[:5]]
        compare(figures, self.acks, read_back(self.bootstrap, self.topic, self.partitions))
        figures.write_gap_s = longest_write_gap(self.acks.values())
        if replica_dirs is not None:
            figures.diverged = diverged_partitions(self.topic, replica_dirs)
        return figures

def compare(figures: Figures, acks: dict[bytes, Ack], read: dict[int, list[tuple[int, bytes]]]) -> None:
    """Count into ``figures`` what the read-back (partition → [(offset, value)]) says of the acks."""
    found: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for partition, records in read.items():
        offsets = [offset for offset, _ in records]
        figures.offset_gaps += (offsets[-1] + 1 - len(offsets)) if offsets else 0
        if offsets != sorted(set(offsets)):
            figures.offset_gaps += 1
        last_seq: dict[bytes, int] = {}
        for offset, value in records:
            found[value].append((partition, offset))
            producer, _, seq = value.partition(b":")
            if int(seq) <= last_seq.get(producer, -1):
                figures.reordered += 1
            last_seq[producer] = int(seq)
    figures.duplicated = sum(len(places) - 1 for places in found.values())
    for value, ack in acks.items():
        places = found.get(value)
        if not places:
            figures.lost += 1
        elif (ack.partition, ack.offset) not in places:
            figures.misplaced += 1


def longest_write_gap(acks: Iterable[Ack]) -> float:
    """The longest time between two acknowledgements on one partition."""
    return write_gap_where(acks)[0]


def write_gap_where(acks: Iterable[Ack]) -> tuple[float, int, float]:
    """The longest time between two acknowledgements on one partition: (seconds, partition, the
    monotonic moment of the acknowledgement before it), for a failure message to place it."""
    times: dict[int, list[float]] = defaultdict(list)
    for ack in acks:
        times[ack.partition].append(ack.at)
    longest: tuple[float, int, float] = (0.0, -1, 0.0)
    for partition, moments in times.items():
        moments.sort()
        for a, b in pairwise(moments):
            if b - a > longest[0]:
                longest = (b - a, partition, a)
    return longest


def _leaders_seen_by(clients: dict[tuple[str, int], RawClient], address: tuple[str, int],
                    topic: str) -> dict[int, tuple[int, int]]:
    """partition → (leader epoch, leader) as one broker's Metadata says; empty when it does not answer."""
    try:
        client = clients.get(address) or clients.setdefault(address, RawClient(*address, timeout=1.0))
        response = client.call(MetadataRequest(
            topics=(MetadataRequestTopic(name=TopicName(topic)),), allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
        ))
    except Exception:  # down, refusing, or too slow: no view from it this round
        stale = clients.pop(address, None)
        if stale is not None:
            stale.close()
        return {}
    return {int(p.partition_index): (int(p.leader_epoch), int(p.leader_id))
            for t in response.topics if t.error_code == 0 for p in t.partitions}


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` from offset 0 to the high watermark: partition → [(offset, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fault-checker", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": False, **QUIET})
    try:
        ends = {p: watermark_offsets(consumer, TopicPartition(topic, p), 30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        next_offset = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout
        while any(next_offset[p] < ends[p] for p in got):
            if time.monotonic() > deadline:
                raise AssertionError(f"read back stopped at {next_offset}, high watermarks {ends}")
            for message in consumer.consume(1000, 0.5):
                if message.error():
                    continue
                value = message.value()
                assert value is not None
                got[message.partition()].append((message.offset(), value))
                next_offset[message.partition()] = message.offset() + 1
        return got
    finally:
        consumer.close()


def stored_batches(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(base offset, record count, CRC) of every batch in a replica's segment files."""
    batches = []
    for segment in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base_offset, length = struct.unpack_from(">qi", data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break  # preallocated or not yet written tail
            (crc,) = struct.unpack_from(">I", data, pos + 17)
            (count,) = struct.unpack_from(">i", data, pos + 57)
            batches.append((base_offset, count, crc))
            pos += 12 + length
    return batches


def diverged_partitions(topic: str, replica_dirs: dict[int, Iterable[Path]], timeout: float = 10.0) -> int:
    """Partitions whose replicas still hold different batches after ``timeout`` (followers may be one
    fetch behind when this starts)."""
    deadline = time.monotonic() + timeout
    while True:
        differing = 0
        for partition, dirs in replica_dirs.items():
            held = {tuple(stored_batches(d, topic, partition)) for d in dirs}
            differing += len(held) > 1
        if differing == 0 or time.monotonic() > deadline:
            return differing
        time.sleep(0.2)
