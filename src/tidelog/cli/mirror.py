"""``tidelog mirror``: run a mirror link (``run``), show where it stands (``status``), and move a
consumer group's committed offsets to the destination's equivalents (``translate-offsets``)."""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from tidelog.cli.common import CliError
from tidelog.cli.stop_signals import stop_on_signals
from tidelog.clients.transactional import ReadError
from tidelog.common.errors import ConfigError
from tidelog.mirror import LinkError, MirrorConfig, load_config
from tidelog.mirror.app import run
from tidelog.mirror.status import age, preserved_status, status
from tidelog.mirror.translate import TranslateError, execute, translate_group

EXAMPLES = """\
examples:
  tidelog mirror run --config dc1-to-dc2.toml
  tidelog mirror status --config dc1-to-dc2.toml
  tidelog mirror translate-offsets --config dc1-to-dc2.toml --group billing            # dry run
  tidelog mirror translate-offsets --config dc1-to-dc2.toml --group billing --execute

dc1-to-dc2.toml:
  [link]
  name = "dc1-to-dc2"
  metrics.listen = "127.0.0.1:9750"
  [topics]
  include = ["orders", "payments\\\\..*"]
  rename = "dc1.{topic}"
  [source]
  "bootstrap.servers" = "dc1:9092"
  [destination]
  "bootstrap.servers" = "dc2:9092"

Run several processes with the same link name to split the work; a dead one's shards move to the
others after link.session.timeout.ms. SIGTERM or Ctrl-C commits what is copied and stops.
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("mirror", help="mirror topics between clusters, exactly once",
                            description="Mirror topics from a source cluster to a destination cluster (tidelog or "
                                        "Apache Kafka on either side), partition for partition, exactly once.",
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_text, func in (("run", "run one process of the link", _run),
                                  ("status", "lag and position of every mirrored partition", _status),
                                  ("translate-offsets", "a group's source offsets as destination offsets",
                                   _translate)):
        examples = "examples:\n" + "".join(line + "\n" for line in EXAMPLES.splitlines() if f"mirror {name} " in line)
        action = actions.add_parser(name, help=help_text, description=help_text, epilog=examples,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        action.add_argument("--config", required=True, metavar="FILE", help="the link's TOML configuration")
        action.add_argument("--source", metavar="HOST:PORT", help="overrides source.bootstrap.servers")
        action.add_argument("--destination", metavar="HOST:PORT", help="overrides destination.bootstrap.servers")
        if name != "run":
            action.add_argument("--json", action="store_true", help="print JSON")
        if name == "translate-offsets":
            action.add_argument("--group", required=True, help="the consumer group (committed on the source)")
            action.add_argument("--execute", action="store_true",
                                help="write the translated offsets to the group on the destination")
        action.set_defaults(func=func)


def _config(args: argparse.Namespace) -> MirrorConfig:
    try:
        config = load_config(Path(args.config))
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None
    return config.with_overrides(args.source, args.destination)


def _run(args: argparse.Namespace) -> int:
    config = _config(args)
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            mirror = run(config, stop)
    except (LinkError, ReadError) as exc:
        raise CliError(str(exc)) from None
    metrics = mirror.metrics
    logging.getLogger("tidelog.mirror").info(
        "stopped: %d records (%d bytes) in %d transactions, %d aborted",
        metrics.total("tidelog_mirror_records_total"), metrics.total("tidelog_mirror_bytes_total"),
        metrics.total("tidelog_mirror_transactions_total"), metrics.total("tidelog_mirror_aborts_total"))
    return 0


def _status(args: argparse.Namespace) -> int:
    config = _config(args)
    if config.preserves_offsets:
        return _preserved_status(config, args.json)
    try:
        rows = status(config)
    except (ReadError, KafkaException) as exc:
        raise CliError(f"link {config.name}: {exc}") from None
    if args.json:
        print(json.dumps([{**row.__dict__, "lag": row.lag} for row in rows], indent=2))
        return 0
    print(f"link {config.name}: {len(rows)} partitions, total lag {sum(r.lag for r in rows)} records")
    header = ("TOPIC", "PARTITION", "DESTINATION", "SHARD", "SOURCE-END", "MIRRORED-TO", "LAG", "DEST-END",
              "COMMITTED", "OWNER")
    _table([header] + [(r.topic, str(r.partition), r.destination, str(r.shard), str(r.source_end),
                        str(r.mirrored_to), str(r.lag), str(r.destination_end), age(r.last_commit_ms), r.owner)
                       for r in rows])
    return 0


def _preserved_status(config: MirrorConfig, as_json: bool) -> int:
    try:
        rows = preserved_status(config)
    except (LinkError, KafkaException) as exc:
        raise CliError(f"link {config.name}: {exc}") from None
    if as_json:
        print(json.dumps([{**row.__dict__, "lag": row.lag} for row in rows], indent=2))
        return 0
    print(f"link {config.name} (offsets preserved): {len(rows)} partitions, "
          f"total lag {sum(r.lag for r in rows)} offsets")
    header = ("TOPIC", "PARTITION", "DESTINATION", "SHARD", "SOURCE-START", "SOURCE-END", "DEST-START", "DEST-END",
              "LAG", "OWNER", "NOTE")
    _table([header] + [(r.topic, str(r.partition), r.destination, str(r.shard), str(r.source_start),
                        str(r.source_end), _offset(r.destination_start), _offset(r.destination_end), str(r.lag),
                        r.owner, r.note) for r in rows])
    return 0


def _offset(value: int) -> str:
    return "-" if value < 0 else str(value)


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _translate(args: argparse.Namespace) -> int:
    config = _config(args)
    if config.preserves_offsets:
        raise CliError(f"link {config.name} preserves offsets (link.offsets = \"preserve\"): a committed offset names "
                       "the same record on both clusters, so there is nothing to translate; commit the same numbers "
                       "on the destination")
    try:
        translations = translate_group(config, args.group)
        if args.execute:
            execute(config, args.group, translations)
    except (TranslateError, ReadError) as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps([t.__dict__ for t in translations], indent=2))
    else:
        print(f"group {args.group}: {len(translations)} partitions"
              f"{' moved to the destination' if args.execute else ' (dry run; --execute writes them)'}")
        for t in translations:
            print(f"  {t.topic} [{t.partition}] {t.source_offset} -> {t.destination} [{t.partition}] "
                  f"{t.destination_offset} ({t.how})")
    return 0
