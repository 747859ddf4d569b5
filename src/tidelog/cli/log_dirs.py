"""``tidelog log-dirs describe``: what the scrubber knows about a broker's log dirs, read from its files.
(``log-dirs list`` and ``log-dirs move`` speak to the brokers instead: ``cli.log_dir_moves``.)

Kafka's DescribeLogDirs has no field for damaged ranges, so this view reads the files the broker keeps
(storage/damage.py's ``damaged-ranges`` in each partition directory, storage/scrubber.py's
``scrubber-checkpoint`` in each log dir) on the broker's host. It works whether the broker runs or not;
the same counts are exported as metrics (``tidelog_log_damaged_ranges``).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tidelog.cli import log_dir_moves
from tidelog.cli.common import CliError, Output, add_json_option
from tidelog.common.config import parse_properties
from tidelog.storage.checkpoint import CheckpointError
from tidelog.storage.damage import FILE_NAME, read_damage
from tidelog.storage.log import parse_dir_name
from tidelog.storage.scrubber import read_cursors

EXAMPLES = """\
examples:
  tidelog log-dirs describe --log-dir /var/lib/tidelog
  tidelog log-dirs describe --server-config server.properties --damaged-only --json
  tidelog log-dirs list --broker 1 --topic clicks
  tidelog log-dirs move --broker 1 --topic clicks --partition 0,1 --to /disks/b/tidelog --wait
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "log-dirs", help="brokers' log dirs: replicas and moves between dirs; damaged ranges (local files)",
        description="list and move talk to the brokers (DescribeLogDirs, AlterReplicaLogDirs): the replicas in "
                    "each log dir, and moves of replicas between the log dirs of one broker. describe reads a "
                    "broker's log dirs on this host: per partition, the scrubber's pass and cursor and the damaged "
                    "ranges it found (fetches of those offsets answer CORRUPT_MESSAGE).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="log_dirs_command", required=True, metavar="COMMAND")
    describe = commands.add_parser("describe", help="scrubber progress and damaged ranges per partition",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = describe.add_mutually_exclusive_group()
    where.add_argument("--log-dir", action="append", default=[], metavar="DIR", help="a log dir (repeatable)")
    where.add_argument("--server-config", metavar="FILE", default="server.properties",
                       help="take log.dirs from this properties file (default ./server.properties)")
    describe.add_argument("--damaged-only", action="store_true", help="only partitions with damaged ranges")
    add_json_option(describe, "the partitions")
    describe.set_defaults(func=_describe)
    log_dir_moves.add_commands(commands)


def _log_dirs(args: argparse.Namespace) -> list[Path]:
    if args.log_dir:
        return [Path(d) for d in args.log_dir]
    config = Path(args.server_config)
    if not config.is_file():
        raise CliError(f"no log dir given: use --log-dir ({config} does not exist)", 2)
    dirs = parse_properties(config.read_text()).get("log.dirs") or parse_properties(config.read_text()).get("log.dir")
    if not dirs:
        raise CliError(f"{config} sets no log.dirs: give --log-dir", 2)
    return [Path(d.strip()) for d in dirs.split(",") if d.strip()]


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rows(log_dir: Path) -> list[dict[str, Any]]:
    if not log_dir.is_dir():
        raise CliError(f"{log_dir} is not a directory", 2)
    try:
        cursors = read_cursors(log_dir)
    except CheckpointError as exc:
        raise CliError(str(exc), 1) from exc
    rows = []
    for child in sorted(log_dir.iterdir()):
        try:
            topic, partition = parse_dir_name(child.name)
        except ValueError:
            continue
        if not child.is_dir():
            continue
        try:
            damage = read_damage(child) if (child / FILE_NAME).exists() else []
        except CheckpointError as exc:
            raise CliError(str(exc), 1) from exc
        cursor = cursors.get((topic, partition))
        rows.append({
            "log_dir": str(log_dir), "topic": topic, "partition": partition,
            "pass_started": _time(cursor.pass_start_ms) if cursor else None,
            "verified_below_offset": cursor.offset if cursor else None,
            "damaged_ranges": [{
                "start_offset": r.start_offset, "end_offset": r.end_offset, "segment": f"{r.segment_base:020d}.log",
                "position": r.position, "bytes": r.length, "kind": r.kind, "found": _time(r.found_ms),
            } for r in damage],
        })
    return rows


def _describe(args: argparse.Namespace) -> int:
    out = Output(args.json)
    rows = [row for d in _log_dirs(args) for row in _rows(d)]
    if args.damaged_only:
        rows = [row for row in rows if row["damaged_ranges"]]
    if args.json:
        out.json(rows)
        return 0
    table = []
    for row in rows:
        ranges = row["damaged_ranges"] or [None]
        for r in ranges:
            table.append((row["topic"], row["partition"], row["pass_started"], row["verified_below_offset"],
                          f"{r['start_offset']}-{r['end_offset']}" if r else None,
                          f"{r['bytes']} B at {r['segment']}:{r['position']} ({r['kind']})" if r else None))
    out.table(("TOPIC", "PARTITION", "PASS STARTED", "VERIFIED BELOW", "DAMAGED OFFSETS", "WHERE"), table)
    return 0
