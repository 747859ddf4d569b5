"""The console's settings: ``console.*`` keys, ``bootstrap.servers``, and ``kafka.*`` client properties.

Properties (a file of ``key=value`` lines, then ``--override`` pairs) are parsed here; an unknown
``console.*`` key or a bad value is an error naming the key. ``kafka.X=Y`` is given to every
confluent-kafka client the console makes as ``X=Y``: that is how its own connection uses SASL/SCRAM
and TLS (``kafka.security.protocol=SASL_SSL``, ``kafka.sasl.mechanism=SCRAM-SHA-512``,
``kafka.sasl.username``, ``kafka.sasl.password``, ``kafka.ssl.ca.location``...). Values of keys that
look secret (``password``, ``secret``, ``key``) are never shown: ``redacted`` replaces them.

Optional endpoints: ``console.metrics.urls`` (comma-separated brokers' Prometheus endpoints, for disk
usage and byte rates, sampled every ``console.chart.interval.ms`` for the charts, whose history is
``console.chart.history.s`` long), ``console.gateway.url``, ``console.mirror.url``, ``console.governor.url``
(their readiness and metrics are shown only when set). The platform panels read the processes' state
topics: ``console.governor.state.topic`` and ``console.gateway.state.topic`` name them when the
processes were started with other names than their defaults; mirror links are found by name.
``console.mirror.config`` (comma-separated paths to mirror links' TOML files, the files the links run
with) gives the console an ``offsets = "preserve"`` link's source cluster, rename and shard count: the
only way to show such a link's source offsets, lag and shard owners, since it keeps no checkpoint on
the destination (platform.py). The files are read and checked at start, like the mirror reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidelog.common.errors import TidelogError
from tidelog.mirror.config import MirrorConfig, load_config
from tidelog.web.server import ListenerConfig

_SECRET_WORDS = ("password", "secret", "key", "token", "jaas")


class ConfigError(ValueError):
    """A setting is unknown or its value is invalid; the message names the key."""


@dataclass(frozen=True)
class ConsoleConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    kafka: Mapping[str, str] = field(default_factory=dict)
    cluster_name: str = "local"
    listen_host: str = "127.0.0.1"
    listen_port: int = 8081
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    users_file: Path | None = None
    session_secret_file: Path | None = None
    session_max_age_s: int = 8 * 3600
    lag_interval_ms: int = 10_000
    lag_window: int = 10
    lag_history_s: int = 3600
    request_timeout_ms: int = 10_000
    refresh_ms: int = 5_000
    chart_interval_ms: int = 10_000
    chart_history_s: int = 3600
    metadata_max_age_ms: int = 2_000
    metrics_urls: tuple[str, ...] = ()
    gateway_url: str = ""
    mirror_url: str = ""
    governor_url: str = ""
    governor_state_topic: str = "__tidelog_governor"
    gateway_state_topic: str = "__tidelog_gateway_state"
    mirror_links: tuple[MirrorConfig, ...] = ()

    def listener(self) -> ListenerConfig:
        return ListenerConfig(self.listen_host, self.listen_port, self.ssl_certfile, self.ssl_keyfile)

    def kafka_config(self, **extra: Any) -> dict[str, Any]:
        """Settings for a confluent-kafka client: bootstrap, the ``kafka.*`` passthrough, then ``extra``."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka, **extra}

    def redacted(self) -> dict[str, str]:
        """The client settings as they may be shown or logged: secret values replaced by ``[hidden]``."""
        return {key: "[hidden]" if is_secret(key) else value
                for key, value in self.kafka_config().items()}


def is_secret(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS) and not key.endswith(".location")


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"must be positive, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value < 65536:
        raise ValueError(f"not a TCP port: {value}")
    return value


def _urls(text: str) -> tuple[str, ...]:
    urls = tuple(part.strip() for part in text.split(",") if part.strip())
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {url!r}")
    return urls


def _url(text: str) -> str:
    return _urls(text)[0] if text.strip() else ""


def _mirror_links(text: str) -> tuple[MirrorConfig, ...]:
    links = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            links.append(load_config(Path(part)))
        except (OSError, TidelogError) as exc:
            raise ValueError(f"{part}: {exc}") from None
    names = [link.name for link in links]
    if len(set(names)) != len(names):
        raise ValueError(f"two files name the same link: {sorted(n for n in set(names) if names.count(n) > 1)}")
    return tuple(links)


def _topic(text: str) -> str:
    if not text or len(text) > 249 or any(not (c.isalnum() or c in "._-") for c in text):
        raise ValueError(f"not a topic name: {text!r}")
    return text


_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "console.cluster.name": ("cluster_name", str),
    "console.listen.host": ("listen_host", str),
    "console.listen.port": ("listen_port", _port),
    "console.ssl.certfile": ("ssl_certfile", Path),
    "console.ssl.keyfile": ("ssl_keyfile", Path),
    "console.users.file": ("users_file", Path),
    "console.session.secret.file": ("session_secret_file", Path),
    "console.session.max.age.s": ("session_max_age_s", _positive),
    "console.lag.interval.ms": ("lag_interval_ms", _positive),
    "console.lag.window": ("lag_window", _positive),
    "console.lag.history.s": ("lag_history_s", _positive),
    "console.request.timeout.ms": ("request_timeout_ms", _positive),
    "console.refresh.ms": ("refresh_ms", _positive),
    "console.chart.interval.ms": ("chart_interval_ms", _positive),
    "console.chart.history.s": ("chart_history_s", _positive),
    "console.metadata.max.age.ms": ("metadata_max_age_ms", lambda t: max(0, int(t))),
    "console.metrics.urls": ("metrics_urls", _urls),
    "console.gateway.url": ("gateway_url", _url),
    "console.mirror.url": ("mirror_url", _url),
    "console.governor.url": ("governor_url", _url),
    "console.governor.state.topic": ("governor_state_topic", _topic),
    "console.gateway.state.topic": ("gateway_state_topic", _topic),
    "console.mirror.config": ("mirror_links", _mirror_links),
}
KNOWN_KEYS = frozenset([*_KEYS, "bootstrap.servers"])


def parse_config(props: Mapping[str, str]) -> ConsoleConfig:
    values: dict[str, Any] = {}
    kafka: dict[str, str] = {}
    for key, text in props.items():
        if key == "bootstrap.servers":
            values["bootstrap_servers"] = text.strip()
        elif key.startswith("kafka."):
            kafka[key.removeprefix("kafka.")] = text
        elif key in _KEYS:
            name, parse = _KEYS[key]
            try:
                values[name] = parse(text.strip())
            except ValueError as exc:
                shown = "[hidden]" if is_secret(key) else repr(text)
                raise ConfigError(f"{key}={shown}: {exc}") from None
        else:
            raise ConfigError(f"unknown setting {key!r} (console settings start with 'console.', Kafka client "
                              "settings with 'kafka.')")
    config = ConsoleConfig(**values, kafka=kafka)
    try:
        config.listener()
    except ValueError as exc:
        raise ConfigError(f"console.ssl.*: {exc}") from None
    return config
