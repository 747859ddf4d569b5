"""Settings of the client frameworks, split from the librdkafka settings they are given with.

A LogProducer or LogConsumer takes one dict, as confluent-kafka does. Keys listed here are the
framework's own and are taken out; every other key goes to librdkafka unchanged (so a typo there
is reported by librdkafka, by name). Values may be given as the Python type or as text, as in a
properties file. An invalid value raises :class:`~tidelog.common.errors.ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tidelog.common.errors import ConfigError
from tidelog.protocol.compression import Compression

T = TypeVar("T")
POLICIES = ("block", "fail", "drop-oldest")
_CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
           "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def _int(key: str, value: object, minimum: int = 0) -> int:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value)
    if number is None or number < minimum:
        raise ConfigError(f"{key}: expected an integer >= {minimum}, got {value!r}")
    return number


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def _choice(key: str, value: object, choices: tuple[str, ...]) -> str:
    text = str(value)
    if text not in choices:
        raise ConfigError(f"{key}: expected one of {', '.join(choices)}, got {value!r}")
    return text


def take(config: dict[str, Any], key: str, default: T, parse: Callable[[str, object], T]) -> T:
    """Remove ``key`` from ``config`` and return it parsed, or ``default`` when absent."""
    if key not in config:
        return default
    return parse(key, config.pop(key))


@dataclass(frozen=True)
class ProducerSettings:
    """The LogProducer's own settings (see docs/clients.md for each)."""

    spool_dir: str
    spool_max_bytes: int = 1 << 30
    spool_full_policy: str = "block"
    spool_segment_bytes: int = 16 << 20
    spool_compression: Compression = Compression.NONE
    spool_batch_bytes: int = 1 << 20
    spool_sync_ms: int = 1000
    outage_ms: int = 10_000
    probe_interval_ms: int = 1000
    buffer_memory: int = 32 << 20
    max_block_ms: int = 60_000
    replay_max_inflight_bytes: int = 16 << 20

    @classmethod
    def split(cls, config: Mapping[str, object]) -> tuple[ProducerSettings, dict[str, Any]]:
        """Return the framework's settings and the rest (for librdkafka)."""
        rest: dict[str, Any] = dict(config)
        if "spool.dir" not in rest:
            raise ConfigError("spool.dir: required (the folder where records wait while the cluster is away)")
        spool_dir = str(rest.pop("spool.dir"))
        settings = cls(
            spool_dir=spool_dir,
            spool_max_bytes=take(rest, "spool.max.bytes", cls.spool_max_bytes, _int),
            spool_full_policy=take(rest, "spool.full.policy", cls.spool_full_policy,
                                   lambda k, v: _choice(k, v, POLICIES)),
            spool_segment_bytes=take(rest, "spool.segment.bytes", cls.spool_segment_bytes,
                                     lambda k, v: _int(k, v, 64 * 1024)),
            spool_compression=take(rest, "spool.compression.type", cls.spool_compression,
                                   lambda k, v: _CODECS[_choice(k, v, tuple(_CODECS))]),
            spool_batch_bytes=take(rest, "spool.batch.bytes", cls.spool_batch_bytes, lambda k, v: _int(k, v, 1)),
            spool_sync_ms=take(rest, "spool.sync.ms", cls.spool_sync_ms, _int),
            outage_ms=take(rest, "spool.outage.ms", cls.outage_ms, lambda k, v: _int(k, v, 1)),
            probe_interval_ms=take(rest, "spool.probe.interval.ms", cls.probe_interval_ms,
                                   lambda k, v: _int(k, v, 1)),
            buffer_memory=take(rest, "buffer.memory", cls.buffer_memory, lambda k, v: _int(k, v, 1)),
            max_block_ms=take(rest, "max.block.ms", cls.max_block_ms, _int),
            replay_max_inflight_bytes=take(rest, "spool.replay.max.inflight.bytes",
                                           cls.replay_max_inflight_bytes, lambda k, v: _int(k, v, 1)),
        )
        if settings.spool_batch_bytes * 2 > settings.spool_segment_bytes:
            raise ConfigError("spool.batch.bytes: must be at most half of spool.segment.bytes")
        if "enable.idempotence" in rest and not _bool("enable.idempotence", rest["enable.idempotence"]):
            raise ConfigError("enable.idempotence: the LogProducer needs it on (replays must not reorder)")
        for key in ("on_delivery", "error_cb", "transactional.id"):
            if key in rest:
                raise ConfigError(f"{key}: not accepted by the LogProducer (use its on_error and metrics())")
        rest["enable.idempotence"] = True
        return settings, rest
