"""``tidelog transactions list|describe|abort``: the transactions a cluster's coordinators know, like
``kafka-transactions.sh``.

confluent-kafka 2.16's AdminClient has no ListTransactions or DescribeTransactions, so ``list`` and
``describe`` speak the protocol themselves (kio's message classes; ``cli/wire.py`` carries them over
the listener's security protocol): ListTransactions v1
to every broker in the metadata, FindCoordinator (key type 1) then DescribeTransactions v0 to the
coordinator of each id. DescribeTransactions answers are decoded here, not by kio, because an id with
no open transaction has start time -1, which kio refuses to decode.

``abort`` ends an open transaction the way a new producer would: InitProducerId with the same
transactional id (a confluent-kafka producer's ``init_transactions``) makes the coordinator abort the
open transaction and fence its producer. (Kafka's tool can also abort transactions the coordinator
does not know, with WriteTxnMarkers; tidelog does not serve that broker-to-broker API.)
"""

from __future__ import annotations

import argparse
import datetime
import io
import struct
from typing import Any

from confluent_kafka import KafkaException, Producer
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.list_transactions.v1.response import ListTransactionsResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import ProducerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    client_config,
    command_adder,
    kafka_error_text,
)
from tidelog.cli.wire import Wire
from tidelog.common.errors import ErrorCode

DESCRIBE_TRANSACTIONS = 65
EXAMPLES = """\
examples:
  tidelog transactions list
  tidelog transactions list --state Ongoing --min-duration-ms 60000   # hanging for a minute or more
  tidelog transactions describe orders-writer-1 --json
  tidelog transactions abort orders-writer-1     # fences the producer and aborts its open transaction

Plain TCP listeners only (the protocol calls do not use librdkafka). With ACLs, DESCRIBE on the
transactional id is needed to see it, WRITE to abort it.
"""
_NAMES = {int(e.value): e.name for e in ErrorCode}


def add_parser(sub: Any) -> None:
    txns = sub.add_parser("transactions", help="list, describe and abort transactions",
                          description="Inspect and abort transactions over the Kafka protocol.",
                          epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = txns.add_subparsers(dest="transactions_command", required=True, metavar="COMMAND")

    command = command_adder(commands, EXAMPLES)

    listing = command("list", "list the transactional ids the coordinators know", _list)
    listing.add_argument("--state", action="append", default=[], help="only this state (repeatable): Empty, Ongoing, "
                         "PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence")
    listing.add_argument("--producer-id", type=int, action="append", default=[], help="only this producer id (repeatable)")
    listing.add_argument("--min-duration-ms", type=int, default=-1, help="only transactions open at least this long")
    add_json_option(listing, "the transactions")
    describe = command("describe", "show a transaction's state, producer and partitions", _describe)
    describe.add_argument("transactional_ids", nargs="+", metavar="TRANSACTIONAL_ID")
    add_json_option(describe, "the transactions")
    abort = command("abort", "abort the open transaction of a transactional id (fencing its producer)", _abort)
    abort.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")


# ------------------------------------------------------------------------------------ the wire


def _call(wire: Wire, address: tuple[str, int], request: Any, api_key: int | None = None,
          version: int | None = None) -> bytes:
    """Send one request (header v2: every API used here is flexible); the response frame."""
    buffer = io.BytesIO()
    header = RequestHeader(request_api_key=i16(api_key if api_key is not None else request.__api_key__),
                           request_api_version=i16(version if version is not None else request.__version__),
                           correlation_id=i32(1), client_id="tidelog-cli")
    entity_writer(RequestHeader)(buffer, header)
    if isinstance(request, bytes):
        buffer.write(request)
    else:
        entity_writer(type(request))(buffer, request)
    return wire.call(address, buffer.getvalue())


def _body(frame: bytes) -> int:
    """Offset of the body after a response header v1 (correlation id, no tagged fields)."""
    if frame[4] != 0:
        raise CliError("the broker's response header carries tagged fields this tool does not read")
    return 5


class _Reader:
    """Just enough of the flexible encoding to read DescribeTransactions v0."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def fixed(self, fmt: str) -> int:
        value: int = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1
        text = self.data[self.pos : self.pos + max(n, 0)].decode()
        self.pos += max(n, 0)
        return text

    def count(self) -> int:
        return max(self.uvarint() - 1, 0)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def describe_response(frame: bytes) -> list[dict[str, Any]]:
    r = _Reader(frame, _body(frame))
    r.fixed(">i")  # throttle time
    states = []
    for _ in range(r.count()):
        error = r.fixed(">h")
        entry: dict[str, Any] = {"transactional_id": r.string(), "error": _NAMES.get(error, str(error)),
                                 "state": r.string(), "timeout_ms": r.fixed(">i"), "start_ms": r.fixed(">q"),
                                 "producer_id": r.fixed(">q"), "producer_epoch": r.fixed(">h")}
        partitions = []
        for _ in range(r.count()):
            topic = r.string()
            partitions += [f"{topic}-{r.fixed('>i')}" for _ in range(r.count())]
            r.skip_tags()
        entry["partitions"] = partitions
        r.skip_tags()
        states.append(entry)
    return states


def describe_request(ids: list[str]) -> bytes:
    """DescribeTransactions v0's body: a compact array of compact strings, no tagged fields."""
    out = bytearray(_uvarint(len(ids) + 1))
    for txn_id in ids:
        data = txn_id.encode()
        out += _uvarint(len(data) + 1) + data
    out.append(0)
    return bytes(out)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# ----------------------------------------------------------------------------------- commands


def _wire(args: argparse.Namespace) -> Wire:
    return Wire(client_config(args), args.timeout)


def _list(args: argparse.Namespace) -> int:
    request = ListTransactionsRequest(state_filters=tuple(args.state),
                                      producer_id_filters=tuple(ProducerId(p) for p in args.producer_id),
                                      duration_filter=i64(args.min_duration_ms))
    wire = _wire(args)
    frame = _call(wire, wire.bootstrap, request)
    response, _ = entity_reader(ListTransactionsResponse)(frame, _body(frame))
    out = Output(args.json)
    if int(response.error_code):
        raise CliError(f"the broker answered {_NAMES.get(int(response.error_code))}")
    rows = sorted((t.transactional_id, int(t.producer_id), t.transaction_state) for t in response.transaction_states)
    if args.json:
        out.json([{"transactional_id": t, "producer_id": p, "state": s} for t, p, s in rows])
    else:
        out.table(["TRANSACTIONAL ID", "PRODUCER ID", "STATE"], rows)
    for unknown in response.unknown_state_filters:
        out.note(f"unknown state {unknown!r}")
    return 0


def _coordinator(wire: Wire, txn_id: str) -> tuple[str, int]:
    frame = _call(wire, wire.bootstrap, FindCoordinatorRequest(key=txn_id, key_type=i8(1)))
    found, _ = entity_reader(FindCoordinatorResponse)(frame, _body(frame))
    if int(found.error_code):
        raise CliError(f"no coordinator for {txn_id}: {_NAMES.get(int(found.error_code))}")
    return found.host, int(found.port)


def _describe(args: argparse.Namespace) -> int:
    described = []
    wire = _wire(args)
    for txn_id in args.transactional_ids:
        frame = _call(wire, _coordinator(wire, txn_id), describe_request([txn_id]),
                      api_key=DESCRIBE_TRANSACTIONS, version=0)
        described += describe_response(frame)
    out = Output(args.json)
    if args.json:
        out.json(described)
    else:
        out.table(["TRANSACTIONAL ID", "STATE", "PRODUCER ID", "EPOCH", "TIMEOUT MS", "STARTED", "PARTITIONS", "ERROR"], [
            (d["transactional_id"], d["state"], d["producer_id"], d["producer_epoch"], d["timeout_ms"],
             _when(d["start_ms"]), ",".join(d["partitions"]), "" if d["error"] == "NONE" else d["error"])
            for d in described
        ])
    return 1 if any(d["error"] != "NONE" for d in described) else 0


def _when(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="seconds")


def _abort(args: argparse.Namespace) -> int:
    config = client_config(args)
    config["transactional.id"] = args.transactional_id
    producer = Producer(config)
    try:
        producer.init_transactions(args.timeout)
    except KafkaException as exc:
        raise CliError(f"cannot take over {args.transactional_id}: {kafka_error_text(exc)}") from None
    Output().note(f"{args.transactional_id}: any open transaction is aborted and its producer fenced")
    return 0
