"""``tidelog configs describe|alter``: kafka-configs.sh for topics and brokers, over the Kafka protocol."""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from tidelog.cli.common import (
    CliError,
    Output,
    add_connection_options,
    add_json_option,
    admin_client,
    parse_assignments,
    result,
    split_config_list,
)

EXAMPLES = """\
examples:
  tidelog configs describe --entity-type topics --entity-name orders          # settings set on the topic
  tidelog configs describe --entity-type topics --entity-name orders --all    # every setting, with its source
  tidelog configs describe --entity-type brokers --entity-name 1 --all
  tidelog configs alter --entity-type topics --entity-name orders --add-config retention.ms=3600000,cleanup.policy=[compact,delete]
  tidelog configs alter --entity-type topics --entity-name orders --delete-config retention.ms
  tidelog configs alter --entity-type brokers --entity-name 1 --add-config log.retention.ms=86400000

Kafka's --entity-default (the cluster-wide broker default, resource name "") cannot be addressed
through librdkafka; name the broker instead.
"""

ENTITY_TYPES = {"topics": ResourceType.TOPIC, "topic": ResourceType.TOPIC, "brokers": ResourceType.BROKER, "broker": ResourceType.BROKER}
DYNAMIC_SOURCES = {ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                   ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value}


def add_parser(sub: Any) -> None:
    configs = sub.add_parser(
        "configs", help="describe and alter topic and broker settings",
        description="Read and change settings of topics and brokers, the way kafka-configs.sh does, over the Kafka protocol.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = configs.add_subparsers(dest="configs_command", required=True, metavar="COMMAND")
    describe = commands.add_parser(
        "describe", help="show settings", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Show the settings of topics or brokers. Without --all only the settings changed at run time "
                    "(on the topic, or dynamically on the broker) are shown, as kafka-configs does.",
    )
    _entity_options(describe, name_required=False)
    describe.add_argument("--all", action="store_true", help="every setting, defaults included, with its source")
    add_json_option(describe, "the settings")
    describe.set_defaults(func=_describe)
    add_connection_options(describe)

    alter = commands.add_parser(
        "alter", help="set or remove settings", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Set (--add-config) or remove (--delete-config) settings of one topic or broker. Removing a "
                    "setting brings back its default. Values holding commas go in brackets: cleanup.policy=[compact,delete].",
    )
    _entity_options(alter, name_required=True)
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V,K2=V2", help="settings to set (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K,K2", help="settings to remove (repeatable)")
    add_json_option(alter, "the outcome")
    alter.set_defaults(func=_alter)
    add_connection_options(alter)


def _entity_options(parser: argparse.ArgumentParser, *, name_required: bool) -> None:
    parser.add_argument("--entity-type", required=True, choices=sorted(ENTITY_TYPES), help="topics or brokers")
    parser.add_argument("--entity-name", action="append", required=name_required, metavar="NAME",
                        help="topic name or broker id (repeatable; describe without it covers every topic or broker)")


def _resources(admin: AdminClient, args: argparse.Namespace) -> list[ConfigResource]:
    kind = ENTITY_TYPES[args.entity_type]
    if args.entity_name:
        return [ConfigResource(kind, name) for name in args.entity_name]
    if kind == ResourceType.TOPIC:
        metadata = admin.list_topics(timeout=args.timeout)
        return [ConfigResource(kind, name) for name in sorted(metadata.topics)]
    cluster = result(admin.describe_cluster(request_timeout=args.timeout), args)
    return [ConfigResource(kind, str(node.id)) for node in sorted(cluster.nodes, key=lambda n: n.id)]


def _entity_label(resource: ConfigResource) -> str:
    return f"{'topic' if resource.restype == ResourceType.TOPIC else 'broker'} {resource.name}"


def _source_name(source: int) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def _describe(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    resources = _resources(admin, args)
    entities, failed = [], False
    out = Output(args.json)
    futures = admin.describe_configs(resources, request_timeout=args.timeout) if resources else {}
    for resource in resources:
        entity: dict[str, Any] = {"entity_type": "topics" if resource.restype == ResourceType.TOPIC else "brokers",
                                  "entity_name": resource.name}
        try:
            entries = result(futures[resource], args)
        except CliError as exc:
            failed = True
            entity["error"] = str(exc)
            out.note(f"Error describing {_entity_label(resource)}: {exc}")
            entities.append(entity)
            continue
        chosen = [e for _n, e in sorted(entries.items()) if args.all or e.source in DYNAMIC_SOURCES]
        entity["configs"] = [
            {"name": e.name, "value": e.value, "source": _source_name(e.source), "read_only": bool(e.is_read_only),
             "sensitive": bool(e.is_sensitive), "default": bool(e.is_default)}
            for e in chosen
        ]
        entities.append(entity)
    if args.json:
        out.json(entities)
        return 1 if failed else 0
    for i, (resource, entity) in enumerate(zip(resources, entities, strict=True)):
        if "error" in entity:
            continue
        if i:
            out.line("")
        label = _entity_label(resource)
        if not entity["configs"]:
            out.line(f"No settings changed on {label} (--all shows every setting).")
            continue
        out.line(f"Settings of {label}:")
        out.table(["NAME", "VALUE", "SOURCE", "READ-ONLY", "SENSITIVE"],
                  [(c["name"], "(hidden)" if c["sensitive"] else c["value"], c["source"],
                    "yes" if c["read_only"] else "no", "yes" if c["sensitive"] else "no") for c in entity["configs"]],
                  max_widths={"VALUE": 60})
    return 1 if failed else 0


def _alter(args: argparse.Namespace) -> int:
    sets: dict[str, str] = {}
    for item in args.add_config:
        sets.update(parse_assignments(split_config_list(item), "--add-config"))
    deletes = [key for item in args.delete_config for key in split_config_list(item)]
    if not sets and not deletes:
        raise CliError("nothing to alter: give --add-config or --delete-config", 2)
    both = set(sets) & set(deletes)
    if both:
        raise CliError(f"both set and deleted: {', '.join(sorted(both))}", 2)
    admin = admin_client(args)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    resources = [ConfigResource(r.restype, r.name, incremental_configs=entries) for r in _resources(admin, args)]
    out = Output(args.json)
    outcomes, failed = [], False
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=args.timeout).items():
        entity: dict[str, Any] = {"entity_type": "topics" if resource.restype == ResourceType.TOPIC else "brokers",
                                  "entity_name": resource.name, "set": sets, "deleted": deletes, "error": None}
        try:
            result(future, args)
            if not args.json:
                out.line(f"Completed updating config for {_entity_label(resource)}.")
        except CliError as exc:
            failed = True
            entity["error"] = str(exc)
            out.note(f"Error updating config for {_entity_label(resource)}: {exc}")
        outcomes.append(entity)
    if args.json:
        out.json(outcomes)
    return 1 if failed else 0
