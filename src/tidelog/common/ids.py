"""Uuids as Kafka shows and reads them: 16 bytes in URL-safe base64 without padding (22 characters,
``-`` and ``_`` instead of ``+`` and ``/``), Kafka's ``Uuid.toString``/``Uuid.fromString``.

Topic ids, cluster ids and directory ids are shown and accepted in this form everywhere a user sees
them (CLI output, files Kafka's tools read); the canonical hex form stays internal.
"""

from __future__ import annotations

import base64
import binascii
import uuid

__all__ = ["kafka_uuid_string", "parse_kafka_uuid"]


def kafka_uuid_string(value: uuid.UUID | bytes | tuple[int, int]) -> str:
    """Kafka's string form of a Uuid given as a UUID, its 16 bytes, or its (most, least) significant
    64-bit halves (signed, as the Java client and librdkafka hand them out)."""
    if isinstance(value, uuid.UUID):
        raw = value.bytes
    elif isinstance(value, tuple):
        most, least = value
        raw = (most & (2**64 - 1)).to_bytes(8, "big") + (least & (2**64 - 1)).to_bytes(8, "big")
    else:
        raw = bytes(value)
    if len(raw) != 16:
        raise ValueError(f"a Uuid is 16 bytes, not {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """The Uuid a Kafka string form names; ValueError (naming the text) when it is not one."""
    if len(text) != 22 or "+" in text or "/" in text or "=" in text:
        raise ValueError(f"{text!r} is not a Kafka Uuid (22 characters of URL-safe base64, no padding)")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not a Kafka Uuid (22 characters of URL-safe base64, no padding)") from None
