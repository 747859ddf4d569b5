"""Build kio response entities for whatever version a client asked for.

Kafka's messages gain and lose fields across versions, and kio has one class per version. Handlers
describe a response once, with every field they know, and :class:`ResponseBuilder` keeps the fields
the requested version has (by the nested class's name in that version's module), dropping the rest.
"""

from __future__ import annotations

import dataclasses
import datetime
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

NO_THROTTLE = datetime.timedelta(0)


@cache
def _module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


@cache
def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


class ResponseBuilder:
    """Builds entities of one API's response at one version."""

    __slots__ = ("_classes", "api_key", "module", "version")

    def __init__(self, api_key: int, version: int) -> None:
        self.api_key = api_key
        self.version = version
        self.module = _module(api_key, version)
        self._classes: dict[str, tuple[type, frozenset[str]]] = {}  # class name -> (class, its fields)

    def has(self, class_name: str, field: str) -> bool:
        cls = getattr(self.module, class_name, None)
        return cls is not None and field in _fields(cls)

    def make(self, class_name: str, /, **values: Any) -> Any:
        """Instantiate ``class_name`` of this version with those of ``values`` it has."""
        found = self._classes.get(class_name)
        if found is None:
            cls = getattr(self.module, class_name)
            found = self._classes[class_name] = (cls, _fields(cls))
        cls, names = found
        if names.issuperset(values):  # the common case: nothing to drop
            return cls(**values)
        return cls(**{k: v for k, v in values.items() if k in names})


@cache
def builder(api_key: int, version: int) -> ResponseBuilder:
    return ResponseBuilder(api_key, version)
