"""``tidelog produce``: the console producer (kafka-console-producer / kcat -P), over the Kafka protocol."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from tidelog.cli.common import CliError, Output, add_connection_options, client_config, parse_assignments
from tidelog.cli.formats import FormatError, ProducedRecord, parse_json_line, parse_raw_line

EXAMPLES = """\
examples:
  echo hello | tidelog produce orders
  tidelog produce orders -m first -m second                   # values from the command line
  printf 'k1:v1\\nk2:v2\\n' | tidelog produce orders --key-separator :
  tidelog produce orders --header source=cli --partition 2 < lines.txt
  printf 'trace:abc\\tpayload\\n' | tidelog produce orders --parse-headers
  tidelog consume orders --from-beginning -e --format json | tidelog produce copy --format json
"""


def add_parser(sub: Any) -> None:
    produce = sub.add_parser(
        "produce", help="write records from stdin, a file or the command line",
        description="Write one record per input line (stdin, --file, or -m values) to TOPIC, then wait until the "
                    "cluster has acknowledged every record. Exits 1 if any record was not delivered.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    produce.add_argument("topic", metavar="TOPIC")
    source = produce.add_mutually_exclusive_group()
    source.add_argument("-m", "--message", action="append", metavar="LINE", help="a record to send, as an input line (repeatable)")
    source.add_argument("--file", metavar="PATH", help="read lines from this file instead of stdin")
    produce.add_argument("--format", choices=("raw", "json"), default="raw",
                         help="raw: the line is the value (default); json: an object with key/value/headers/partition/timestamp")
    produce.add_argument("-K", "--key-separator", metavar="SEP", help="raw: the line's part before SEP is the key")
    produce.add_argument("--parse-headers", action="store_true", help="raw: lines start with headers k:v,k2:v2 and a tab")
    produce.add_argument("-H", "--header", action="append", default=[], metavar="KEY=VALUE", help="header added to every record (repeatable)")
    produce.add_argument("-p", "--partition", type=int, help="write every record to this partition (default: by key, or spread)")
    produce.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all", help="acknowledgements to wait for (default all)")
    produce.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none", help="batch compression")
    produce.add_argument("--linger-ms", type=int, default=5, help="wait this long to fill batches (default 5)")
    produce.add_argument("--json", action="store_true", help="print the delivery summary as JSON on stdout")
    add_connection_options(produce)
    produce.set_defaults(func=_produce)


@dataclass
class Deliveries:
    """Delivery reports: per partition the first and last offset and count; errors by name."""

    delivered: int = 0
    failed: int = 0
    partitions: dict[int, list[int]] = field(default_factory=dict)  # partition -> [first, last, count]
    errors: dict[str, int] = field(default_factory=dict)

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed += 1
            name = f"{err.name()}: {err.str()}"
            self.errors[name] = self.errors.get(name, 0) + 1
            return
        self.delivered += 1
        partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
        span = self.partitions.setdefault(partition, [offset, offset, 0])
        span[0], span[1], span[2] = min(span[0], offset), max(span[1], offset), span[2] + 1


def _lines(args: argparse.Namespace) -> Iterator[str]:
    if args.message is not None:
        yield from args.message
    elif args.file:
        try:
            with open(args.file, encoding="utf-8") as stream:
                yield from _without_newlines(stream)
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror}") from None
    else:
        yield from _without_newlines(sys.stdin)


def _without_newlines(stream: Iterable[str]) -> Iterator[str]:
    for line in stream:
        yield line[:-1] if line.endswith("\n") else line


def _records(args: argparse.Namespace) -> Iterator[ProducedRecord]:
    static_headers = [(k, v.encode()) for k, v in parse_assignments(args.header, "--header").items()]
    for number, line in enumerate(_lines(args), 1):
        try:
            if args.format == "json":
                if not line.strip():
                    continue
                record = parse_json_line(line)
            else:
                record = parse_raw_line(line, args.key_separator, args.parse_headers)
        except FormatError as exc:
            raise CliError(f"input line {number}: {exc}") from None
        record.headers = static_headers + record.headers
        if args.partition is not None:
            record.partition = args.partition
        yield record


def _send(producer: Producer, topic: str, record: ProducedRecord, deliveries: Deliveries) -> None:
    kwargs: dict[str, Any] = {"value": record.value, "key": record.key, "on_delivery": deliveries.on_delivery}
    if record.partition is not None:
        kwargs["partition"] = record.partition
    if record.timestamp is not None:
        kwargs["timestamp"] = record.timestamp
    if record.headers:
        kwargs["headers"] = record.headers
    while True:
        try:
            producer.produce(topic, **kwargs)
            break
        except BufferError:  # local queue full: let deliveries drain it
            producer.poll(0.1)
    producer.poll(0)


def _produce(args: argparse.Namespace) -> int:
    config = client_config(args)
    config.update({"acks": "all" if args.acks == "-1" else args.acks, "compression.type": args.compression,
                   "linger.ms": args.linger_ms})
    producer = Producer(config)
    deliveries = Deliveries()
    input_error: CliError | None = None
    try:
        for record in _records(args):
            _send(producer, args.topic, record, deliveries)
    except CliError as exc:
        input_error = exc
    except KeyboardInterrupt:
        input_error = CliError("interrupted", 130)
    deadline = time.monotonic() + args.timeout
    while len(producer) and time.monotonic() < deadline:
        producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    undelivered = len(producer)
    _report(args, deliveries, undelivered)
    if input_error is not None:
        raise input_error
    return 1 if deliveries.failed or undelivered else 0


def _report(args: argparse.Namespace, deliveries: Deliveries, undelivered: int) -> None:
    out = Output(args.json)
    if args.json:
        out.json({
            "topic": args.topic, "delivered": deliveries.delivered, "failed": deliveries.failed, "undelivered": undelivered,
            "partitions": {str(p): {"first_offset": s[0], "last_offset": s[1], "count": s[2]} for p, s in sorted(deliveries.partitions.items())},
            "errors": deliveries.errors,
        })
    else:
        spans = ", ".join(f"partition {p}: offsets {s[0]}-{s[1]}" for p, s in sorted(deliveries.partitions.items()))
        out.note(f"Produced {deliveries.delivered} record(s) to {args.topic}" + (f" ({spans})" if spans else "") + ".")
    for error, count in deliveries.errors.items():
        out.note(f"{count} record(s) failed: {error}")
    if undelivered:
        out.note(f"{undelivered} record(s) not acknowledged within {args.timeout:g} s")
