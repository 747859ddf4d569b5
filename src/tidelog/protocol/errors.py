"""What can go wrong while turning bytes into requests, and what the broker should do about it.

Every failure of the codec is a ``ProtocolError``; nothing else escapes ``FrameDecoder.feed``,
``parse_request_header`` or ``decode_request`` for any input. Each subclass carries a ``hint`` that
tells the connection what Kafka 4 does in the same situation::

    ProtocolError                 root; never raised itself
    ├── FrameError                length prefix negative or above socket.request.max.bytes → CLOSE
    ├── UnknownApiKey             API key no broker knows (or tidelog does not serve) → CLOSE
    ├── UnsupportedVersion        known key, version outside the accepted range
    │                               ApiVersions → API_VERSIONS_FALLBACK (v0 body, error 35)
    │                               any other key (Produce v0-2 included) → CLOSE
    └── InvalidRequest            header or body that does not parse → CLOSE

Why CLOSE and not an error response: Kafka's ``SocketServer.parseRequestHeader`` throws
``InvalidRequestException`` when ``RequestHeader.parse`` fails (unknown key) or when
``ApiVersionManager.isApiEnabled`` is false (version out of range; ApiVersions is exempt). The
processor's ``processChannelException`` then logs "Closing socket ... because of error" and closes
the channel without answering. Kafka 4 advertises Produce from v0 (KAFKA-18659, for librdkafka's
compression check) while ``ApiKeys.PRODUCE.oldestVersion()`` is 3, so a Produce v0-2 request takes
that same path. A body that fails to parse raises inside ``RequestContext.parseRequest`` on the
processor thread and ends the same way.
"""

from __future__ import annotations

import enum


class Hint(enum.Enum):
    """What the connection should do after a ``ProtocolError``."""

    CLOSE = "close"
    """Log once with the client address and close the connection without answering."""
    API_VERSIONS_FALLBACK = "api_versions_fallback"
    """Answer with ``encode_api_versions_unsupported`` (v0 body, UNSUPPORTED_VERSION), keep serving."""


class ProtocolError(Exception):
    """Root of every codec failure. ``hint`` says what to do, ``str(error)`` says why."""

    hint: Hint = Hint.CLOSE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def closes_connection(self) -> bool:
        return self.hint is Hint.CLOSE


class FrameError(ProtocolError):
    """The 4-byte size prefix is negative or above the frame limit; the stream cannot be resynchronised."""

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message)
        self.size = size


class UnknownApiKey(ProtocolError):
    """The request names an API key that tidelog does not serve."""

    def __init__(self, api_key: int, correlation_id: int | None = None) -> None:
        super().__init__(f"unknown API key {api_key}")
        self.api_key = api_key
        self.correlation_id = correlation_id


class UnsupportedVersion(ProtocolError):
    """A known API key at a version outside the accepted range.

    ``correlation_id`` is always known (it sits at the same offset in every request header), so the
    ApiVersions fallback can be answered.
    """

    def __init__(self, api_key: int, version: int, correlation_id: int, supported: tuple[int, int]) -> None:
        low, high = supported
        super().__init__(f"API key {api_key} version {version} is not supported (accepted {low}..{high})")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.supported = supported
        # ApiVersions is the one key Kafka answers at any version (ApiKeys.isVersionEnabled).
        self.hint = Hint.API_VERSIONS_FALLBACK if api_key == 18 else Hint.CLOSE


class InvalidRequest(ProtocolError):
    """The header or body does not parse: truncated or malformed."""

    def __init__(
        self, message: str, *, api_key: int | None = None, correlation_id: int | None = None
    ) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.correlation_id = correlation_id
