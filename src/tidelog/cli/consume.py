"""``tidelog consume``: the console consumer (kafka-console-consumer / kcat -C), over the Kafka protocol.

Partitions are assigned directly (no consumer group, no committed offsets): every run starts where
its options say. ``group.id`` is set only because librdkafka requires one; nothing is committed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from tidelog.cli.common import CliError, Output, add_connection_options, client_config, kafka_error_text
from tidelog.cli.formats import ConsumedRecord, FormatError, KcatFormat, render_json, render_raw

OFFSET_TAIL_BASE = -2000  # librdkafka's RD_KAFKA_OFFSET_TAIL(n) is -2000 - n
TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}

EXAMPLES = """\
examples:
  tidelog consume orders --from-beginning -e                  # everything, then exit at the end
  tidelog consume orders --offset -10 -e                      # the last 10 records of each partition
  tidelog consume orders --partition 0 --offset 42 --max-messages 1
  tidelog consume orders --timestamp 2025-01-31T10:00:00Z -e  # from the first record at or after that time
  tidelog consume orders --from-beginning -e -f '%p:%o %k=%s [%h] @%T\\n'
  tidelog consume orders --from-beginning -e --format json | jq .value
"""


def add_parser(sub: Any) -> None:
    consume = sub.add_parser(
        "consume", help="read records and print them",
        description="Read records of TOPIC (all partitions, or --partition) and print them to stdout. By default it "
                    "starts at the end and waits for new records until interrupted; -e stops at the end.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument("-p", "--partition", type=int, action="append", metavar="N", help="only this partition (repeatable)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start of each partition")
    start.add_argument("--offset", metavar="OFFSET",
                       help="start offset: N (absolute), -N (the last N records), earliest or latest (default latest)")
    start.add_argument("--timestamp", metavar="TIME", help="start at the first record at or after TIME (epoch ms, or ISO 8601; UTC if no zone)")
    consume.add_argument("-n", "--max-messages", type=int, metavar="N", help="exit after N records")
    consume.add_argument("-e", "--exit-at-end", action="store_true", help="exit when every partition is read to its end")
    consume.add_argument("--timeout-ms", type=int, metavar="MS", help="exit when no record arrives for this long")
    consume.add_argument("--skip-message-on-error", action="store_true",
                         help="skip a record that cannot be read (e.g. a batch inflating past "
                              "receive.message.max.bytes) instead of stopping")
    fmt = consume.add_mutually_exclusive_group()
    fmt.add_argument("--format", choices=("raw", "json"), default="raw", help="raw: values, one per line (default); json: one object per record")
    fmt.add_argument("-f", "--format-string", metavar="FMT", help="kcat-style format: %%t %%p %%o %%k %%K %%s %%S %%T %%h %%%%, \\n \\t")
    consume.add_argument("--print-key", action="store_true", help="raw: print the key, the key separator, then the value")
    consume.add_argument("--key-separator", default="\t", metavar="SEP", help="raw --print-key separator (default tab)")
    consume.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
                         help="read_committed hides aborted and open transactions")
    add_connection_options(consume)
    consume.set_defaults(func=_consume)


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (UTC when it names no zone), as epoch ms."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--timestamp: {text!r} is neither epoch milliseconds nor an ISO 8601 time", 2) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def parse_offset(text: str) -> int:
    """A start offset as librdkafka takes it: absolute, logical (beginning/end) or tail (-N)."""
    named = {"earliest": OFFSET_BEGINNING, "beginning": OFFSET_BEGINNING, "latest": OFFSET_END, "end": OFFSET_END}
    if text in named:
        return named[text]
    try:
        value = int(text)
    except ValueError:
        raise CliError(f"--offset: {text!r} is not a number, earliest or latest", 2) from None
    return value if value >= 0 else OFFSET_TAIL_BASE + value


def _renderer(args: argparse.Namespace) -> Callable[[ConsumedRecord], bytes]:
    if args.format_string is not None:
        try:
            compiled = KcatFormat(args.format_string)
        except FormatError as exc:
            raise CliError(f"--format-string: {exc}", 2) from None
        return compiled.render
    if args.format == "json":
        return render_json
    separator = args.key_separator.encode()
    return lambda record: render_raw(record, args.print_key, separator)


def _record(msg: Message) -> ConsumedRecord:
    ts_type, ts = msg.timestamp()
    raw = msg.headers() or []
    pairs = list(raw.items()) if isinstance(raw, dict) else list(raw)
    headers = [(str(k), v.encode() if isinstance(v, str) else v) for k, v in pairs]
    return ConsumedRecord(
        str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0),
        ts if ts_type in TIMESTAMP_TYPES else None, TIMESTAMP_TYPES.get(ts_type), msg.key(), msg.value(), headers,
    )


def _partitions(consumer: Consumer, args: argparse.Namespace) -> list[int]:
    try:
        metadata = consumer.list_topics(args.topic, timeout=args.timeout)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None or not topic.partitions:
        raise CliError(f"topic {args.topic} does not exist")
    known = sorted(topic.partitions)
    wanted = args.partition or known
    missing = sorted(set(wanted) - set(known))
    if missing:
        raise CliError(f"topic {args.topic} has no partition {', '.join(map(str, missing))} (it has {len(known)})")
    return sorted(set(wanted))


def _start_offsets(consumer: Consumer, args: argparse.Namespace, partitions: list[int]) -> list[TopicPartition]:
    if args.timestamp is not None:
        when = parse_timestamp(args.timestamp)
        found = consumer.offsets_for_times([TopicPartition(args.topic, p, when) for p in partitions], timeout=args.timeout)
        return [TopicPartition(args.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found]
    offset = OFFSET_BEGINNING if args.from_beginning else parse_offset(args.offset) if args.offset is not None else OFFSET_END
    return [TopicPartition(args.topic, p, offset) for p in partitions]


def _consume(args: argparse.Namespace) -> int:
    render = _renderer(args)
    config = client_config(args)
    config.update({
        "group.id": f"tidelog-console-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "earliest", "isolation.level": args.isolation_level,
    })
    consumer = Consumer(config)
    count = 0
    try:
        partitions = _partitions(consumer, args)
        consumer.assign(_start_offsets(consumer, args, partitions))
        count = _loop(consumer, args, set(partitions), render, sys.stdout.buffer)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
        Output().note(f"Processed a total of {count} messages")
    return 0


# A record librdkafka cannot hand over: its batch does not decompress (or inflates past
# receive.message.max.bytes, librdkafka's cap), or does not parse. librdkafka fetches it again and again,
# so the consumer either stops, naming it, or seeks past it.
UNREADABLE = frozenset({KafkaError._BAD_COMPRESSION, KafkaError._BAD_MSG})


def _unreadable(consumer: Consumer, msg: Any, error: Any, skip: bool) -> None:
    partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
    where = f"partition {partition} offset {offset}: {error.name()}: {error.str()}"
    if not skip:
        raise CliError(f"{where} (--skip-message-on-error skips it, or start again with --offset {offset + 1})")
    Output().note(f"warning: {where}; skipped")
    consumer.seek(TopicPartition(msg.topic(), partition, offset + 1))


def _loop(consumer: Consumer, args: argparse.Namespace, partitions: set[int],
          render: Callable[[ConsumedRecord], bytes], out: BinaryIO) -> int:
    count, at_end = 0, set[int]()
    last_record = time.monotonic()
    sys.stdout.flush()
    while args.max_messages is None or count < args.max_messages:
        messages = consumer.consume(num_messages=500 if args.max_messages is None else min(500, args.max_messages - count), timeout=0.2)
        for msg in messages:
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(msg.partition() or 0))
                    continue
                if error.fatal():
                    raise CliError(f"{error.name()}: {error.str()}")
                if error.code() in UNREADABLE:
                    out.flush()
                    _unreadable(consumer, msg, error, args.skip_message_on_error)
                    continue
                Output().note(f"warning: {error.name()}: {error.str()}")
                continue
            at_end.discard(int(msg.partition() or 0))
            out.write(render(_record(msg)))
            count += 1
        if messages:
            out.flush()
            last_record = time.monotonic()
        if args.exit_at_end and at_end >= partitions:
            break
        if args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
            break
    out.flush()
    return count
