"""The agent's TOML: dotted keys bare or quoted, defaults, and a clear error naming any bad key."""

from __future__ import annotations

import tomllib

import pytest

from tidelog.agent.config import parse_config
from tidelog.common.errors import ConfigError

GOOD = """
[agent]
id = "web-1"
transaction.interval.ms = 50
[kafka]
bootstrap.servers = "127.0.0.1:9092"
"linger.ms" = 5
[[files]]
paths = ["/var/log/*.log"]
topic = "logs"
multiline.start.pattern = '^\\d{4}-'
"max.line.bytes" = 4096
"""


def test_bare_and_quoted_dotted_keys_mean_the_same_setting() -> None:
    config = parse_config(tomllib.loads(GOOD))
    assert config.agent_id == "web-1" and config.transaction_interval_ms == 50
    assert config.kafka == {"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5}
    group = config.files[0]
    assert group.max_line_bytes == 4096 and group.start_pattern is not None
    assert group.start_pattern.search(b"2026-01-01") is not None
    assert config.rotate_wait_ms == 1000 and config.transactional_id == "tidelog-agent-web-1"


@pytest.mark.parametrize(("edit", "message"), [
    (("transaction.interval.ms = 50", "transaction.interval.ms = 0"), "agent.transaction.interval.ms"),
    (("id = \"web-1\"", "id = \"web-1\"\nspeed = 3"), "agent.speed: unknown setting"),
    (("topic = \"logs\"", "topic = \"logs\"\npath = 'x'"), "files[0].path: unknown setting"),
    (("'^\\d{4}-'", "'(unclosed'"), "files[0].multiline.start.pattern: not a regular expression"),
    (("\"linger.ms\" = 5", "\"transactional.id\" = \"x\""), "kafka.transactional.id: set by the agent"),
    (("bootstrap.servers = \"127.0.0.1:9092\"", ""), "kafka.bootstrap.servers: required"),
    (("topic = \"logs\"", ""), "files[0]: needs paths and topic"),
])
def test_a_bad_setting_is_refused_by_name(edit: tuple[str, str], message: str) -> None:
    document = tomllib.loads(GOOD.replace(*edit))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_config(document)


def test_files_are_required() -> None:
    with pytest.raises(ConfigError, match="files: at least one"):
        parse_config({"kafka": {"bootstrap.servers": "x"}})
