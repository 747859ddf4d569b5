"""Apache Kafka's broker keys that tidelog does not act on, as settings it accepts, stores and reports.

Kafka accepts every key of its broker catalogue (``kafka_broker_catalogue.py``, generated from its
jars): a properties file may name any of them, and AlterConfigs / IncrementalAlterConfigs store the
dynamic ones (update mode per-broker or cluster-wide) and refuse the read-only ones with Kafka's
error. tidelog does the same for the keys it has no setting of its own for: each becomes a
``Setting`` of Kafka's type and default, dynamic as in Kafka, documented as having no effect
(docs/configuration.md lists them). tidelog's own settings keep their meaning, but their read-only
flag follows Kafka's update mode where Kafka has the key (``kafka_dynamic``), so DescribeConfigs'
``read_only`` matches Kafka's.
"""

from __future__ import annotations

from tidelog.common.kafka_broker_catalogue import KAFKA_BROKER_KEYS

__all__ = ["NO_EFFECT_DOC", "kafka_dynamic", "kafka_only_keys", "kafka_password"]

NO_EFFECT_DOC = "Apache Kafka broker key: accepted, stored and reported; no effect in tidelog."


def kafka_dynamic(name: str) -> bool | None:
    """Whether Kafka lets ``name`` change at run time (per-broker or cluster-wide); None if Kafka has no such key."""
    entry = KAFKA_BROKER_KEYS.get(name)
    return None if entry is None else entry[2] != "read-only"


def kafka_password(name: str) -> bool:
    """Whether Kafka's ``name`` is of type PASSWORD (never shown by DescribeConfigs)."""
    entry = KAFKA_BROKER_KEYS.get(name)
    return entry is not None and entry[3]


def kafka_only_keys(known: set[str]) -> list[tuple[str, str, str | None, bool, bool]]:
    """(name, Kafka type, default as Kafka renders it, dynamic, password) of Kafka's keys not in ``known``."""
    return [
        (name, kind, default, mode != "read-only", password)
        for name, (kind, default, mode, password) in sorted(KAFKA_BROKER_KEYS.items())
        if name not in known
    ]
