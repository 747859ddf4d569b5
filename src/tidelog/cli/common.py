"""What every cluster command shares: where the cluster is, client settings, output, errors.

Where the cluster is, most specific first: ``--bootstrap-server``, then ``bootstrap.servers`` in the
``--command-config`` file, then the ``TIDELOG_BOOTSTRAP_SERVER`` environment variable, then
``127.0.0.1:9092``. The command-config file holds librdkafka client properties (``key=value`` lines,
``#`` comments), as Kafka's tools' ``--command-config`` does; ``-X key=value`` sets one more.

Output: human output goes to stdout as tables (rich) and notes go to stderr, so that stdout stays
pipeable; ``--json`` prints one JSON document (or JSON lines for a stream) instead. Exit codes: 0 when
everything asked for was done, 1 when the cluster refused or failed some of it, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tidelog.common.config import parse_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "TIDELOG_BOOTSTRAP_SERVER"
T = TypeVar("T")


class CliError(Exception):
    """A failure to report in one line (no traceback); ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def parse_assignments(items: Iterable[str], what: str) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` → ``{"a": "1", "b": "x=y"}``; a missing ``=`` is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{what} expects key=value, got {item!r}", 2)
        out[key.strip()] = value
    return out


def service_properties(args: argparse.Namespace, between: Mapping[str, str] | None = None) -> dict[str, str]:
    """A platform process's settings: its properties file (``args.config``), then ``between``, then the
    ``--override KEY=VALUE`` items, then ``--bootstrap-server`` where the command has one."""
    props: dict[str, str] = {}
    if args.config:
        try:
            props.update(parse_properties(Path(args.config).read_text()))
        except OSError as exc:
            raise CliError(f"cannot read {args.config}: {exc.strerror}", 2) from None
    props.update(between or {})
    props.update(parse_assignments(args.override, "--override"))
    if getattr(args, "bootstrap_server", None):
        props["bootstrap.servers"] = args.bootstrap_server
    return props


def split_config_list(text: str) -> list[str]:
    """kafka-configs' ``--add-config`` syntax: ``a=1,b=[x,y]`` → ``["a=1", "b=x,y"]`` (brackets keep commas)."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise CliError(f"unbalanced brackets in {text!r}", 2)
    items.append(current)
    return [item.strip().replace("[", "").replace("]", "") for item in items if item.strip()]


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("-b", "--bootstrap-server", metavar="HOST:PORT",
                       help=f"broker(s) to connect to (env {BOOTSTRAP_ENV}; default {DEFAULT_BOOTSTRAP})")
    group.add_argument("--command-config", metavar="FILE", help="client properties file (librdkafka names: security.protocol, sasl.*, ...)")
    group.add_argument("-X", dest="client_property", action="append", default=[], metavar="KEY=VALUE",
                       help="one client property (repeatable), e.g. -X socket.timeout.ms=5000")
    group.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="give up on the cluster after this long (default 30)")


def add_json_option(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON instead of a table")


def client_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """librdkafka settings for this invocation (see the module docstring for precedence)."""
    env = os.environ if environ is None else environ
    config: dict[str, Any] = {"bootstrap.servers": env.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP}
    if args.command_config:
        path = Path(args.command_config)
        if not path.is_file():
            raise CliError(f"command config file {args.command_config} does not exist", 2)
        config.update(parse_properties(path.read_text()))
    config.update(parse_assignments(args.client_property, "-X"))
    if args.bootstrap_server:
        config["bootstrap.servers"] = args.bootstrap_server
    config.setdefault("socket.connection.setup.timeout.ms", int(min(args.timeout, 30) * 1000))
    config["logger"] = logging.getLogger("tidelog.client")
    return config


def admin_client(args: argparse.Namespace) -> AdminClient:
    return AdminClient(client_config(args))


def kafka_error_text(exc: BaseException) -> str:
    """One line for a confluent-kafka failure: ``UNKNOWN_TOPIC_OR_PART: Broker: Unknown topic or partition``."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error: KafkaError = exc.args[0]
        return f"{error.name()}: {error.str()}"
    return str(exc) or type(exc).__name__


def result(future: Future[T], args: argparse.Namespace) -> T:
    """Wait for an admin future; a cluster failure becomes a CliError with Kafka's error name."""
    try:
        return future.result(timeout=args.timeout)
    except TimeoutError:
        raise CliError(f"no answer from {client_config(args)['bootstrap.servers']} within {args.timeout:g} s") from None
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None


def error_code_name(exc: BaseException) -> str | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return str(exc.args[0].name())
    return None


class Output:
    """stdout for results (tables or JSON), stderr for notes."""

    def __init__(self, json_mode: bool = False) -> None:
        self.json_mode = json_mode
        self.out = _console(sys.stdout)
        self.err = _console(sys.stderr)

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None,
              show_header: bool = True, max_widths: Mapping[str, int] | None = None) -> None:
        """Rows under column headers; a column named in ``max_widths`` folds longer cells onto more lines."""
        table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False,
                      show_header=show_header)
        for column in columns:
            table.add_column(column, max_width=(max_widths or {}).get(column), overflow="fold")
        for row in rows:
            table.add_row(*(_cell(value) for value in row))
        if self.out.is_terminal:
            self.out.print(table)
            return
        with self.out.capture() as captured:
            self.out.print(table)
        # Piped or redirected: no padding at line ends, so the output diffs and greps cleanly.
        sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
        sys.stdout.flush()

    def json(self, data: object) -> None:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
        sys.stdout.flush()

    def line(self, text: str) -> None:
        self.out.print(text, markup=False, highlight=False)

    def note(self, text: str) -> None:
        self.err.print(text, markup=False, highlight=False)


def _console(stream: Any) -> Console:
    interactive = hasattr(stream, "isatty") and stream.isatty()
    return Console(file=stream, width=None if interactive else 200, highlight=False, soft_wrap=False,
                   emoji=False, no_color=not interactive)


def _cell(value: object) -> Text:
    """A table cell as plain text (never rich markup: config values may contain brackets)."""
    if value is None:
        return Text("-")
    if isinstance(value, list | tuple):
        return Text(",".join(str(item) for item in value) or "-")
    return Text(str(value))


def command_adder(commands: Any, examples: str) -> Callable[..., argparse.ArgumentParser]:
    """A function adding one subcommand to ``commands``: its help, description (the help when not
    given), the shared examples epilog, the function it runs, and the connection options."""

    def command(
        name: str, help: str, func: Callable[[argparse.Namespace], int], description: str | None = None
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(
            name, help=help, description=description or help, epilog=examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.set_defaults(func=func)
        add_connection_options(parser)
        return parser

    return command
