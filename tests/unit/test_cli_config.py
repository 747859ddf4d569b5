"""`tidelog serve` settings: file, then TIDELOG_* environment, then --override."""

import pathlib

import pytest

from tidelog.cli.main import env_overrides, load_broker_config
from tidelog.common.errors import ConfigError


def test_override_beats_environment_beats_file(tmp_path: pathlib.Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\nnode.id=5\nlog.dirs=/x\n")
    env = {"TIDELOG_NUM_PARTITIONS": "3", "TIDELOG_LOG_DIRS": "/y"}
    config = load_broker_config(str(props), ["num.partitions=4"], env)
    assert config.get("num.partitions") == 4
    assert config.get("log.dirs") == ["/y"]
    assert config.get("node.id") == 5


def test_env_names_map_to_kafka_keys() -> None:
    assert env_overrides({"TIDELOG_LOG_RETENTION_MS": "1", "PATH": "/bin"}) == {"log.retention.ms": "1"}


@pytest.mark.parametrize("bad", ["novalue", "=1"])
def test_malformed_override_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError):
        load_broker_config(None, [bad], {})


def test_missing_properties_file_is_refused() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_broker_config("/nonexistent/server.properties", [], {})


def test_serve_raises_the_soft_open_files_limit_to_the_hard_one() -> None:
    import logging
    import resource

    from tidelog.cli.serve import raise_open_files_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        now = raise_open_files_limit(logging.getLogger("test"))
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == now
        assert now == hard or hard == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
