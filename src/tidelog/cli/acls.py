"""``tidelog acls add|list|remove|audit-report``: kafka-acls.sh over the Kafka protocol, and the report of
tidelog's audit mode.

``add``, ``list`` and ``remove`` call CreateAcls, DescribeAcls and DeleteAcls (confluent-kafka's
AdminClient), so they work against Apache Kafka too. The options are kafka-acls.sh's: principals with
their permission (``--allow-principal``/``--deny-principal``), hosts, operations, resources, pattern type,
and the ``--producer``/``--consumer`` bundles. ``audit-report`` reads the file the broker's authorizer
writes in audit mode (``tidelog.security.audit``); only ``--apply`` talks to the cluster.

confluent-kafka names the CLUSTER resource type BROKER (same wire code); it is shown as CLUSTER here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    admin_client,
    client_config,
    command_adder,
    result,
)
from tidelog.common.config import parse_properties
from tidelog.security.audit import FILE_NAME, read_report

CLUSTER_NAME = "kafka-cluster"

EXAMPLES = """\
examples:
  tidelog acls add --allow-principal User:alice --operation Read --operation Write --topic orders
  tidelog acls add --allow-principal User:alice --operation Read --group app- --resource-pattern-type prefixed
  tidelog acls add --deny-principal User:mallory --deny-host 10.0.0.9 --operation All --topic orders
  tidelog acls add --allow-principal User:svc --producer --topic orders --transactional-id svc-tx --idempotent
  tidelog acls add --allow-principal User:app --consumer --topic orders --group billing
  tidelog acls add --allow-principal User:ops --operation Alter --cluster
  tidelog acls list                                    # every ACL the principal may see
  tidelog acls list --topic orders --resource-pattern-type match --json   # all ACLs that apply to orders
  tidelog acls list --principal User:alice
  tidelog acls remove --allow-principal User:alice --operation Write --topic orders --force
  tidelog acls audit-report --log-dir /var/lib/tidelog           # who enforcement would refuse
  tidelog acls audit-report --log-dir /var/lib/tidelog --suggest # the `tidelog acls add` lines that fix it
  tidelog acls audit-report --log-dir /var/lib/tidelog --apply   # create those ACLs (asks first)
  tidelog acls enforce --listener APPS                 # then lock the listener (tidelog brokers; no restart)

The cluster resource's name is always kafka-cluster. Principals are TYPE:NAME (User:alice).
"""

OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
PATTERN_TYPES = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED,
                 "match": ResourcePatternType.MATCH, "any": ResourcePatternType.ANY}
PRODUCER_TOPIC_OPS = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
PRODUCER_TXN_OPS = (AclOperation.WRITE, AclOperation.DESCRIBE)
CONSUMER_TOPIC_OPS = (AclOperation.READ, AclOperation.DESCRIBE)


def add_parser(sub: Any) -> None:
    acls = sub.add_parser(
        "acls", help="add, list and remove ACLs; the audit-mode report",
        description="Manage Kafka ACLs the way kafka-acls.sh does, over the Kafka protocol (works against "
                    "Apache Kafka too), and read tidelog's audit-mode report.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = acls.add_subparsers(dest="acls_command", required=True, metavar="COMMAND")

    command = command_adder(commands, EXAMPLES)

    add = command("add", "create ACLs", _add, "Create one ACL per resource, principal, host and operation.")
    _binding_options(add, pattern_default="literal", pattern_choices=("literal", "prefixed"))
    add.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on --topic; WRITE, DESCRIBE on "
                     "--transactional-id; IDEMPOTENT_WRITE on the cluster with --idempotent")
    add.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    add.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on --topic; READ on --group")
    add_json_option(add, "the ACLs created")

    listing = command("list", "show ACLs", _list, "Show the ACLs matching the resources and principals given (all "
                      "of them without options). DescribeAcls needs DESCRIBE on the cluster.")
    _resource_options(listing, pattern_default=None, pattern_choices=tuple(PATTERN_TYPES))
    listing.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME", help="only this principal's ACLs (repeatable)")
    add_json_option(listing, "the ACLs")

    remove = command("remove", "delete ACLs", _remove, "Delete the ACLs matching a filter. What matches is shown "
                     "first and you are asked to confirm (--force skips the question). Unset parts match anything.")
    _binding_options(remove, pattern_default="literal", pattern_choices=tuple(PATTERN_TYPES), operations_required=False)
    remove.add_argument("--force", action="store_true", help="do not ask for confirmation")
    add_json_option(remove, "the ACLs deleted")

    audit = command("audit-report", "who the authorizer in audit mode would refuse, and the ACLs to fix it", _audit,
                    "Read the audit-mode report the broker writes (<first log dir>/__acl_audit.json): per principal "
                    "its clients, hosts and requests, then the requests enforcement would still refuse.")
    where = audit.add_mutually_exclusive_group()
    where.add_argument("--file", metavar="PATH", help="the report file")
    where.add_argument("--log-dir", metavar="DIR", help="the broker's first log dir (holds __acl_audit.json)")
    where.add_argument("--server-config", metavar="FILE", default="server.properties",
                       help="take the first of log.dirs from this properties file (default ./server.properties)")
    audit.add_argument("--all", action="store_true", help="also rows the current ACLs already allow")
    audit.add_argument("--suggest", "--emit-acls", dest="suggest", action="store_true",
                       help="print the suggested ACLs as `tidelog acls add` command lines")
    audit.add_argument("--apply", action="store_true", help="print the suggested ACLs and create them on the cluster (asks first)")
    audit.add_argument("--force", action="store_true", help="with --apply: do not ask")
    add_json_option(audit, "the report")

    for mode, func, text in (("enforce", _enforce, "refuse what the ACLs do not allow"),
                             ("audit", _audit_mode, "allow everything, record what enforcement would refuse")):
        switch = command(mode, f"switch listeners to {mode} mode (tidelog brokers)", func,
                         f"Switch the authorizer of one listener (or all) on every broker to {mode} mode: {text}. "
                         "A dynamic broker setting (listener.name.<listener>.authorizer.mode), no restart.")
        switch.add_argument("--listener", metavar="NAME", help="the listener's name, e.g. APPS (default: every listener)")
        add_json_option(switch, "the outcome per broker")


def _resource_options(parser: argparse.ArgumentParser, *, pattern_default: str | None, pattern_choices: tuple[str, ...]) -> None:
    group = parser.add_argument_group("resources")
    group.add_argument("--topic", action="append", default=[], metavar="TOPIC", help="(repeatable; * is every topic)")
    group.add_argument("--group", action="append", default=[], metavar="GROUP", help="consumer group (repeatable)")
    group.add_argument("--transactional-id", action="append", default=[], metavar="ID", help="(repeatable)")
    group.add_argument("--cluster", action="store_true", help="the cluster itself (name kafka-cluster)")
    group.add_argument("--resource-pattern-type", default=pattern_default, choices=pattern_choices, type=str.lower,
                       help=f"how names match (default {pattern_default or 'any without a resource, literal with one'})")


def _binding_options(parser: argparse.ArgumentParser, *, pattern_default: str, pattern_choices: tuple[str, ...],
                     operations_required: bool = True) -> None:
    _resource_options(parser, pattern_default=pattern_default, pattern_choices=pattern_choices)
    who = parser.add_argument_group("principals, hosts, operations")
    who.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME", help="(repeatable)")
    who.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME", help="(repeatable)")
    who.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="for the allowed principals (default *)")
    who.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="for the denied principals (default *)")
    who.add_argument("--operation", action="append", default=[], metavar="OP",
                     help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                          "IdempotentWrite, All (repeatable)" + ("" if operations_required else "; default: any"))


# -- building bindings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    restype: ResourceType
    name: str


def parse_operation(text: str) -> AclOperation:
    op = OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        raise CliError(f"unknown operation {text!r}: one of {', '.join(_op_name(o) for o in OPERATIONS.values())}", 2)
    return op


def _op_name(op: AclOperation) -> str:
    return "".join(part.capitalize() for part in op.name.split("_"))


def _resources(args: argparse.Namespace) -> list[Resource]:
    found = [Resource(ResourceType.TOPIC, t) for t in args.topic]
    found += [Resource(ResourceType.GROUP, g) for g in args.group]
    found += [Resource(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id]
    if args.cluster:
        found.append(Resource(ResourceType.BROKER, CLUSTER_NAME))
    return found


def _principals(args: argparse.Namespace) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) for every principal and host given."""
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            if ":" not in principal:
                raise CliError(f"a principal is TYPE:NAME, e.g. User:alice, not {principal!r}", 2)
            out += [(principal, host, permission) for host in (hosts or ["*"])]
    return out


def _bundle(args: argparse.Namespace) -> list[tuple[Resource, AclOperation]]:
    """The (resource, operation) pairs of --producer / --consumer, or of --operation on each resource."""
    resources = _resources(args)
    if not (args.producer or args.consumer):
        if args.idempotent:
            raise CliError("--idempotent goes with --producer", 2)
        ops = [parse_operation(o) for o in args.operation]
        if not ops:
            raise CliError("give at least one --operation (or --producer / --consumer)", 2)
        return [(r, op) for r in resources for op in ops]
    if args.operation:
        raise CliError("--producer and --consumer choose the operations themselves: drop --operation", 2)
    topics = [r for r in resources if r.restype == ResourceType.TOPIC]
    if not topics:
        raise CliError("--producer and --consumer need --topic", 2)
    pairs: list[tuple[Resource, AclOperation]] = []
    if args.producer:
        pairs += [(t, op) for t in topics for op in PRODUCER_TOPIC_OPS]
        pairs += [(r, op) for r in resources if r.restype == ResourceType.TRANSACTIONAL_ID for op in PRODUCER_TXN_OPS]
        if args.idempotent:
            pairs.append((Resource(ResourceType.BROKER, CLUSTER_NAME), AclOperation.IDEMPOTENT_WRITE))
    if args.consumer:
        groups = [r for r in resources if r.restype == ResourceType.GROUP]
        if not groups:
            raise CliError("--consumer needs --group", 2)
        pairs += [(t, op) for t in topics for op in CONSUMER_TOPIC_OPS]
        pairs += [(g, AclOperation.READ) for g in groups]
    return list(dict.fromkeys(pairs))


def build_bindings(args: argparse.Namespace) -> list[AclBinding]:
    pattern = PATTERN_TYPES[args.resource_pattern_type]
    principals = _principals(args)
    if not principals:
        raise CliError("give --allow-principal or --deny-principal", 2)
    pairs = _bundle(args)
    if not pairs:
        raise CliError("give a resource: --topic, --group, --transactional-id or --cluster", 2)
    return [AclBinding(r.restype, r.name, pattern if r.restype != ResourceType.BROKER else ResourcePatternType.LITERAL,
                       principal, host, op, permission)
            for r, op in pairs for principal, host, permission in principals]


def _name(value: object) -> str:
    return str(getattr(value, "name", value))


def binding_doc(b: AclBinding) -> dict[str, str]:
    restype = "CLUSTER" if b.restype == ResourceType.BROKER else _name(b.restype)
    return {"resource_type": restype, "resource_name": b.name, "pattern_type": _name(b.resource_pattern_type),
            "principal": b.principal, "host": b.host, "operation": _name(b.operation),
            "permission_type": _name(b.permission_type)}


def _print_bindings(out: Output, docs: list[dict[str, str]]) -> None:
    out.table(["RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
              [(d["resource_type"], d["resource_name"], d["pattern_type"], d["principal"], d["host"], d["operation"],
                d["permission_type"]) for d in docs])


def _sorted_docs(bindings: Iterable[AclBinding]) -> list[dict[str, str]]:
    return sorted((binding_doc(b) for b in bindings), key=lambda d: tuple(d.values()))


# -- add, list, remove ---------------------------------------------------------------------------


def create(admin: AdminClient, args: argparse.Namespace, bindings: list[AclBinding]) -> tuple[list[AclBinding], list[str]]:
    """CreateAcls: the bindings created, and one line per refused binding."""
    futures = admin.create_acls(bindings, request_timeout=args.timeout)
    created, errors = [], []
    for binding, future in futures.items():
        try:
            result(future, args)
            created.append(binding)
        except CliError as exc:
            d = binding_doc(binding)
            errors.append(f"{d['permission_type']} {d['principal']} {d['operation']} on {d['resource_type']} "
                          f"{d['resource_name']}: {exc}")
    return created, errors


def _add(args: argparse.Namespace) -> int:
    bindings = build_bindings(args)
    admin = admin_client(args)  # must outlive its futures
    created, errors = create(admin, args, bindings)
    out = Output(args.json)
    for error in errors:
        out.note(f"Error: {error}")
    if args.json:
        out.json({"created": _sorted_docs(created), "errors": errors})
    elif created:
        out.line(f"Added {len(created)} ACL{'s' if len(created) != 1 else ''}:")
        _print_bindings(out, _sorted_docs(created))
    return 1 if errors else 0


def _filters(args: argparse.Namespace, principals: list[tuple[str | None, str | None, AclPermissionType]],
             operations: list[AclOperation]) -> list[AclBindingFilter]:
    resources: list[Resource | None] = list(_resources(args)) or [None]
    pattern_name = args.resource_pattern_type or ("literal" if _resources(args) else "any")
    pattern = PATTERN_TYPES[pattern_name]
    filters = []
    for r in resources:
        for principal, host, permission in principals:
            for op in operations:
                filters.append(AclBindingFilter(
                    r.restype if r else ResourceType.ANY, r.name if r else None,  # type: ignore[arg-type]
                    pattern, principal, host, op, permission))  # type: ignore[arg-type]
    return filters


def _describe(admin: AdminClient, args: argparse.Namespace, filters: list[AclBindingFilter]) -> list[AclBinding]:
    found: dict[tuple[str, ...], AclBinding] = {}
    for f in filters:
        for b in result(admin.describe_acls(f, request_timeout=args.timeout), args):
            found[tuple(binding_doc(b).values())] = b
    return list(found.values())


def _list(args: argparse.Namespace) -> int:
    principals: list[tuple[str | None, str | None, AclPermissionType]] = (
        [(p, None, AclPermissionType.ANY) for p in args.principal] or [(None, None, AclPermissionType.ANY)])
    admin = admin_client(args)
    docs = _sorted_docs(_describe(admin, args, _filters(args, principals, [AclOperation.ANY])))
    out = Output(args.json)
    if args.json:
        out.json(docs)
    elif docs:
        _print_bindings(out, docs)
    else:
        out.note("No ACLs visible (none match, or this principal is not allowed DESCRIBE on the cluster).")
    return 0


def _remove(args: argparse.Namespace) -> int:
    principals: list[tuple[str | None, str | None, AclPermissionType]] = list(_principals(args))
    if not principals:
        principals = [(None, None, AclPermissionType.ANY)]
    operations = [parse_operation(o) for o in args.operation] or [AclOperation.ANY]
    if not _resources(args) and principals == [(None, None, AclPermissionType.ANY)]:
        raise CliError("name a resource or a principal to remove (removing every ACL needs at least --topic '*' ...)", 2)
    admin = admin_client(args)  # must outlive its futures
    filters = _filters(args, principals, operations)
    matching = _sorted_docs(_describe(admin, args, filters))
    out = Output(args.json)
    if not matching:
        if args.json:
            out.json({"deleted": [], "errors": []})
        else:
            out.note("No ACL matches: nothing to remove.")
        return 0
    if not args.force:
        out.note("These ACLs will be removed:")
        for d in matching:
            out.note(f"  {d['permission_type']} {d['principal']} {d['operation']} on {d['resource_type']} "
                     f"{d['resource_name']} ({d['pattern_type']}, host {d['host']})")
        if not _confirm("Are you sure you want to remove them? (y/n) "):
            out.note("Nothing removed.")
            return 1
    deleted: list[AclBinding] = []
    errors = []
    for f, future in admin.delete_acls(filters, request_timeout=args.timeout).items():
        try:
            deleted += result(future, args)
        except CliError as exc:
            errors.append(f"{binding_doc(f)}: {exc}")
    for error in errors:
        out.note(f"Error: {error}")
    docs = _sorted_docs(deleted)
    if args.json:
        out.json({"deleted": docs, "errors": errors})
    else:
        out.line(f"Removed {len(docs)} ACL{'s' if len(docs) != 1 else ''}.")
    return 1 if errors else 0


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise CliError("not confirmed: stdin is not a terminal (add --force)", 1)
    sys.stderr.write(question)
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


# -- audit report --------------------------------------------------------------------------------


def _report_path(args: argparse.Namespace) -> Path:
    if args.file:
        return Path(args.file)
    if args.log_dir:
        return Path(args.log_dir) / FILE_NAME
    config = Path(args.server_config)
    if not config.is_file():
        raise CliError(f"no report location: give --file or --log-dir ({config} does not exist)", 2)
    properties = parse_properties(config.read_text())
    log_dirs = properties.get("log.dirs") or properties.get("log.dir")
    if not log_dirs:
        raise CliError(f"{config} sets no log.dirs: give --file or --log-dir", 2)
    return Path(log_dirs.split(",")[0].strip()) / FILE_NAME


def suggestion_binding(row: dict[str, Any]) -> AclBinding:
    restype = ResourceType.BROKER if row["resource_type"] == "CLUSTER" else ResourceType[row["resource_type"]]
    return AclBinding(restype, row["resource_name"], ResourcePatternType[row["pattern_type"]], row["principal"],
                      row["host"], AclOperation[row["operation"]], AclPermissionType[row["permission_type"]])


def suggestion_command(row: dict[str, Any]) -> str:
    """One suggested ACL as a ``tidelog acls add`` command line."""
    who = "--allow-principal" if row["permission_type"] == "ALLOW" else "--deny-principal"
    host = "" if row["host"] == "*" else f" {'--allow-host' if who == '--allow-principal' else '--deny-host'} {row['host']}"
    flag = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}.get(row["resource_type"])
    resource = "--cluster" if flag is None else f"{flag} {shlex.quote(row['resource_name'])}"
    pattern = "" if row["pattern_type"] == "LITERAL" else f" --resource-pattern-type {row['pattern_type'].lower()}"
    op = _op_name(AclOperation[row["operation"]])
    return f"tidelog acls add {who} {shlex.quote(row['principal'])}{host} --operation {op} {resource}{pattern}"


def _audit(args: argparse.Namespace) -> int:
    path = _report_path(args)
    if not path.is_file():
        raise CliError(f"no audit report at {path} (is a listener in audit mode? the broker writes it every "
                       "authorizer.audit.flush.interval.ms)")
    try:
        report = read_report(path)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    rows = [e for e in report.get("entries", []) if args.all or e.get("still_denied")]
    suggestions = list(report.get("suggested_acls", []))
    out = Output(args.json)
    if args.json:
        out.json({**report, "entries": rows, "file": str(path)})
    elif args.suggest or args.apply:
        for row in suggestions:
            out.line(suggestion_command(row))
        if not suggestions:
            out.note("No ACL to suggest: nothing recorded is still denied.")
    else:
        _print_report(out, report, rows, args.all)
    if args.apply:
        return _apply(args, out, suggestions)
    return 0


def _print_report(out: Output, report: dict[str, Any], rows: list[dict[str, Any]], everything: bool) -> None:
    modes = ", ".join(f"{listener}={mode}" for listener, mode in sorted(report.get("modes", {}).items()))
    out.line(f"Listener modes: {modes or '-'}")
    principals = report.get("principals", {})
    if principals:
        last_seen = {p: max(e["last_seen_ms"] for e in report["entries"] if e["principal"] == p) for p in principals}
        out.table(["PRINCIPAL", "CLIENT-IDS", "HOSTS", "LISTENERS", "REQUESTS", "STILL-DENIED", "LAST-SEEN"],
                  [(p, d["clients"], d["hosts"], d["listeners"], d["requests"], d["still_denied"], _time(last_seen[p]))
                   for p, d in sorted(principals.items())], title="Principals refused by enforcement, as recorded")
    if rows:
        out.table(["PRINCIPAL", "CLIENT-ID", "HOST", "LISTENER", "RESOURCE", "OPERATION", "COUNT", "LAST-SEEN"]
                  + (["STILL-DENIED"] if everything else []),
                  [(r["principal"], r["client_id"], r["host"], r["listener"], f"{r['resource_type']}:{r['resource_name']}",
                    r["operation"], r["count"], _time(r["last_seen_ms"])) + (("yes" if r["still_denied"] else "no",) if everything else ())
                   for r in rows], title="Requests" if everything else "Requests enforcement would still refuse")
    elif not principals:
        out.line("Nothing recorded: enforcement would refuse no request seen so far.")
    else:
        out.line("Every recorded request is now allowed by the ACLs: enforcement can be switched on.")
    if report.get("dropped"):
        out.note(f"{report['dropped']} more rows were only counted (authorizer.audit.max.entries reached).")
    if report.get("suggested_acls"):
        out.note(f"{len(report['suggested_acls'])} suggested ACLs: --suggest prints them, --apply creates them.")


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _apply(args: argparse.Namespace, out: Output, suggestions: list[dict[str, Any]]) -> int:
    if not suggestions:
        out.note("Nothing to apply.")
        return 0
    if not args.force and not _confirm(f"Create {len(suggestions)} ACLs on {admin_target(args)}? (y/n) "):
        out.note("Nothing created.")
        return 1
    admin = admin_client(args)  # must outlive its futures
    _created, errors = create(admin, args, [suggestion_binding(row) for row in suggestions])
    for error in errors:
        out.note(f"Error: {error}")
    out.note(f"Created {len(suggestions) - len(errors)} of {len(suggestions)} suggested ACLs.")
    return 1 if errors else 0


def admin_target(args: argparse.Namespace) -> str:
    return str(client_config(args)["bootstrap.servers"])


# -- audit / enforce switch ----------------------------------------------------------------------


def _enforce(args: argparse.Namespace) -> int:
    return _switch(args, "enforce")


def _audit_mode(args: argparse.Namespace) -> int:
    return _switch(args, "audit")


def _switch(args: argparse.Namespace, mode: str) -> int:
    key = f"listener.name.{args.listener.lower()}.authorizer.mode" if args.listener else "authorizer.mode"
    admin = admin_client(args)  # must outlive its futures
    nodes = sorted(node.id for node in result(admin.describe_cluster(request_timeout=args.timeout), args).nodes)
    entry = ConfigEntry(key, mode, incremental_operation=AlterConfigOpType.SET)
    resources = [ConfigResource(ResourceType.BROKER, str(node), incremental_configs=[entry]) for node in nodes]
    out = Output(args.json)
    outcomes = []
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=args.timeout).items():
        try:
            result(future, args)
            outcomes.append({"broker": int(resource.name), "setting": key, "value": mode, "error": None})
            if not args.json:
                out.line(f"Broker {resource.name}: {key}={mode}")
        except CliError as exc:
            outcomes.append({"broker": int(resource.name), "setting": key, "value": mode, "error": str(exc)})
            out.note(f"Error on broker {resource.name}: {exc}")
    if args.json:
        out.json(outcomes)
    return 1 if any(o["error"] for o in outcomes) else 0
