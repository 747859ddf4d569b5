"""Log lines with context: one line per event, as text or as one JSON object.

Context travels in ``extra=``, under the names in ``CONTEXT_FIELDS`` (build it with ``context(...)``)::

    log.warning("closing connection: %s", exc, extra=context(peer=conn.peer, client_id=conn.client_id, api="Produce"))

Text (``log.format=text``)::

    2025-01-31T10:00:00.123Z WARNING tidelog.broker.server: closing connection: bad frame [peer=127.0.0.1:50412 client_id=rdkafka api=Produce]

JSON (``log.format=json``), one object per line, for log shippers::

    {"ts": "2025-01-31T10:00:00.123Z", "level": "WARNING", "logger": "tidelog.broker.server",
     "msg": "closing connection: bad frame", "peer": "127.0.0.1:50412", "client_id": "rdkafka", "api": "Produce"}

An exception adds ``exc`` (the formatted traceback) to either form; in text it follows on the next
lines, as Python prints it. Timestamps are UTC with milliseconds.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

CONTEXT_FIELDS = ("peer", "client_id", "listener", "api", "api_version", "correlation_id", "topic", "partition", "group")
FORMATS = ("text", "json")


def context(**fields: object) -> dict[str, object]:
    """``extra=`` for a log call: the known context fields that are not None."""
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"unknown log context fields: {', '.join(sorted(unknown))}")
    return {name: value for name, value in fields.items() if value is not None}


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


def _context_of(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in CONTEXT_FIELDS if getattr(record, name, None) is not None}


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger>: <message> [k=v ...]``."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        fields = _context_of(record)
        if fields:
            line += " [" + " ".join(f"{name}={value}" for name, value in fields.items()) + "]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the context fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_context_of(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def formatter(kind: str) -> logging.Formatter:
    if kind == "json":
        return JsonFormatter()
    if kind == "text":
        return TextFormatter()
    raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {kind!r}")


def configure_logging(level: str | int = "INFO", kind: str = "text", stream: TextIO | None = None) -> None:
    """Send the root logger's records to ``stream`` (stderr) in ``kind`` format, replacing its handlers."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(kind))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


class OncePerInterval:
    """Log an event at most once per key (an address, a user name) per ``interval_s``.

    ``should_log(key, now)`` is True for the first event of a key in an interval and returns how many
    events of that key were held back since the last line (to say so in it). At most ``max_keys`` keys
    are remembered (the oldest are forgotten first), so hostile keys cannot grow it without bound.
    """

    def __init__(self, interval_s: float = 60.0, max_keys: int = 10_000) -> None:
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._last: dict[str, tuple[float, int]] = {}  # key -> (when last logged, events held back since)

    def should_log(self, key: str, now: float | None = None) -> tuple[bool, int]:
        now = time.monotonic() if now is None else now
        seen = self._last.pop(key, None)
        if seen is not None and now - seen[0] < self.interval_s:
            self._last[key] = (seen[0], seen[1] + 1)
            return False, seen[1] + 1
        self._last[key] = (now, 0)
        while len(self._last) > self.max_keys:
            del self._last[next(iter(self._last))]
        return True, 0 if seen is None else seen[1]
