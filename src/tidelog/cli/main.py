"""The ``tidelog`` command: ``serve`` runs a broker; the other commands operate a cluster.

Every command other than ``serve`` reaches the cluster only through the Kafka protocol (confluent-kafka),
so each one works against Apache Kafka as well. Each command lives in its own module here and adds
its parser through ``add_parser``.
"""

from __future__ import annotations

import argparse
import os
import sys

from tidelog.cli import (
    acls,
    agent,
    brokers,
    cluster,
    configs,
    consume,
    dev_cluster,
    gateway,
    governor,
    groups,
    log_dirs,
    mirror,
    partitions,
    perf,
    produce,
    quotas,
    serve,
    topics,
    transactions,
    users,
    web_console,
)
from tidelog.cli.common import CliError
from tidelog.cli.serve import env_overrides, load_broker_config
from tidelog.observability.logs import configure_logging

__all__ = ["build_parser", "env_overrides", "load_broker_config", "main"]

EPILOG = """\
examples:
  tidelog serve --override log.dirs=/var/lib/tidelog --override metrics.port=9100
  tidelog topics create orders --partitions 6
  echo hello | tidelog produce orders
  tidelog consume orders --from-beginning -e
  tidelog cluster describe
  tidelog perf produce orders --num-records 100000

Each command has its own --help with examples. Commands other than serve find the cluster through
--bootstrap-server, the TIDELOG_BOOTSTRAP_SERVER environment variable, or bootstrap.servers in a
--command-config file (default 127.0.0.1:9092), and work against Apache Kafka too.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidelog", description="tidelog: a Kafka-compatible streaming platform.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (env TIDELOG_LOG_LEVEL; default INFO for "
                        "serve, WARNING for the client commands)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (serve, dev_cluster, gateway, governor, agent, mirror, topics, configs, produce, consume, groups,
                   transactions, cluster, partitions, brokers, acls, users, quotas, perf, log_dirs, web_console):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    default_level = "INFO" if args.command in ("serve", "dev-cluster", "gateway", "agent", "mirror", "console") else "WARNING"
    args.log_level = (args.log_level or os.environ.get("TIDELOG_LOG_LEVEL") or default_level).upper()
    if args.command not in ("serve", "gateway", "console"):  # serve: from its settings (log.format); others: their own
        configure_logging(args.log_level, "text")
    try:
        code: int = args.func(args)
    except CliError as exc:
        print(f"tidelog: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (| head): not an error; keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
