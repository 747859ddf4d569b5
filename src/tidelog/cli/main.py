"""The ``tidelog`` command. ``tidelog serve`` starts a broker the way kafka-server-start.sh does."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pathlib
import sys

from tidelog.common.config import BrokerConfig, parse_properties
from tidelog.common.errors import ConfigError

ENV_PREFIX = "TIDELOG_"


def env_overrides(environ: dict[str, str]) -> dict[str, str]:
    """``TIDELOG_LOG_DIRS=/x`` → ``log.dirs=/x`` (dots as underscores, upper case)."""
    return {
        key[len(ENV_PREFIX):].lower().replace("_", "."): value
        for key, value in environ.items()
        if key.startswith(ENV_PREFIX) and key != ENV_PREFIX + "LOG_LEVEL"
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


def _serve(args: argparse.Namespace) -> int:
    from tidelog.broker.node import BrokerNode

    log = logging.getLogger("tidelog")
    try:
        config = load_broker_config(args.properties, args.override, dict(os.environ))
        for key in config.unknown:
            log.warning("unknown configuration key %r ignored", key)
        node = BrokerNode(config)
    except ConfigError as exc:
        print(f"tidelog: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(node.run_until_signalled())
    except ConfigError as exc:
        print(f"tidelog: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tidelog: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidelog", description="tidelog: a Kafka-compatible streaming platform.")
    parser.add_argument("--log-level", default=os.environ.get("TIDELOG_LOG_LEVEL", "INFO"), help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run a broker",
        description="Run a broker. With no arguments: 127.0.0.1:9092, data in ./data. Settings use Kafka's "
        "names (docs/configuration.md) from a properties file, TIDELOG_* environment variables "
        "(TIDELOG_LOG_DIRS=/data) and --override key=value, in increasing precedence.",
    )
    serve.add_argument("properties", nargs="?", help="server.properties-style file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="set one setting (repeatable)")
    serve.set_defaults(func=_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
