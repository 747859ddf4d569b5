"""Quota entities and keys, and Kafka's checks of AlterClientQuotas and DescribeClientQuotas.

An entity is a tuple of ``(entity type, name)`` pairs sorted by type; ``name`` None is the default
entity of that type (``--entity-default`` in kafka-configs.sh). Types: ``user``, ``client-id`` (alone
or together) and ``ip`` (alone). The cluster image keeps ``entity → {key: value}``; an entity with no
keys left is removed.

Keys and the entities that take them, with the type Kafka checks a value against:

    user, client-id, user+client-id  producer_byte_rate (LONG), consumer_byte_rate (LONG),
                                     request_percentage (DOUBLE), controller_mutation_rate (DOUBLE)
    ip                               connection_creation_rate (INT)

plus tidelog's ``tidelog.tier`` (user, client-id, user+client-id; 0 = high, 1 = medium, 2 = low):
AlterClientQuotas carries doubles only, so the tier is a small integer (``tiers.py``).

Every refusal is a ``QuotaError`` with Kafka's error code and words (checked against Kafka by the
differential scenario in tests/compat).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping

from tidelog.common.errors import ErrorCode

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

Entity = tuple[tuple[str, str | None], ...]


class QuotaError(Exception):
    """Kafka's refusal of an entity, a value or a filter; ``code`` is the error to answer with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _invalid(message: str) -> QuotaError:
    return QuotaError(ErrorCode.INVALID_REQUEST, message)


PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
TIER = "tidelog.tier"

# key → Kafka's ConfigDef type, for the range checks of validate_value
CLIENT_KEYS: Mapping[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
    TIER: "TIER",
}
IP_KEYS: Mapping[str, str] = {CONNECTION_CREATION_RATE: "INT"}

_LIMITS = {"SHORT": (2**15 - 1, "a SHORT"), "INT": (2**31 - 1, "an INT"), "LONG": (2**63 - 1, "a LONG")}


def entity(**names: str | None) -> Entity:
    """``entity(user="alice", client_id=None)`` → ((client-id, None), (user, alice))."""
    return tuple(sorted((kind.replace("_", "-"), name) for kind, name in names.items()))


def entity_dict(value: Entity) -> dict[str, str | None]:
    return dict(value)


def describe(value: Entity) -> str:
    """Kafka's way of naming an entity in messages and the CLI: ``user=alice, client-id=<default>``."""
    ordered = sorted(value, key=lambda part: ENTITY_TYPES.index(part[0]) if part[0] in ENTITY_TYPES else 9)
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in ordered)


def is_valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def validate_entity(components: Iterable[tuple[str, str | None]]) -> tuple[Entity, Mapping[str, str]]:
    """The entity and the keys it takes; raises QuotaError."""
    seen: dict[str, str | None] = {}
    for kind, name in components:
        if kind in seen:
            raise _invalid(f"Invalid empty client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _invalid(f"Unhandled client quota entity type: {kind}")
        if kind == IP and not is_valid_ip(name):
            raise _invalid(f"{name} is not a valid IP or resolvable host.")
        if name is not None and not name:
            raise _invalid(f"Empty {kind} not supported")
        seen[kind] = name
    if not seen:
        raise _invalid("Invalid empty client quota entity")
    if IP in seen:
        if len(seen) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
        return tuple(sorted(seen.items())), IP_KEYS
    return tuple(sorted(seen.items())), CLIENT_KEYS


def validate_value(keys: Mapping[str, str], key: str, value: float) -> None:
    """Kafka's checks of one quota value (ClientQuotaControlManager.validateQuotaKeyValue)."""
    kind = keys.get(key)
    if kind is None:
        raise _invalid(f"Invalid configuration key {key}")
    if math.isnan(value) or value <= 0.0:
        if kind == "TIER" and value == 0.0:
            return
        raise _invalid(f"Quota {key} must be greater than 0")
    if kind == "DOUBLE":
        if not math.isfinite(value):
            raise _invalid(f"Quota {key} must be finite")
        return
    if kind == "TIER":
        if value not in (1.0, 2.0):
            raise _invalid(f"{key} must be 0 (high), 1 (medium) or 2 (low)")
        return
    limit, words = _LIMITS[kind]
    if value > limit:
        raise _invalid(f"Proposed value for {key} is too large for {words}.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise _invalid(f"{key} cannot be a fractional value.")


def alter(current: Mapping[str, float], keys: Mapping[str, str], ops: Iterable[tuple[str, float, bool]]) -> dict[str, float]:
    """The entity's values after ``ops`` ((key, value, remove) each); raises QuotaError.

    A key named twice refuses the whole entry, as Kafka does."""
    values = dict(current)
    seen: set[str] = set()
    for key, value, remove in ops:
        if key in seen:
            raise _invalid(f"Duplicate quota key {key} not updating quota for this entity")
        seen.add(key)
        if remove:
            values.pop(key, None)
            continue
        validate_value(keys, key, value)
        values[key] = float(value)
    return values


# -- DescribeClientQuotas filters ------------------------------------------------------------------

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaFilter:
    """Components of a DescribeClientQuotas request, checked as Kafka checks them (raises QuotaError)."""

    def __init__(self, components: Iterable[tuple[str, int, str | None]], strict: bool) -> None:
        self.exact: dict[str, str | None] = {}
        self.specified: set[str] = set()
        self.strict = strict
        for kind, match_type, match in components:
            self._add(kind, match_type, match)
        uses_ip = IP in self.exact or IP in self.specified
        uses_client = any(k in self.exact or k in self.specified for k in (USER, CLIENT_ID))
        if uses_ip and uses_client:
            raise _invalid("Invalid entity filter component combination. IP filter "
                              "component should not be used with user or clientId filter component.")

    def _add(self, kind: str, match_type: int, match: str | None) -> None:
        if not kind:
            raise _invalid("Invalid empty entity type.")
        if kind in self.exact or kind in self.specified:
            raise _invalid(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            raise QuotaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            self.exact[kind] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            self.exact[kind] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            self.specified.add(kind)
        else:
            raise _invalid(f"Unknown match type {match_type}")

    def matches(self, value: Entity) -> bool:
        names = dict(value)
        if self.strict and len(names) != len(self.exact) + len(self.specified):
            return False
        for kind, name in self.exact.items():
            if kind not in names or names[kind] != name:
                return False
        return all(kind in names for kind in self.specified)
