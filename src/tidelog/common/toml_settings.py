"""Reading the TOML files of the platform processes (agent, mirror): flattening and typed values.

Dotted keys may be written bare (TOML nests them into tables) or quoted; ``flatten`` turns both into
one ``"a.b"`` key, so ``transaction.interval.ms = 200`` and ``"transaction.interval.ms" = 200`` mean
the same setting. Every check raises :class:`~tidelog.common.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidelog.common.errors import ConfigError


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def integer(where: str, key: str, value: object, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{where}{key}: expected an integer >= {minimum}, got {value!r}")
    return value


def text(where: str, key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}{key}: expected a non-empty string, got {value!r}")
    return value


def strings(where: str, key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}{key}: expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def client_settings(table: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings as confluent-kafka wants them: booleans as ``true``/``false`` text."""
    return {k: v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else v
            for k, v in flatten(table).items()}


def load_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
