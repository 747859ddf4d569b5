"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against Apache Kafka."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from compat_harness.scenario import Broker, Result, ScenarioFn, scenario_params
from compat_harness.steps import (
    APPEND,
    BROKER_RESOURCE,
    DELETE,
    SET,
    SUBTRACT,
    TOPIC_RESOURCE,
    alter_configs,
    create_topic,
    describe_configs,
    incremental_alter_configs,
)

COMMON_KEYS = ["retention.ms", "segment.bytes", "cleanup.policy", "max.message.bytes", "min.insync.replicas",
               "retention.bytes", "message.timestamp.type", "compression.type", "segment.ms"]


def scenario_describe_configs_topic_defaults(b: Broker) -> None:
    """Common topic keys of a topic without overrides, with synonyms: values, sources
    (DEFAULT_CONFIG or the broker's static setting), types, read-only and sensitive flags."""
    name = b.topic()
    create_topic(b, name, 1)
    describe_configs(b, "describe", TOPIC_RESOURCE, name, COMMON_KEYS, synonyms=True)


def scenario_describe_configs_topic_overrides(b: Broker) -> None:
    """A topic created with retention.ms, cleanup.policy and max.message.bytes set: those keys come
    back as TOPIC_CONFIG with the broker default among their synonyms."""
    name = b.topic()
    create_topic(b, name, 1, {"retention.ms": "3600000", "cleanup.policy": "compact", "max.message.bytes": "2000"})
    describe_configs(b, "describe", TOPIC_RESOURCE, name, COMMON_KEYS, synonyms=True)


def scenario_describe_configs_all_topic_keys(b: Broker) -> None:
    """Every config key a topic has (DescribeConfigs with no key list): the names, with value and
    source of each."""
    name = b.topic()
    create_topic(b, name, 1)
    response: Any = describe_configs(b, None, TOPIC_RESOURCE, name, None)
    configs = getattr(response, "results", [None])[0]
    b.note("configs", {c.name: {"value": c.value, "source": c.config_source, "read_only": c.read_only,
                                "type": c.config_type, "sensitive": c.is_sensitive}
                       for c in getattr(configs, "configs", ())})


def scenario_describe_configs_documentation(b: Broker) -> None:
    """include_documentation=true (v3+) returns a documentation string for each key."""
    name = b.topic()
    create_topic(b, name, 1)
    response: Any = describe_configs(b, None, TOPIC_RESOURCE, name, ["retention.ms", "cleanup.policy"],
                                     documentation=True)
    configs = getattr(response, "results", [None])[0]
    b.note("has documentation", {c.name: bool(c.documentation) for c in getattr(configs, "configs", ())})


def scenario_describe_configs_unknown_resources(b: Broker) -> None:
    """An unknown topic (UNKNOWN_TOPIC_OR_PARTITION), an unknown key (left out), an invalid topic
    name, another broker's id, and a non-numeric broker name."""
    name = b.topic()
    create_topic(b, name, 1)
    describe_configs(b, "unknown topic", TOPIC_RESOURCE, b.topic("-missing"), ["retention.ms"])
    describe_configs(b, "unknown key", TOPIC_RESOURCE, name, ["no.such.key"])
    describe_configs(b, "invalid topic name", TOPIC_RESOURCE, "bad name!", ["retention.ms"])
    describe_configs(b, "broker 7", BROKER_RESOURCE, "7", ["num.partitions"])
    describe_configs(b, "broker 'x'", BROKER_RESOURCE, "x", ["num.partitions"])


def scenario_describe_configs_broker(b: Broker) -> None:
    """Broker configs of this node: keys set in server.properties are STATIC_BROKER_CONFIG, others
    DEFAULT_CONFIG; with synonyms."""
    keys = ["num.partitions", "auto.create.topics.enable", "log.retention.hours", "log.retention.ms",
            "message.max.bytes", "log.segment.bytes", "default.replication.factor", "log.cleanup.policy"]
    describe_configs(b, "broker 1", BROKER_RESOURCE, "1", keys, synonyms=True)
    describe_configs(b, "cluster default (empty name)", BROKER_RESOURCE, "", ["log.retention.ms"])


def scenario_describe_configs_versions(b: Broker) -> None:
    """The same topic keys at DescribeConfigs v1 (oldest accepted) and v3 (config types)."""
    name = b.topic()
    create_topic(b, name, 1, {"retention.ms": "3600000"})
    for version in (1, 3):
        describe_configs(b, f"v{version}", TOPIC_RESOURCE, name, ["retention.ms", "segment.bytes"], synonyms=True,
                         version=version)


def scenario_alter_configs(b: Broker) -> None:
    """AlterConfigs (non-incremental) replaces the whole set of overrides: setting one key drops
    the others; validate_only changes nothing; errors per resource."""
    name = b.topic()
    create_topic(b, name, 1, {"retention.ms": "3600000", "cleanup.policy": "compact"})
    alter_configs(b, "validate only", TOPIC_RESOURCE, name, {"segment.ms": "60000"}, validate_only=True)
    alter_configs(b, "set segment.ms", TOPIC_RESOURCE, name, {"segment.ms": "60000"})
    b.wait_until("the new set is described", lambda: _value(b, TOPIC_RESOURCE, name, "segment.ms") == "60000")
    describe_configs(b, "after", TOPIC_RESOURCE, name, ["retention.ms", "cleanup.policy", "segment.ms"])
    alter_configs(b, "unknown key", TOPIC_RESOURCE, name, {"no.such.key": "1"})
    alter_configs(b, "bad value", TOPIC_RESOURCE, name, {"retention.ms": "soon"})
    alter_configs(b, "bad enum", TOPIC_RESOURCE, name, {"cleanup.policy": "shred"})
    alter_configs(b, "unknown topic", TOPIC_RESOURCE, b.topic("-missing"), {"retention.ms": "1000"})
    describe_configs(b, "after errors", TOPIC_RESOURCE, name, ["retention.ms", "cleanup.policy", "segment.ms"])


def scenario_incremental_alter_configs(b: Broker) -> None:
    """IncrementalAlterConfigs: SET, DELETE (also of a key that is not set), APPEND and SUBTRACT on
    a list key, APPEND on a non-list key (INVALID_CONFIG), unknown key, bad value, unknown topic,
    validate_only."""
    name = b.topic()
    create_topic(b, name, 1)
    incremental_alter_configs(b, "set retention.ms", TOPIC_RESOURCE, name, [("retention.ms", SET, "7200000")])
    incremental_alter_configs(b, "append cleanup.policy", TOPIC_RESOURCE, name, [("cleanup.policy", APPEND, "compact")])
    # Kafka answers once its controller committed the change; its broker applies it a moment later.
    b.wait_until("the append is described", lambda: _value(b, TOPIC_RESOURCE, name, "cleanup.policy") == "delete,compact")
    describe_configs(b, "after set and append", TOPIC_RESOURCE, name, ["retention.ms", "cleanup.policy"])
    incremental_alter_configs(b, "subtract cleanup.policy", TOPIC_RESOURCE, name,
                              [("cleanup.policy", SUBTRACT, "delete")])
    incremental_alter_configs(b, "delete retention.ms", TOPIC_RESOURCE, name, [("retention.ms", DELETE, None)])
    incremental_alter_configs(b, "delete unset segment.ms", TOPIC_RESOURCE, name, [("segment.ms", DELETE, None)])
    b.wait_until("the deletion is described", lambda: _value(b, TOPIC_RESOURCE, name, "retention.ms") != "7200000")
    describe_configs(b, "after subtract and delete", TOPIC_RESOURCE, name, ["retention.ms", "cleanup.policy"])
    incremental_alter_configs(b, "append to non-list", TOPIC_RESOURCE, name, [("retention.ms", APPEND, "5")])
    incremental_alter_configs(b, "unknown key", TOPIC_RESOURCE, name, [("no.such.key", SET, "1")])
    incremental_alter_configs(b, "bad value", TOPIC_RESOURCE, name, [("max.message.bytes", SET, "-5x")])
    incremental_alter_configs(b, "unknown topic", TOPIC_RESOURCE, b.topic("-missing"), [("retention.ms", SET, "1")])
    incremental_alter_configs(b, "same key twice", TOPIC_RESOURCE, name,
                              [("retention.ms", SET, "1000"), ("retention.ms", SET, "2000")])
    incremental_alter_configs(b, "validate only", TOPIC_RESOURCE, name, [("retention.ms", SET, "5000")],
                              validate_only=True)
    describe_configs(b, "after errors", TOPIC_RESOURCE, name, ["retention.ms", "cleanup.policy"])


def _value(b: Broker, resource_type: int, name: str, key: str) -> str | None:
    """A key's described value, unrecorded (for waiting until an alteration shows)."""
    response: Any = describe_configs(b, None, resource_type, name, [key])
    configs = getattr(response, "results", [None])[0]
    return next((c.value for c in getattr(configs, "configs", ()) if c.name == key), None)


def _broker_value(b: Broker, key: str) -> str | None:
    return _value(b, BROKER_RESOURCE, "1", key)


def scenario_incremental_alter_broker_configs(b: Broker) -> None:
    """IncrementalAlterConfigs on the broker: a read-only key (log.dirs) is refused; a cluster-wide
    default (empty resource name) of log.retention.ms shows on the broker as
    DYNAMIC_DEFAULT_BROKER_CONFIG (Kafka applies it asynchronously: the scenario waits for it);
    deleting it restores the default."""
    incremental_alter_configs(b, "read-only log.dirs", BROKER_RESOURCE, "1", [("log.dirs", SET, "/tmp/x")])
    before = _broker_value(b, "log.retention.ms")
    incremental_alter_configs(b, "cluster default log.retention.ms", BROKER_RESOURCE, "",
                              [("log.retention.ms", SET, "86400000")])
    try:
        b.wait_until("cluster default applied", lambda: _broker_value(b, "log.retention.ms") == "86400000")
        describe_configs(b, "broker after", BROKER_RESOURCE, "1", ["log.retention.ms"], synonyms=True)
    finally:
        incremental_alter_configs(b, "undo cluster default", BROKER_RESOURCE, "", [("log.retention.ms", DELETE, None)])
        b.wait_until("cluster default removed", lambda: _broker_value(b, "log.retention.ms") == before)
    describe_configs(b, "broker after undo", BROKER_RESOURCE, "1", ["log.retention.ms"], synonyms=True)


def scenario_alter_kafka_broker_keys_tidelog_does_not_use(b: Broker) -> None:
    """A dynamic Kafka broker key tidelog has no use for (sasl.kerberos.min.time.before.relogin) is
    accepted, stored and described; a read-only one (broker.heartbeat.interval.ms) is refused with
    INVALID_REQUEST; a name in no catalogue is INVALID_CONFIG (Kafka stores it: allowed difference).
    Both are deleted again at the end, so that other scenarios see the broker as it started."""
    key = "sasl.kerberos.min.time.before.relogin"
    incremental_alter_configs(b, "set a dynamic key", BROKER_RESOURCE, "1", [(key, SET, "120000")])
    # Kafka applies a dynamic config when its metadata record reaches the broker, a moment later
    b.wait_until("the new value is described", lambda: _broker_value(b, key) == "120000")
    describe_configs(b, "described", BROKER_RESOURCE, "1", [key], synonyms=True)
    incremental_alter_configs(b, "set a read-only key", BROKER_RESOURCE, "1",
                              [("broker.heartbeat.interval.ms", SET, "3000")])
    incremental_alter_configs(b, "set an unknown key", BROKER_RESOURCE, "1", [("no.such.broker.key", SET, "1")])
    incremental_alter_configs(b, "delete them", BROKER_RESOURCE, "1", [(key, DELETE, None)])
    incremental_alter_configs(b, "delete the unknown key", BROKER_RESOURCE, "1", [("no.such.broker.key", DELETE, None)])




def scenario_describe_configs_whole_broker(b: Broker) -> None:
    """Every key of the broker's description (no key list): names, read-only flags, sources, types
    and sensitivity, compared key by key."""
    response: Any = describe_configs(b, None, BROKER_RESOURCE, "1", None)
    configs = getattr(response, "results", [None])[0]
    if configs is None:
        b.note("describe", repr(response))
        return
    b.note("broker keys", {c.name: {"read_only": c.read_only, "source": int(c.config_source),
                                    "sensitive": c.is_sensitive, "type": int(c.config_type)} for c in configs.configs})


GROUP_RESOURCE = 32
GROUP_KEYS = ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.record.lock.duration.ms"]


def _group_value(b: Broker, group: str, key: str) -> str | None:
    response: Any = describe_configs(b, None, GROUP_RESOURCE, group, [key])
    configs = getattr(response, "results", [None])[0]
    return None if configs is None or not configs.configs else str(configs.configs[0].value)


def scenario_group_configs(b: Broker) -> None:
    """GROUP resource configs (KIP-848): a group's defaults with synonyms, SET of the session timeout
    and heartbeat interval, values outside the broker's bounds, a heartbeat not below the session
    timeout, an unknown key (INVALID_CONFIG each), DELETE, and AlterConfigs replacing the set."""
    group = b.topic("-group")
    describe_configs(b, "defaults", GROUP_RESOURCE, group, GROUP_KEYS, synonyms=True)
    incremental_alter_configs(b, "set", GROUP_RESOURCE, group, [
        ("consumer.session.timeout.ms", SET, "50000"), ("consumer.heartbeat.interval.ms", SET, "6000")])
    b.wait_until("the new value is described", lambda: _group_value(b, group, "consumer.session.timeout.ms") == "50000")
    describe_configs(b, "described", GROUP_RESOURCE, group, GROUP_KEYS, synonyms=True)
    incremental_alter_configs(b, "session timeout below the minimum", GROUP_RESOURCE, group,
                              [("consumer.session.timeout.ms", SET, "1000")])
    incremental_alter_configs(b, "heartbeat above the maximum", GROUP_RESOURCE, group,
                              [("consumer.heartbeat.interval.ms", SET, "600000")])
    incremental_alter_configs(b, "unknown key", GROUP_RESOURCE, group, [("no.such.group.key", SET, "1")])
    incremental_alter_configs(b, "not a number", GROUP_RESOURCE, group, [("consumer.session.timeout.ms", SET, "x")])
    incremental_alter_configs(b, "delete", GROUP_RESOURCE, group, [("consumer.heartbeat.interval.ms", DELETE, None)])
    b.wait_until("the deletion is described", lambda: _group_value(b, group, "consumer.heartbeat.interval.ms") == "5000")
    alter_configs(b, "replace the set", GROUP_RESOURCE, group, {"share.record.lock.duration.ms": "20000"})
    b.wait_until("the replacement is described", lambda: _group_value(b, group, "consumer.session.timeout.ms") == "45000")
    describe_configs(b, "after replacing", GROUP_RESOURCE, group, GROUP_KEYS)
    alter_configs(b, "clear", GROUP_RESOURCE, group, {})


@pytest.mark.parametrize("scenario", scenario_params(globals()))
def test_same_as_kafka(scenario: ScenarioFn, compare_with_kafka: Callable[[ScenarioFn], Result]) -> None:
    compare_with_kafka(scenario)
