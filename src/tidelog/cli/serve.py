"""``tidelog serve``: start a broker the way kafka-server-start.sh does."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pathlib
import resource
import sys
from collections.abc import Coroutine
from typing import Any

from tidelog.cli.stop_signals import stacks_on_sigusr1
from tidelog.common.config import BrokerConfig, parse_properties
from tidelog.common.errors import ConfigError
from tidelog.metadata.errors import DuplicateBrokerError, MetadataStoreUnavailable
from tidelog.observability.logs import configure_logging

ENV_PREFIX = "TIDELOG_"
# TIDELOG_* variables that are not broker settings.
NOT_SETTINGS = {ENV_PREFIX + "LOG_LEVEL", ENV_PREFIX + "BOOTSTRAP_SERVER"}


def env_overrides(environ: dict[str, str]) -> dict[str, str]:
    """``TIDELOG_LOG_DIRS=/x`` → ``log.dirs=/x`` (dots as underscores, upper case)."""
    return {
        key[len(ENV_PREFIX):].lower().replace("_", "."): value
        for key, value in environ.items()
        if key.startswith(ENV_PREFIX) and key not in NOT_SETTINGS
    }


def load_broker_config(properties_file: str | None, overrides: list[str], environ: dict[str, str]) -> BrokerConfig:
    """Properties file, then environment, then ``--override`` (last wins), validated by the catalogue."""
    props: dict[str, str] = {}
    if properties_file:
        path = pathlib.Path(properties_file)
        if not path.is_file():
            raise ConfigError(f"properties file {properties_file} does not exist")
        props.update(parse_properties(path.read_text()))
    props.update(env_overrides(environ))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return BrokerConfig.from_properties(props)


def add_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="run a broker",
        description="Run a broker. With no arguments: 127.0.0.1:9092, data in ./data. Settings use Kafka's "
        "names (docs/configuration.md) from a properties file, TIDELOG_* environment variables "
        "(TIDELOG_LOG_DIRS=/data) and --override key=value, in increasing precedence.",
        epilog="examples:\n  tidelog serve\n  tidelog serve config/server.properties --override metrics.port=9100\n"
        "  TIDELOG_LOG_FORMAT=json tidelog serve --override log.dirs=/var/lib/tidelog",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("properties", nargs="?", help="server.properties-style file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="set one setting (repeatable)")
    serve.add_argument(
        "--event-loop", choices=("auto", "uvloop", "asyncio"), default="auto",
        help="auto (default): uvloop when installed, else asyncio (bench/RESULTS.md has the comparison)",
    )
    serve.set_defaults(func=serve_command)


def raise_open_files_limit(log: logging.Logger) -> int:
    """Raise the soft open-files limit to the hard one, as the JVM does for Kafka at start.

    A broker keeps several files open per partition (log and indexes) and one socket per client; the
    usual soft limit of 1024 would cap it far below what the machine allows. Returns the limit in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d to %d: %s", soft, target, exc)
    return soft


def run_event_loop(main: Coroutine[Any, Any, None], choice: str) -> None:
    """Run the broker on uvloop (measured: 0.67-0.78x the broker CPU of asyncio for consume, the same
    for produce) when it is installed and not refused, else on asyncio's own loop."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ConfigError("--event-loop uvloop: the uvloop package is not installed") from None
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(main)
            return
    asyncio.run(main)


def serve_command(args: argparse.Namespace) -> int:
    from tidelog.broker.node import BrokerNode

    log = logging.getLogger("tidelog")
    try:
        config = load_broker_config(args.properties, args.override, dict(os.environ))
        configure_logging(args.log_level, str(config.get("log.format")))
        for key in config.unknown:
            log.warning("unknown configuration key %r ignored", key)
        node = BrokerNode(config)
        raise_open_files_limit(log)
        stacks_on_sigusr1()
    except ConfigError as exc:
        print(f"tidelog: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        run_event_loop(node.run_until_signalled(), args.event_loop)
    except ConfigError as exc:
        print(f"tidelog: configuration error: {exc}", file=sys.stderr)
        return 2
    except (MetadataStoreUnavailable, DuplicateBrokerError) as exc:
        print(f"tidelog: cannot join the cluster: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"tidelog: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0
