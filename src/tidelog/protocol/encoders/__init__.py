"""Hand-written encoders for the hot responses, byte-for-byte equal to kio's ``entity_writer``.

Each encoder takes the kio response object a handler built (any supported version; the version is
the object's ``__version__``) and returns the body as a list of buffers. ``HAND_WRITTEN`` maps an
API key to its encoder; ``codec.encode_response`` falls back to kio for every other key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidelog.protocol.encoders.api_versions import encode_api_versions_response
from tidelog.protocol.encoders.fetch import encode_fetch_response
from tidelog.protocol.encoders.metadata import encode_metadata_response
from tidelog.protocol.encoders.produce import encode_produce_response

Buffers = list[bytes | memoryview]

HAND_WRITTEN: dict[int, Callable[[Any], Buffers]] = {
    0: encode_produce_response,
    1: encode_fetch_response,
    3: encode_metadata_response,
    18: encode_api_versions_response,
}

__all__ = [
    "HAND_WRITTEN",
    "Buffers",
    "encode_api_versions_response",
    "encode_fetch_response",
    "encode_metadata_response",
    "encode_produce_response",
]
