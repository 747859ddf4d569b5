"""``tidelog brokers drain|undrain BROKER``: move every replica off a broker, or let it take replicas again.

Drain, in order:

1. The broker joins the cluster-wide dynamic broker config ``placement.excluded.brokers``
   (IncrementalAlterConfigs APPEND, sent to one live broker: librdkafka cannot address the default
   resource, and tidelog's dynamic broker configs are cluster-wide anyway): from then on new topics and
   partitions place no replica on it. That config *is* the drained state: it lives in the cluster's
   metadata (etcd), survives restarts, and ``tidelog configs describe --broker`` shows it.
2. A plan (``reassign_plan.drain_plan``) replaces each of its replicas by a broker on another rack
   where possible, least loaded first; the replaced replica keeps its position, so when the drained
   broker led a partition its replacement leads it once the move completes (leadership leaves with
   the data, and no broker gains more preferred leaderships than it had).
3. The moves run in batches of ``--batch-size`` partitions; a batch starts when the previous one is
   done (``--throttle``: each batch under Kafka's replication throttles, removed once the drain is
   done, ``cli.reassign_throttles``), and a progress line shows partitions done/total, bytes copied, the rate and the time left:
   on a terminal one line redrawn in place (rich), otherwise (a pipe, a log) a line per update
   (``cli.progress``).

Resumable: the plan is computed from the cluster as it is now, so running drain again after an
interruption skips what moved already and follows moves still in progress (their target no longer
holds the broker). Undrain removes the broker from ``placement.excluded.brokers`` (it does not move
anything back: a later reassignment or new topics will use it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tidelog.cli import reassign_calls, reassign_throttles
from tidelog.cli.common import CliError, admin_client, command_adder, result
from tidelog.cli.partitions import current_assignment, follow, wire_of
from tidelog.cli.progress import ProgressOutput
from tidelog.cli.reassign_plan import Assignment, TopicPartition, drain_plan, throttle_plan
from tidelog.cli.wire import Wire

EXCLUDED = "placement.excluded.brokers"
EXAMPLES = """\
examples:
  tidelog brokers drain 3                   # every replica and leadership off broker 3, 10 partitions at a time
  tidelog brokers drain 3 --batch-size 50
  tidelog brokers drain 3 --throttle 50000000   # each batch's replication held to 50 MB/s per broker
  tidelog brokers undrain 3                 # new topics and partitions may use broker 3 again
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("brokers", help="drain a broker of its replicas, or undrain it",
                            description="Decommission building blocks: drain and undrain.", epilog=EXAMPLES,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="brokers_command", required=True, metavar="COMMAND")
    command = command_adder(commands, EXAMPLES)
    drain = command("drain", "move every replica off a broker (resumable)", _drain)
    drain.add_argument("broker", type=int)
    drain.add_argument("--batch-size", type=int, default=10, metavar="N", help="partitions moved at a time (default 10)")
    drain.add_argument("--move-timeout", type=float, default=3600.0, metavar="SECONDS",
                       help="give up following one batch after this long (default 3600; run again to resume)")
    drain.add_argument("--throttle", type=int, metavar="BYTES_PER_SEC",
                       help="throttle each batch's replication to this rate on the brokers involved (Kafka's "
                            "replication throttles, removed once the broker is drained)")
    undrain = command("undrain", "let placement use a drained broker again", _undrain)
    undrain.add_argument("broker", type=int)


def _set_excluded(args: argparse.Namespace, op: AlterConfigOpType, live: list[int]) -> None:
    entry = ConfigEntry(EXCLUDED, str(args.broker), incremental_operation=op)
    via = args.broker if args.broker in live else min(live)
    resource = ConfigResource(ResourceType.BROKER, str(via), incremental_configs=[entry])
    admin = admin_client(args)
    futures = admin.incremental_alter_configs([resource])
    for future in futures.values():
        result(future, args)


def _drain(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise CliError("--batch-size must be at least 1", 2)
    if args.throttle is not None and args.throttle < 0:
        raise CliError(f"--throttle {args.throttle}: a rate is at least 0 bytes/s", 2)
    current, racks, addresses = current_assignment(args)
    if args.broker not in racks:
        raise CliError(f"broker {args.broker} is not in the cluster")
    _set_excluded(args, AlterConfigOpType.APPEND, list(racks))
    print(f"Broker {args.broker} is drained: new topics and partitions place no replica on it ({EXCLUDED}).")
    wire = wire_of(args)
    moving = reassign_calls.ongoing(wire)
    for tp, (replicas, _, removing) in moving.items():
        current[tp] = [r for r in replicas if r not in removing]  # plan from where each move is going
    in_flight = [tp for tp, (replicas, _, removing) in moving.items()
                 if args.broker in removing and tp in current]
    plan = drain_plan(current, racks, {args.broker})
    for tp in plan.stuck:
        print(f"{tp[0]}-{tp[1]}: no broker can take its replica on {args.broker} (too few brokers)", file=sys.stderr)
    todo = sorted(plan.moves)
    total = len(todo) + len(in_flight)
    print(f"{total} partition(s) to move off broker {args.broker}"
          f"{f' ({len(in_flight)} already moving)' if in_flight else ''}.", flush=True)
    failed = 0
    if total:
        with ProgressOutput(sys.stdout) as progress:
            failed = _move_in_batches(args, wire, addresses, current, plan.moves, todo, in_flight, progress)
            if args.throttle is not None:
                reassign_throttles.clear_throttles(admin_client(args), racks, {t for t, _ in [*todo, *in_flight]},
                                                   args, say=progress.note)
    if failed or plan.stuck:
        print(f"Broker {args.broker} still holds replicas: {failed} move(s) refused, {len(plan.stuck)} with no "
              "broker to take them. Run drain again once that is fixed.", file=sys.stderr)
        return 1
    print(f"Broker {args.broker} holds no replica any more.")
    return 0


def _move_in_batches(args: argparse.Namespace, wire: Wire, addresses: dict[int, tuple[str, int]], current: Assignment,
                     moves: Assignment, todo: list[TopicPartition], in_flight: list[TopicPartition],
                     progress: ProgressOutput) -> int:
    """Follow the moves already under way, then start and follow ``todo`` batch by batch; the number
    of moves refused. On a terminal this is one line redrawn in place; otherwise a line per update."""
    total = len(todo) + len(in_flight)
    if in_flight:
        follow(wire, addresses, in_flight, progress, timeout=args.move_timeout, label="already moving: ")
    done, failed = len(in_flight), 0
    for start in range(0, len(todo), args.batch_size):
        batch = todo[start:start + args.batch_size]
        if args.throttle is not None:
            limits = throttle_plan(current, reassign_calls.ongoing(wire), {tp: moves[tp] for tp in batch})
            reassign_throttles.set_replication_throttle(admin_client(args), limits, args.throttle, args, say=progress.note)
        answers = reassign_calls.alter(wire, {tp: moves[tp] for tp in batch})
        for (topic, index), (error, message) in sorted(answers.items()):
            if error != "NONE":
                failed += 1
                print(f"{topic}-{index}: {error}{': ' + message if message else ''}", file=sys.stderr)
        started = [tp for tp in batch if answers.get(tp, ("NONE", None))[0] == "NONE"]
        follow(wire, addresses, started, progress, timeout=args.move_timeout,
               label=f"{done}/{total} moved off broker {args.broker}; this batch: ")
        done += len(batch)
        progress.update(f"{done}/{total} partitions moved off broker {args.broker}")
    return failed


def _undrain(args: argparse.Namespace) -> int:
    _, racks, _ = current_assignment(args)
    _set_excluded(args, AlterConfigOpType.SUBTRACT, list(racks))
    print(f"Broker {args.broker} is no longer drained: placement may use it again.")
    return 0
