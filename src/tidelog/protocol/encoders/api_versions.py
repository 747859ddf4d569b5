"""ApiVersionsResponse v0-4.

Layout: error_code; api_keys (api_key, min_version, max_version); throttle_time from v1. Flexible
from v3, with tagged supported_features (0), finalized_features_epoch (1), finalized_features (2)
and zk_migration_ready (3), each written only when it differs from its default: kcat 1.7 on
librdkafka 2.0 cannot read a response that carries non-empty tagged fields.
"""

from __future__ import annotations

import struct
from typing import Any

from tidelog.protocol.encoders import _wire as w

_API = struct.Struct(">hhh")
_FEATURE = struct.Struct(">hh")


def encode_api_versions_response(response: Any) -> list[bytes | memoryview]:
    version = response.__version__
    flexible = version >= 3
    out = bytearray(w.INT16.pack(response.error_code))
    out += w.array_length(len(response.api_keys), flexible)
    for api in response.api_keys:
        out += _API.pack(api.api_key, api.min_version, api.max_version)
        if flexible:
            out += w.NO_TAGS
    if version >= 1:
        out += w.INT32.pack(w.millis(response.throttle_time))
    if flexible:
        out += w.tag_section(_tags(response))
    return [bytes(out)]


def _tags(response: Any) -> list[bytes]:
    default = w.defaults(type(response))
    tags = []
    if response.supported_features != default["supported_features"]:
        tags.append(w.tagged(0, _features(response.supported_features, ("min_version", "max_version"))))
    if response.finalized_features_epoch != default["finalized_features_epoch"]:
        tags.append(w.tagged(1, w.INT64.pack(response.finalized_features_epoch)))
    if response.finalized_features != default["finalized_features"]:
        levels = ("max_version_level", "min_version_level")
        tags.append(w.tagged(2, _features(response.finalized_features, levels)))
    if response.zk_migration_ready != default["zk_migration_ready"]:
        tags.append(w.tagged(3, b"\x01" if response.zk_migration_ready else b"\x00"))
    return tags


def _features(features: Any, names: tuple[str, str]) -> bytes:
    first, second = names
    out = bytearray(w.uvarint(len(features) + 1))
    for feature in features:
        out += w.compact_string(feature.name)
        out += _FEATURE.pack(getattr(feature, first), getattr(feature, second)) + w.NO_TAGS
    return bytes(out)
