"""The load loops of ``tidelog perf``; each runs in its own process and reports through a queue.

Messages put on the queue (tuples, first item the kind):

- ``("progress", worker, records, bytes, errors, window)``: running totals of acknowledged (produce)
  or read (consume) records, about every ``REPORT_EVERY_S``; ``window`` is the latency histogram of
  the records since the previous report (``LatencyHistogram.to_wire()``);
- ``("done", worker, records, bytes, errors, histogram, elapsed_s, error_names)`` once at the end;
- ``("failed", worker, message)`` when the loop could not run at all.

Produce latency is librdkafka's own measure, from ``produce()`` to the acknowledgement
(``Message.latency()``). Consume latency is the record's age when read (now minus its timestamp),
which is end-to-end latency when the records are fresh.
"""

from __future__ import annotations

import logging
import random
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from tidelog.cli.perf_stats import LatencyHistogram

REPORT_EVERY_S = 0.25


class Queue(Protocol):
    def put(self, item: Any) -> None: ...


class Counter(Protocol):
    """A shared ``multiprocessing.Value('q')``: records claimed by all consumer workers."""

    value: int

    def get_lock(self) -> Any: ...


def payload(size: int, seed: int) -> bytes:
    """Random upper-case letters, like kafka-producer-perf-test's payload."""
    return bytes(random.Random(seed).choices(range(65, 91), k=size))


@dataclass
class Tally:
    records: int = 0
    bytes: int = 0
    errors: int = 0
    error_names: dict[str, int] = field(default_factory=dict)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    window: LatencyHistogram = field(default_factory=LatencyHistogram)
    next_report: float = 0.0

    def ok(self, nbytes: int, latency_s: float | None) -> None:
        self.records += 1
        self.bytes += nbytes
        if latency_s is not None:
            self.latency.record(latency_s)
            self.window.record(latency_s)

    def failed(self, error: KafkaError) -> None:
        self.errors += 1
        name = f"{error.name()}: {error.str()}"
        self.error_names[name] = self.error_names.get(name, 0) + 1

    def report(self, queue: Queue, worker: int, now: float, force: bool = False) -> None:
        if force or now >= self.next_report:
            queue.put(("progress", worker, self.records, self.bytes, self.errors, self.window.to_wire()))
            self.window = LatencyHistogram()
            self.next_report = now + REPORT_EVERY_S

    def done(self, queue: Queue, worker: int, elapsed_s: float) -> None:
        self.report(queue, worker, time.monotonic(), force=True)
        queue.put(("done", worker, self.records, self.bytes, self.errors, self.latency.to_wire(), elapsed_s, self.error_names))


@dataclass
class ProduceJob:
    config: dict[str, Any]
    topic: str
    worker: int
    record_size: int
    num_records: int | None  # this worker's share; None with a duration
    duration_s: float | None
    throughput: float | None  # records/s for this worker; None: as fast as possible
    flush_timeout_s: float = 60.0


def run_producer(job: ProduceJob, queue: Queue) -> None:
    try:
        _produce(job, queue)
    except Exception:
        queue.put(("failed", job.worker, traceback.format_exc()))


def _produce(job: ProduceJob, queue: Queue) -> None:
    producer = Producer({**job.config, "logger": logging.getLogger("tidelog.client")})
    value = payload(job.record_size, job.worker)
    tally = Tally()

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            tally.failed(err)
        else:
            tally.ok(job.record_size, msg.latency())

    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        if job.num_records is not None and sent >= job.num_records:
            break
        if job.duration_s is not None and now - start >= job.duration_s:
            break
        if job.throughput:
            ahead = sent / job.throughput - (now - start)
            if ahead > 0.001:
                producer.poll(min(ahead, 0.05))
                continue
        try:
            producer.produce(job.topic, value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            continue
        sent += 1
        producer.poll(0)
        tally.report(queue, job.worker, now)
    deadline = time.monotonic() + job.flush_timeout_s
    while len(producer) and time.monotonic() < deadline:
        producer.flush(0.25)
        tally.report(queue, job.worker, time.monotonic())
    elapsed = time.monotonic() - start
    tally.errors += len(producer)  # never acknowledged
    tally.done(queue, job.worker, elapsed)


@dataclass
class ConsumeJob:
    config: dict[str, Any]
    topic: str
    worker: int
    partitions: list[int]
    num_records: int | None  # total over all workers (claimed through the shared counter)
    duration_s: float | None
    idle_timeout_s: float


def run_consumer(job: ConsumeJob, queue: Queue, claimed: Counter | None) -> None:
    try:
        _consume(job, queue, claimed)
    except Exception:
        queue.put(("failed", job.worker, traceback.format_exc()))


def _claim(claimed: Counter | None, limit: int | None, wanted: int) -> int:
    if claimed is None or limit is None:
        return wanted
    with claimed.get_lock():
        granted = max(0, min(wanted, limit - claimed.value))
        claimed.value += granted
    return granted


def _consume(job: ConsumeJob, queue: Queue, claimed: Counter | None) -> None:
    consumer = Consumer({**job.config, "logger": logging.getLogger("tidelog.client"), "group.id": f"tidelog-perf-{job.worker}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    tally = Tally()
    try:
        # Without a count or a duration: read up to the end offsets as they are now.
        ends = {p: consumer.get_watermark_offsets(TopicPartition(job.topic, p), timeout=30)[1] for p in job.partitions}
        next_offsets = {p: 0 for p in job.partitions}
        until_end = job.num_records is None and job.duration_s is None
        consumer.assign([TopicPartition(job.topic, p, OFFSET_BEGINNING) for p in job.partitions])
        start = last = time.monotonic()
        idle = False
        while True:
            now = time.monotonic()
            if job.duration_s is not None and now - start >= job.duration_s:
                break
            if job.num_records is not None and claimed is not None and claimed.value >= job.num_records:
                break
            if until_end and all(next_offsets[p] >= ends[p] for p in job.partitions):
                break
            if now - last >= job.idle_timeout_s:
                idle = True
                break
            messages = [m for m in consumer.consume(num_messages=1000, timeout=0.1) if _usable(m, tally)]
            granted = _claim(claimed, job.num_records, len(messages))
            if granted:
                last = time.monotonic()
            now_ms = time.time() * 1000
            for msg in messages[:granted]:
                next_offsets[int(msg.partition() or 0)] = int(msg.offset() or 0) + 1
                ts_type, ts = msg.timestamp()
                age = max(0.0, (now_ms - ts) / 1000) if ts_type and ts > 0 else None
                tally.ok(len(msg.key() or b"") + len(msg.value() or b""), age)
            tally.report(queue, job.worker, time.monotonic())
        # A run that ended by waiting in vain is timed to its last record.
        tally.done(queue, job.worker, (last if idle else time.monotonic()) - start)
    finally:
        consumer.close()


def _usable(msg: Message, tally: Tally) -> bool:
    error = msg.error()
    if error is None:
        return True
    if error.code() != KafkaError._PARTITION_EOF:
        tally.failed(error)
    return False
