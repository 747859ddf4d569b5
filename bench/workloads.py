"""Load tools for ``bench/compare.py``: Kafka's own perf tools and confluent-kafka processes.

Every tool runs as its own process (so its CPU is not the driver's) and returns a ``ToolRun``: what it
measured plus the CPU seconds the tool process used (from ``wait4``), which tells whether the client
was the limit.

- Kafka's tools (``org.apache.kafka.tools.*`` from kafka-tools, run with ``java -cp '<libs>/*'``):
  ``ProducerPerformance``, ``ConsumerPerformance`` (fetch rate, excluding the group join) and
  ``EndToEndLatency`` (one record at a time: produce, wait until consumed, repeat).
- confluent-kafka tools, this file run as a script (``python bench/workloads.py produce|consume|latency
  ...``, one JSON line on stdout). ``--bootstrap mock`` runs the same loop against librdkafka's
  in-process mock cluster (``test.mock.num.brokers=1``): that figure is the tool's own ceiling.

    python bench/workloads.py produce --bootstrap 127.0.0.1:9092 --topic t --count 100000 --size 1024
    python bench/workloads.py consume --bootstrap mock --topic t --count 100000 --size 1024
    python bench/workloads.py latency --bootstrap 127.0.0.1:9092 --topic lat --rate 2000 --seconds 20 --size 200
    python bench/workloads.py raw-produce --bootstrap 127.0.0.1:9092 --topic t --count 1000000 --size 1024

``raw-produce`` is no client library: it sends one prebuilt 1 MiB Produce request (v8, acks=all,
not idempotent) over and over with ``--inflight`` requests outstanding, so it costs almost nothing
per byte and measures how fast the broker itself takes records in (``--ca ca.pem``: over a TLS
listener, to measure the broker's TLS path; ``--batch-bytes 16000``: small requests). ``raw-consume`` is its reading
twin: plain Fetch requests (v4) for every partition, one at a time, with the consumers' default
limits, walking only the batch headers; it measures how fast the broker serves reads.

    python bench/workloads.py raw-consume --bootstrap 127.0.0.1:9092 --topic t --count 500000 --partitions 64

``failover`` is a paced acks=all producer to one partition that kills the partition's leader process
(``--kill-pid``, SIGKILL) after ``--before`` seconds and reports the time from the kill to the first
acknowledged record produced after it (``failover_s``), and until Metadata names another leader:

    python bench/workloads.py failover --bootstrap 127.0.0.1:9092,127.0.0.1:9093 --topic f --partition 1 \\
        --kill-pid 4242 --old-leader 2 --rate 1000 --size 1024
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MB = 1_000_000  # MB/s here is 10^6 bytes/s for every tool (Kafka's tools print 2^20; recomputed from records/s)
MIB = 1 << 20
HERE = Path(__file__).resolve()


@dataclass
class ToolRun:
    """One load-tool run: its figures, wall time and the tool process's own CPU seconds."""

    tool: str
    figures: dict[str, float]
    wall_s: float
    cpu_s: float
    output: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def client_cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class ToolFailed(Exception):
    pass


def run_tool(tool: str, command: list[str], timeout: float) -> tuple[str, float, float]:
    """Run ``command``; (stdout, wall seconds, CPU seconds of the process and its children)."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        out_chunks: list[bytes] = []
        err_chunks: list[bytes] = []
        readers = [
            threading.Thread(target=lambda: out_chunks.append(process.stdout.read() if process.stdout else b"")),
            threading.Thread(target=lambda: err_chunks.append(process.stderr.read() if process.stderr else b"")),
        ]
        for reader in readers:
            reader.start()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        for reader in readers:
            reader.join()
    finally:
        timer.cancel()
    wall = time.monotonic() - started
    stdout = b"".join(out_chunks).decode(errors="replace")
    stderr = b"".join(err_chunks).decode(errors="replace")
    if process.returncode != 0:
        raise ToolFailed(f"{tool} exited with {process.returncode} after {wall:.1f} s:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    return stdout + ("\n" + stderr if stderr else ""), wall, usage.ru_utime + usage.ru_stime


# --- Kafka's tools -----------------------------------------------------------------------------------

def _java(libs: Path, main: str, *arguments: str) -> list[str]:
    return ["java", "-Xmx1G", "-XX:+UseG1GC", "-Dlog4j2.level=WARN", "-cp", f"{libs}/*",
            f"org.apache.kafka.tools.{main}", *arguments]


PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency"
    r"(?:, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th)?"
)


def java_produce(libs: Path, bootstrap: str, topic: str, count: int, size: int, props: dict[str, str],
                 timeout: float = 600) -> ToolRun:
    command = _java(libs, "ProducerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--num-records", str(count), "--record-size", str(size), "--throughput", "-1",
                    "--command-property", *[f"{k}={v}" for k, v in props.items()])
    out, wall, cpu = run_tool("ProducerPerformance", command, timeout)
    matches = PRODUCER_SUMMARY.findall(out)
    if not matches:
        raise ToolFailed(f"ProducerPerformance printed no summary:\n{out[-2000:]}")
    sent, rate, _mib_s, avg, peak, p50, _p95, p99, p999 = matches[-1]
    if int(sent) != count:
        raise ToolFailed(f"ProducerPerformance sent {sent} of {count}:\n{out[-2000:]}")
    figures = {"records_s": float(rate), "mb_s": float(rate) * size / MB, "lat_avg_ms": float(avg),
               "lat_max_ms": float(peak)}
    if p50:
        figures |= {"lat_p50_ms": float(p50), "lat_p99_ms": float(p99), "lat_p999_ms": float(p999)}
    return ToolRun("ProducerPerformance", figures, wall, cpu, out)


def java_consume(libs: Path, bootstrap: str, topic: str, count: int, size: int, timeout: float = 600) -> ToolRun:
    command = _java(libs, "ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--num-records", str(count), "--timeout", "30000",
                    "--command-property", "auto.offset.reset=earliest", "enable.auto.commit=false")
    out, wall, cpu = run_tool("ConsumerPerformance", command, timeout)
    lines = [line for line in out.splitlines() if line.count(",") >= 9]
    if len(lines) < 2:
        raise ToolFailed(f"ConsumerPerformance printed no stats:\n{out[-2000:]}")
    header = [h.strip() for h in lines[0].split(",")]
    values = dict(zip(header, [v.strip() for v in lines[-1].split(",")], strict=False))
    consumed = int(values["data.consumed.in.nMsg"])
    if consumed < count:
        raise ToolFailed(f"ConsumerPerformance consumed {consumed} of {count}:\n{out[-2000:]}")
    records_s = float(values["fetch.nMsg.sec"])
    figures = {"records_s": records_s, "mb_s": records_s * size / MB,
               "rebalance_ms": float(values["rebalance.time.ms"]), "fetch_ms": float(values["fetch.time.ms"])}
    return ToolRun("ConsumerPerformance", figures, wall, cpu, out)


E2E_PERCENTILES = re.compile(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)")
E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")


def java_end_to_end(libs: Path, bootstrap: str, topic: str, count: int, size: int, timeout: float = 600) -> ToolRun:
    command = _java(libs, "EndToEndLatency", bootstrap, topic, str(count), "all", str(size))
    out, wall, cpu = run_tool("EndToEndLatency", command, timeout)
    percentiles, avg = E2E_PERCENTILES.search(out), E2E_AVG.search(out)
    if percentiles is None or avg is None:
        raise ToolFailed(f"EndToEndLatency printed no percentiles:\n{out[-2000:]}")
    p50, p99, p999 = (float(v) for v in percentiles.groups())
    figures = {"lat_avg_ms": float(avg.group(1)), "lat_p50_ms": p50, "lat_p99_ms": p99, "lat_p999_ms": p999}
    return ToolRun("EndToEndLatency", figures, wall, cpu, out)


# --- confluent-kafka tools (this file as a script) ---------------------------------------------------

def confluent(mode: str, bootstrap: str, topic: str, timeout: float = 600, **options: object) -> ToolRun:
    command = [sys.executable, str(HERE), mode, "--bootstrap", bootstrap, "--topic", topic]
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    out, wall, cpu = run_tool(f"confluent-kafka {mode}", command, timeout)
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return ToolRun(f"confluent-kafka {mode}", result, wall, cpu, out)


def _client_config(bootstrap: str) -> dict[str, Any]:
    if bootstrap == "mock":
        return {"bootstrap.servers": "mock", "test.mock.num.brokers": 1, "log_level": 3}
    return {"bootstrap.servers": bootstrap, "log_level": 3}


def _producer_config(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    return {
        **_client_config(bootstrap),
        "acks": args.acks, "linger.ms": args.linger_ms, "batch.size": args.batch_bytes,
        "message.max.bytes": max(args.batch_bytes + 4096, 1_000_000),
        "enable.idempotence": args.idempotence, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }


def _produce_loop(producer: Any, topic: str, count: int, size: int, keys: int) -> float:
    payload = b"x" * size
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for i in range(count):
        key = str(i % keys).encode() if keys else None
        while True:
            try:
                produce(topic, payload, key)
                break
            except BufferError:
                poll(0.005)
    remaining = producer.flush(300)
    if remaining:
        raise SystemExit(f"{remaining} messages not delivered")
    return time.perf_counter() - started


def _errors_counter() -> tuple[list[int], Any]:
    errors = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors[0] += 1
    return errors, on_delivery


def tool_produce(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    errors, on_delivery = _errors_counter()
    producer = Producer({**_producer_config(args, args.bootstrap), "on_delivery": on_delivery})
    producer.produce(args.topic, b"warm-up")  # connection, metadata, producer id: outside the timing
    producer.flush(60)
    elapsed = _produce_loop(producer, args.topic, args.count, args.size, args.keys)
    if errors[0]:
        raise SystemExit(f"{errors[0]} delivery errors")
    return {"records_s": args.count / elapsed, "mb_s": args.count * args.size / elapsed / MB, "seconds": elapsed}


def tool_consume(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = args.bootstrap
    if bootstrap == "mock":  # fill the mock cluster first, then read it over a real socket
        producer = Producer(_producer_config(args, "mock"))
        _produce_loop(producer, args.topic, args.count, args.size, 0)
        broker = next(iter(producer.list_topics(timeout=10).brokers.values()))
        bootstrap = f"{broker.host}:{broker.port}"
    consumer = Consumer({
        **_client_config(bootstrap), "group.id": "bench-unused", "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": MIB,
        # Prefetch freely: consume(n, t) below returns as soon as 10,000 records are queued.
        "queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 1_048_576,
    })
    partitions = consumer.list_topics(args.topic, timeout=30).topics[args.topic].partitions
    started = time.perf_counter()
    consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
    seen = 0
    deadline = time.monotonic() + 300
    while seen < args.count and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < args.count:
        raise SystemExit(f"consumed {seen} of {args.count}")
    return {"records_s": seen / elapsed, "mb_s": seen * args.size / elapsed / MB, "seconds": elapsed}


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def tool_latency(args: argparse.Namespace) -> dict[str, Any]:
    """Produce ``rate`` records/s for ``seconds`` (each carrying its send time), consume them, report."""
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    consumer = Consumer({**_client_config(args.bootstrap), "group.id": "bench-unused", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(args.topic, 0, OFFSET_END)])
    consumer.consume(1, 2.0)  # let the assignment settle before the first record
    producer = Producer({**_producer_config(args, args.bootstrap)})
    producer.produce(args.topic, b"warm-up")
    producer.flush(30)
    total = int(args.rate * args.seconds)
    padding = b"x" * max(0, args.size - 8)

    def send() -> None:
        interval = 1.0 / args.rate
        start = time.monotonic()
        for i in range(total):
            due = start + i * interval
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            producer.produce(args.topic, struct.pack(">q", time.monotonic_ns()) + padding)
            producer.poll(0)
        producer.flush(30)

    sender = threading.Thread(target=send)
    sender.start()
    latencies: list[float] = []
    deadline = time.monotonic() + args.seconds + 30
    while len(latencies) < total and time.monotonic() < deadline:
        message = consumer.poll(0.1)  # consume(n, t) would wait for n records or t: poll returns the first
        if message is None:
            continue
        now = time.monotonic_ns()
        value = message.value()
        if message.error() is None and value is not None and len(value) == args.size:
            latencies.append((now - struct.unpack_from(">q", value)[0]) / 1e6)
    sender.join()
    consumer.close()
    if len(latencies) < total:
        raise SystemExit(f"received {len(latencies)} of {total}")
    latencies.sort()
    return {"lat_p50_ms": _percentile(latencies, 0.50), "lat_p99_ms": _percentile(latencies, 0.99),
            "lat_p999_ms": _percentile(latencies, 0.999), "lat_max_ms": latencies[-1], "records": len(latencies)}


def tool_failover(args: argparse.Namespace) -> dict[str, Any]:
    """Produce ``rate`` records/s to one partition; after ``before`` s kill -9 ``kill-pid`` (its leader).

    Each record carries its sequence number. The figure is the time from the kill to the first
    acknowledgement (acks=all) of a record produced after it, read on this process's monotonic clock;
    a delivery callback runs inside ``poll``, which the paced loop calls at least every ``1/rate`` s,
    so an acknowledgement is seen at most that late. Alongside: the time until Metadata (asked every
    50 ms through every broker of ``bootstrap``) names a leader other than ``old-leader``. The run
    goes on ``after`` s past that first acknowledgement, then flushes: every record must be
    acknowledged (the producer retries; idempotence keeps the retries from writing twice).
    """
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    producer = Producer({**_producer_config(args, args.bootstrap), "linger.ms": 0, "log_level": 0})
    admin = AdminClient({"bootstrap.servers": args.bootstrap, "log_level": 0})
    padding = b"x" * max(0, args.size - 8)
    state: dict[str, Any] = {"kill_seq": None, "first_ack": None, "acked": 0, "errors": 0, "error": ""}
    new_leader: list[float] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            state["error"] = str(err)
            return
        state["acked"] += 1
        after_kill = state["kill_seq"] is not None and struct.unpack_from(">q", msg.value())[0] >= state["kill_seq"]
        if after_kill and state["first_ack"] is None:
            state["first_ack"] = time.monotonic()

    def watch_metadata(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                part = admin.list_topics(args.topic, timeout=1).topics[args.topic].partitions[args.partition]
                if part.leader >= 0 and part.leader != args.old_leader:
                    new_leader.append(time.monotonic())
                    return
            except Exception:  # a broker down: ask again
                pass
            stop.wait(0.05)

    producer.produce(args.topic, struct.pack(">q", -1) + padding, partition=args.partition, on_delivery=on_delivery)
    producer.flush(60)  # connection, metadata, producer id: before the clock starts
    admin.list_topics(args.topic, timeout=10)
    stop = threading.Event()
    watcher = threading.Thread(target=watch_metadata, args=(stop,), daemon=True)
    interval = 1.0 / args.rate
    start = time.monotonic()
    kill_at = 0.0
    seq = 0
    while True:
        delay = start + seq * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.monotonic()
        if state["kill_seq"] is None and now >= start + args.before:
            os.kill(args.kill_pid, signal.SIGKILL)
            kill_at = time.monotonic()
            state["kill_seq"] = seq
            watcher.start()
        first = state["first_ack"]
        if first is not None and now >= first + args.after:
            break
        if kill_at and now >= kill_at + args.max_wait:
            break
        while True:
            try:
                producer.produce(args.topic, struct.pack(">q", seq) + padding, partition=args.partition,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
        seq += 1
    remaining = producer.flush(120)
    stop.set()
    watcher.join(5)
    if state["first_ack"] is None:
        raise SystemExit(f"no record produced after the kill was acknowledged within {args.max_wait:g} s"
                         f" ({state['errors']} delivery errors: {state['error']})")
    result = {"failover_s": state["first_ack"] - kill_at, "sent": seq, "acked": state["acked"] - 1,
              "errors": state["errors"], "unacknowledged": remaining, "last_error": state["error"]}
    if new_leader:
        result["new_leader_s"] = new_leader[0] - kill_at
    return result


# --- the broker's own intake ceiling (raw pipelined Produce) ---------------------------------------------

PRODUCE_V8 = 8  # ProduceRequest v3-v8 share one non-flexible layout; every broker here accepts v8


def record_batch(count: int, size: int) -> bytes:
    """One uncompressed v2 record batch of ``count`` keyless records of ``size`` bytes."""
    from tidelog.protocol.records import Record, build_batch

    now = int(time.time() * 1000)
    return build_batch([Record(offset, now, None, b"x" * size) for offset in range(count)])


def produce_request_head(correlation_id: int, topic: str, batch_size: int, acks: int) -> bytes:
    """A Produce v8 request for one batch of ``batch_size`` bytes to partition 0, up to the batch itself."""
    name = topic.encode()
    body = (struct.pack(">hhih", 0, PRODUCE_V8, correlation_id, 3) + b"raw"  # header v1: key, version, id, client
            + struct.pack(">hhi", -1, acks, 30_000)  # transactional id null, acks, timeout
            + struct.pack(">ih", 1, len(name)) + name + struct.pack(">iii", 1, 0, batch_size))
    return struct.pack(">i", len(body) + batch_size) + body


def produce_request(correlation_id: int, topic: str, batch: bytes, acks: int) -> bytes:
    return produce_request_head(correlation_id, topic, len(batch), acks) + batch


def _send_parts(sock: socket.socket, parts: list[bytes]) -> None:
    """``sendall`` of the parts joined, without joining them: no copy of a large batch per request."""
    if isinstance(sock, ssl.SSLSocket):  # no sendmsg over TLS
        for part in parts:
            sock.sendall(part)
        return
    views = [memoryview(part) for part in parts]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


def _produce_error(frame: bytes) -> int:
    """The partition error code of a one-topic, one-partition ProduceResponse v8 (after the correlation id)."""
    (name_length,) = struct.unpack_from(">h", frame, 8)
    (error,) = struct.unpack_from(">h", frame, 10 + name_length + 4 + 4)
    return int(error)


def tool_raw_produce(args: argparse.Namespace) -> dict[str, Any]:
    """Send the same prebuilt Produce request (one batch of ``batch-bytes``) ``inflight`` at a time.

    The client does almost nothing per byte (no serialisation, no batching, no delivery reports, and
    the batch is sent from the same buffer every time, after a request head of its own), so the
    figure is the broker's intake rate: what it accepts, acknowledges and writes per second. (Until
    session 6 each request was built by joining head and batch, 2 MB of fresh memory per request:
    the client then used 1.0-1.1 s of CPU per 500 MB, more than half of it copying and faulting
    that memory in; now 0.4-0.5 s.)
    """
    host, port = args.bootstrap.rsplit(":", 1)
    # Under Kafka's default message.max.bytes (1,048,588) with room for the batch and record headers.
    per_batch = max(1, min(args.batch_bytes, 1_000_000) // (args.size + 16))
    batches = -(-args.count // per_batch)
    batch = record_batch(per_batch, args.size)
    acks = -1 if args.acks == "all" else int(args.acks)
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if args.ca:  # a TLS listener: the same requests through the broker's TLS path
        sock = ssl.create_default_context(cafile=args.ca).wrap_socket(sock, server_hostname=host)
    sent = received = 0
    started = time.perf_counter()
    while received < batches:
        while sent < batches and sent - received < args.inflight:
            _send_parts(sock, [produce_request_head(sent, args.topic, len(batch), acks), batch])
            sent += 1
        (length,) = struct.unpack(">i", _recv_exactly(sock, 4))
        frame = _recv_exactly(sock, length)
        error = _produce_error(frame)
        if error:
            raise SystemExit(f"produce failed with error code {error}")
        received += 1
    elapsed = time.perf_counter() - started
    sock.close()
    records = batches * per_batch
    return {"records_s": records / elapsed, "mb_s": records * args.size / elapsed / MB, "seconds": elapsed,
            "requests": batches}


def failover(bootstrap: str, topic: str, partition: int, kill_pid: int, old_leader: int, rate: float, size: int,
             timeout: float = 180) -> ToolRun:
    return confluent("failover", bootstrap, topic, timeout, partition=partition, kill_pid=kill_pid,
                     old_leader=old_leader, rate=rate, size=size)


def raw_produce(bootstrap: str, topic: str, count: int, size: int, inflight: int = 8, timeout: float = 600) -> ToolRun:
    return confluent("raw-produce", bootstrap, topic, timeout, count=count, size=size, inflight=inflight)


FETCH_V4 = 4  # the oldest Fetch Kafka 4 still serves; not flexible, so it is written and read by hand here


def fetch_request(correlation_id: int, topic: str, offsets: list[int], partition_max_bytes: int,
                   max_bytes: int) -> bytes:
    name = topic.encode()
    body = (struct.pack(">hhih", 1, FETCH_V4, correlation_id, 3) + b"raw"  # header v1: key, version, id, client
            + struct.pack(">iiiib", -1, 500, 1, max_bytes, 0)  # replica, max wait, min bytes, max bytes, isolation
            + struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", len(offsets))
            + b"".join(struct.pack(">iqi", partition, offset, partition_max_bytes)
                       for partition, offset in enumerate(offsets)))
    return struct.pack(">i", len(body)) + body


def _read_fetch_response(frame: memoryview, offsets: list[int]) -> int:
    """Advance ``offsets`` past the whole batches of a FetchResponse v4 (one topic); the bytes they hold.

    A batch cut at the partition's byte limit is left for the next fetch, as clients do.
    """
    pos = 4 + 4  # correlation id, throttle time
    (topics,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    taken = 0
    for _ in range(topics):
        (name_length,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + name_length
        (partitions,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(partitions):
            partition, error, _hw, _lso, aborted = struct.unpack_from(">ihqqi", frame, pos)
            pos += 26 + max(aborted, 0) * 16
            if error:
                raise SystemExit(f"fetch of partition {partition} failed with error code {error}")
            (size,) = struct.unpack_from(">i", frame, pos)
            pos += 4
            end = pos + max(size, 0)
            batch = pos
            while batch + 27 <= end:
                base, length = struct.unpack_from(">qi", frame, batch)
                if batch + 12 + length > end:
                    break
                (last_delta,) = struct.unpack_from(">i", frame, batch + 23)
                offsets[partition] = base + last_delta + 1
                taken += 12 + length
                batch += 12 + length
            pos = end
    return taken


def tool_raw_consume(args: argparse.Namespace) -> dict[str, Any]:
    """Read ``count`` records of all ``partitions`` from offset 0 with plain Fetch requests, one at a time.

    The client's settings are the consumers' defaults (1 MiB per partition, 50 MiB per fetch), but it
    only walks the batch headers to find the next offsets: no record is decoded, no CRC checked. So
    the figure is how fast the broker serves reads, as ``raw-produce`` is for writes.
    """
    host, port = args.bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    offsets = [0] * args.partitions
    buffer = bytearray(64 * MIB)
    buffer[::4096] = b"\x01" * len(range(0, len(buffer), 4096))  # its pages faulted in now, not while timed
    taken = fetches = 0
    started = time.perf_counter()
    while sum(offsets) < args.count:
        sock.sendall(fetch_request(fetches, args.topic, offsets, MIB, 50 * MIB))
        (length,) = struct.unpack(">i", _recv_exactly(sock, 4))
        if length > len(buffer):
            buffer = bytearray(length)
        view = memoryview(buffer)[:length]
        received = 0
        while received < length:
            got = sock.recv_into(view[received:])
            if not got:
                raise ConnectionError("closed by the broker")
            received += got
        taken += _read_fetch_response(view, offsets)
        fetches += 1
    elapsed = time.perf_counter() - started
    sock.close()
    records = sum(offsets)
    return {"records_s": records / elapsed, "mb_s": taken / elapsed / MB, "seconds": elapsed, "fetches": fetches}


def raw_consume(bootstrap: str, topic: str, count: int, partitions: int = 1, timeout: float = 600) -> ToolRun:
    return confluent("raw-consume", bootstrap, topic, timeout, count=count, partitions=partitions)


# --- idle connections ----------------------------------------------------------------------------------

def open_idle_connections(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each had an ApiVersions answered and then say nothing."""
    request = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((host, port), timeout=30)
        sock.sendall(struct.pack(">i", len(request)) + request)
        header = _recv_exactly(sock, 4)
        _recv_exactly(sock, struct.unpack(">i", header)[0])
        sockets.append(sock)
    return sockets


def idle_connections_alive(sockets: list[socket.socket]) -> bool:
    for sock in sockets:
        sock.setblocking(False)
        try:
            if sock.recv(1) == b"":
                return False
        except BlockingIOError:
            pass
    return True


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["produce", "consume", "latency", "raw-produce", "raw-consume", "failover"])
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT, or 'mock' for librdkafka's mock cluster")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--keys", type=int, default=0, help="distinct keys (0: no key)")
    parser.add_argument("--acks", default="all")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=MIB)
    parser.add_argument("--idempotence", default="true")
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--inflight", type=int, default=8, help="raw-produce: requests in flight")
    parser.add_argument("--ca", default="", help="raw-produce: the CA file of a TLS listener (connect with TLS)")
    parser.add_argument("--partitions", type=int, default=1, help="raw-consume: the topic's partitions")
    parser.add_argument("--partition", type=int, default=0, help="failover: the partition written")
    parser.add_argument("--kill-pid", type=int, default=0, help="failover: the process to kill -9 (its leader)")
    parser.add_argument("--old-leader", type=int, default=-1, help="failover: the node id of that leader")
    parser.add_argument("--before", type=float, default=3, help="failover: seconds of writes before the kill")
    parser.add_argument("--after", type=float, default=1, help="failover: seconds of writes after the first ack")
    parser.add_argument("--max-wait", type=float, default=60, help="failover: give up this long after the kill")
    args = parser.parse_args()
    args.idempotence = args.idempotence.lower() == "true"
    tools = {"produce": tool_produce, "consume": tool_consume, "latency": tool_latency, "raw-produce": tool_raw_produce,
             "raw-consume": tool_raw_consume, "failover": tool_failover}
    result = tools[args.mode](args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
