"""``tidelog topics create|list|describe|alter|delete``: kafka-topics.sh through the Kafka protocol."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    admin_client,
    command_adder,
    kafka_error_text,
    parse_assignments,
    result,
)
from tidelog.common.ids import kafka_uuid_string

EXAMPLES = """\
examples:
  tidelog topics create orders --partitions 6 --config retention.ms=86400000 --config cleanup.policy=compact
  tidelog topics create orders --if-not-exists          # no error when it is already there
  tidelog topics list
  tidelog topics describe orders                        # partitions, leaders, ISR, log start/end offsets
  tidelog topics describe --under-replicated-partitions # every topic, only partitions with ISR < replicas
  tidelog topics alter orders --partitions 12 --config retention.ms=3600000 --delete-config cleanup.policy
  tidelog topics delete orders payments
  tidelog topics list --json | jq -r '.[].topic'
"""


def add_parser(sub: Any) -> None:
    topics = sub.add_parser(
        "topics", help="create, list, describe, alter and delete topics",
        description="Manage topics, the way kafka-topics.sh does, over the Kafka protocol (works against Apache Kafka too).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = topics.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")

    command = command_adder(commands, EXAMPLES)

    create = command("create", "create topics", _create, "Create topics. Unset --partitions and --replication-factor "
                     "take the broker's num.partitions and default.replication.factor.")
    _add_names(create, required=True)
    create.add_argument("--partitions", type=int, help="number of partitions (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, help="copies of each partition (default: the broker's default.replication.factor)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic setting, e.g. retention.ms=3600000 (repeatable)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")
    create.add_argument("--validate-only", action="store_true", help="ask the cluster to check the request without creating anything")
    add_json_option(create, "what happened to each topic")

    listing = command("list", "list topics", _list, "List topics with their partition count and replication factor.")
    listing.add_argument("--exclude-internal", action="store_true", help="leave out internal topics (names starting with __)")
    add_json_option(listing, "the list")

    describe = command("describe", "show partitions, leaders, replicas, ISR, offsets and overridden configs", _describe,
                       "Describe topics (all of them when none is named): per partition its leader, replicas, in-sync "
                       "replicas and log start/end offsets, and the topic's overridden settings.")
    _add_names(describe, required=False)
    describe.add_argument("--under-replicated-partitions", action="store_true", help="only partitions whose ISR is smaller than their replica set")
    describe.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a leader")
    describe.add_argument("--exclude-internal", action="store_true", help="leave out internal topics when listing all")
    add_json_option(describe, "the description")

    alter = command("alter", "add partitions or change settings", _alter,
                    "Grow a topic's partition count and set or remove its settings.")
    _add_names(alter, required=True)
    alter.add_argument("--partitions", type=int, help="new total partition count (it can only grow)")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="set a topic setting (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY", help="remove an override, back to the default (repeatable)")
    add_json_option(alter, "what happened to each topic")

    delete = command("delete", "delete topics", _delete, "Delete topics and their data.")
    _add_names(delete, required=True)
    delete.add_argument("--if-exists", action="store_true", help="succeed when a topic does not exist")
    add_json_option(delete, "what happened to each topic")


def _add_names(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("topics", nargs="*", metavar="TOPIC", help="topic name(s)")
    parser.add_argument("--topic", action="append", default=[], dest="topic_flags", metavar="TOPIC",
                        help="topic name, kafka-topics style (repeatable)")
    parser.set_defaults(names_required=required)


def _names(args: argparse.Namespace) -> list[str]:
    names = list(dict.fromkeys([*args.topics, *args.topic_flags]))
    if not names and args.names_required:
        raise CliError("name at least one topic", 2)
    return names


@dataclass
class Outcome:
    """What happened to one topic in a create/alter/delete."""

    topic: str
    status: str  # created, exists, altered, deleted, missing, validated, error
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def _report(out: Output, outcomes: list[Outcome], verbs: dict[str, str]) -> int:
    if out.json_mode:
        out.json([{"topic": o.topic, "status": o.status, "error": o.error, **o.detail} for o in outcomes])
    for o in outcomes:
        if o.error is not None:
            out.note(f"Error on topic {o.topic}: {o.error}")
        elif not out.json_mode:
            out.line(verbs[o.status].format(topic=o.topic, **o.detail))
    return 1 if any(o.error is not None for o in outcomes) else 0


def _create(args: argparse.Namespace) -> int:
    names = _names(args)
    configs = parse_assignments(args.config, "--config")
    admin = admin_client(args)
    new = [NewTopic(name, num_partitions=args.partitions or -1, replication_factor=args.replication_factor or -1, config=configs)
           for name in names]
    futures = admin.create_topics(new, operation_timeout=args.timeout, request_timeout=args.timeout, validate_only=args.validate_only)
    outcomes = []
    for name in names:
        try:
            result(futures[name], args)
            outcomes.append(Outcome(name, "validated" if args.validate_only else "created"))
        except CliError as exc:
            if args.if_not_exists and str(exc).startswith("TOPIC_ALREADY_EXISTS"):
                outcomes.append(Outcome(name, "exists"))
            else:
                outcomes.append(Outcome(name, "error", str(exc)))
    verbs = {"created": "Created topic {topic}.", "exists": "Topic {topic} already exists.",
             "validated": "Topic {topic} can be created (validate only)."}
    return _report(Output(args.json), outcomes, verbs)


def _delete(args: argparse.Namespace) -> int:
    names = _names(args)
    admin = admin_client(args)  # must outlive its futures
    futures = admin.delete_topics(names, operation_timeout=args.timeout, request_timeout=args.timeout)
    outcomes = []
    for name in names:
        try:
            result(futures[name], args)
            outcomes.append(Outcome(name, "deleted"))
        except CliError as exc:
            missing = str(exc).startswith("UNKNOWN_TOPIC_OR_PART")
            outcomes.append(Outcome(name, "missing") if missing and args.if_exists else Outcome(name, "error", str(exc)))
    return _report(Output(args.json), outcomes, {"deleted": "Deleted topic {topic}.", "missing": "Topic {topic} does not exist."})


def _alter(args: argparse.Namespace) -> int:
    names = _names(args)
    sets = parse_assignments(args.config, "--config")
    if args.partitions is None and not sets and not args.delete_config:
        raise CliError("nothing to alter: give --partitions, --config or --delete-config", 2)
    admin = admin_client(args)
    errors: dict[str, str] = {}
    if args.partitions is not None:
        futures = admin.create_partitions([NewPartitions(name, args.partitions) for name in names],
                                          operation_timeout=args.timeout, request_timeout=args.timeout)
        for name in names:
            try:
                result(futures[name], args)
            except CliError as exc:
                errors[name] = str(exc)
    if sets or args.delete_config:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete_config]
        resources = [ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries) for name in names if name not in errors]
        for resource, future in admin.incremental_alter_configs(resources, request_timeout=args.timeout).items():
            try:
                result(future, args)
            except CliError as exc:
                errors[resource.name] = str(exc)
    outcomes = [Outcome(name, "error", errors[name]) if name in errors else Outcome(name, "altered") for name in names]
    return _report(Output(args.json), outcomes, {"altered": "Altered topic {topic}."})


# -- reading -------------------------------------------------------------------------------------


def _all_topics(admin: AdminClient, args: argparse.Namespace, exclude_internal: bool) -> dict[str, Any]:
    try:
        metadata = admin.list_topics(timeout=args.timeout)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    return {name: t for name, t in sorted(metadata.topics.items()) if not (exclude_internal and name.startswith("__"))}


def _list(args: argparse.Namespace) -> int:
    topics = _all_topics(admin_client(args), args, args.exclude_internal)
    rows = []
    for name, t in topics.items():
        parts = list(t.partitions.values())
        rf = len(parts[0].replicas) if parts else 0
        rows.append({"topic": name, "partitions": len(parts), "replication_factor": rf,
                     "error": kafka_error_text(KafkaException(t.error)) if t.error is not None else None})
    out = Output(args.json)
    if args.json:
        out.json(rows)
    else:
        out.table(["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"], [(r["topic"], r["partitions"], r["replication_factor"]) for r in rows])
    return 0


def _node_id(node: Any) -> int | None:
    return None if node is None or node.id < 0 else int(node.id)


def _describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    names = _names(args) or list(_all_topics(admin, args, args.exclude_internal))
    described, errors = {}, {}
    for name, future in admin.describe_topics(TopicCollection(names), request_timeout=args.timeout).items():
        try:
            described[name] = result(future, args)
        except CliError as exc:
            errors[name] = str(exc)
    overrides = _overridden_configs(admin, args, list(described))
    offsets = _offsets(admin, args, [(name, p.id) for name, d in described.items() for p in d.partitions])
    topics: list[dict[str, Any]] = []
    for name in names:
        if name in errors:
            topics.append({"topic": name, "error": errors[name]})
            continue
        d = described[name]
        partitions = [_partition_row(name, p, offsets) for p in sorted(d.partitions, key=lambda p: p.id)]
        if args.under_replicated_partitions or args.unavailable_partitions:
            partitions = [p for p in partitions if (args.under_replicated_partitions and len(p["isr"]) < len(p["replicas"]))
                          or (args.unavailable_partitions and p["leader"] is None)]
            if not partitions:
                continue
        topics.append({
            "topic": name, "topic_id": _topic_id(d.topic_id), "internal": bool(d.is_internal),
            "partition_count": len(d.partitions),
            "replication_factor": len(d.partitions[0].replicas) if d.partitions else 0,
            "configs": overrides.get(name, {}), "partitions": partitions,
        })
    out = Output(args.json)
    if args.json:
        out.json(topics)
    else:
        _print_described(out, topics)
    for name, error in errors.items():
        if not args.json:
            out.note(f"Error on topic {name}: {error}")
    return 1 if errors else 0


def _partition_row(topic: str, p: Any, offsets: dict[tuple[str, int], tuple[int | None, int | None]]) -> dict[str, Any]:
    start, end = offsets.get((topic, p.id), (None, None))
    return {
        "partition": p.id, "leader": _node_id(p.leader),
        "replicas": [n.id for n in p.replicas], "isr": [n.id for n in p.isr],
        "log_start_offset": start, "log_end_offset": end,
    }


def _print_described(out: Output, topics: list[dict[str, Any]]) -> None:
    for i, t in enumerate(topics):
        if "error" in t:
            continue
        if i:
            out.line("")
        configs = ",".join(f"{k}={v}" for k, v in t["configs"].items())
        out.line(f"Topic: {t['topic']}  TopicId: {t['topic_id']}  PartitionCount: {t['partition_count']}  "
                 f"ReplicationFactor: {t['replication_factor']}  Configs: {configs}")
        out.table(
            ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOG-END"],
            [(p["partition"], "none" if p["leader"] is None else p["leader"], p["replicas"], p["isr"],
              p["log_start_offset"], p["log_end_offset"]) for p in t["partitions"]],
        )


def _overridden_configs(admin: AdminClient, args: argparse.Namespace, names: list[str]) -> dict[str, dict[str, str | None]]:
    """Each topic's settings set on the topic itself (what kafka-topics --describe shows)."""
    if not names:
        return {}
    out: dict[str, dict[str, str | None]] = {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names], request_timeout=args.timeout)
    for resource, future in futures.items():
        try:
            entries = result(future, args)
        except CliError:
            continue
        out[resource.name] = {k: e.value for k, e in sorted(entries.items()) if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return out


def _offsets(admin: AdminClient, args: argparse.Namespace, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    """(log start, log end) per partition; None where the cluster could not say."""
    found: dict[tuple[str, int], list[int | None]] = {tp: [None, None] for tp in partitions}
    if not partitions:
        return {}
    for index, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):  # type: ignore[no-untyped-call]
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions}, request_timeout=args.timeout)
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)][index] = int(future.result(timeout=args.timeout).offset)
            except (KafkaException, TimeoutError):
                pass  # left as unknown: shown as "-"
    return {tp: (v[0], v[1]) for tp, v in found.items()}


def _topic_id(value: object) -> str:
    """Kafka's form of a topic id (URL-safe base64, no padding); librdkafka's ``str()`` is standard base64."""
    most = getattr(value, "get_most_significant_bits", None)
    least = getattr(value, "get_least_significant_bits", None)
    if most is None or least is None:
        return str(value)
    return kafka_uuid_string((int(most()), int(least())))
