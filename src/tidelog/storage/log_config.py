"""Per-partition log settings, read from resolved Kafka topic configs."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from tidelog.common.config import TOPIC_SETTINGS, Value
from tidelog.protocol.compression import Compression

_NEVER = 2**63 - 1


def _int(resolved: Mapping[str, Value], key: str) -> int:
    value = resolved.get(key, TOPIC_SETTINGS[key].default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: expected a number, got {value!r}")
    return int(value)


def _float(resolved: Mapping[str, Value], key: str) -> float:
    value = resolved.get(key, TOPIC_SETTINGS[key].default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: expected a number, got {value!r}")
    return float(value)


def _str(resolved: Mapping[str, Value], key: str) -> str:
    return str(resolved.get(key, TOPIC_SETTINGS[key].default))


def _list(resolved: Mapping[str, Value], key: str) -> tuple[str, ...]:
    value = resolved.get(key, TOPIC_SETTINGS[key].default)
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    assert isinstance(value, list)
    return tuple(value)


# compression.type values that name a codec; "producer" keeps each batch as the producer sent it.
_CODECS = {
    "uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}


@dataclass(frozen=True)
class LogConfig:
    """The settings a :class:`~tidelog.storage.log.PartitionLog` obeys (Kafka topic semantics).

    Defaults are Kafka 4's. ``flush_messages`` / ``flush_ms`` of 2**63-1 mean "leave it to the OS".
    ``retention_ms`` / ``retention_bytes`` of -1 mean "no limit".
    """

    segment_bytes: int = 1_073_741_824
    segment_ms: int = 7 * 24 * 3_600_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10_485_760
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = ("delete",)
    flush_messages: int = _NEVER
    flush_ms: int = _NEVER
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = _NEVER
    message_timestamp_after_max_ms: int = 3_600_000
    delete_retention_ms: int = 24 * 3_600_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _NEVER
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    extra: Mapping[str, Value] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_topic_config(cls, resolved: Mapping[str, Value]) -> LogConfig:
        """Build from Kafka topic config names (``resolve_topic_config`` output); missing keys default."""
        return cls(
            segment_bytes=_int(resolved, "segment.bytes"),
            segment_ms=_int(resolved, "segment.ms"),
            segment_jitter_ms=_int(resolved, "segment.jitter.ms"),
            segment_index_bytes=_int(resolved, "segment.index.bytes"),
            index_interval_bytes=_int(resolved, "index.interval.bytes"),
            retention_ms=_int(resolved, "retention.ms"),
            retention_bytes=_int(resolved, "retention.bytes"),
            cleanup_policy=_list(resolved, "cleanup.policy"),
            flush_messages=_int(resolved, "flush.messages"),
            flush_ms=_int(resolved, "flush.ms"),
            file_delete_delay_ms=_int(resolved, "file.delete.delay.ms"),
            max_message_bytes=_int(resolved, "max.message.bytes"),
            message_timestamp_type=_str(resolved, "message.timestamp.type"),
            message_timestamp_before_max_ms=_int(resolved, "message.timestamp.before.max.ms"),
            message_timestamp_after_max_ms=_int(resolved, "message.timestamp.after.max.ms"),
            delete_retention_ms=_int(resolved, "delete.retention.ms"),
            min_cleanable_dirty_ratio=_float(resolved, "min.cleanable.dirty.ratio"),
            min_compaction_lag_ms=_int(resolved, "min.compaction.lag.ms"),
            max_compaction_lag_ms=_int(resolved, "max.compaction.lag.ms"),
            compression_type=_str(resolved, "compression.type"),
            compression_gzip_level=_int(resolved, "compression.gzip.level"),
            compression_lz4_level=_int(resolved, "compression.lz4.level"),
            compression_zstd_level=_int(resolved, "compression.zstd.level"),
            extra=dict(resolved),
        )

    def random_segment_jitter(self) -> int:
        """A segment's roll jitter, drawn once per segment: uniform in [0, min(segment.jitter.ms,
        segment.ms)), so that segments created together do not all roll at the same moment (Kafka's
        ``LogConfig.randomSegmentJitter``)."""
        if self.segment_jitter_ms <= 0:
            return 0
        return random.randrange(min(self.segment_jitter_ms, self.segment_ms))

    @cached_property
    def target_compression(self) -> Compression | None:
        """The codec every stored batch must have, or None for ``producer`` (keep the producer's)."""
        return _CODECS.get(self.compression_type)

    @cached_property
    def compression_level(self) -> int | None:
        """The ``compression.<codec>.level`` of :attr:`target_compression` (None: snappy, none)."""
        codec = self.target_compression
        if codec == Compression.GZIP:
            return self.compression_gzip_level
        if codec == Compression.LZ4:
            return self.compression_lz4_level
        if codec == Compression.ZSTD:
            return self.compression_zstd_level
        return None

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
