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
    state.dir = "/var/lib/tidelog-agent"  # the outage spool (and gateway mode's positions file)
    spool.max.bytes = 268435456   # lines read into the spool during an outage (0: no spool)

    [kafka]                       # librdkafka settings, given to the producer as they are (direct mode)
    "bootstrap.servers" = "127.0.0.1:9092"

    [gateway]                     # instead of [kafka]: write through ``tidelog gateway`` (gateway mode)
    url = "http://127.0.0.1:8080"
    token.file = "/etc/tidelog/agent.token"   # or token = "..."; sent as "Authorization: Bearer ..."
    request.max.bytes = 1048576   # the largest request body the agent sends
    request.timeout.ms = 30000
    positions.save.interval.ms = 1000  # how often the positions file is rewritten (lazily: see below)

    [[files]]                     # one or more groups of files
    paths = ["/var/log/app/*.log"]
    exclude = ["*.gz"]
    topic = "app-logs"
    max.line.bytes = 1048576
    multiline.start.pattern = '^\\d{4}-\\d\\d-\\d\\d '

Exactly one of ``[kafka]`` (direct mode: a transactional producer, positions in a topic) and
``[gateway]`` (gateway mode: the gateway's exactly-once per source, positions in
``<state.dir>/positions.json``, an outage spool in ``<state.dir>/spool``) is given. ``state.dir`` is
required in gateway mode; in direct mode it is optional and turns on the outage spool
(``<state.dir>/spool``, kafka_spool.py), unless ``spool.max.bytes = 0``.

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
_GATEWAY_INTS = {"request.max.bytes": 1 << 20, "request.timeout.ms": 30_000, "positions.save.interval.ms": 1000}
DEFAULT_SPOOL_BYTES = 256 << 20
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
class GatewayTarget:
    """Gateway mode: where the gateway is, how to authenticate, how large a request may be."""

    url: str
    token: str | None = None
    request_max_bytes: int = 1 << 20
    request_timeout_ms: int = 30_000
    positions_save_interval_ms: int = 1000


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
    gateway: GatewayTarget | None = None
    state_dir: Path | None = None
    spool_max_bytes: int = 0

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


def _gateway(table: object) -> GatewayTarget:
    if not isinstance(table, dict):
        raise ConfigError("gateway: expected a table ([gateway])")
    flat = flatten(table)
    unknown = set(flat) - {"url", "token", "token.file", *_GATEWAY_INTS}
    if unknown:
        raise ConfigError(f"gateway.{sorted(unknown)[0]}: unknown setting")
    if "url" not in flat:
        raise ConfigError("gateway.url: required")
    url = _str("gateway.", "url", flat["url"]).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"gateway.url: expected http://HOST:PORT or https://HOST:PORT, got {url!r}")
    if "token" in flat and "token.file" in flat:
        raise ConfigError("gateway.token and gateway.token.file: give one of them")
    token = _str("gateway.", "token", flat["token"]) if "token" in flat else None
    if "token.file" in flat:
        path = Path(_str("gateway.", "token.file", flat["token.file"]))
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"gateway.token.file: cannot read {path}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"gateway.token.file: {path} is empty")
    ints = {key.replace(".", "_"): _int("gateway.", key, flat.get(key, default), 1024 if key == "request.max.bytes" else 1)
            for key, default in _GATEWAY_INTS.items()}
    return GatewayTarget(url=url, token=token, **ints)


def parse_config(document: Mapping[str, Any]) -> AgentConfig:
    unknown = set(document) - {"agent", "kafka", "gateway", "files"}
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown section (expected agent, kafka, gateway, files)")
    agent = flatten(document.get("agent", {}))
    allowed = {"id", "host", "positions.topic", "state.dir", "spool.max.bytes", *_AGENT_INTS}
    if set(agent) - allowed:
        raise ConfigError(f"agent.{sorted(set(agent) - allowed)[0]}: unknown setting")
    kafka = flatten(document.get("kafka", {}))
    gateway = _gateway(document["gateway"]) if "gateway" in document else None
    if gateway is not None and kafka:
        raise ConfigError("kafka and gateway: give one of them (the agent writes straight to Kafka or through a "
                          "gateway)")
    if gateway is None and "bootstrap.servers" not in kafka:
        raise ConfigError("kafka.bootstrap.servers: required (or a [gateway] section)")
    for key in _FORBIDDEN_KAFKA:
        if key in kafka:
            raise ConfigError(f"kafka.{key}: set by the agent (it writes with its own transactional producer)")
    groups = document.get("files")
    if not isinstance(groups, list) or not groups:
        raise ConfigError("files: at least one [[files]] table is needed")
    hostname = socket.gethostname()
    state_dir = Path(_str("agent.", "state.dir", agent["state.dir"])) if "state.dir" in agent else None
    spool_max = _int("agent.", "spool.max.bytes", agent.get("spool.max.bytes", DEFAULT_SPOOL_BYTES), 0)
    if gateway is None and state_dir is None:
        if agent.get("spool.max.bytes"):
            raise ConfigError("agent.spool.max.bytes: the spool is kept in agent.state.dir; set it too (or "
                              "leave both out: without a spool, the files are the backlog)")
        spool_max = 0
    elif state_dir is None:
        raise ConfigError("agent.state.dir: required in gateway mode (the positions file and the spool are kept "
                          "there)")
    ints = {key.replace(".", "_"): _int("agent.", key, agent.get(key, default)) for key, default in _AGENT_INTS.items()}
    config = AgentConfig(
        agent_id=_str("agent.", "id", agent.get("id", hostname)),
        host=_str("agent.", "host", agent.get("host", hostname)),
        files=tuple(_file_group(i, table) for i, table in enumerate(groups)),
        kafka=client_settings(kafka),
        positions_topic=_str("agent.", "positions.topic", agent.get("positions.topic", "__tidelog_agent_positions")),
        gateway=gateway, state_dir=state_dir, spool_max_bytes=spool_max,
        **ints,
    )
    if "|" in config.agent_id:
        raise ConfigError("agent.id: may not contain '|'")
    return config


def load_config(path: Path) -> AgentConfig:
    return parse_config(load_toml(path))
