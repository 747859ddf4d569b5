"""The gateway's settings: typed, checked, unknown keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.gateway.config import ConfigError, parse_config


def test_settings_are_parsed_and_kafka_properties_pass_through() -> None:
    config = parse_config({"bootstrap.servers": "b:9092", "gateway.dc": "dc1", "gateway.state.partitions": "16",
                           "kafka.security.protocol": "SASL_SSL", "gateway.header.source.host": "host"})
    assert config.data_topic("logs") == "dc1.logs"
    assert config.state_partitions == 16
    assert config.headers.source_host == "host"
    assert config.kafka_config(**{"group.id": "g"}) == {"bootstrap.servers": "b:9092", "reconnect.backoff.max.ms": 1000,
                                                        "security.protocol": "SASL_SSL", "group.id": "g"}
    overridden = parse_config({"kafka.reconnect.backoff.max.ms": "5000"})
    assert overridden.kafka_config()["reconnect.backoff.max.ms"] == "5000"


def test_read_session_settings_have_kafka_style_names() -> None:
    config = parse_config({"gateway.read.sessions.max": "7", "gateway.read.session.max.bytes": "65536",
                           "gateway.read.session.timeout.ms": "2000"})
    assert (config.read_sessions_max, config.read_session_max_bytes, config.read_session_timeout_ms) == (7, 65536, 2000)


def test_without_a_data_centre_topics_are_written_as_named() -> None:
    assert parse_config({}).data_topic("logs") == "logs"


@pytest.mark.parametrize(("props", "fragment"), [
    ({"gateway.listen.prot": "1"}, "unknown setting"),
    ({"gateway.listen.port": "70000"}, "gateway.listen.port"),
    ({"gateway.state.partitions": "0"}, "gateway.state.partitions"),
    ({"gateway.max.inflight.bytes": "lots"}, "gateway.max.inflight.bytes"),
    ({"gateway.dc": "dc/1"}, "gateway.dc"),
    ({"gateway.read.sessions.max": "0"}, "gateway.read.sessions.max"),
    ({"gateway.read.session.timeout.ms": "100"}, "gateway.read.session.timeout.ms"),
    ({"gateway.ssl.certfile": "c.pem"}, "key file"),
    ({"gateway.ssl.client.auth": "required"}, "gateway.ssl"),
])
def test_bad_setting_is_an_error_naming_the_key(props: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_config(props)


def test_tls_listener_url_is_https() -> None:
    config = parse_config({"gateway.ssl.certfile": "c.pem", "gateway.ssl.keyfile": "k.pem", "gateway.listen.port": "8443"})
    assert config.url == "https://127.0.0.1:8443"
    assert config.listener().certfile == Path("c.pem")
