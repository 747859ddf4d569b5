"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, brokers and groups
(ConfigResource type 32: ``broker/group_configs.py``).

A topic setting's value is the topic's override if it has one (source DYNAMIC_TOPIC_CONFIG), else the
broker's value of its synonym (``retention.ms`` ← ``log.retention.ms``: STATIC_BROKER_CONFIG from the
properties file, DYNAMIC_DEFAULT_BROKER_CONFIG when altered at run time), else Kafka's default
(DEFAULT_CONFIG). With ``include_synonyms`` every level that has a value is listed, most specific first.
Broker settings can be altered only where Kafka's are dynamic; the rest are read-only. A broker
setting altered on the broker's own resource (its id) is DYNAMIC_BROKER_CONFIG and wins over one
altered on the cluster default resource (empty name), DYNAMIC_DEFAULT_BROKER_CONFIG.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tidelog.broker.authz import CLUSTER, CLUSTER_NAME, GROUP, TOPIC, Op, authorize
from tidelog.broker.context import BrokerContext, ConnectionInfo
from tidelog.broker.group_configs import GROUP_SETTINGS, GroupConfigs
from tidelog.broker.responses import NO_THROTTLE, builder
from tidelog.common.config import (
    BROKER_SETTINGS,
    DYNAMIC_ONLY_BROKER_KEYS,
    TOPIC_SETTINGS,
    ConfigSource,
    Setting,
    Value,
    parse_topic_configs,
)
from tidelog.common.errors import ConfigError, ErrorCode, KafkaError
from tidelog.common.names import topic_name_problem
from tidelog.metadata.image import TopicImage
from tidelog.protocol.headers import RequestHeader

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC_RESOURCE, BROKER, BROKER_LOGGER, GROUP_RESOURCE = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    setting: Setting
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]


def _broker_synonyms(ctx: BrokerContext, key: str) -> list[tuple[str, str | None, ConfigSource]]:
    return [
        (name, None if BROKER_SETTINGS[name].sensitive else BROKER_SETTINGS[name].render(value), source)
        for name, value, source in ctx.config.synonyms(key)
    ]


def topic_config_entries(ctx: BrokerContext, topic: TopicImage) -> Iterator[ConfigEntry]:
    for name, setting in sorted(TOPIC_SETTINGS.items()):
        default_value, default_source, broker_key = ctx.config.topic_default(name)
        synonyms = _broker_synonyms(ctx, broker_key) if broker_key is not None else []
        if name in topic.configs:
            value, source = setting.render(topic.configs[name]), ConfigSource.DYNAMIC_TOPIC_CONFIG
            synonyms.insert(0, (name, value, source))
        else:
            value, source = setting.render(default_value), default_source
        yield ConfigEntry(name, value, source, False, setting.sensitive, setting, tuple(synonyms))


def broker_config_entries(ctx: BrokerContext, cluster_default: bool = False) -> Iterator[ConfigEntry]:
    """The node's settings; for the cluster-default resource (empty name) only those with a dynamic default."""
    for name, setting in sorted(BROKER_SETTINGS.items()):
        if cluster_default and name not in ctx.config.dynamic:
            continue
        if name in DYNAMIC_ONLY_BROKER_KEYS and not ctx.config.has(name):
            continue
        synonyms = _broker_synonyms(ctx, name)
        value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (None, ConfigSource.DEFAULT_CONFIG)
        yield ConfigEntry(name, value, source, not setting.dynamic, setting.sensitive, setting, tuple(synonyms))


def group_config_entries(ctx: BrokerContext, group_id: str) -> Iterator[ConfigEntry]:
    store = _group_configs(ctx)
    for name, value, source, synonyms in store.effective(group_id):
        setting = GROUP_SETTINGS[name]
        yield ConfigEntry(name, value, source, False, False, setting, tuple(synonyms))


def _group_configs(ctx: BrokerContext) -> GroupConfigs:
    if ctx.groups is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
    return ctx.groups.configs


def _alter_group(ctx: BrokerContext, resource: Any, incremental: bool, validate_only: bool) -> None:
    """A group's own configs: SET/DELETE (incremental) or replace them all; APPEND/SUBTRACT are refused (no list keys)."""
    if not resource.resource_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a group config resource needs a group id")
    store = _group_configs(ctx)
    values = store.overrides(resource.resource_name) if incremental else {}
    seen: set[str] = set()
    for change in resource.configs:
        if change.name in seen:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {change.name}")
        seen.add(change.name)
        op = change.config_operation if incremental else SET
        if op == DELETE:
            store.parse(change.name, None)
            values.pop(change.name, None)
        elif op == SET:
            values[change.name] = store.parse(change.name, change.value)
        else:
            store.parse(change.name, change.value)
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {change.name}")
    if validate_only:
        store.validate(values)
        return
    store.replace(resource.resource_name, values, ctx.groups.core.consumer if ctx.groups is not None else None)


def _refusal(ctx: BrokerContext, conn: ConnectionInfo, resource: Any, operation: Op) -> ErrorCode | None:
    """Kafka's check: the operation on the topic, or on the cluster for broker and logger resources."""
    if resource.resource_type == TOPIC_RESOURCE:
        allowed = authorize(ctx, conn, operation, TOPIC, resource.resource_name)
        return None if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource.resource_type in (BROKER, BROKER_LOGGER):
        return None if authorize(ctx, conn, operation, CLUSTER, CLUSTER_NAME) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if resource.resource_type == GROUP_RESOURCE:
        allowed = authorize(ctx, conn, operation, GROUP, resource.resource_name)
        return None if allowed else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


def _describe_one(ctx: BrokerContext, conn: ConnectionInfo, b: Any, resource: Any, synonyms: bool, docs: bool) -> Any:
    def result(error: ErrorCode, message: str | None, configs: tuple[Any, ...] = ()) -> Any:
        return b.make(
            "DescribeConfigsResult",
            error_code=error,
            error_message=message,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=configs,
        )

    refusal = _refusal(ctx, conn, resource, Op.DESCRIBE_CONFIGS)
    if refusal is not None:
        return result(refusal, None)
    if resource.resource_type == TOPIC_RESOURCE:
        problem = topic_name_problem(resource.resource_name)
        if problem:
            return result(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        topic = ctx.image.topics.get(resource.resource_name)
        if topic is None:
            return result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource.resource_name} does not exist")
        entries = list(topic_config_entries(ctx, topic))
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(ctx.node_id)):
            return result(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.node_id} but received {resource.resource_name}")
        entries = list(broker_config_entries(ctx, cluster_default=resource.resource_name == ""))
    elif resource.resource_type == BROKER_LOGGER:
        entries = []
    elif resource.resource_type == GROUP_RESOURCE:
        entries = list(group_config_entries(ctx, resource.resource_name))
    else:
        return result(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}")
    wanted = resource.configuration_keys
    if wanted is not None:
        entries = [e for e in entries if e.name in wanted]
    configs = tuple(
        b.make(
            "DescribeConfigsResourceResult",
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=int(e.source),
            is_sensitive=e.sensitive,
            is_default=e.source is ConfigSource.DEFAULT_CONFIG,
            synonyms=tuple(
                b.make("DescribeConfigsSynonym", name=n, value=v, source=int(s)) for n, v, s in e.synonyms
            ) if synonyms else (),
            config_type=e.setting.type.value,
            documentation=e.setting.doc if docs else None,
        )
        for e in entries
    )
    return result(ErrorCode.NONE, None, configs)


async def describe_configs(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    b = builder(DESCRIBE_CONFIGS, header.api_version)
    synonyms = getattr(request, "include_synonyms", False)
    docs = getattr(request, "include_documentation", False)
    results = tuple(_describe_one(ctx, conn, b, r, synonyms, docs) for r in request.resources)
    return b.make("DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=results)


# -- altering -------------------------------------------------------------------------------------


def _apply_incremental(current: dict[str, Value], changes: Any, settings: dict[str, Setting]) -> dict[str, Value]:
    updated = dict(current)
    seen: set[str] = set()
    for change in changes:
        if change.name in seen:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {change.name}")
        seen.add(change.name)
        setting = settings.get(change.name)
        if setting is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {change.name}")
        op = change.config_operation
        if op == DELETE:
            updated.pop(change.name, None)
            continue
        try:
            value = setting.parse(change.value)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if op == SET:
            updated[change.name] = value
        elif op in (APPEND, SUBTRACT):
            if setting.type.name != "LIST":
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {change.name}")
            base = list(updated.get(change.name) or setting.default or [])  # type: ignore[arg-type]
            assert isinstance(value, list)
            if op == APPEND:
                updated[change.name] = base + [v for v in value if v not in base]
            else:
                updated[change.name] = [v for v in base if v not in value]
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return updated


def _replace_all(changes: Any, settings: dict[str, Setting]) -> dict[str, Value]:
    pairs = [(c.name, c.value) for c in changes]
    if settings is TOPIC_SETTINGS:
        try:
            return parse_topic_configs(pairs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    updated: dict[str, Value] = {}
    for name, raw in pairs:
        setting = settings.get(name)
        if setting is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {name}")
        try:
            updated[name] = setting.parse(raw)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return updated


async def _alter_one(ctx: BrokerContext, resource: Any, incremental: bool, validate_only: bool) -> tuple[ErrorCode, str | None]:
    try:
        if resource.resource_type == TOPIC_RESOURCE:
            topic = ctx.image.topics.get(resource.resource_name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource.resource_name} does not exist")
            if incremental:
                overrides = _apply_incremental(dict(topic.configs), resource.configs, TOPIC_SETTINGS)
            else:
                overrides = _replace_all(resource.configs, TOPIC_SETTINGS)
            outcome = await ctx.topics.set_topic_configs(topic.name, overrides, validate_only)
            if not outcome.ok:
                raise KafkaError(outcome.error, outcome.message or "")
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(ctx.node_id)):
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id {resource.resource_name}")
            # The empty name is the cluster-wide default; the broker's id, its own values (Kafka's two scopes).
            node = None if resource.resource_name == "" else ctx.node_id
            current = ctx.config.dynamic if node is None else ctx.config.per_broker
            if incremental:
                values = _apply_incremental(dict(current), resource.configs, BROKER_SETTINGS)
            else:
                values = _replace_all(resource.configs, BROKER_SETTINGS)
            static = sorted(k for k in values if not BROKER_SETTINGS[k].dynamic)
            if static:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {set(static)}")
            await ctx.topics.set_broker_configs(values, validate_only, node)
        elif resource.resource_type == BROKER_LOGGER:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker loggers cannot be altered")
        elif resource.resource_type == GROUP_RESOURCE:
            _alter_group(ctx, resource, incremental, validate_only)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}")
    except KafkaError as exc:
        return exc.code, exc.message or None
    return ErrorCode.NONE, None


async def _alter(
    ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any, api_key: int, incremental: bool
) -> Any:
    b = builder(api_key, header.api_version)
    responses = []
    for resource in request.resources:
        refusal = _refusal(ctx, conn, resource, Op.ALTER_CONFIGS)
        if refusal is not None:
            error, message = refusal, None
        else:
            error, message = await _alter_one(ctx, resource, incremental, request.validate_only)
        responses.append(
            b.make(
                "AlterConfigsResourceResponse",
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    top = "IncrementalAlterConfigsResponse" if incremental else "AlterConfigsResponse"
    return b.make(top, throttle_time=NO_THROTTLE, responses=tuple(responses))


async def alter_configs(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    return await _alter(ctx, conn, header, request, ALTER_CONFIGS, incremental=False)


async def incremental_alter_configs(ctx: BrokerContext, conn: ConnectionInfo, header: RequestHeader, request: Any) -> Any:
    return await _alter(ctx, conn, header, request, INCREMENTAL_ALTER_CONFIGS, incremental=True)
