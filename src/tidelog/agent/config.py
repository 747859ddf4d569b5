"""The agent's TOML configuration, read and checked before anything starts.

::

    [agent]
    id = "web-1"                  # names the transactional.id and the saved positions (default: host name)
    host = "web-1"                # the host part of every sourceId (default: host name)
    positions.topic = "__tidelog_agent_positions"
    transaction.interval.ms = 200 # a transaction is committed at least this often while lines come
    transaction.max.records = 10000
    poll.interval.ms = 100        # how often files are checked for growth and rotation when idle
    scan.interval.ms = 2000       # how often the globs are expanded for new files
    rotate.wait.ms = 1000         # a renamed file is read until it has been quiet this long
    multiline.timeout.ms = 1000   # a multi-line record is emitted after this long without a next line

    [kafka]                       # librdkafka settings, given to the producer as they are
    "bootstrap.servers" = "127.0.0.1:9092"

    [[files]]                     # one or more groups of files
    paths = ["/var/log/app/*.log"]
    exclude = ["*.gz"]
    topic = "app-logs"
    max.line.bytes = 1048576
    multiline.start.pattern = '^\\d{4}-\\d\\d-\\d\\d '

Dotted keys may be written bare (TOML nests them) or quoted: both mean the same setting. Any unknown
key, wrong type or bad value raises :class:`~tidelog.common.errors.ConfigError` naming it; nothing
is started with a half-understood configuration.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.common.errors import ConfigError
from tidelog.common.toml_settings import client_settings, flatten, load_toml
from tidelog.common.toml_settings import integer as _int
from tidelog.common.toml_settings import strings as _strings
from tidelog.common.toml_settings import text as _str

_AGENT_INTS = {
    "transaction.interval.ms": 200, "transaction.max.records": 10_000, "poll.interval.ms": 100,
    "scan.interval.ms": 2000, "rotate.wait.ms": 1000, "multiline.timeout.ms": 1000,
}
_FORBIDDEN_KAFKA = ("transactional.id", "enable.idempotence", "isolation.level")


@dataclass(frozen=True)
class FileGroup:
    """Files named by ``paths`` (globs), less ``exclude`` (globs on the name or the path), to ``topic``."""

    paths: tuple[str, ...]
    topic: str
    exclude: tuple[str, ...] = ()
    max_line_bytes: int = 1 << 20
    start_pattern: re.Pattern[bytes] | None = None


@dataclass(frozen=True)
class AgentConfig:
    agent_id: str
    host: str
    files: tuple[FileGroup, ...]
    kafka: Mapping[str, Any]
    positions_topic: str = "__tidelog_agent_positions"
    transaction_interval_ms: int = 200
    transaction_max_records: int = 10_000
    poll_interval_ms: int = 100
    scan_interval_ms: int = 2000
    rotate_wait_ms: int = 1000
    multiline_timeout_ms: int = 1000

    @property
    def transactional_id(self) -> str:
        return f"tidelog-agent-{self.agent_id}"

    def with_bootstrap(self, servers: str) -> AgentConfig:
        return dataclasses.replace(self, kafka={**self.kafka, "bootstrap.servers": servers})


def _file_group(index: int, table: object) -> FileGroup:
    where = f"files[{index}]."
    if not isinstance(table, dict):
        raise ConfigError(f"files[{index}]: expected a table ([[files]])")
    flat = flatten(table)
    unknown = set(flat) - {"paths", "exclude", "topic", "max.line.bytes", "multiline.start.pattern"}
    if unknown:
        raise ConfigError(f"{where}{sorted(unknown)[0]}: unknown setting")
    if "paths" not in flat or "topic" not in flat:
        raise ConfigError(f"files[{index}]: needs paths and topic")
    pattern = None
    if "multiline.start.pattern" in flat:
        text = _str(where, "multiline.start.pattern", flat["multiline.start.pattern"])
        try:
            pattern = re.compile(text.encode())
        except re.error as exc:
            raise ConfigError(f"{where}multiline.start.pattern: not a regular expression: {exc}") from None
    return FileGroup(
        paths=_strings(where, "paths", flat["paths"]),
        topic=_str(where, "topic", flat["topic"]),
        exclude=_strings(where, "exclude", flat.get("exclude", [])) if "exclude" in flat else (),
        max_line_bytes=_int(where, "max.line.bytes", flat.get("max.line.bytes", 1 << 20), 16),
        start_pattern=pattern,
    )


def parse_config(document: Mapping[str, Any]) -> AgentConfig:
    unknown = set(document) - {"agent", "kafka", "files"}
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown section (expected agent, kafka, files)")
    agent = flatten(document.get("agent", {}))
    allowed = {"id", "host", "positions.topic", *_AGENT_INTS}
    if set(agent) - allowed:
        raise ConfigError(f"agent.{sorted(set(agent) - allowed)[0]}: unknown setting")
    kafka = flatten(document.get("kafka", {}))
    if "bootstrap.servers" not in kafka:
        raise ConfigError("kafka.bootstrap.servers: required")
    for key in _FORBIDDEN_KAFKA:
        if key in kafka:
            raise ConfigError(f"kafka.{key}: set by the agent (it writes with its own transactional producer)")
    groups = document.get("files")
    if not isinstance(groups, list) or not groups:
        raise ConfigError("files: at least one [[files]] table is needed")
    hostname = socket.gethostname()
    ints = {key.replace(".", "_"): _int("agent.", key, agent.get(key, default)) for key, default in _AGENT_INTS.items()}
    config = AgentConfig(
        agent_id=_str("agent.", "id", agent.get("id", hostname)),
        host=_str("agent.", "host", agent.get("host", hostname)),
        files=tuple(_file_group(i, table) for i, table in enumerate(groups)),
        kafka=client_settings(kafka),
        positions_topic=_str("agent.", "positions.topic", agent.get("positions.topic", "__tidelog_agent_positions")),
        **ints,
    )
    if "|" in config.agent_id:
        raise ConfigError("agent.id: may not contain '|'")
    return config


def load_config(path: Path) -> AgentConfig:
    return parse_config(load_toml(path))
