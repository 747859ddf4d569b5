"""``tidelog agent``: ship log files to Kafka, each line exactly once (tidelog.agent)."""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path
from typing import Any

from tidelog.agent import Agent, AgentError, load_config
from tidelog.agent.positions import PositionsError
from tidelog.cli.common import CliError
from tidelog.cli.stop_signals import stop_on_signals
from tidelog.common.errors import ConfigError

EXAMPLES = """\
examples:
  tidelog agent --config /etc/tidelog/agent.toml
  tidelog agent --config agent.toml -b 10.0.0.5:9092      # overrides kafka.bootstrap.servers

agent.toml:
  [agent]
  id = "web-1"
  [kafka]
  "bootstrap.servers" = "127.0.0.1:9092"
  [[files]]
  paths = ["/var/log/app/*.log"]
  topic = "app-logs"
  multiline.start.pattern = '^\\d{4}-'

Rotation by rename and by copytruncate is followed; positions are kept in the positions topic, in the
same transaction as the lines, so a restart or a kill -9 neither loses nor repeats a line.
SIGTERM or Ctrl-C commits what was read and stops.

An outage spool straight to Kafka (lines read on into state.dir/spool while the cluster is out of
reach, written in transactions with their positions when it is back):
  [agent]
  state.dir = "/var/lib/tidelog-agent"

Through tidelog gateway instead of [kafka] (exactly once by the gateway's seqnos; positions in
state.dir/positions.json; an outage spool in state.dir/spool):
  [agent]
  state.dir = "/var/lib/tidelog-agent"
  [gateway]
  url = "http://gateway:8080"
  token.file = "/etc/tidelog/agent.token"
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "agent", help="tail log files and ship their lines to Kafka, exactly once",
        description="Tail the files named in the config's [[files]] globs and write each line to its topic "
                    "with a transactional producer that saves the file positions in the same transaction, "
                    "or through tidelog gateway ([gateway]).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="the agent's TOML configuration")
    parser.add_argument("-b", "--bootstrap-server", metavar="HOST:PORT", help="overrides kafka.bootstrap.servers")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(Path(args.config))
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None
    if args.bootstrap_server:
        if config.gateway is not None:
            raise CliError("--bootstrap-server: the configuration writes through a gateway ([gateway])", 2)
        config = config.with_bootstrap(args.bootstrap_server)
    stop = threading.Event()
    if config.gateway is not None:
        from tidelog.agent.via_gateway import GatewayAgent  # httpx and the spool only in gateway mode

        agent: Agent = GatewayAgent(config)
    elif config.spool_max_bytes:
        from tidelog.agent.kafka_spool import SpoolingAgent

        agent = SpoolingAgent(config)
    else:
        agent = Agent(config)
    try:
        with stop_on_signals(stop):
            agent.start()
            agent.run(stop)
    except (AgentError, PositionsError) as exc:
        agent.close()
        raise CliError(str(exc)) from None
    metrics = agent.metrics
    logging.getLogger("tidelog.agent").info(
        "stopped: %d records (%d bytes) in %d transactions, %d aborted, %d cut to max.line.bytes, "
        "%d already at the gateway", metrics.lines_total, metrics.bytes_total, metrics.transactions_total,
        metrics.aborts_total, metrics.truncated_lines_total, metrics.duplicates_total)
    return 0
