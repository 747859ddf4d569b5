"""The gateway's settings: ``gateway.*`` keys, ``bootstrap.servers``, and ``kafka.*`` client properties.

A properties file (``key=value`` lines) and ``--override`` pairs are merged, then parsed here. Every
``gateway.*`` key is known, typed and checked; an unknown key or a bad value is an error that names
the key (a typo never silently falls back to a default). ``kafka.X=Y`` is handed to every
confluent-kafka client the gateway makes as ``X=Y`` (e.g. ``kafka.security.protocol=SASL_SSL``,
``kafka.sasl.mechanism=SCRAM-SHA-256``), so the gateway reaches a secured cluster like any client.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tidelog.web.cert_principal import PrincipalMapper
from tidelog.web.server import ListenerConfig

_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


# A client retries a lost broker at most this far apart (librdkafka's default grows to 10 s): after a
# cluster outage the gateway's clients see the brokers back within a second.
CLIENT_DEFAULTS: dict[str, Any] = {"reconnect.backoff.max.ms": 1000}


class ConfigError(ValueError):
    """A setting is unknown or its value is invalid; the message names the key."""


@dataclass(frozen=True)
class Headers:
    """Names of the enrichment headers each record gets; an empty name leaves that header out."""

    source_host: str = "tidelog-source-host"
    source_file: str = "tidelog-source-file"
    log_type: str = "tidelog-log-type"
    client_address: str = "tidelog-client-address"
    receive_time: str = "tidelog-receive-time"
    source_id: str = "tidelog-source-id"
    seqno: str = "tidelog-seqno"


@dataclass(frozen=True)
class GatewayConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    kafka: Mapping[str, str] = field(default_factory=dict)
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    advertised_url: str = ""
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_cafile: Path | None = None
    ssl_client_auth: str = "none"
    ssl_principal_mapping_rules: str = "DEFAULT"  # Kafka's: client certificate subject -> principal
    http_server: str = "auto"  # tidelog.web.server: uvicorn (HTTP/1.1, faster) or hypercorn (HTTP/2 too)
    auth_tokens_file: Path | None = None
    dc: str = ""
    group_id: str = "tidelog-gateway"
    instance_id: str = ""
    state_topic: str = "__tidelog_gateway_state"
    state_partitions: int = 8
    state_replication_factor: int = -1
    transactional_id_prefix: str = ""
    transaction_timeout_ms: int = 60_000
    session_timeout_ms: int = 10_000
    max_request_bytes: int = 8 * 1024 * 1024
    max_inflight_bytes: int = 64 * 1024 * 1024
    backpressure_wait_ms: int = 1_000
    request_timeout_ms: int = 30_000
    txn_max_requests: int = 64
    read_sessions_max: int = 100
    read_session_max_bytes: int = 4 * 1024 * 1024
    read_session_timeout_ms: int = 30_000
    staged_dir: Path = Path("gateway-staged")
    staged_timeout_ms: int = 600_000
    staged_max_transactions: int = 1_000
    staged_max_transaction_bytes: int = 64 * 1024 * 1024
    push_topic: str = ""
    push_subscriptions_max: int = 100
    headers: Headers = field(default_factory=Headers)
    acl_enable: str = "auto"  # auto: on when a tokens file is set or client certificates are asked for (acls.py)
    acl_refresh_ms: int = 5_000
    super_users: frozenset[str] = frozenset()
    acl_allow_if_no_acl: bool = False

    @property
    def acls_enabled(self) -> bool:
        return self.acl_enable == "true" or (self.acl_enable == "auto" and (
            self.auth_tokens_file is not None or self.ssl_client_auth != "none"))

    def certificate_principals(self) -> PrincipalMapper | None:
        """The mapping of client certificates to principals, when the listener asks for certificates."""
        return PrincipalMapper(self.ssl_principal_mapping_rules) if self.ssl_client_auth != "none" else None

    @property
    def txn_prefix(self) -> str:
        return self.transactional_id_prefix or self.group_id

    @property
    def subscriptions_topic(self) -> str:
        """The compacted topic that keeps the push subscriptions (``push_store``)."""
        return self.push_topic or f"{self.state_topic}-subscriptions"

    def listener(self) -> ListenerConfig:
        return ListenerConfig(self.listen_host, self.listen_port, self.ssl_certfile, self.ssl_keyfile,
                              self.ssl_cafile, self.ssl_client_auth, server=self.http_server)

    @property
    def url(self) -> str:
        return self.advertised_url or self.listener().url

    def kafka_config(self, **extra: Any) -> dict[str, Any]:
        """Settings for a confluent-kafka client: bootstrap, ``CLIENT_DEFAULTS``, the ``kafka.*``
        passthrough (which may override them), then ``extra``."""
        return {"bootstrap.servers": self.bootstrap_servers, **CLIENT_DEFAULTS, **self.kafka, **extra}

    def data_topic(self, topic: str) -> str:
        """The topic a write names, as written: ``<dc>.<topic>`` when ``gateway.dc`` is set."""
        return f"{self.dc}.{topic}" if self.dc else topic


def _positive(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value <= 0:
            raise ValueError(f"must be positive, got {value}")
        return value
    return parse


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be from {low} to {high}, got {value}")
        return value
    return parse


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value < 65536:
        raise ValueError(f"not a TCP port: {value}")
    return value


def _name(text: str) -> str:
    if not text or not set(text) <= _TOPIC_CHARS:
        raise ValueError("must be letters, digits, '.', '_' or '-'")
    return text


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text.lower()
    return parse


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("must be true or false")
    return text.lower() == "true"


def _principals(text: str) -> frozenset[str]:
    """Kafka's ``super.users`` form: ``User:a;User:b``."""
    found = frozenset(p.strip() for p in text.split(";") if p.strip())
    if any(":" not in p for p in found):
        raise ValueError("principals are Type:name (User:alice), separated by ';'")
    return found


def _replication(text: str) -> int:
    value = int(text)
    if value == 0 or value < -1:
        raise ValueError("must be -1 (the broker's default) or positive")
    return value


# gateway.* key -> (dataclass field, parser)
_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "gateway.listen.host": ("listen_host", str),
    "gateway.listen.port": ("listen_port", _port),
    "gateway.advertised.url": ("advertised_url", str),
    "gateway.ssl.certfile": ("ssl_certfile", Path),
    "gateway.ssl.keyfile": ("ssl_keyfile", Path),
    "gateway.ssl.cafile": ("ssl_cafile", Path),
    "gateway.ssl.client.auth": ("ssl_client_auth", str),
    "gateway.ssl.principal.mapping.rules": ("ssl_principal_mapping_rules", str),
    "gateway.http.server": ("http_server", str),
    "gateway.auth.tokens.file": ("auth_tokens_file", Path),
    "gateway.dc": ("dc", lambda t: _name(t) if t else ""),
    "gateway.group.id": ("group_id", _name),
    "gateway.instance.id": ("instance_id", lambda t: _name(t) if t else ""),
    "gateway.state.topic": ("state_topic", _name),
    "gateway.state.partitions": ("state_partitions", _positive("partitions")),
    "gateway.state.replication.factor": ("state_replication_factor", _replication),
    "gateway.transactional.id.prefix": ("transactional_id_prefix", str),
    "gateway.transaction.timeout.ms": ("transaction_timeout_ms", _positive("ms")),
    "gateway.session.timeout.ms": ("session_timeout_ms", _positive("ms")),
    "gateway.max.request.bytes": ("max_request_bytes", _positive("bytes")),
    "gateway.max.inflight.bytes": ("max_inflight_bytes", _positive("bytes")),
    "gateway.backpressure.wait.ms": ("backpressure_wait_ms", lambda t: max(0, int(t))),
    "gateway.request.timeout.ms": ("request_timeout_ms", _positive("ms")),
    "gateway.txn.max.requests": ("txn_max_requests", _positive("requests")),
    "gateway.read.sessions.max": ("read_sessions_max", _positive("sessions")),
    "gateway.read.session.max.bytes": ("read_session_max_bytes", _positive("bytes")),
    "gateway.read.session.timeout.ms": ("read_session_timeout_ms", _bounded(500, 3_600_000)),
    "gateway.staged.dir": ("staged_dir", Path),
    "gateway.staged.timeout.ms": ("staged_timeout_ms", _bounded(1_000, 14 * 60_000)),
    "gateway.staged.max.transactions": ("staged_max_transactions", _positive("transactions")),
    "gateway.staged.max.transaction.bytes": ("staged_max_transaction_bytes", _positive("bytes")),
    "gateway.push.topic": ("push_topic", lambda t: _name(t) if t else ""),
    "gateway.push.subscriptions.max": ("push_subscriptions_max", _positive("subscriptions")),
    "gateway.acl.enable": ("acl_enable", _choice("auto", "true", "false")),
    "gateway.acl.refresh.ms": ("acl_refresh_ms", _bounded(100, 3_600_000)),
    "gateway.super.users": ("super_users", _principals),
    "gateway.acl.allow.everyone.if.no.acl.found": ("acl_allow_if_no_acl", _boolean),
}
_HEADER_KEYS = {f"gateway.header.{f.name.replace('_', '.')}": f.name for f in fields(Headers)}
KNOWN_KEYS = frozenset([*_KEYS, *_HEADER_KEYS, "bootstrap.servers"])


def parse_config(props: Mapping[str, str]) -> GatewayConfig:
    """Build a ``GatewayConfig`` from properties; ``ConfigError`` names the first bad key."""
    values: dict[str, Any] = {}
    headers: dict[str, str] = {}
    kafka: dict[str, str] = {}
    for key, text in props.items():
        if key == "bootstrap.servers":
            values["bootstrap_servers"] = text
        elif key.startswith("kafka."):
            kafka[key.removeprefix("kafka.")] = text
        elif key in _HEADER_KEYS:
            headers[_HEADER_KEYS[key]] = text.strip()
        elif key in _KEYS:
            name, parse = _KEYS[key]
            try:
                values[name] = parse(text.strip())
            except ValueError as exc:
                raise ConfigError(f"{key}={text!r}: {exc}") from None
        else:
            raise ConfigError(f"unknown setting {key!r} (gateway settings start with 'gateway.', Kafka client "
                              "settings with 'kafka.')")
    config = GatewayConfig(**values, kafka=kafka, headers=Headers(**headers))
    try:
        config.listener()
        config.certificate_principals()
    except ValueError as exc:
        raise ConfigError(f"gateway.ssl.* / gateway.http.server: {exc}") from None
    return config


def default_instance_id(port: int) -> str:
    return f"{socket.gethostname()}-{port}"
