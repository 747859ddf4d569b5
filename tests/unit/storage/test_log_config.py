import pytest

from tidelog.common.config import BrokerConfig, resolve_topic_config
from tidelog.storage.log_config import LogConfig


def test_defaults_match_kafka() -> None:
    config = LogConfig.from_topic_config(resolve_topic_config(BrokerConfig(), {}))
    assert config == LogConfig()
    assert config.segment_bytes == 1 << 30 and config.index_interval_bytes == 4096
    assert config.delete and not config.compact and not config.log_append_time


@pytest.mark.parametrize(
    ("key", "value", "attribute", "expected"),
    [
        ("segment.bytes", 1024, "segment_bytes", 1024),
        ("segment.ms", 60_000, "segment_ms", 60_000),
        ("segment.index.bytes", 4096, "segment_index_bytes", 4096),
        ("index.interval.bytes", 1, "index_interval_bytes", 1),
        ("retention.ms", -1, "retention_ms", -1),
        ("retention.bytes", 10, "retention_bytes", 10),
        ("cleanup.policy", ["compact", "delete"], "cleanup_policy", ("compact", "delete")),
        ("cleanup.policy", "compact", "cleanup_policy", ("compact",)),
        ("flush.messages", 1, "flush_messages", 1),
        ("flush.ms", 5, "flush_ms", 5),
        ("file.delete.delay.ms", 0, "file_delete_delay_ms", 0),
        ("max.message.bytes", 100, "max_message_bytes", 100),
        ("message.timestamp.type", "LogAppendTime", "message_timestamp_type", "LogAppendTime"),
        ("message.timestamp.before.max.ms", 7, "message_timestamp_before_max_ms", 7),
        ("message.timestamp.after.max.ms", 8, "message_timestamp_after_max_ms", 8),
        ("delete.retention.ms", 9, "delete_retention_ms", 9),
        ("min.cleanable.dirty.ratio", 0.1, "min_cleanable_dirty_ratio", 0.1),
        ("min.compaction.lag.ms", 11, "min_compaction_lag_ms", 11),
        ("max.compaction.lag.ms", 12, "max_compaction_lag_ms", 12),
        ("compression.type", "zstd", "compression_type", "zstd"),
    ],
)
def test_each_kafka_topic_key_reaches_its_field(key: str, value: object, attribute: str, expected: object) -> None:
    config = LogConfig.from_topic_config({key: value})  # type: ignore[dict-item]
    assert getattr(config, attribute) == expected


def test_broker_defaults_flow_through_resolution() -> None:
    broker = BrokerConfig.from_properties({"log.retention.hours": "1", "log.cleanup.policy": "compact"})
    config = LogConfig.from_topic_config(resolve_topic_config(broker, {"segment.bytes": 2048}))
    assert (config.retention_ms, config.compact, config.segment_bytes) == (3_600_000, True, 2048)
