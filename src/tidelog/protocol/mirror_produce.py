"""MirrorProduce: tidelog's own request for writing record batches at their source offsets.

Not a Kafka API. Its key, ``MIRROR_PRODUCE_KEY`` (32001), lies far outside Kafka's range (Kafka's
keys stop below 100), and tidelog advertises it in ApiVersions, so a mirror learns from one
ApiVersions call whether a destination can keep offsets; Kafka's clients skip keys they do not know,
and Apache Kafka, which does not serve it, never appears to accept it (the mirror refuses to start).
A new key rather than a tagged field on Produce: an unknown tag is dropped silently by a broker that
does not know it (KIP-482), so a Produce carrying "keep these offsets" would be appended at new
offsets by Apache Kafka without a word, whereas an unknown key cannot be mistaken for a write.

The classes below are schema entities in kio's format (frozen dataclasses whose fields carry
``kafka_type``), so the same sans-IO codec decodes and encodes them as any Kafka message. Version 0
is flexible (compact strings, tagged fields, request header v2, response header v1)::

    MirrorProduceRequest v0
      link            compact string   the mirror link writing; must equal the topic's mirror.source
      acks            int16            1: the leader's append; -1: every in-sync replica (as Produce)
      timeout_ms      int32            how long an acks=-1 answer may wait for replication
      topics          [ name compact string,
                        partitions [ index int32,
                                     log_start_offset int64,
                                     records compact nullable bytes ] ]
                      log_start_offset: the source partition's log start (-1: unknown); the
                      destination's log start follows it up, as a follower's follows its leader's
                      records: whole v2 batches, base offsets as on the source, in offset order;
                      null asks only for the partition's log end offset (nothing is written)

    MirrorProduceResponse v0
      throttle_time_ms int32
      topics          [ name, partitions [ index int32, error_code int16, error_message nullable string,
                                          log_end_offset int64, log_start_offset int64,
                                          high_watermark int64, duplicate_batches int32 ] ]
                      log_end_offset: where the mirror continues (-1 with an error before the log
                      was reached); duplicate_batches: batches acknowledged without being written,
                      as they lie wholly below the log end offset (a retry)

The broker's rules are in ``tidelog.storage.source_offsets`` and ``broker/handlers/mirror_produce.py``.
"""

# No ``from __future__ import annotations``: kio reads the field types at runtime.

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

MIRROR_PRODUCE_KEY = 32001
VERSIONS = (0, 0)


def _int(kind: str) -> dict[str, str]:
    return {"kafka_type": kind}


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorPartitionData:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(MIRROR_PRODUCE_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    index: i32 = field(metadata=_int("int32"))
    log_start_offset: i64 = field(metadata=_int("int64"), default=i64(-1))
    records: Records | None = field(metadata=_int("records"))


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorTopicData:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(MIRROR_PRODUCE_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_int("string"))
    partitions: tuple[MirrorPartitionData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorProduceRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(MIRROR_PRODUCE_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    link: str = field(metadata=_int("string"))
    acks: i16 = field(metadata=_int("int16"))
    timeout: i32Timedelta = field(metadata=_int("timedelta_i32"))
    topics: tuple[MirrorTopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorPartitionResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(MIRROR_PRODUCE_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    index: i32 = field(metadata=_int("int32"))
    error_code: i16 = field(metadata=_int("int16"))
    error_message: str | None = field(metadata=_int("string"), default=None)
    log_end_offset: i64 = field(metadata=_int("int64"))
    log_start_offset: i64 = field(metadata=_int("int64"))
    high_watermark: i64 = field(metadata=_int("int64"))
    duplicate_batches: i32 = field(metadata=_int("int32"))


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorTopicResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(MIRROR_PRODUCE_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_int("string"))
    partitions: tuple[MirrorPartitionResponse, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorProduceResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(MIRROR_PRODUCE_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata=_int("timedelta_i32"))
    topics: tuple[MirrorTopicResponse, ...]


def partition_response(index: int, error_code: int, *, log_end_offset: int = -1, log_start_offset: int = -1,
                       high_watermark: int = -1, duplicate_batches: int = 0,
                       error_message: str | None = None) -> MirrorPartitionResponse:
    return MirrorPartitionResponse(
        index=i32(index), error_code=i16(error_code), error_message=error_message,
        log_end_offset=i64(log_end_offset), log_start_offset=i64(log_start_offset),
        high_watermark=i64(high_watermark), duplicate_batches=i32(duplicate_batches))
