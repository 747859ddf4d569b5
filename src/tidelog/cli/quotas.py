"""``tidelog quotas describe|alter|delete``: Kafka's client quotas, as ``kafka-configs.sh --entity-type
users/clients/ips`` manages them, over the Kafka protocol (DescribeClientQuotas and AlterClientQuotas
v0, which librdkafka does not offer; ``cli/wire.py`` carries them). Works against Apache Kafka too.

Entities are named the kafka-configs.sh way (``--entity-type users --entity-name alice --entity-type
clients --entity-default``) or with the shorter ``--user``, ``--user-default``, ``--client-id``,
``--client-default``, ``--ip`` and ``--ip-default``. ``describe`` with no entity lists every quota;
with entities it shows exactly that entity (``--any`` widens a named type to its every name).

``tidelog quotas tier ...`` (priority tiers) lives in ``cli/quota_tiers.py``.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.alter_client_quotas.v0.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.alter_client_quotas.v0.response import AlterClientQuotasResponse
from kio.schema.describe_client_quotas.v0.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_client_quotas.v0.response import DescribeClientQuotasResponse
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import f64, i8, i32
from kio.static.protocol import Entity

from tidelog.cli.common import (
    CliError,
    Output,
    add_json_option,
    client_config,
    command_adder,
    split_config_list,
)
from tidelog.cli.quota_tiers import add_tier_parser
from tidelog.cli.wire import Wire
from tidelog.common.errors import ErrorCode

T = TypeVar("T", bound=Entity)

EXAMPLES = """\
examples:
  tidelog quotas alter --user alice --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
  tidelog quotas alter --entity-type users --entity-name alice --entity-type clients --entity-default \\
      --add-config request_percentage=50
  tidelog quotas alter --client-default --add-config consumer_byte_rate=10485760
  tidelog quotas alter --ip 10.0.0.7 --add-config connection_creation_rate=20
  tidelog quotas alter --user alice --delete-config consumer_byte_rate
  tidelog quotas describe                          # every quota
  tidelog quotas describe --user alice --json      # exactly user=alice
  tidelog quotas describe --user alice --any       # alice alone and alice with any client id
  tidelog quotas delete --user alice               # every key of user=alice
  tidelog quotas alter --user batch --add-config tidelog.tier=2    # alice's batch jobs: low tier
  tidelog quotas tier throttle low --rate 1048576  # the low tier together: 1 MiB/s per direction per broker
  tidelog quotas tier pause low                    # produce held, fetches answered empty
  tidelog quotas tier resume low

Keys: producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage (% of one request thread),
controller_mutation_rate (partition mutations/s) for users and client ids; connection_creation_rate
for ips; tidelog.tier (0 high, 1 medium, 2 low) for users and client ids (docs/quotas.md).
Altering needs ALTER_CONFIGS on the cluster, describing DESCRIBE_CONFIGS, when ACLs are enforced.
"""

ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_ERROR_NAMES = {int(e.value): e.name for e in ErrorCode}


def add_parser(sub: Any) -> None:
    quotas = sub.add_parser("quotas", help="describe, alter and delete client quotas",
                            description="Kafka's client quotas (and tidelog's priority tiers) over the Kafka protocol.",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = quotas.add_subparsers(dest="quotas_command", required=True, metavar="COMMAND")
    command = command_adder(commands, EXAMPLES)

    describe = command("describe", "show client quotas", _describe)
    _entity_options(describe)
    describe.add_argument("--any", action="store_true", help="also entities with other types beside the named ones")
    add_json_option(describe, "the quotas")

    alter = command("alter", "set or delete quota keys of one entity", _alter)
    _entity_options(alter)
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V,K=V", help="keys to set")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K,K", help="keys to remove")
    alter.add_argument("--validate-only", action="store_true", help="check with the broker, change nothing")

    delete = command("delete", "remove quota keys of one entity (all of them by default)", _delete)
    _entity_options(delete)
    delete.add_argument("--config", action="append", default=[], metavar="K,K", help="only these keys")
    add_tier_parser(commands, EXAMPLES)


def _entity_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("entity (as kafka-configs.sh names it, or the short forms)")
    group.add_argument("--entity-type", dest="entity_parts", action="append", type=_entity_type,
                       metavar="users|clients|ips", default=[])
    group.add_argument("--entity-name", dest="entity_parts", action="append", type=lambda v: ("name", v))
    group.add_argument("--entity-default", dest="entity_parts", action="append_const", const=("name", None))
    for flag, kind in (("--user", "user"), ("--client-id", "client-id"), ("--ip", "ip")):
        group.add_argument(flag, dest="entity_parts", action="append", type=_pair(kind), metavar="NAME")
        group.add_argument(f"{flag.removesuffix('-id')}-default", dest="entity_parts", action="append_const",
                           const=("pair", (kind, None)))


def _pair(kind: str) -> Callable[[str], tuple[str, tuple[str, str]]]:
    return lambda name: ("pair", (kind, name))


def _entity_type(text: str) -> tuple[str, str]:
    kind = ENTITY_TYPES.get(text)
    if kind is None:
        raise argparse.ArgumentTypeError(f"entity type {text!r} is not one of {', '.join(ENTITY_TYPES)}")
    return "type", kind


def entity_of(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """(type, name or None for the default, named) for each entity part, in the order given."""
    parts: list[tuple[str, str | None, bool]] = []
    pending: str | None = None
    for tag, value in args.entity_parts:
        if tag == "pair":
            parts.append((value[0], value[1], True))
        elif tag == "type":
            if pending is not None:
                parts.append((pending, None, False))
            pending = value
        else:
            if pending is None:
                raise CliError("--entity-name/--entity-default must follow an --entity-type", 2)
            parts.append((pending, value, True))
            pending = None
    if pending is not None:
        parts.append((pending, None, False))
    if len({kind for kind, _, _ in parts}) != len(parts):
        raise CliError("an entity type may be named once", 2)
    return parts


def _call(wire: Wire, request: Any, response_type: type[T]) -> T:
    buffer = io.BytesIO()
    header = RequestHeader(request_api_key=request.__api_key__, request_api_version=request.__version__,
                           correlation_id=i32(1), client_id="tidelog-cli")
    entity_writer(RequestHeader)(buffer, header)
    entity_writer(type(request))(buffer, request)
    frame = wire.call(wire.bootstrap, buffer.getvalue())
    _header, offset = entity_reader(ResponseHeader)(frame, 0)
    body, _size = entity_reader(response_type)(frame, offset)
    return body


def describe_quotas(args: argparse.Namespace, parts: list[tuple[str, str | None, bool]], strict: bool) -> list[dict[str, Any]]:
    components = tuple(
        ComponentData(entity_type=kind, match_type=i8(0 if name is not None else 1 if named else 2), match=name)
        for kind, name, named in parts
    )
    wire = Wire(client_config(args), args.timeout)
    answer = _call(wire, DescribeClientQuotasRequest(components=components, strict=strict), DescribeClientQuotasResponse)
    if answer.error_code != 0:
        raise CliError(f"{_ERROR_NAMES.get(int(answer.error_code), answer.error_code)}: {answer.error_message}")
    rows: list[dict[str, Any]] = [
        {"entity": {e.entity_type: e.entity_name for e in entry.entity},
         "values": {v.key: float(v.value) for v in entry.values}}
        for entry in answer.entries or ()
    ]
    rows.sort(key=lambda r: sorted((k, v or "") for k, v in r["entity"].items()))
    return rows


def _describe(args: argparse.Namespace) -> int:
    parts = entity_of(args)
    rows = describe_quotas(args, parts, strict=bool(parts) and not args.any)
    out = Output(args.json)
    if args.json:
        out.json(rows)
        return 0

    def name(row: dict[str, Any], kind: str) -> str:
        if kind not in row["entity"]:
            return ""
        value = row["entity"][kind]
        return "<default>" if value is None else str(value)

    out.table(["USER", "CLIENT-ID", "IP", "KEY", "VALUE"], [
        (name(row, "user"), name(row, "client-id"), name(row, "ip"), key, _number(value))
        for row in rows for key, value in sorted(row["values"].items())
    ])
    return 0


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def alter_quotas(args: argparse.Namespace, ops: list[tuple[str, float, bool]], validate_only: bool = False) -> None:
    parts = entity_of(args)
    if not parts or not all(named for _, _, named in parts):
        raise CliError("name the entity: --entity-name or --entity-default after each --entity-type", 2)
    entry = EntryData(
        entity=tuple(EntityData(entity_type=kind, entity_name=name) for kind, name, _ in parts),
        ops=tuple(OpData(key=key, value=f64(value), remove=remove) for key, value, remove in ops),
    )
    wire = Wire(client_config(args), args.timeout)
    answer = _call(wire, AlterClientQuotasRequest(entries=(entry,), validate_only=validate_only), AlterClientQuotasResponse)
    for result in answer.entries:
        if result.error_code != 0:
            raise CliError(f"{_ERROR_NAMES.get(int(result.error_code), result.error_code)}: {result.error_message}")


def _parse_values(items: list[str]) -> list[tuple[str, float, bool]]:
    ops = []
    for item in items:
        for assignment in split_config_list(item):
            key, sep, value = assignment.partition("=")
            if not sep:
                raise CliError(f"--add-config {assignment!r} is not KEY=VALUE", 2)
            try:
                ops.append((key.strip(), float(value), False))
            except ValueError:
                raise CliError(f"--add-config {key}: {value!r} is not a number", 2) from None
    return ops


def _keys(items: list[str]) -> list[str]:
    return [key.strip() for item in items for key in item.split(",") if key.strip()]


def _alter(args: argparse.Namespace) -> int:
    ops = _parse_values(args.add_config) + [(key, 0.0, True) for key in _keys(args.delete_config)]
    if not ops:
        raise CliError("nothing to change: give --add-config and/or --delete-config", 2)
    alter_quotas(args, ops, args.validate_only)
    print("validated" if args.validate_only else "altered")
    return 0


def _delete(args: argparse.Namespace) -> int:
    keys = _keys(args.config)
    if not keys:
        parts = entity_of(args)
        current = describe_quotas(args, parts, strict=True)
        keys = sorted({key for row in current for key in row["values"]})
        if not keys:
            raise CliError("that entity has no quotas")
    alter_quotas(args, [(key, 0.0, True) for key in keys])
    print(f"deleted {', '.join(keys)}")
    return 0
