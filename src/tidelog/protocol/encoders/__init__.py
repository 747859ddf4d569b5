"""Hand-written encoders for the hot responses, byte-for-byte equal to kio's ``entity_writer``.

Each encoder takes the kio response object a handler built and returns the body as a list of
buffers. ``HAND_WRITTEN`` maps an API key to its encoder; ``codec.encode_response`` falls back to
kio for every other key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Buffers = list[bytes | memoryview]

HAND_WRITTEN: dict[int, Callable[[Any], Buffers]] = {}
