"""The link's TOML: defaults, the rename rule, topic selection, and every bad value named."""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.common.errors import ConfigError
from tidelog.mirror.config import BUILTIN_CONFIG_EXCLUDE, DEFAULT_SHARDS, parse_config


def document(**link: Any) -> dict[str, Any]:
    return {"link": {"name": "dc1-to-dc2", **link}, "topics": {"include": ["orders", "dc1\\..*"]},
            "source": {"bootstrap.servers": "a:9092"},
            "destination": {"bootstrap": {"servers": "b:9092"}, "security": {"protocol": "SASL_SSL"},
                            "enable.ssl.certificate.verification": False}}


def test_defaults_and_derived_names() -> None:
    config = parse_config(document())
    assert (config.shards, config.budget_bytes, config.offset_header) == (DEFAULT_SHARDS, 64 << 20,
                                                                          "tidelog.mirror.offset")
    assert not config.shards_set  # an existing link topic's count then wins (topics.ensure_link_topic)
    assert parse_config(document(shards=DEFAULT_SHARDS)).shards_set
    assert config.link_topic == "__tidelog_mirror.dc1-to-dc2"
    assert config.transactional_id(3) == "tidelog-mirror.dc1-to-dc2.3"
    assert config.destination == {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                                  "enable.ssl.certificate.verification": "false"}
    assert config.config_exclude == BUILTIN_CONFIG_EXCLUDE


def test_patterns_match_whole_names_and_internal_topics_are_never_mirrored() -> None:
    rule = parse_config(document()).topics
    assert rule.selects("orders") and rule.selects("dc1.payments")
    assert not rule.selects("orders-eu") and not rule.selects("xdc1.payments")
    assert not parse_config({**document(), "topics": {"include": [".*"]}}).topics.selects("__consumer_offsets")


def test_rename_rule_and_exclusions() -> None:
    config = parse_config({**document(), "topics": {"include": [".*"], "exclude": ["tmp-.*"],
                                                    "rename": "dc1.{topic}"}})
    assert config.topics.destination("orders") == "dc1.orders"
    assert not config.topics.selects("tmp-1")


@pytest.mark.parametrize(("change", "message"), [
    ({"link": {"name": "a b"}}, "link.name"),
    ({"link": {"name": "x", "shards": 0}}, "link.shards"),
    ({"link": {"name": "x", "budget.bytes": 1000}}, "link.budget.bytes"),
    ({"link": {"name": "x", "start": "middle"}}, "link.start"),
    ({"link": {"name": "x", "colour": 1}}, "link.colour: unknown setting"),
    ({"link": {"name": "x", "replication.factor": 0}}, "link.replication.factor"),
    ({"link": {"name": "x", "metrics.listen": "nowhere"}}, "link.metrics.listen"),
    ({"topics": {"include": ["("]}}, "topics.include"),
    ({"topics": {"include": ["a"], "rename": "dc1.orders"}}, "topics.rename"),
    ({"topics": {"exclude": ["a"]}}, "topics.include: required"),
    ({"source": {"transactional.id": "x", "bootstrap.servers": "a"}}, "source.transactional.id"),
    ({"destination": {"group.id": "x", "bootstrap.servers": "a"}}, "destination.group.id"),
    ({"source": {"security.protocol": "SSL"}}, "source.bootstrap.servers: required"),
    ({"mirror": {}}, "mirror: unknown section"),
])
def test_bad_settings_are_refused_by_name(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_config({**document(), **change})
