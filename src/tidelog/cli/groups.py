"""``tidelog groups list|describe|delete|reset-offsets|delete-offsets``: kafka-consumer-groups.sh over the
Kafka protocol.

Lag is the partition's log end offset (ListOffsets, latest) minus the group's committed offset
(OffsetFetch). Resetting offsets is planned by a pure function, ``plan_reset``: from each partition's
committed, earliest and latest offsets (and, for ``--to-datetime``/``--by-duration``, the offset the
timestamp lookup found) to the new offsets, clamped to [earliest, latest] as Kafka's tool does. The plan
is printed (``--dry-run``, the default) or committed (``--execute``), which Kafka allows only while the
group has no members (Empty, or Dead when it does not exist).
"""

from __future__ import annotations

import argparse
import io
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v1.response import FindCoordinatorResponse
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import GroupId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32
from kio.static.protocol import Entity

from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    client_config,
    command_adder,
    kafka_error_text,
    result,
)
from tidelog.cli.wire import Wire
from tidelog.common.errors import ErrorCode

TP = tuple[str, int]
T = TypeVar("T", bound=Entity)

# -- pure reset planning -------------------------------------------------------------------------

RESET_KINDS = ("earliest", "latest", "datetime", "duration", "shift", "offset", "current")


class ResetError(ValueError):
    """The reset cannot be planned for a partition (e.g. --shift-by without a committed offset)."""


@dataclass(frozen=True)
class PartitionOffsets:
    """What is known of one partition before a reset: the group's committed offset (None when it has
    none), the log start and log end offsets, and the offset of the first record at or after the
    looked-up timestamp (None when no record is that recent, or no lookup was made)."""

    current: int | None
    earliest: int
    latest: int
    at_timestamp: int | None = None


@dataclass(frozen=True)
class ResetTarget:
    """One of Kafka's reset options. ``value`` is N for ``shift`` and ``offset``, the timestamp in ms
    for ``datetime`` and the duration in ms for ``duration``; unused otherwise."""

    kind: str
    value: int = 0

    def lookup_timestamp(self, now_ms: int) -> int | None:
        """The timestamp whose offsets must be looked up before planning, if any."""
        if self.kind == "datetime":
            return self.value
        if self.kind == "duration":
            return now_ms - self.value
        return None


def _clamp(offset: int, p: PartitionOffsets) -> int:
    return max(p.earliest, min(offset, p.latest))


def plan_partition(p: PartitionOffsets, target: ResetTarget) -> int:
    """The new offset of one partition (Kafka's ConsumerGroupCommand rules)."""
    if target.kind == "earliest":
        return p.earliest
    if target.kind == "latest":
        return p.latest
    if target.kind in ("datetime", "duration"):
        # no record at or after the timestamp: the log end, as Kafka does
        return p.latest if p.at_timestamp is None else _clamp(p.at_timestamp, p)
    if target.kind == "offset":
        return _clamp(target.value, p)
    if target.kind == "shift":
        if p.current is None:
            raise ResetError("cannot shift: the group has no committed offset for this partition")
        return _clamp(p.current + target.value, p)
    if target.kind == "current":
        return p.latest if p.current is None else p.current
    raise ResetError(f"unknown reset kind {target.kind!r}")


def plan_reset(partitions: Mapping[TP, PartitionOffsets], target: ResetTarget) -> dict[TP, int]:
    """New offsets for every partition, in (topic, partition) order. ResetError names the first
    partition that cannot be planned."""
    plan = {}
    for tp in sorted(partitions):
        try:
            plan[tp] = plan_partition(partitions[tp], target)
        except ResetError as exc:
            raise ResetError(f"{tp[0]}:{tp[1]}: {exc}") from None
    return plan


_DURATION = re.compile(r"^([-+]?)P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,3})?)S)?)?$", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """ISO-8601 durations as Kafka's --by-duration takes them (java.time.Duration): ``PnDTnHnMn.nS``."""
    match = _DURATION.match(text.strip())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(f"not a duration like P1DT2H30M (PnDTnHnMnS): {text!r}")
    sign, days, hours, minutes, seconds = match.groups()
    ms = round((int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)) * 1000)
    return -ms if sign == "-" else ms


def parse_datetime_ms(text: str) -> int:
    """``YYYY-MM-DDTHH:mm:SS[.sss][zone]`` → epoch ms; without a zone the local time zone, as Kafka."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not a date-time like 2024-05-01T12:00:00.000 or 2024-05-01T12:00:00Z: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return round(moment.timestamp() * 1000)


def parse_topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """``orders`` → all partitions; ``orders:0,2`` → partitions 0 and 2."""
    topic, sep, parts = text.partition(":")
    if not topic or (sep and not parts):
        raise ValueError(f"expected TOPIC or TOPIC:P,P: {text!r}")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise ValueError(f"partitions must be numbers: {text!r}") from None


# -- command line --------------------------------------------------------------------------------

EXAMPLES = """\
examples:
  tidelog groups list                                   # every group with its type and state
  tidelog groups list --state Empty --state Stable --json
  tidelog groups describe billing                       # per partition: committed, log end, lag, consumer
  tidelog groups describe billing --members             # members, hosts, client ids, assigned partitions
  tidelog groups describe billing --state               # coordinator, assignor, state, member count
  tidelog groups reset-offsets --group billing --topic orders --to-earliest          # prints the plan
  tidelog groups reset-offsets --group billing --topic orders:0,1 --shift-by -100 --execute
  tidelog groups reset-offsets --group billing --all-topics --to-datetime 2024-05-01T12:00:00Z --execute
  tidelog groups reset-offsets --group billing --all-topics --by-duration PT30M --execute
  tidelog groups delete-offsets --group billing --topic orders
  tidelog groups delete billing audit-trail

Offsets can be reset (--execute) only while the group has no active member: stop its consumers first.
"""

STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown", ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance", ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead", ConsumerGroupState.EMPTY: "Empty",
}
STATES_BY_NAME = {name.lower(): state for state, name in STATE_NAMES.items() if state != ConsumerGroupState.UNKNOWN}


def add_parser(sub: Any) -> None:
    groups = sub.add_parser(
        "groups", help="list, describe, delete consumer groups; lag; reset and delete offsets",
        description="Operate consumer groups the way kafka-consumer-groups.sh does, over the Kafka protocol "
                    "(works against Apache Kafka too).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = groups.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")

    command = command_adder(commands, EXAMPLES)

    listing = command("list", "list groups", _list, "List consumer groups with their type (classic or consumer) and state.")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         help="only groups in this state (repeatable): Empty, Stable, PreparingRebalance, CompletingRebalance, Dead")
    add_json_option(listing, "the list")

    describe = command("describe", "show offsets and lag, members, or state", _describe,
                       "Describe groups. By default (--offsets) one row per partition the group committed or is "
                       "assigned: committed offset, log end offset, lag (log end - committed) and the consumer holding it.")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", dest="view", action="store_const", const="offsets", help="offsets and lag (default)")
    view.add_argument("--members", dest="view", action="store_const", const="members", help="members and their assignments")
    view.add_argument("--state", dest="view", action="store_const", const="state", help="coordinator, assignor, state")
    describe.set_defaults(view="offsets")
    add_json_option(describe, "the description")

    delete = command("delete", "delete groups", _delete, "Delete groups and their committed offsets (only groups without members).")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    add_json_option(delete, "what happened to each group")

    reset = command("reset-offsets", "plan or apply new committed offsets", _reset,
                    "Move a group's committed offsets. Without --execute the plan is only printed (--dry-run). "
                    "New offsets are kept within [log start, log end] of each partition.")
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", dest="target", action="store_const", const=ResetTarget("earliest"), help="the log start")
    how.add_argument("--to-latest", dest="target", action="store_const", const=ResetTarget("latest"), help="the log end")
    how.add_argument("--to-current", dest="target", action="store_const", const=ResetTarget("current"),
                     help="the committed offset (the log end where there is none)")
    how.add_argument("--to-offset", type=int, metavar="N", help="offset N in every chosen partition")
    how.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N (N may be negative)")
    how.add_argument("--to-datetime", metavar="ISO", help="first record at or after this time, e.g. 2024-05-01T12:00:00Z")
    how.add_argument("--by-duration", metavar="PnDTnHnMnS", help="first record at or after now minus this, e.g. PT1H30M")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_json_option(reset, "the plan")

    delete_offsets = command("delete-offsets", "forget a group's committed offsets for topics", _delete_offsets,
                             "Delete committed offsets of a group for some topics or partitions (OffsetDelete). Kafka "
                             "refuses partitions the group is consuming while it is active.")
    delete_offsets.add_argument("--group", required=True)
    delete_offsets.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P]", help="(repeatable)")
    add_json_option(delete_offsets, "what happened to each partition")


# -- reading the cluster -------------------------------------------------------------------------


def _state_name(state: Any) -> str:
    return STATE_NAMES.get(state, str(getattr(state, "name", state)))


def _type_name(kind: Any) -> str:
    name = str(getattr(kind, "name", kind))
    return name.lower()


def _log_offsets(admin: AdminClient, args: argparse.Namespace, tps: Iterable[TP], spec: Any) -> dict[TP, int | None]:
    """One ListOffsets per partition with ``spec``; None where the cluster answered nothing useful."""
    tps = list(tps)
    found: dict[TP, int | None] = dict.fromkeys(tps)
    if not tps:
        return found
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in tps}, request_timeout=args.timeout)
    for tp, future in futures.items():
        try:
            offset = int(future.result(timeout=args.timeout).offset)
        except (KafkaException, TimeoutError):
            continue
        found[(tp.topic, tp.partition)] = offset if offset >= 0 else None
    return found


def _committed(admin: AdminClient, args: argparse.Namespace, group: str) -> dict[TP, int | None]:
    """The group's committed offsets (OffsetFetch for all its partitions); None: no offset."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=args.timeout)
    answer = result(futures[group], args)
    out: dict[TP, int | None] = {}
    for tp in answer.topic_partitions or []:
        if tp.error is not None:
            continue
        out[(tp.topic, tp.partition)] = int(tp.offset) if tp.offset >= 0 else None
    return out


def _describe_groups(admin: AdminClient, args: argparse.Namespace, groups: list[str]) -> dict[str, Any]:
    """Each group's ConsumerGroupDescription, or the error text."""
    futures = admin.describe_consumer_groups(groups, request_timeout=args.timeout)
    out: dict[str, Any] = {}
    for group in groups:
        try:
            out[group] = result(futures[group], args)
        except CliError as exc:
            out[group] = str(exc)
    return out


def _admin(args: argparse.Namespace) -> AdminClient:
    # librdkafka lets an admin handle's Metadata requests auto-create topics: naming a missing
    # topic in --topic must not create it
    return AdminClient({**client_config(args), "allow.auto.create.topics": False})


def _topic_partitions(admin: AdminClient, args: argparse.Namespace, topic: str) -> list[int]:
    try:
        metadata = admin.list_topics(topic, timeout=args.timeout)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        raise CliError(f"topic {topic} does not exist")
    return sorted(described.partitions)


# -- list ----------------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    states = set()
    for name in args.state:
        state = STATES_BY_NAME.get(name.lower().replace("-", "").replace("_", ""))
        if state is None:
            raise CliError(f"unknown state {name!r}: one of {', '.join(STATE_NAMES[s] for s in STATES_BY_NAME.values())}", 2)
        states.add(state)
    admin = _admin(args)
    kwargs: dict[str, Any] = {"request_timeout": args.timeout}
    if states:
        kwargs["states"] = states
    listed = result(admin.list_consumer_groups(**kwargs), args)
    rows = sorted(({"group": g.group_id, "type": _type_name(g.type), "state": _state_name(g.state),
                    "simple": bool(g.is_simple_consumer_group)} for g in listed.valid), key=lambda r: str(r["group"]))
    out = Output(args.json)
    if args.json:
        out.json(rows)
    else:
        out.table(["GROUP", "TYPE", "STATE"], [(r["group"], r["type"], r["state"]) for r in rows])
    for error in listed.errors:
        out.note(f"Error listing groups: {kafka_error_text(KafkaException(error))}")
    return 1 if listed.errors else 0


# -- describe ------------------------------------------------------------------------------------


def _owners(description: Any) -> dict[TP, Any]:
    owners = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions if member.assignment else []:
            owners[(tp.topic, tp.partition)] = member
    return owners


def _offset_rows(admin: AdminClient, args: argparse.Namespace, group: str, description: Any) -> list[dict[str, Any]]:
    committed = _committed(admin, args, group)
    owners = _owners(description)
    tps = sorted(set(committed) | set(owners))
    ends = _log_offsets(admin, args, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    rows = []
    for tp in tps:
        current, end, member = committed.get(tp), ends.get(tp), owners.get(tp)
        rows.append({
            "group": group, "topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
            "lag": end - current if end is not None and current is not None else None,
            "consumer_id": member.member_id if member else None, "host": member.host if member else None,
            "client_id": member.client_id if member else None,
        })
    return rows


def _member_rows(group: str, description: Any) -> list[dict[str, Any]]:
    return [{
        "group": group, "consumer_id": m.member_id, "group_instance_id": m.group_instance_id, "host": m.host,
        "client_id": m.client_id,
        "assignment": [f"{tp.topic}:{tp.partition}" for tp in (m.assignment.topic_partitions if m.assignment else [])],
    } for m in sorted(description.members, key=lambda m: str(m.member_id))]


def _state_row(group: str, description: Any) -> dict[str, Any]:
    coordinator = description.coordinator
    return {
        "group": group, "coordinator": f"{coordinator.host}:{coordinator.port} ({coordinator.id})" if coordinator else None,
        "assignment_strategy": description.partition_assignor or None, "state": _state_name(description.state),
        "type": _type_name(description.type), "members": len(description.members),
    }


def _describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    descriptions = _describe_groups(admin, args, list(dict.fromkeys(args.groups)))
    out = Output(args.json)
    documents: list[dict[str, Any]] = []
    failed = False
    for group, description in descriptions.items():
        if isinstance(description, str):
            failed = True
            documents.append({"group": group, "error": description})
            out.note(f"Error describing group {group}: {description}")
            continue
        doc = _state_row(group, description)
        if args.view == "offsets":
            try:
                doc["offsets"] = _offset_rows(admin, args, group, description)
            except CliError as exc:
                failed = True
                doc["error"] = str(exc)
                out.note(f"Error fetching offsets of group {group}: {exc}")
        elif args.view == "members":
            doc["member_list"] = _member_rows(group, description)
        documents.append(doc)
    if args.json:
        out.json(documents)
    else:
        _print_described(out, [d for d in documents if "error" not in d], args.view)
    return 1 if failed else 0


def _print_described(out: Output, documents: list[dict[str, Any]], view: str) -> None:
    for i, doc in enumerate(documents):
        if i:
            out.line("")
        group, state = doc["group"], doc["state"]
        if view == "state":
            out.table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                      [(group, doc["coordinator"], doc["assignment_strategy"], state, doc["members"])])
            continue
        if state in ("Dead", "Unknown") and not doc.get("offsets"):
            out.note(f"Consumer group '{group}' does not exist.")
            continue
        if view == "members":
            if not doc["member_list"]:
                out.note(f"Consumer group '{group}' has no active members.")
                continue
            out.table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                      [(group, m["consumer_id"], m["host"], m["client_id"], len(m["assignment"]), m["assignment"])
                       for m in doc["member_list"]])
            continue
        if doc["members"] == 0:
            out.note(f"Consumer group '{group}' has no active members.")
        out.table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
                  [(group, r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                    r["consumer_id"], r["host"], r["client_id"]) for r in doc["offsets"]])


# -- delete --------------------------------------------------------------------------------------


def _delete(args: argparse.Namespace) -> int:
    groups = list(dict.fromkeys(args.groups))
    admin = _admin(args)  # must outlive its futures
    futures = admin.delete_consumer_groups(groups, request_timeout=args.timeout)
    outcomes = []
    out = Output(args.json)
    for group in groups:
        try:
            result(futures[group], args)
            outcomes.append({"group": group, "status": "deleted", "error": None})
            if not args.json:
                out.line(f"Deleted consumer group '{group}'.")
        except CliError as exc:
            outcomes.append({"group": group, "status": "error", "error": str(exc)})
            out.note(f"Error deleting consumer group '{group}': {exc}")
    if args.json:
        out.json(outcomes)
    return 1 if any(o["error"] for o in outcomes) else 0


# -- reset-offsets -------------------------------------------------------------------------------


def _target(args: argparse.Namespace) -> ResetTarget:
    try:
        if args.to_offset is not None:
            return ResetTarget("offset", args.to_offset)
        if args.shift_by is not None:
            return ResetTarget("shift", args.shift_by)
        if args.to_datetime is not None:
            return ResetTarget("datetime", parse_datetime_ms(args.to_datetime))
        if args.by_duration is not None:
            return ResetTarget("duration", parse_duration_ms(args.by_duration))
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    target: ResetTarget = args.target
    return target


def _chosen_partitions(admin: AdminClient, args: argparse.Namespace, committed: Mapping[TP, int | None]) -> list[TP]:
    if args.all_topics:
        return sorted(committed)
    chosen: list[TP] = []
    for text in args.topic:
        try:
            topic, partitions = parse_topic_partitions(text)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
        existing = _topic_partitions(admin, args, topic)
        for p in partitions if partitions is not None else existing:
            if p not in existing:
                raise CliError(f"topic {topic} has no partition {p}", 2)
            chosen.append((topic, p))
    return sorted(set(chosen))


def _gather(admin: AdminClient, args: argparse.Namespace, tps: list[TP], committed: Mapping[TP, int | None],
            target: ResetTarget) -> dict[TP, PartitionOffsets]:
    earliest = _log_offsets(admin, args, tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    latest = _log_offsets(admin, args, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    timestamp = target.lookup_timestamp(int(time.time() * 1000))
    at_time = _log_offsets(admin, args, tps, OffsetSpec.for_timestamp(timestamp)) if timestamp is not None else {}
    missing = [f"{t}:{p}" for t, p in tps if earliest[(t, p)] is None or latest[(t, p)] is None]
    if missing:
        raise CliError(f"could not read the log start/end offsets of {', '.join(missing)}")
    return {tp: PartitionOffsets(committed.get(tp), earliest[tp] or 0, latest[tp] or 0, at_time.get(tp)) for tp in tps}


def _members(description: Any) -> str:
    count = len(description.members)
    return f"{count} member{'' if count == 1 else 's'}"


def _reset(args: argparse.Namespace) -> int:
    target = _target(args)
    admin = _admin(args)
    description = _describe_groups(admin, args, [args.group])[args.group]
    if isinstance(description, str):
        raise CliError(f"cannot describe group {args.group}: {description}")
    state = _state_name(description.state)
    active = state not in ("Empty", "Dead", "Unknown") or bool(description.members)
    if args.execute and active:
        raise CliError(f"Assignments can only be reset if the group '{args.group}' is inactive, but the current state "
                       f"is {state} ({_members(description)}). Stop its consumers and try again.")
    committed = _committed(admin, args, args.group)
    tps = _chosen_partitions(admin, args, committed)
    if not tps:
        raise CliError(f"nothing to reset: group {args.group} has no committed offsets (name topics with --topic)")
    offsets = _gather(admin, args, tps, committed, target)
    try:
        plan = plan_reset(offsets, target)
    except ResetError as exc:
        raise CliError(str(exc)) from None
    if args.execute:
        request = ConsumerGroupTopicPartitions(args.group, [TopicPartition(t, p, offset) for (t, p), offset in plan.items()])
        answer = result(admin.alter_consumer_group_offsets([request], request_timeout=args.timeout)[args.group], args)
        errors = [f"{tp.topic}:{tp.partition}: {kafka_error_text(KafkaException(tp.error))}"
                  for tp in answer.topic_partitions or [] if tp.error is not None]
        if errors:
            raise CliError("some offsets were not committed: " + "; ".join(errors))
    rows = [{"group": args.group, "topic": t, "partition": p, "current_offset": offsets[(t, p)].current, "new_offset": new}
            for (t, p), new in plan.items()]
    out = Output(args.json)
    if args.json:
        out.json({"group": args.group, "executed": bool(args.execute), "partitions": rows})
    else:
        out.table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                  [(r["group"], r["topic"], r["partition"], r["current_offset"], r["new_offset"]) for r in rows])
    if args.execute:
        out.note(f"Committed the new offsets of group {args.group}.")
    else:
        note = "Dry run: nothing changed; add --execute to commit these offsets."
        if active:
            note += f" (--execute is refused while the group is {state} with {_members(description)}.)"
        out.note(note)
    return 0


# -- delete-offsets ------------------------------------------------------------------------------


# librdkafka has no OffsetDelete, so this one command speaks the protocol itself (kio's message classes):
# FindCoordinator v1 on a bootstrap broker, then OffsetDelete v0 on the coordinator, over the
# listener's security protocol (cli/wire.py).


def _kafka_call(wire: Wire, address: tuple[str, int], request: Any, response_type: type[T]) -> T:
    """One request on a fresh connection; the decoded response."""
    buffer = io.BytesIO()
    header = RequestHeader(request_api_key=request.__api_key__, request_api_version=request.__version__,
                           correlation_id=i32(1), client_id="tidelog-cli")
    entity_writer(RequestHeader)(buffer, header)
    entity_writer(type(request))(buffer, request)
    frame = wire.call(address, buffer.getvalue())
    _header, offset = entity_reader(ResponseHeader)(frame, 0)
    body, _size = entity_reader(response_type)(frame, offset)
    return body


_ERROR_NAMES = {int(e.value): e.name for e in ErrorCode}


def _error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"error {code}")


def _delete_offsets(args: argparse.Namespace) -> int:
    wanted: dict[str, list[int] | None] = {}
    for text in args.topic:
        try:
            topic, partitions = parse_topic_partitions(text)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
        wanted[topic] = partitions
    wire = Wire(client_config(args), args.timeout)
    admin = _admin(args)
    chosen = {topic: parts if parts is not None else _topic_partitions(admin, args, topic) for topic, parts in wanted.items()}
    found = _kafka_call(wire, wire.bootstrap, FindCoordinatorRequest(key=args.group, key_type=i8(0)), FindCoordinatorResponse)
    if found.error_code != 0:
        raise CliError(f"no coordinator for group {args.group}: {_error_name(found.error_code)}")
    request = OffsetDeleteRequest(group_id=GroupId(args.group), topics=tuple(
        OffsetDeleteRequestTopic(name=TopicName(topic), partitions=tuple(
            OffsetDeleteRequestPartition(partition_index=i32(p)) for p in parts))
        for topic, parts in chosen.items()))
    answer = _kafka_call(wire, (found.host, int(found.port)), request, OffsetDeleteResponse)
    if answer.error_code != 0:
        raise CliError(f"could not delete offsets of group {args.group}: {_error_name(answer.error_code)}")
    rows = [{"group": args.group, "topic": str(t.name), "partition": int(p.partition_index),
             "error": None if p.error_code == 0 else _error_name(p.error_code)}
            for t in answer.topics for p in t.partitions]
    rows.sort(key=lambda r: (r["topic"], r["partition"]))
    out = Output(args.json)
    if args.json:
        out.json(rows)
    else:
        out.table(["GROUP", "TOPIC", "PARTITION", "STATUS"],
                  [(r["group"], r["topic"], r["partition"], r["error"] or "Successful") for r in rows])
    return 1 if any(r["error"] for r in rows) else 0
