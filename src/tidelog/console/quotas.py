"""Client quotas and priority tiers, as the quotas page shows and changes them.

Kafka's client quotas are read with DescribeClientQuotas v0 (every entity: no component filter,
not strict) and changed with AlterClientQuotas v0, carried by ``console.wire`` because librdkafka
has no call for them. The same requests serve Apache Kafka; a tidelog cluster also stores each
entity's priority tier as the quota key ``tidelog.tier`` (0 high, 1 medium, 2 low: docs/quotas.md),
which Kafka refuses, so against Kafka the tier column simply stays empty.

Entities are tuples of ``(type, name)`` in Kafka's order user, client-id, ip, where a ``None`` name
is the type's default entity (shown, and typed in the form, as ``<default>``). ``parse_entity`` reads
the form's three fields; a field left empty is not part of the entity. Values are numbers (Kafka's
quota values are doubles); ``tidelog.tier`` also takes its names (``low``). What Kafka refuses
(a negative rate, an unknown key, an ip with a user) is the broker's to say: its error name and text
are shown as they come.

The tier rules (``quota.tier.<tier>.byte.rate``, ``quota.tier.<tier>.paused``) are dynamic broker
settings of the cluster-wide default; the page reads them from a broker's DescribeConfigs
(``KafkaView.broker_configs``), where they appear with the source DYNAMIC_DEFAULT_BROKER_CONFIG.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kio.schema.alter_client_quotas.v0.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.describe_client_quotas.v0.request import DescribeClientQuotasRequest
from kio.static.primitive import f64

from tidelog.console.kafka import KafkaFailure
from tidelog.console.wire import Wire, error_name

DEFAULT = "<default>"
ENTITY_TYPES = ("user", "client-id", "ip")
TIER_KEY = "tidelog.tier"
TIERS = ("high", "medium", "low")
KEYS = {  # key -> what its number means, for the page's hints
    "producer_byte_rate": "bytes/s produced, per broker",
    "consumer_byte_rate": "bytes/s fetched, per broker",
    "request_percentage": "% of one request-handling thread",
    "controller_mutation_rate": "partitions created or deleted per second",
    "connection_creation_rate": "new connections per second (ip entities)",
    TIER_KEY: "priority tier: 0 high, 1 medium, 2 low (tidelog only)",
}
Entity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class QuotaEntry:
    entity: Entity
    values: dict[str, float]

    @property
    def tier(self) -> str:
        """The entity's own tier by name; empty when it sets none (precedence or quota.tier.default applies)."""
        value = self.values.get(TIER_KEY)
        if value is None:
            return ""
        return TIERS[int(value)] if value in (0, 1, 2) else str(value)

    @property
    def key(self) -> str:
        """The entity as the forms carry it back (JSON: ``[[type, name or null], ...]``)."""
        return json.dumps([list(part) for part in self.entity])

    def name_of(self, kind: str) -> str:
        for part_kind, name in self.entity:
            if part_kind == kind:
                return DEFAULT if name is None else name
        return ""


def entity_order(entity: Entity) -> Entity:
    return tuple(sorted(entity, key=lambda part: ENTITY_TYPES.index(part[0]) if part[0] in ENTITY_TYPES else 9))


def parse_entity(fields: dict[str, str]) -> Entity:
    """The entity a form names: its ``user``, ``client-id`` and ``ip`` fields (``<default>`` for the
    default entity), or an ``entity`` field as ``QuotaEntry.key`` wrote it."""
    if fields.get("entity"):
        try:
            parts = tuple((str(kind), None if name is None else str(name)) for kind, name in json.loads(fields["entity"]))
        except (ValueError, TypeError):
            raise ValueError("the entity of this form is damaged: reload the page") from None
    else:
        parts = tuple((kind, None if text == DEFAULT else text) for kind in ENTITY_TYPES
                      if (text := fields.get(kind, "").strip()))
    if not parts:
        raise ValueError("name the entity: a user, a client id or an ip (<default> for the default entity)")
    return entity_order(parts)


def parse_value(key: str, text: str) -> float:
    text = text.strip()
    if key == TIER_KEY and text.lower() in TIERS:
        return float(TIERS.index(text.lower()))
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{key}: {text!r} is not a number" + (" or a tier name" if key == TIER_KEY else "")) from None


def entity_text(entity: Entity) -> str:
    return ", ".join(f"{kind}={DEFAULT if name is None else name}" for kind, name in entity)


def number_text(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def describe(wire: Wire) -> list[QuotaEntry]:
    answer = wire.call(DescribeClientQuotasRequest(components=(), strict=False))
    if answer.error_code != 0:
        raise KafkaFailure(error_name(answer.error_code), answer.error_message or "")
    entries = [QuotaEntry(entity_order(tuple((e.entity_type, e.entity_name) for e in entry.entity)),
                          {v.key: float(v.value) for v in entry.values})
               for entry in answer.entries or ()]
    return sorted(entries, key=lambda q: [(kind, name or "") for kind, name in q.entity])


def alter(wire: Wire, entity: Entity, set_values: dict[str, float], remove: tuple[str, ...] = ()) -> None:
    ops = tuple(OpData(key=k, value=f64(float(v)), remove=False) for k, v in set_values.items())
    ops += tuple(OpData(key=k, value=f64(0.0), remove=True) for k in remove)
    entry = EntryData(entity=tuple(EntityData(entity_type=kind, entity_name=name) for kind, name in entity), ops=ops)
    answer = wire.call(AlterClientQuotasRequest(entries=(entry,), validate_only=False))
    for result in answer.entries:
        if result.error_code != 0:
            raise KafkaFailure(error_name(result.error_code), result.error_message or "")


def tier_rules(broker_configs: dict[str, str | None]) -> list[dict[str, str]]:
    """The medium and low tiers' rules from a broker's configs (the high tier has none)."""
    rules = []
    for tier in TIERS[1:]:
        rate = broker_configs.get(f"quota.tier.{tier}.byte.rate")
        paused = (broker_configs.get(f"quota.tier.{tier}.paused") or "false").lower() == "true"
        rules.append({"tier": tier, "rate": rate or "", "state": "paused" if paused
                      else "throttled" if rate and rate not in ("0", "-1") else "free"})
    return rules
