"""The governor's settings: Kafka client settings plus ``governor.*`` keys (properties file,
``--override key=value``, or the CLI's flags). Bad values raise ``ConfigError`` naming the key.

| key | default | meaning |
|---|---|---|
| ``bootstrap.servers`` | 127.0.0.1:9092 | the cluster; every other non-``governor.`` key goes to librdkafka as is |
| ``security.protocol``, ``sasl.*``, ``ssl.*`` | PLAINTEXT | librdkafka's; the governor's own connections honour them too (``tidelog.clients.security``) |
| ``governor.listen.host`` / ``.port`` | 127.0.0.1 / 8095 | the HTTP API of ``tidelog governor run`` |
| ``governor.interval.ms`` | 10000 | one observe/heal/execute round |
| ``governor.state.topic`` | __tidelog_governor | compacted topic holding plan and control |
| ``governor.throttle.bytes.per.second`` | 52428800 | ``leader/follower.replication.throttled.rate`` while moving |
| ``governor.throttle.required`` | false | a cluster refusing the throttle keys: false moves unthrottled (warned), true aborts the plan |
| ``governor.moves.per.broker`` / ``governor.moves.max`` | 2 / 20 | partitions in flight per broker / in all |
| ``governor.move.stall.ms`` | 600000 | a move with no progress for this long is cancelled |
| ``governor.broker.dead.grace.ms`` | 300000 | a missing broker is healed around after this long |
| ``governor.self.healing`` | true | plan around dead brokers, offline log dirs, added brokers |
| ``governor.auto.balance`` | false | plan whenever a balance goal is violated |
| ``governor.goal.disk.capacity.threshold`` | 0.8 | hard: fraction of a disk logs may use |
| ``governor.goal.max.replicas.per.broker`` | 10000 | hard |
| ``governor.goal.balance.threshold`` | 0.10 | soft goals: allowed deviation from the mean |
| ``governor.breaker.max.under.replicated`` / ``.max.isr.shrinks`` | 0 / 0 | pause above |
| ``governor.breaker.max.p99.ms`` | 1000 | produce p99 latency; pause above |
| ``governor.breaker.pause.disk.ratio`` / ``.cancel.disk.ratio`` | 0.85 / 0.95 | a log dir's fullness |
| ``governor.metrics.flavour`` | tidelog | ``tidelog`` or ``kafka-jmx`` (metric names, ``metrics`` module) |
| ``governor.metrics.url.template`` | (none) | e.g. ``http://{host}:9404/metrics``; ``{host}``, ``{id}`` |
| ``governor.metrics.url.<id>`` | (none) | one broker's endpoint, overriding the template |
| ``governor.disk.capacity.bytes`` | 1 TiB | when DescribeLogDirs does not report capacity |
| ``governor.rack.group.<rack>`` | (none) | virtual rack group of a physical rack |
| ``governor.tenant.<name>.brokers`` / ``.topics`` | (none) | a tenant's pool: broker ids / topic prefixes |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidelog.clients.security import ClientSecurity
from tidelog.common.errors import ConfigError as CommonConfigError
from tidelog.governor.breaker import BreakerLimits
from tidelog.governor.collect import ModelSettings
from tidelog.governor.execution import Limits
from tidelog.governor.metrics import FLAVOURS


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class GovernorConfig:
    client: dict[str, Any]
    listen_host: str = "127.0.0.1"
    listen_port: int = 8095
    interval_s: float = 10.0
    state_topic: str = "__tidelog_governor"
    throttle: int = 50 * 2**20
    throttle_required: bool = False
    limits: Limits = field(default_factory=Limits)
    grace_ms: int = 300_000
    self_healing: bool = True
    auto_balance: bool = False
    disk_threshold: float = 0.8
    max_replicas: int = 10_000
    balance_threshold: float = 0.10
    breaker: BreakerLimits = field(default_factory=BreakerLimits)
    flavour: str = "tidelog"
    metrics_template: str | None = None
    metrics_urls: dict[int, str] = field(default_factory=dict)
    model: ModelSettings = field(default_factory=ModelSettings)

    def metrics_url(self, broker: int, host: str) -> str | None:
        if broker in self.metrics_urls:
            return self.metrics_urls[broker]
        return self.metrics_template.format(host=host, id=broker) if self.metrics_template else None


def _num(props: Mapping[str, str], key: str, default: float, lo: float = 0.0, hi: float = float("inf")) -> float:
    if key not in props:
        return default
    try:
        value = float(props[key])
    except ValueError:
        raise ConfigError(f"{key}={props[key]!r} is not a number") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{key}={props[key]} must be between {lo:g} and {hi:g}")
    return value


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    value = props.get(key, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key}={props[key]!r} must be true or false")
    return value == "true"


def _ids(key: str, text: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{key}={text!r} must be a comma-separated list of broker ids") from None


def parse_config(props: Mapping[str, str]) -> GovernorConfig:
    client = {k: v for k, v in props.items() if not k.startswith("governor.")}
    client.setdefault("bootstrap.servers", "127.0.0.1:9092")
    try:  # the governor's own connections (cluster.py) read these too: refuse what they cannot honour now
        ClientSecurity.from_config(client)
    except CommonConfigError as exc:
        raise ConfigError(str(exc)) from None
    flavour = props.get("governor.metrics.flavour", "tidelog")
    if flavour not in FLAVOURS:
        raise ConfigError(f"governor.metrics.flavour={flavour!r} must be one of {', '.join(FLAVOURS)}")
    urls, groups = {}, {}
    tenants: dict[str, tuple[frozenset[int], tuple[str, ...]]] = {}
    for key, value in props.items():
        if key.startswith("governor.metrics.url.") and key != "governor.metrics.url.template":
            suffix = key.removeprefix("governor.metrics.url.")
            if not suffix.isdigit():
                raise ConfigError(f"{key}: the suffix must be a broker id")
            urls[int(suffix)] = value
        elif key.startswith("governor.rack.group."):
            groups[key.removeprefix("governor.rack.group.")] = value
        elif key.startswith("governor.tenant."):
            name, _, what = key.removeprefix("governor.tenant.").rpartition(".")
            if not name or what not in ("brokers", "topics"):
                raise ConfigError(f"{key}: expected governor.tenant.<name>.brokers or .topics")
            brokers, prefixes = tenants.get(name, (frozenset(), ()))
            if what == "brokers":
                brokers = _ids(key, value)
            else:
                prefixes = tuple(p.strip() for p in value.split(",") if p.strip())
            tenants[name] = (brokers, prefixes)
    limits = Limits(int(_num(props, "governor.moves.per.broker", 2, 1)), int(_num(props, "governor.moves.max", 20, 1)),
                    int(_num(props, "governor.move.stall.ms", 600_000, 1)))
    breaker = BreakerLimits(
        int(_num(props, "governor.breaker.max.under.replicated", 0)), int(_num(props, "governor.breaker.max.isr.shrinks", 0)),
        _num(props, "governor.breaker.max.p99.ms", 1000.0, 0), _num(props, "governor.breaker.pause.disk.ratio", 0.85, 0, 1),
        _num(props, "governor.breaker.cancel.disk.ratio", 0.95, 0, 1),
        int(_num(props, "governor.breaker.resume.after.ms", 60_000, 0)))
    return GovernorConfig(
        client=client, listen_host=props.get("governor.listen.host", "127.0.0.1"),
        listen_port=int(_num(props, "governor.listen.port", 8095, 0, 65535)),
        interval_s=_num(props, "governor.interval.ms", 10_000, 100) / 1000,
        state_topic=props.get("governor.state.topic", "__tidelog_governor"),
        throttle=int(_num(props, "governor.throttle.bytes.per.second", 50 * 2**20, 0)), limits=limits,
        throttle_required=_bool(props, "governor.throttle.required", False),
        grace_ms=int(_num(props, "governor.broker.dead.grace.ms", 300_000, 0)),
        self_healing=_bool(props, "governor.self.healing", True), auto_balance=_bool(props, "governor.auto.balance", False),
        disk_threshold=_num(props, "governor.goal.disk.capacity.threshold", 0.8, 0.01, 1),
        max_replicas=int(_num(props, "governor.goal.max.replicas.per.broker", 10_000, 1)),
        balance_threshold=_num(props, "governor.goal.balance.threshold", 0.10, 0, 10), breaker=breaker,
        flavour=flavour, metrics_template=props.get("governor.metrics.url.template"), metrics_urls=urls,
        model=ModelSettings(int(_num(props, "governor.disk.capacity.bytes", 1 << 40, 1)), groups, tenants),
    )
