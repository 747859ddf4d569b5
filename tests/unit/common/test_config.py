"""The config catalogue: Kafka names, parsing, validation messages, sources and fallbacks."""

import pytest

from tidelog.common.config import (
    BROKER_SETTINGS,
    TOPIC_SETTINGS,
    BrokerConfig,
    ConfigSource,
    parse_properties,
    parse_topic_configs,
    render_markdown,
    resolve_topic_config,
)
from tidelog.common.errors import ConfigError


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("retention.ms", "60000", 60000),
        ("cleanup.policy", "compact,delete", ["compact", "delete"]),
        ("min.cleanable.dirty.ratio", "0.25", 0.25),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("preallocate", "TRUE", True),
    ],
)
def test_topic_values_parse_to_their_types(key: str, raw: str, expected: object) -> None:
    assert parse_topic_configs([(key, raw)]) == {key: expected}


@pytest.mark.parametrize(
    ("key", "raw", "words"),
    [
        ("retention.ms", "soon", "retention.ms"),
        ("cleanup.policy", "shred", "must be one of"),
        ("min.cleanable.dirty.ratio", "2", "between"),
        ("segment.bytes", "1", "at least"),
        ("no.such.key", "1", "Unknown topic config name: no.such.key"),
    ],
)
def test_invalid_topic_values_are_refused_naming_the_key(key: str, raw: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_topic_configs([(key, raw)])
    assert words in str(info.value)


def test_broker_unknown_keys_are_collected_not_fatal() -> None:
    config = BrokerConfig.from_properties({"node.id": "3", "made.up": "x"})
    assert config.get("node.id") == 3
    assert config.unknown == ["made.up"]


def test_invalid_broker_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"num\.partitions"):
        BrokerConfig.from_properties({"num.partitions": "zero"})


def test_retention_hours_feed_the_topic_default_like_kafka() -> None:
    config = BrokerConfig.from_properties({"log.retention.hours": "2"})
    value, source, synonym = config.topic_default("retention.ms")
    # Kafka lists synonyms from log.retention.ms on; .hours-only settings fall outside that list, so
    # the source is DEFAULT_CONFIG although the value comes from log.retention.hours.
    assert (value, source, synonym) == (7_200_000, ConfigSource.DEFAULT_CONFIG, "log.retention.ms")
    assert config.synonyms("log.retention.hours") == [
        ("log.retention.hours", 2, ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", 168, ConfigSource.DEFAULT_CONFIG),
    ]


def test_synonyms_list_dynamic_then_static_then_default() -> None:
    config = BrokerConfig.from_properties({"num.partitions": "3"})
    config.dynamic = {"num.partitions": 5}
    assert config.synonyms("num.partitions") == [
        ("num.partitions", 5, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("num.partitions", 3, ConfigSource.STATIC_BROKER_CONFIG),
        ("num.partitions", 1, ConfigSource.DEFAULT_CONFIG),
    ]
    value, source, _ = config.topic_default("segment.bytes")
    assert (value, source) == (1073741824, ConfigSource.DEFAULT_CONFIG)


def test_topic_override_beats_broker_default() -> None:
    config = BrokerConfig.from_properties({"log.retention.ms": "1000"})
    resolved = resolve_topic_config(config, {"segment.bytes": 4096})
    assert resolved["retention.ms"] == 1000
    assert resolved["segment.bytes"] == 4096
    assert config.source("log.retention.ms") is ConfigSource.STATIC_BROKER_CONFIG


def test_every_topic_synonym_is_a_broker_setting() -> None:
    for setting in TOPIC_SETTINGS.values():
        assert setting.broker_synonym is None or setting.broker_synonym in BROKER_SETTINGS


def test_properties_parser_handles_comments_colons_and_continuations() -> None:
    text = "# c\n! c\nlisteners=PLAINTEXT://a:1,\\\n  PLAINTEXT2://b:2\nnode.id: 4\n\nempty\n"
    assert parse_properties(text) == {"listeners": "PLAINTEXT://a:1,PLAINTEXT2://b:2", "node.id": "4", "empty": ""}


def test_generated_docs_list_every_key() -> None:
    doc = render_markdown()
    for key in list(BROKER_SETTINGS) + list(TOPIC_SETTINGS):
        assert f"`{key}`" in doc


def test_configuration_doc_is_generated_from_the_catalogue() -> None:
    import pathlib

    doc = pathlib.Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
    assert doc.read_text() == render_markdown(), "run: python -m tidelog.common.config > docs/configuration.md"
