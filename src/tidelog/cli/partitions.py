"""``tidelog partitions reassign|list-reassignments``: kafka-reassign-partitions.sh's moves.

``reassign --generate`` proposes an assignment of the topics in a topics-to-move JSON over a broker list
(Kafka's rack-aware placement); ``--execute`` starts the moves of a reassignment JSON
(AlterPartitionReassignments) after printing the current assignment for rollback, and with ``--wait``
follows them to the end (refused while other moves are in progress, unless ``--additional``: Kafka's rule); ``--verify`` says, per partition, whether its move completed; ``--cancel``
cancels the moves of the listed partitions (their original replicas come back). The JSON formats are
Kafka's (``cli.reassign_plan``), so either tool reads the other's files.

Throttles as Kafka's tool sets them (``cli.reassign_throttles``): ``--execute --throttle RATE`` sets the
throttled-replica lists on the moved topics and the rates on the brokers involved before the moves
start; ``--verify`` removes them once nothing of the plan is moving any more (``--preserve-throttles``
keeps them), and so does ``--execute --wait`` when it has seen its moves to the end. A replica given an
absolute ``log_dirs`` entry is then moved to that dir of its broker (AlterReplicaLogDirs, asked again
until the broker holds the replica; ``cli.log_dir_moves``), ``--replica-alter-log-dirs-throttle``
bounding the copy; ``--verify`` reports those moves too.

``list-reassignments`` shows the moves in progress (ListPartitionReassignments) with the bytes already
on the adding replicas (DescribeLogDirs); ``--watch`` repeats it with the copy rate and the time left.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tidelog.cli import log_dir_moves, reassign_calls, reassign_throttles
from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    admin_client,
    client_config,
    command_adder,
    kafka_error_text,
    result,
)
from tidelog.cli.progress import ProgressOutput
from tidelog.cli.reassign_plan import (
    Assignment,
    PlanError,
    ReplicaDirs,
    Sample,
    TopicPartition,
    dumps,
    generate,
    parse_reassignment_with_dirs,
    parse_topics_to_move,
    progress_line,
    throttle_plan,
)
from tidelog.cli.wire import Wire

EXAMPLES = """\
examples:
  echo '{"version":1,"topics":[{"topic":"orders"}]}' > move.json
  tidelog partitions reassign --generate --topics-to-move-json-file move.json --broker-list 1,2,4 > plan.txt
  tidelog partitions reassign --execute --reassignment-json-file plan.json --wait
  tidelog partitions reassign --execute --reassignment-json-file plan.json --throttle 50000000
  tidelog partitions reassign --verify --reassignment-json-file plan.json
  tidelog partitions reassign --cancel --reassignment-json-file plan.json
  tidelog partitions list-reassignments --watch
  tidelog partitions elect-leaders --all-topic-partitions
  tidelog partitions elect-leaders --election-type unclean --topic orders --partition 3

Plain TCP or the listener's TLS/SASL (the reassignment requests are sent by tidelog itself, not librdkafka).
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("partitions", help="move partitions between brokers (reassignments)",
                            description="Partition reassignments, with kafka-reassign-partitions.sh's JSON files.",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="partitions_command", required=True, metavar="COMMAND")
    command = command_adder(commands, EXAMPLES)
    reassign = command("reassign", "generate, execute, verify or cancel a reassignment", _reassign)
    mode = reassign.add_mutually_exclusive_group(required=True)
    for flag in ("generate", "execute", "verify", "cancel"):
        mode.add_argument(f"--{flag}", action="store_true")
    reassign.add_argument("--topics-to-move-json-file", metavar="FILE", help="for --generate")
    reassign.add_argument("--broker-list", metavar="IDS", help="for --generate: brokers to place on, e.g. 1,2,3")
    reassign.add_argument("--reassignment-json-file", metavar="FILE", help="for --execute, --verify, --cancel")
    reassign.add_argument("--wait", action="store_true", help="with --execute: show progress until every move is done "
                          "(then remove the throttles, as --verify does)")
    reassign.add_argument("--throttle", type=int, metavar="BYTES_PER_SEC",
                          help="with --execute: throttle the moves' replication to this rate on each broker involved "
                               "(leader/follower.replication.throttled.rate and the topics' throttled-replica lists)")
    reassign.add_argument("--replica-alter-log-dirs-throttle", type=int, metavar="BYTES_PER_SEC",
                          help="with --execute: bound the copies of log-dir moves (replica.alter.log.dirs.io.max.bytes."
                               "per.second on their brokers)")
    reassign.add_argument("--additional", action="store_true",
                          help="with --execute: start these moves although others are in progress (refused "
                               "otherwise, as Kafka's tool does); also the way to change the throttle of moves "
                               "in progress, by submitting them again")
    reassign.add_argument("--preserve-throttles", action="store_true",
                          help="with --verify: leave the throttles in place when the moves are done")
    listing = command("list-reassignments", "moves in progress, with bytes copied", _list)
    listing.add_argument("--watch", action="store_true", help="repeat every --interval seconds until no move is left")
    listing.add_argument("--interval", type=float, default=2.0, metavar="SECONDS")
    add_json_option(listing, "the moves")
    elect = command("elect-leaders", "move leadership to preferred replicas, or elect unclean leaders", _elect)
    elect.add_argument("--election-type", choices=("preferred", "unclean"), default="preferred",
                       help="preferred (default): the first live in-sync replica of the list; unclean: any live "
                            "replica, for partitions without a leader (may lose records)")
    scope = elect.add_mutually_exclusive_group(required=True)
    scope.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    scope.add_argument("--topic", help="one topic (with --partition: one partition)")
    scope.add_argument("--path-to-json-file", metavar="FILE",
                       help='kafka-leader-election.sh\'s file: {"partitions": [{"topic": "t", "partition": 0}, ...]}')
    elect.add_argument("--partition", type=int, help="with --topic")
    add_json_option(elect, "each partition's outcome")


def _read(path: str | None, flag: str) -> str:
    if not path:
        raise CliError(f"this mode needs --{flag}", 2)
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}", 2) from None


def wire_of(args: argparse.Namespace) -> Wire:
    return Wire(client_config(args), args.timeout)


def current_assignment(args: argparse.Namespace) -> tuple[Assignment, dict[int, str | None], dict[int, tuple[str, int]]]:
    """(every partition's replicas, broker → rack, broker → address) from Metadata and DescribeCluster."""
    admin = admin_client(args)
    try:
        metadata = admin.list_topics(timeout=args.timeout)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    cluster = result(admin.describe_cluster(request_timeout=args.timeout), args)
    assignment = {(str(t.topic), int(p.id)): [int(r) for r in p.replicas]
                  for t in metadata.topics.values() for p in t.partitions.values()}
    racks: dict[int, str | None] = {int(n.id): n.rack for n in cluster.nodes}
    addresses = {int(b.id): (str(b.host), int(b.port)) for b in metadata.brokers.values()}
    return assignment, racks, addresses


def _check_throttle_options(args: argparse.Namespace) -> None:
    for flag, value in (("--throttle", args.throttle), ("--replica-alter-log-dirs-throttle", args.replica_alter_log_dirs_throttle)):
        if value is None:
            continue
        if not args.execute:
            raise CliError(f"{flag} goes with --execute (--verify removes the throttles)", 2)
        if value < 0:
            raise CliError(f"{flag} {value}: a rate is at least 0 bytes/s", 2)
    if args.preserve_throttles and not args.verify:
        raise CliError("--preserve-throttles goes with --verify", 2)
    if args.additional and not args.execute:
        raise CliError("--additional goes with --execute", 2)


def _reassign(args: argparse.Namespace) -> int:
    _check_throttle_options(args)
    try:
        if args.generate:
            return _generate(args)
        plan, dirs = parse_reassignment_with_dirs(_read(args.reassignment_json_file, "reassignment-json-file"))
    except PlanError as exc:
        raise CliError(str(exc), 2) from None
    if args.execute:
        return _execute(args, plan, dirs)
    if args.verify:
        return _verify(args, plan, dirs)
    return _cancel(args, plan)


def _generate(args: argparse.Namespace) -> int:
    topics = parse_topics_to_move(_read(args.topics_to_move_json_file, "topics-to-move-json-file"))
    if not args.broker_list:
        raise CliError("--generate needs --broker-list", 2)
    try:
        wanted = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        raise CliError(f"--broker-list {args.broker_list!r} is not a list of broker ids", 2) from None
    current, racks, _ = current_assignment(args)
    unknown = [b for b in wanted if b not in racks]
    if unknown:
        raise CliError(f"brokers {unknown} are not in the cluster")
    proposed = generate(current, topics, {b: racks[b] for b in wanted})
    print("Current partition replica assignment")
    print(dumps({tp: r for tp, r in current.items() if tp in proposed}))
    print()
    print("Proposed partition reassignment configuration")
    print(dumps(proposed))
    return 0


def _execute(args: argparse.Namespace, plan: Assignment, dirs: ReplicaDirs) -> int:
    current, racks, addresses = current_assignment(args)
    missing = sorted(tp for tp in plan if tp not in current)
    if missing:
        raise CliError("partitions that do not exist: " + ", ".join(f"{t}-{p}" for t, p in missing))
    wire = wire_of(args)
    in_progress = reassign_calls.ongoing(wire)
    if in_progress and not args.additional:
        # Kafka's tool refuses too: a second plan started over a first one is more often a mistake
        raise CliError(f"{len(in_progress)} partition move(s) already in progress (see list-reassignments): "
                       "nothing started; add --additional to start these moves as well, or to change the "
                       "throttle of those in progress by submitting them again")
    print("Current partition replica assignment")
    print()
    print(dumps({tp: current[tp] for tp in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if args.replica_alter_log_dirs_throttle is not None and not dirs:
        print("--replica-alter-log-dirs-throttle: the plan names no log dir, so no log dir move is throttled",
              file=sys.stderr)
    throttled = args.throttle is not None or (args.replica_alter_log_dirs_throttle is not None and bool(dirs))
    if throttled:
        # Before the moves start, so that nothing is copied unthrottled.
        print(reassign_throttles.VERIFY_WARNING)
        admin = admin_client(args)
        if args.throttle is not None:
            limits = throttle_plan(current, in_progress, plan)
            reassign_throttles.set_replication_throttle(admin, limits, args.throttle, args)
        if args.replica_alter_log_dirs_throttle is not None and dirs:
            reassign_throttles.set_log_dir_throttle(admin, {b for _, _, b in dirs}, args.replica_alter_log_dirs_throttle, args)
    failed = _report(reassign_calls.alter(wire, dict(plan)))
    started = [tp for tp in sorted(plan) if tp not in failed]
    if started:
        print("Successfully started partition reassignments for " + ",".join(f"{t}-{p}" for t, p in started))
    dir_moves = {r: d for r, d in dirs.items() if (r[0], r[1]) not in failed}
    refused = log_dir_moves.start_moves(wire, addresses, dir_moves, args.timeout) if dir_moves else {}
    for (topic, index, broker), error in sorted(refused.items()):
        print(f"Error starting the log dir move of {topic}-{index} on broker {broker} to {dirs[(topic, index, broker)]}: "
              f"{error}", file=sys.stderr)
    moving_dirs = {r: d for r, d in dir_moves.items() if r not in refused}
    if moving_dirs:
        print("Successfully started log dir moves for: "
              + ",".join(f"{t}-{p} on broker {b}" for t, p, b in sorted(moving_dirs)))
    if args.wait and (started or moving_dirs):
        with ProgressOutput(sys.stderr) as progress:
            follow(wire, addresses, started, progress)
            log_dir_moves.follow(wire, addresses, moving_dirs, progress)
        if throttled:
            reassign_throttles.clear_throttles(admin_client(args), racks, {t for t, _ in plan}, args)
    return 1 if failed or refused else 0


def _report(answers: dict[TopicPartition, tuple[str, str | None]]) -> set[TopicPartition]:
    failed = set()
    for (topic, index), (error, message) in sorted(answers.items()):
        if error != "NONE":
            failed.add((topic, index))
            print(f"Error reassigning partition(s):\n{topic}-{index}: {error}{': ' + message if message else ''}",
                  file=sys.stderr)
    return failed


def _verify(args: argparse.Namespace, plan: Assignment, dirs: ReplicaDirs) -> int:
    current, racks, addresses = current_assignment(args)
    wire = wire_of(args)
    moving = reassign_calls.ongoing(wire)
    print("Status of partition reassignment:")
    problems = 0
    for tp in sorted(plan):
        name = f"{tp[0]}-{tp[1]}"
        if tp in moving:
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == plan[tp]:
            print(f"Reassignment of partition {name} is completed.")
        else:
            problems += 1
            print(f"There is no active reassignment of partition {name}, but replica set is "
                  f"{current.get(tp)} rather than {plan[tp]}.")
    dirs_moving = False
    if dirs:
        print()
        print("Status of log dir moves:")
        for state in log_dir_moves.move_states(wire, addresses, dirs).values():
            print(state.text)
            dirs_moving = dirs_moving or state.moving
            problems += not state.done and not state.moving
    if not args.preserve_throttles and not dirs_moving and not any(tp in moving for tp in plan):
        # Kafka's rule: throttles go once nothing of the plan is moving, whatever the outcome.
        print()
        reassign_throttles.clear_throttles(admin_client(args), racks, {t for t, _ in plan}, args)
    return 1 if problems else 0


def _cancel(args: argparse.Namespace, plan: Assignment) -> int:
    failed = _report(reassign_calls.alter(wire_of(args), dict.fromkeys(plan)))
    cancelled = [tp for tp in sorted(plan) if tp not in failed]
    if cancelled:
        print("Successfully cancelled partition reassignments for: " + ",".join(f"{t}-{p}" for t, p in cancelled))
    return 1 if failed else 0


def sample(wire: Wire, addresses: dict[int, tuple[str, int]], moving: reassign_calls.Ongoing) -> Sample:
    """Bytes on the adding replicas of ``moving`` against the leader-side size they will reach."""
    sizes = reassign_calls.replica_sizes(wire, addresses)
    copied = total = 0
    for (topic, index), (replicas, adding, _) in moving.items():
        full = max((sizes.get((r, topic, index), 0) for r in replicas if r not in adding), default=0)
        for broker in adding:
            copied += min(full, sizes.get((broker, topic, index), 0))
            total += full
    return Sample(time.monotonic(), copied, total)


def follow(wire: Wire, addresses: dict[int, tuple[str, int]], partitions: Collection[TopicPartition],
           progress: ProgressOutput, interval: float = 1.0, timeout: float | None = None, label: str = "") -> None:
    """Show a progress line every ``interval`` until none of ``partitions`` is moving."""
    wanted = set(partitions)
    previous: Sample | None = None
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        moving = {tp: v for tp, v in reassign_calls.ongoing(wire).items() if tp in wanted}
        now = sample(wire, addresses, moving)
        progress.update(label + progress_line(len(wanted) - len(moving), len(wanted), previous, now))
        if not moving:
            return
        if deadline is not None and time.monotonic() > deadline:
            raise CliError(f"{len(moving)} move(s) still in progress after {timeout:g} s (run again to keep following)")
        previous = now
        time.sleep(interval)


def _list(args: argparse.Namespace) -> int:
    wire = wire_of(args)
    _, _, addresses = current_assignment(args)
    out = Output(args.json)
    previous: Sample | None = None
    while True:
        moving = reassign_calls.ongoing(wire)
        sizes = reassign_calls.replica_sizes(wire, addresses) if moving else {}
        rows: list[dict[str, Any]] = []
        for (topic, index), (replicas, adding, removing) in sorted(moving.items()):
            full = max((sizes.get((r, topic, index), 0) for r in replicas if r not in adding), default=0)
            copied = sum(min(full, sizes.get((b, topic, index), 0)) for b in adding)
            rows.append({"topic": topic, "partition": index, "replicas": replicas, "adding": adding,
                         "removing": removing, "bytes_copied": copied, "bytes_total": full * len(adding)})
        if args.json:
            out.json(rows)
        else:
            out.table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING", "COPIED", "OF"],
                      [(r["topic"], r["partition"], r["replicas"], r["adding"], r["removing"], r["bytes_copied"],
                        r["bytes_total"]) for r in rows])
            now = Sample(time.monotonic(), sum(r["bytes_copied"] for r in rows), sum(r["bytes_total"] for r in rows))
            out.note(progress_line(0, len(rows), previous, now).split(", ", 1)[-1] if rows else "no reassignment in progress")
            previous = now
        if not args.watch or not moving:
            return 0
        time.sleep(args.interval)


def _election_scope(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The partitions named on the command line; None for every partition of the cluster."""
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file:
        try:
            doc = json.loads(_read(args.path_to_json_file, "path-to-json-file"))
            return [(str(p["topic"]), int(p["partition"])) for p in doc["partitions"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise CliError(f"{args.path_to_json_file}: expected {{\"partitions\": [{{\"topic\": ..., "
                           f"\"partition\": ...}}]}} ({exc})", 2) from None
    if args.partition is not None:
        return [(args.topic, args.partition)]
    metadata = admin_client(args).list_topics(args.topic, timeout=args.timeout)
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None:
        raise CliError(f"topic {args.topic!r} does not exist", 1)
    return [(args.topic, p) for p in sorted(topic.partitions)]


def _elect(args: argparse.Namespace) -> int:
    if args.partition is not None and not args.topic:
        raise CliError("--partition needs --topic", 2)
    scope = _election_scope(args)
    kind = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    partitions = None if scope is None else [KafkaTopicPartition(t, p) for t, p in scope]
    # (confluent-kafka 2.16 raises SystemError for elect_leaders(request_timeout=...): result() bounds the wait)
    admin = admin_client(args)  # held: a collected client fails its pending futures (_DESTROY)
    outcome = result(admin.elect_leaders(kind, partitions), args)
    rows = []
    for tp, failure in sorted(outcome.items(), key=lambda item: (item[0].topic, item[0].partition)):
        error: KafkaError | None = failure.args[0] if isinstance(failure, KafkaException) else failure
        # Kafka's tool reports ELECTION_NOT_NEEDED as "valid replica already elected": not a failure.
        not_needed = error is not None and error.code() == KafkaError.ELECTION_NOT_NEEDED
        state = "elected" if error is None else "already elected" if not_needed else error.name()
        rows.append({"topic": tp.topic, "partition": tp.partition, "outcome": state,
                     "message": None if error is None or not_needed else error.str()})
    out = Output(args.json)
    if args.json:
        out.json(rows)
    else:
        out.table(["TOPIC", "PARTITION", "OUTCOME", "MESSAGE"],
                  [(r["topic"], r["partition"], r["outcome"], r["message"] or "") for r in rows])
    return 1 if any(r["message"] for r in rows) else 0
