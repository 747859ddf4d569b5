"""``tidelog agent``: a log-file shipper that writes each line to Kafka exactly once.

It reaches clusters only through the Kafka protocol (confluent-kafka), so it works against tidelog
and Apache Kafka alike.

* config.py: the TOML configuration.
* lines.py: bytes to records (lines, multi-line records, the maximum size), pure.
* files.py: a source (one path) and its generations (the files that had the path), rotation by
  rename and copytruncate, positions, rewinding.
* positions.py: the compacted positions topic, written in the lines' transaction and read at start.
* shipper.py: the loop (read, produce, commit or abort and rewind).
* kafka_spool.py: the loop with an outage spool (``agent.state.dir``): read on into the spool while the
  cluster is out of reach, replay it in transactions with the positions when it answers.
* outage_spool.py: the spool's batches (lines and position states), shared with gateway mode.
"""

from tidelog.agent.config import AgentConfig, FileGroup, load_config, parse_config
from tidelog.agent.lines import Line, LineSplitter
from tidelog.agent.shipper import Agent, AgentError, AgentMetrics

__all__ = ["Agent", "AgentConfig", "AgentError", "AgentMetrics", "FileGroup", "Line", "LineSplitter",
           "load_config", "parse_config"]
