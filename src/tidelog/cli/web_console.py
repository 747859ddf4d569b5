"""``tidelog console``: run the web console (docs/console.md) in the foreground until SIGTERM or Ctrl-C;
``tidelog console hash-password`` prints a password hash for the console's users file.

Settings come from an optional properties file, then ``--override key=value`` pairs (last wins);
``--bootstrap-server`` sets ``bootstrap.servers``. Bad settings exit with status 2 and the key named.
``hash-password`` reads the password from standard input (never from the command line, where it would
land in the shell's history and the process list) and prints ``scrypt$N$r$p$SALT$KEY``.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import signal
import sys
from typing import Any

from tidelog.cli.common import CliError, service_properties
from tidelog.console.app import run
from tidelog.console.auth import ROLES, UsersFileError, hash_password
from tidelog.console.config import ConfigError, ConsoleConfig, parse_config
from tidelog.observability.logs import configure_logging

EPILOG = """\
examples:
  tidelog console --bootstrap-server 127.0.0.1:9092 --override console.listen.port=8081
  tidelog console config/console.properties
  tidelog console hash-password --user alice --role admin >> console-users
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("console", help="run the web console (topics, messages, groups, lag, ACLs)",
                            description="Run the web console for a Kafka cluster (tidelog or Apache Kafka).",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", help="properties file (console.*, bootstrap.servers, kafka.*), "
                        "or 'hash-password'")
    parser.add_argument("--bootstrap-server", help="the cluster (sets bootstrap.servers)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="set one setting (repeatable)")
    parser.add_argument("--user", help="hash-password: print a whole users-file line for this user")
    parser.add_argument("--role", choices=ROLES, default="read-only", help="hash-password: the user's role")
    parser.set_defaults(func=command)


def load(args: argparse.Namespace) -> ConsoleConfig:
    props = service_properties(args)
    try:
        return parse_config(props)
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


def hash_command(args: argparse.Namespace) -> int:
    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise CliError("the passwords differ", 2)
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise CliError("an empty password is not allowed", 2)
    hashed = hash_password(password)
    print(f"{args.user} {args.role} {hashed}" if args.user else hashed)
    return 0


def command(args: argparse.Namespace) -> int:
    if args.config == "hash-password":
        return hash_command(args)
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
    except (UsersFileError, ValueError) as exc:
        raise CliError(str(exc), 2) from None
    except OSError as exc:
        logging.getLogger(__name__).error("console stopped: %s", exc)
        return 1
    return 0
