"""``tidelog perf produce|consume|latency``: load tools in the spirit of Kafka's perf-test scripts.

``produce`` and ``consume`` run their loops in ``--processes`` worker processes (spawned, so each has
its own librdkafka and GIL) and add up what the workers report. Progress goes to stderr: a live bar
on a terminal, else one kafka-producer-perf-test line every ``--reporting-interval`` seconds. The
summary goes to stdout, as a table or (``--json``) one JSON object: records, bytes, errors, duration,
records/s, MB/s (2^20 bytes) and latency avg/p50/p95/p99/p99.9/max in ms.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue as queue_module
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from tidelog.cli.common import CliError, Output, add_connection_options, client_config, kafka_error_text
from tidelog.cli.perf_stats import MB, LatencyHistogram, progress_line, summary
from tidelog.cli.perf_worker import ConsumeJob, ProduceJob, payload, run_consumer, run_producer

EXAMPLES = """\
examples:
  tidelog perf produce bench --num-records 1000000 --record-size 100
  tidelog perf produce bench --duration 30 --throughput 50000 --processes 4 --acks 1
  tidelog perf produce bench --num-records 200000 --batch-size 65536 --linger-ms 20 --compression lz4 --json
  tidelog perf consume bench                         # everything up to the current end
  tidelog perf consume bench --num-records 500000 --processes 2
  tidelog perf latency bench --num-records 2000      # produce one record, read it back, repeat
"""


def add_parser(sub: Any) -> None:
    perf = sub.add_parser(
        "perf", help="load tests: produce, consume, end-to-end latency",
        description="Measure what a cluster sustains, like kafka-producer-perf-test and kafka-consumer-perf-test.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = perf.add_subparsers(dest="perf_command", required=True, metavar="COMMAND")

    def command(name: str, help: str, description: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(
            name, help=help, description=description, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        parser.add_argument("topic", metavar="TOPIC")
        parser.set_defaults(func=func)
        return parser

    produce = command("produce", "write records as fast as allowed and measure", "Write --num-records records (or for "
                      "--duration seconds) of --record-size bytes and report throughput and acknowledgement latency "
                      "(from produce() to the broker's acknowledgement).", _perf_produce)
    amount = produce.add_mutually_exclusive_group(required=True)
    amount.add_argument("--num-records", type=int, metavar="N", help="records to write (split over the processes)")
    amount.add_argument("--duration", type=float, metavar="SECONDS", help="write for this long instead")
    produce.add_argument("--record-size", type=int, default=100, metavar="BYTES", help="value size (default 100)")
    produce.add_argument("--throughput", type=float, default=-1, metavar="N", help="cap in records/s over all processes (default -1: none)")
    produce.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all", help="acknowledgements (default all)")
    produce.add_argument("--batch-size", type=int, metavar="BYTES", help="librdkafka batch.size")
    produce.add_argument("--linger-ms", type=float, default=5, metavar="MS", help="librdkafka linger.ms (default 5)")
    produce.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none")
    _common(produce)

    consume = command("consume", "read records as fast as possible and measure", "Read the topic from the beginning: "
                      "--num-records records, or for --duration seconds, or (neither) up to the end offsets it has "
                      "when the run starts. Latency is each record's age when read (now - its timestamp).", _perf_consume)
    amount = consume.add_mutually_exclusive_group()
    amount.add_argument("--num-records", type=int, metavar="N", help="records to read in all")
    amount.add_argument("--duration", type=float, metavar="SECONDS", help="read for this long")
    consume.add_argument("--idle-timeout", type=float, default=10, metavar="SECONDS", help="stop when nothing arrives for this long (default 10)")
    _common(consume)

    latency = command("latency", "end-to-end latency: produce one record, consume it, repeat", "Produce one record, "
                      "wait for its acknowledgement and for a consumer to receive it, and time the round; repeat "
                      "(like Kafka's EndToEndLatency).", _perf_latency)
    latency.add_argument("--num-records", type=int, default=1000, metavar="N", help="rounds (default 1000)")
    latency.add_argument("--record-size", type=int, default=100, metavar="BYTES", help="value size (default 100)")
    latency.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all", help="acknowledgements (default all)")
    latency.add_argument("--partition", type=int, default=0, help="partition to use (default 0)")
    latency.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_connection_options(latency)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=1, metavar="N", help="worker processes (default 1)")
    parser.add_argument("--reporting-interval", type=float, default=5.0, metavar="SECONDS",
                        help="seconds between progress lines when stderr is not a terminal (default 5)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_connection_options(parser)


def _positive(value: float | None, flag: str) -> None:
    if value is not None and value <= 0:
        raise CliError(f"{flag} must be positive", 2)


def _worker_config(args: argparse.Namespace) -> dict[str, Any]:
    config = client_config(args)
    config.pop("logger", None)  # workers attach their own
    return config


# -- progress ----------------------------------------------------------------------------------


class ProgressView:
    """A live bar on a terminal; periodic lines otherwise (both on stderr)."""

    def __init__(self, label: str, total: float | None, by_time: bool, interval_s: float, verb: str) -> None:
        self.total, self.by_time, self.interval_s, self.verb = total, by_time, interval_s, verb
        self.start = time.monotonic()
        self.window = LatencyHistogram()
        self.last_line = self.start
        self.last_records, self.last_bytes = 0, 0
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        if sys.stderr.isatty():
            count = TextColumn("{task.completed:.0f}/{task.total:.0f} s") if by_time else MofNCompleteColumn()
            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), count, TextColumn("{task.fields[rate]}"),
                                     TimeElapsedColumn(), console=Console(file=sys.stderr))
            self.progress.start()
            self.task = self.progress.add_task(label, total=total, rate="")

    def update(self, records: int, nbytes: int, window: LatencyHistogram | None = None) -> None:
        now = time.monotonic()
        if window is not None:
            self.window.merge(window)
        elapsed = now - self.start
        if self.progress is not None and self.task is not None:
            rate = f"{records / max(elapsed, 1e-9):,.0f} rec/s {nbytes / MB / max(elapsed, 1e-9):.2f} MB/s"
            self.progress.update(self.task, completed=min(elapsed, self.total or elapsed) if self.by_time else records, rate=rate)
        elif now - self.last_line >= self.interval_s:
            line = progress_line(records - self.last_records, nbytes - self.last_bytes, now - self.last_line, self.window, self.verb)
            print(line, file=sys.stderr, flush=True)
            self.last_line, self.last_records, self.last_bytes = now, records, nbytes
            self.window = LatencyHistogram()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


# -- workers -------------------------------------------------------------------------------------


def _run_workers(target: Callable[..., None], jobs: Sequence[tuple[Any, ...]], view: ProgressView,
                 ctx: Any, work_queue: Any) -> dict[str, Any]:
    """Start one process per job, follow their reports, and add up their final tallies."""
    processes = [ctx.Process(target=target, args=(*job_args,), daemon=True) for job_args in jobs]
    for process in processes:
        process.start()
    progress: dict[int, tuple[int, int]] = {}
    done: dict[int, tuple[Any, ...]] = {}
    try:
        while len(done) < len(processes):
            try:
                message = work_queue.get(timeout=0.1)
            except queue_module.Empty:
                dead = [i for i, p in enumerate(processes) if not p.is_alive() and i not in done]
                if dead and work_queue.empty():
                    raise CliError(f"perf worker {dead[0]} exited with code {processes[dead[0]].exitcode} without a report") from None
                view.update(sum(r for r, _ in progress.values()), sum(b for _, b in progress.values()))
                continue
            kind, worker = message[0], message[1]
            if kind == "failed":
                raise CliError(f"perf worker {worker} failed:\n{message[2]}")
            if kind == "progress":
                progress[worker] = (message[2], message[3])
                view.update(sum(r for r, _ in progress.values()), sum(b for _, b in progress.values()),
                            LatencyHistogram.from_wire(message[5]))
            elif kind == "done":
                done[worker] = message
    finally:
        view.close()
        for process in processes:
            if process.is_alive() and len(done) < len(processes):
                process.terminate()
            process.join(10)
    latency = LatencyHistogram()
    errors: dict[str, int] = {}
    for message in done.values():
        latency.merge(LatencyHistogram.from_wire(message[5]))
        for name, count in message[7].items():
            errors[name] = errors.get(name, 0) + count
    return {
        "records": sum(m[2] for m in done.values()), "bytes": sum(m[3] for m in done.values()),
        "errors": sum(m[4] for m in done.values()), "elapsed": max(m[6] for m in done.values()),
        "latency": latency, "error_names": errors,
    }


def _perf_produce(args: argparse.Namespace) -> int:
    for value, flag in ((args.num_records, "--num-records"), (args.duration, "--duration"), (args.record_size, "--record-size"),
                        (args.processes, "--processes")):
        _positive(value, flag)
    config = _worker_config(args)
    config.update({"acks": "all" if args.acks == "-1" else args.acks, "linger.ms": args.linger_ms,
                   "compression.type": args.compression})
    if args.batch_size is not None:
        config["batch.size"] = args.batch_size
    _check_topic(args)
    n = args.processes
    shares = [None] * n if args.num_records is None else [args.num_records // n + (1 if i < args.num_records % n else 0) for i in range(n)]
    rate = args.throughput / n if args.throughput > 0 else None
    ctx = multiprocessing.get_context("spawn")
    work_queue = ctx.Queue()
    jobs = [(ProduceJob(config, args.topic, i, args.record_size, shares[i], args.duration, rate, max(args.timeout, 10.0)), work_queue)
            for i in range(n)]
    view = ProgressView(f"producing to {args.topic}", args.num_records or args.duration, args.num_records is None,
                        args.reporting_interval, "sent")
    totals = _run_workers(run_producer, jobs, view, ctx, work_queue)
    report = summary(totals["records"], totals["bytes"], totals["errors"], totals["elapsed"], totals["latency"],
                     processes=n, record_size=args.record_size, acks=args.acks, error_names=totals["error_names"])
    _print_summary(args, report, "acknowledged")
    return 1 if report["errors"] else 0


def _check_topic(args: argparse.Namespace) -> list[int]:
    """The topic's partitions; a clean error when it does not exist (perf never creates topics)."""
    consumer = Consumer({**client_config(args), "group.id": "tidelog-perf-check"})
    try:
        metadata = consumer.list_topics(args.topic, timeout=args.timeout)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    finally:
        consumer.close()
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None or not topic.partitions:
        raise CliError(f"topic {args.topic} does not exist (create it with: tidelog topics create {args.topic})")
    return sorted(topic.partitions)


def _perf_consume(args: argparse.Namespace) -> int:
    for value, flag in ((args.num_records, "--num-records"), (args.duration, "--duration"), (args.processes, "--processes"),
                        (args.idle_timeout, "--idle-timeout")):
        _positive(value, flag)
    config = _worker_config(args)
    partitions = _check_topic(args)
    n = min(args.processes, len(partitions))
    ctx = multiprocessing.get_context("spawn")
    work_queue = ctx.Queue()
    claimed = ctx.Value("q", 0) if args.num_records is not None else None
    jobs = [(ConsumeJob(config, args.topic, i, partitions[i::n], args.num_records, args.duration, args.idle_timeout), work_queue, claimed)
            for i in range(n)]
    view = ProgressView(f"consuming {args.topic}", args.num_records or args.duration, args.duration is not None,
                        args.reporting_interval, "read")
    totals = _run_workers(run_consumer, jobs, view, ctx, work_queue)
    report = summary(totals["records"], totals["bytes"], totals["errors"], totals["elapsed"], totals["latency"],
                     processes=n, error_names=totals["error_names"])
    _print_summary(args, report, "read")
    return 1 if report["errors"] else 0


def _perf_latency(args: argparse.Namespace) -> int:
    _positive(args.num_records, "--num-records")
    _positive(args.record_size, "--record-size")
    config = client_config(args)
    _check_topic(args)
    producer = Producer({**config, "acks": "all" if args.acks == "-1" else args.acks, "linger.ms": 0})
    consumer = Consumer({**config, "group.id": "tidelog-perf-latency", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    tp = TopicPartition(args.topic, args.partition)
    try:
        _low, high = consumer.get_watermark_offsets(tp, timeout=args.timeout)
    except KafkaException as exc:
        consumer.close()
        raise CliError(kafka_error_text(exc)) from None
    consumer.assign([TopicPartition(args.topic, args.partition, high)])
    base = payload(args.record_size, 0)
    latency, errors = LatencyHistogram(), 0
    view = ProgressView(f"round trips on {args.topic}-{args.partition}", args.num_records, False, 5.0, "round-tripped")
    start = time.monotonic()
    try:
        for i in range(args.num_records):
            value = (f"{i:012d}".encode() + base)[: max(args.record_size, 12)]
            began = time.perf_counter()
            producer.produce(args.topic, value, partition=args.partition)
            producer.flush(args.timeout)
            if _receive(consumer, value, args.timeout):
                sample = LatencyHistogram()
                sample.record(time.perf_counter() - began)
                latency.merge(sample)
                view.update(i + 1, (i + 1) * len(value), sample)
            else:
                errors += 1
    finally:
        view.close()
        consumer.close()
    report = summary(latency.count, latency.count * max(args.record_size, 12), errors, time.monotonic() - start, latency,
                     acks=args.acks, partition=args.partition)
    _print_summary(args, report, "round trips")
    return 1 if errors else 0


def _receive(consumer: Consumer, value: bytes, timeout_s: float) -> bool:
    """Poll until ``value`` arrives (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.05)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise CliError(f"{error.name()}: {error.str()}")
            continue
        if msg.value() == value:
            return True
    return False


def _print_summary(args: argparse.Namespace, report: dict[str, Any], what: str) -> None:
    out = Output(args.json)
    if args.json:
        out.json(report)
        return
    lat = report["latency_ms"]
    out.table(["", ""], [
        ("records", f"{report['records']} {what}"),
        ("errors", report["errors"]),
        ("bytes", report["bytes"]),
        ("duration", f"{report['duration_s']:.2f} s"),
        ("throughput", f"{report['records_per_sec']:.1f} records/s, {report['mb_per_sec']:.2f} MB/s"),
        ("latency ms", "  ".join(f"{name} {lat[name]:.2f}" for name in ("avg", "p50", "p95", "p99", "p99.9", "max"))),
    ], show_header=False)
    for name, count in report.get("error_names", {}).items():
        out.note(f"{count} error(s): {name}")
