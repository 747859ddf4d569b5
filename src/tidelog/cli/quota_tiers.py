"""``tidelog quotas tier throttle|pause|resume``: hold a whole priority tier back, or let it go.

The rules are dynamic broker settings of the cluster-wide default (IncrementalAlterConfigs on the
BROKER resource named "", which librdkafka cannot address, so the request is built here and carried
by ``cli/wire.py``): they live in the cluster metadata and every broker applies them at once.

- ``throttle TIER --rate BYTES``: ``quota.tier.<tier>.byte.rate`` = BYTES (the tier's clients together,
  per direction, per broker);
- ``pause TIER``: ``quota.tier.<tier>.paused`` = true;
- ``resume TIER``: both deleted: the tier is free again (its clients keep their own quotas).

The high tier has no such settings: tier rules never hold it back.
"""

from __future__ import annotations

import argparse
import io
from typing import Any

from kio.schema.incremental_alter_configs.v0.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.incremental_alter_configs.v0.response import IncrementalAlterConfigsResponse
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32

from tidelog.cli.common import CliError, add_connection_options, client_config
from tidelog.cli.wire import Wire
from tidelog.common.errors import ErrorCode

BROKER_RESOURCE, SET, DELETE = 4, 0, 1
TIERS = ("medium", "low")
_ERROR_NAMES = {int(e.value): e.name for e in ErrorCode}


def add_tier_parser(commands: Any, examples: str) -> None:
    tier = commands.add_parser("tier", help="throttle, pause or resume a whole priority tier",
                               description="Hold a whole priority tier back on every broker, or let it go. "
                                           "The high tier is never held back by tier rules.",
                               epilog=examples, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = tier.add_subparsers(dest="tier_command", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help, epilog=examples,
                                                             formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("tier", choices=TIERS, metavar="medium|low")
        parser.set_defaults(func=_run)
        add_connection_options(parser)
        return parser

    throttle = action("throttle", "hold a tier to a byte rate (its clients together, per direction, per broker)")
    throttle.add_argument("--rate", type=int, required=True, metavar="BYTES_PER_SEC")
    action("pause", "pause a tier: produce requests held, fetches answered empty")
    action("resume", "lift the tier's throttle and pause")


def _run(args: argparse.Namespace) -> int:
    prefix = f"quota.tier.{args.tier}"
    if args.tier_command == "throttle":
        if args.rate < 1:
            raise CliError("--rate must be at least 1 byte/s", 2)
        changes = [(f"{prefix}.byte.rate", SET, str(args.rate)), (f"{prefix}.paused", DELETE, None)]
        done = f"tier {args.tier} throttled to {args.rate} bytes/s per direction on each broker"
    elif args.tier_command == "pause":
        changes = [(f"{prefix}.paused", SET, "true")]
        done = f"tier {args.tier} paused"
    else:
        changes = [(f"{prefix}.byte.rate", DELETE, None), (f"{prefix}.paused", DELETE, None)]
        done = f"tier {args.tier} resumed"
    _alter_cluster_default(args, changes)
    print(done)
    return 0


def _alter_cluster_default(args: argparse.Namespace, changes: list[tuple[str, int, str | None]]) -> None:
    request = IncrementalAlterConfigsRequest(validate_only=False, resources=(AlterConfigsResource(
        resource_type=i8(BROKER_RESOURCE), resource_name="",
        configs=tuple(AlterableConfig(name=name, config_operation=i8(op), value=value) for name, op, value in changes),
    ),))
    wire = Wire(client_config(args), args.timeout)
    buffer = io.BytesIO()
    header = RequestHeader(request_api_key=request.__api_key__, request_api_version=request.__version__,
                           correlation_id=i32(1), client_id="tidelog-cli")
    entity_writer(RequestHeader)(buffer, header)
    entity_writer(IncrementalAlterConfigsRequest)(buffer, request)
    frame = wire.call(wire.bootstrap, buffer.getvalue())
    _header, offset = entity_reader(ResponseHeader)(frame, 0)
    answer, _size = entity_reader(IncrementalAlterConfigsResponse)(frame, offset)
    for response in answer.responses:
        if response.error_code != 0:
            code = int(response.error_code)
            raise CliError(f"{_ERROR_NAMES.get(code, code)}: {response.error_message}")
