"""``tidelog gateway``: run the HTTP gateway (docs/gateway.md) in the foreground until SIGTERM or Ctrl-C.

Settings come from an optional properties file, then ``--override key=value`` pairs (last wins);
``--bootstrap-server`` sets ``bootstrap.servers``. Bad settings exit with status 2 and the key named.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from tidelog.cli.common import CliError, service_properties
from tidelog.common.errors import ConfigError as KafkaSettingError
from tidelog.gateway.app import run
from tidelog.gateway.config import ConfigError, GatewayConfig, parse_config
from tidelog.gateway.topics import StateTopicMismatch
from tidelog.observability.logs import configure_logging

EPILOG = """\
examples:
  tidelog gateway --bootstrap-server 127.0.0.1:9092 --override gateway.listen.port=8080
  tidelog gateway config/gateway.properties --override gateway.dc=dc1
  curl -s -XPOST 'localhost:8080/v1/topics/logs/write?sourceId=web-1&seqno=1' --data-binary @app.log
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("gateway", help="run the HTTP gateway (exactly-once writes per source, pull reads)",
                            description="Run the HTTP gateway in front of a Kafka cluster (tidelog or Apache Kafka).",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", help="properties file (gateway.*, bootstrap.servers, kafka.*)")
    parser.add_argument("--bootstrap-server", help="the cluster (sets bootstrap.servers)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="set one setting (repeatable)")
    parser.set_defaults(func=command)


def load(args: argparse.Namespace) -> GatewayConfig:
    props = service_properties(args)
    try:
        return parse_config(props)
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


def command(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, "text")
    config = load(args)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(config, stop)

    try:
        asyncio.run(main())
    except (StateTopicMismatch, KafkaSettingError) as exc:
        raise CliError(str(exc), 2) from None
    except OSError as exc:
        logging.getLogger(__name__).error("gateway stopped: %s", exc)
        return 1
    return 0
