"""Moves of replicas between the log dirs of one broker: ``tidelog log-dirs list|move``, and the log-dir
part of ``tidelog partitions reassign`` (kafka-reassign-partitions' ``log_dirs`` in its JSON).

Both speak Kafka's protocol only, so they work against Apache Kafka as well:

- ``list`` asks each broker for DescribeLogDirs: its dirs (offline ones with their error, total and
  usable bytes) and the replicas in each. A replica being moved shows twice: where it is, and as the
  *future* replica in the destination dir with the bytes copied so far and the offsets still to copy
  (``offset_lag``); progress is the future's size against the current replica's.
- ``move`` sends AlterReplicaLogDirs to the broker holding the replicas; ``--wait`` follows the copies
  until no future replica is left. The copy rate is the broker's
  ``replica.alter.log.dirs.io.max.bytes.per.second``.

A replica the broker does not hold yet (a reassignment is adding it) answers REPLICA_NOT_AVAILABLE
(Kafka 4: NOT_LEADER_OR_FOLLOWER): ``start_moves`` asks again every half second until the broker has it
or the command's ``--timeout`` passes, as Kafka's tool does.

States of one asked-for move (``move_state``), read from DescribeLogDirs: *done* (the replica is in the
target dir and no future replica is left), *moving* (the future replica is in the target dir), or a
problem said in words (the replica is elsewhere with no move, is being moved to another dir, or is
not on the broker at all).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidelog.cli import reassign_calls
from tidelog.cli.common import (
    CliError,
    Output,
    add_connection_options,
    add_json_option,
    admin_client,
    client_config,
)
from tidelog.cli.progress import ProgressOutput
from tidelog.cli.reassign_calls import ReplicaDir
from tidelog.cli.wire import Wire

Replica = tuple[str, int, int]  # topic, partition, broker
RETRIED = frozenset({"REPLICA_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER"})

EXAMPLES = """\
examples:
  tidelog log-dirs list --broker 1 --topic clicks
  tidelog log-dirs move --broker 1 --topic clicks --partition 0,1 --to /disks/b/tidelog --wait
"""


def add_commands(commands: Any) -> None:
    listing = commands.add_parser("list", help="each broker's log dirs and replicas, moves in progress (DescribeLogDirs)",
                                  epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    listing.add_argument("--broker", type=int, action="append", default=[], metavar="ID",
                         help="only this broker (repeatable; default every broker)")
    listing.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    add_json_option(listing, "the log dirs and replicas")
    add_connection_options(listing)
    listing.set_defaults(func=_list)
    move = commands.add_parser("move", help="move replicas to another log dir of their broker (AlterReplicaLogDirs)",
                               epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    move.add_argument("--broker", type=int, required=True, metavar="ID")
    move.add_argument("--topic", required=True)
    move.add_argument("--partition", required=True, metavar="P[,P...]", help="partition indexes, comma-separated")
    move.add_argument("--to", required=True, metavar="DIR", help="the destination: one of the broker's log.dirs")
    move.add_argument("--wait", action="store_true", help="show the copy's progress until every replica has moved")
    add_connection_options(move)
    move.set_defaults(func=_move)


def addresses_of(args: argparse.Namespace) -> dict[int, tuple[str, int]]:
    metadata = admin_client(args).list_topics(timeout=args.timeout)
    return {int(b.id): (str(b.host), int(b.port)) for b in metadata.brokers.values()}


def start_moves(wire: Wire, addresses: Mapping[int, tuple[str, int]], moves: Mapping[Replica, str],
                timeout: float) -> dict[Replica, str]:
    """AlterReplicaLogDirs per broker, asking again for replicas not created yet; the error name of each
    move that was refused (empty: all started)."""
    pending = dict(moves)
    refused: dict[Replica, str] = {}
    deadline = time.monotonic() + timeout
    while pending:
        retry: dict[Replica, str] = {}
        for broker in sorted({b for _, _, b in pending}):
            asked = {(t, p): d for (t, p, b), d in pending.items() if b == broker}
            if broker not in addresses:
                refused.update({(t, p, broker): "BROKER_NOT_AVAILABLE" for t, p in asked})
                continue
            for (topic, index), error in reassign_calls.alter_log_dirs(wire, addresses[broker], asked).items():
                replica = (topic, index, broker)
                if error in RETRIED and time.monotonic() < deadline:
                    retry[replica] = asked[(topic, index)]
                elif error != "NONE":
                    refused[replica] = error
        pending = retry
        if pending:
            time.sleep(0.5)
    return refused


@dataclass(frozen=True, slots=True)
class MoveState:
    done: bool
    moving: bool
    text: str       # what --verify prints
    copied: int = 0
    total: int = 0


def move_state(replica: Replica, target: str, found: list[ReplicaDir]) -> MoveState:
    """Where ``replica`` stands against its asked-for ``target`` dir (``found``: its broker's replicas)."""
    topic, index, broker = replica
    name = f"{topic}-{index} on broker {broker}"
    mine = [r for r in found if (r.topic, r.partition) == (topic, index)]
    current = next((r for r in mine if not r.future), None)
    future = next((r for r in mine if r.future), None)
    if current is None:
        return MoveState(False, False, f"Replica {name} is not in any online log dir of the broker.")
    if future is not None and future.log_dir == target:
        text = (f"Log dir move of {name} is still in progress: {_mib(future.size)} of {_mib(current.size)} copied "
                f"to {target}, {future.offset_lag} offsets to go.")
        return MoveState(False, True, text, min(future.size, current.size), current.size)
    if future is not None:
        return MoveState(False, False, f"Replica {name} is being moved to {future.log_dir} instead of {target}.")
    if current.log_dir == target:
        return MoveState(True, False, f"Log dir move of {name} to {target} is completed.")
    return MoveState(False, False, f"Replica {name} is in {current.log_dir} and is not being moved to {target}.")


def move_states(wire: Wire, addresses: Mapping[int, tuple[str, int]], moves: Mapping[Replica, str]) -> dict[Replica, MoveState]:
    found: dict[int, list[ReplicaDir]] = {}
    for broker in sorted({b for _, _, b in moves}):
        if broker in addresses:
            found[broker] = reassign_calls.describe_log_dirs(wire, addresses[broker])[1]
    return {replica: move_state(replica, target, found.get(replica[2], [])) for replica, target in sorted(moves.items())}


def follow(wire: Wire, addresses: Mapping[int, tuple[str, int]], moves: Mapping[Replica, str],
           progress: ProgressOutput, interval: float = 1.0) -> dict[Replica, MoveState]:
    """A progress line every ``interval`` until no move of ``moves`` is copying; the final states."""
    while True:
        states = move_states(wire, addresses, moves)
        copying = [s for s in states.values() if s.moving]
        done = sum(1 for s in states.values() if s.done)
        line = f"{done}/{len(states)} log dir moves done"
        if copying:
            line += (f", {_mib(sum(s.copied for s in copying))} of {_mib(sum(s.total for s in copying))} copied"
                     f" by the {len(copying)} in progress")
        progress.update(line)
        if not copying:
            return states
        time.sleep(interval)


def _mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"


def _list(args: argparse.Namespace) -> int:
    wire = Wire(client_config(args), args.timeout)
    addresses = addresses_of(args)
    unknown = [b for b in args.broker if b not in addresses]
    if unknown:
        raise CliError(f"brokers {unknown} are not in the cluster", 2)
    dirs_out: list[dict[str, Any]] = []
    replicas_out: list[dict[str, Any]] = []
    for broker in sorted(args.broker or addresses):
        dirs, replicas = reassign_calls.describe_log_dirs(wire, addresses[broker])
        sizes = {(r.topic, r.partition): r.size for r in replicas if not r.future}
        for d in dirs:
            dirs_out.append({"broker": broker, "log_dir": d.path, "error": None if d.error == "NONE" else d.error,
                             "total_bytes": d.total_bytes, "usable_bytes": d.usable_bytes})
        for r in sorted(replicas, key=lambda r: (r.topic, r.partition, r.future)):
            if args.topic and r.topic not in args.topic:
                continue
            row: dict[str, Any] = {"broker": broker, "log_dir": r.log_dir, "topic": r.topic, "partition": r.partition,
                                   "size": r.size, "offset_lag": r.offset_lag, "is_future": r.future}
            if r.future:
                row["of_size"] = sizes.get((r.topic, r.partition), 0)
            replicas_out.append(row)
    out = Output(args.json)
    if args.json:
        out.json({"log_dirs": dirs_out, "replicas": replicas_out})
        return 0
    out.table(["BROKER", "LOG DIR", "ERROR", "TOTAL", "USABLE"],
              [(d["broker"], d["log_dir"], d["error"] or "", d["total_bytes"], d["usable_bytes"]) for d in dirs_out])
    out.table(["BROKER", "LOG DIR", "TOPIC", "PARTITION", "SIZE", "OFFSET LAG", "MOVE"],
              [(r["broker"], r["log_dir"], r["topic"], r["partition"], r["size"], r["offset_lag"],
                f"future replica: {r['size']} of {r['of_size']} bytes" if r["is_future"] else "")
               for r in replicas_out])
    return 0


def _move(args: argparse.Namespace) -> int:
    try:
        partitions = sorted({int(p) for p in args.partition.split(",") if p.strip()})
    except ValueError:
        raise CliError(f"--partition {args.partition!r} is not a list of partition indexes", 2) from None
    if not partitions:
        raise CliError("--partition names no partition", 2)
    if not args.to.startswith("/"):
        raise CliError(f"--to {args.to!r}: give the log dir's absolute path, as the broker's log.dirs lists it", 2)
    wire = Wire(client_config(args), args.timeout)
    addresses = addresses_of(args)
    if args.broker not in addresses:
        raise CliError(f"broker {args.broker} is not in the cluster", 2)
    moves = {(args.topic, p, args.broker): args.to for p in partitions}
    refused = start_moves(wire, addresses, moves, timeout=0)
    for (topic, index, broker), error in sorted(refused.items()):
        print(f"Error moving {topic}-{index} on broker {broker} to {args.to}: {error}", file=sys.stderr)
    started = [r for r in sorted(moves) if r not in refused]
    if started:
        print(f"Successfully started log dir moves to {args.to} for: " + ",".join(f"{t}-{p}" for t, p, _ in started))
    if args.wait and started:
        with ProgressOutput(sys.stderr) as progress:
            states = follow(wire, addresses, {r: args.to for r in started}, progress)
        problems = [s.text for s in states.values() if not s.done]
        for text in problems:
            print(text, file=sys.stderr)
        if problems:
            return 1
        print(f"Moved to {args.to}: " + ",".join(f"{t}-{p}" for t, p, _ in started))
    return 1 if refused else 0

