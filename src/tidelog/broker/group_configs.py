"""GROUP resource configs (ConfigResource type 32, KIP-848): Kafka's group keys, per group.

The keys are Kafka's (``KAFKA_GROUP_KEYS``, generated from its jars): ``consumer.session.timeout.ms``
and ``consumer.heartbeat.interval.ms`` are applied by the KIP-848 coordinator (from each member's
next heartbeat); the others (``consumer.assignment.interval.ms``, ``share.*``, ``streams.*``) are
validated, stored and described but have no effect, as tidelog has no share or streams groups.

Validation follows Kafka's ``GroupConfig.validate``: a value of the key's type, a ``*.ms`` or count
key within the broker's ``group.<kind>.min.<name>`` .. ``group.<kind>.max.<name>`` where the broker
has those bounds, and a heartbeat interval below the session timeout; otherwise INVALID_CONFIG.
DescribeConfigs shows a group's own value with source GROUP_CONFIG, others with the broker value
of the key's synonym (``group.consumer.session.timeout.ms``) and that value's source, or Kafka's
default. The group need not exist, as in Kafka.

File format: ``__group_configs.json`` in the first log dir, ``{"version": 1, "groups": {group id:
{key: value as Kafka renders it}}}``, replaced atomically (write a temporary file, fsync, rename,
fsync the directory). One node keeps it beside its metadata; a cluster will keep it in its metadata
store (issue 16).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.common.config import BROKER_SETTINGS, BrokerConfig, ConfigSource, Scope, Setting, Type, Value
from tidelog.common.errors import ConfigError, ErrorCode, KafkaError
from tidelog.common.kafka_broker_catalogue import KAFKA_GROUP_KEYS

if TYPE_CHECKING:
    from tidelog.coordinator.consumer_group import ConsumerGroupManager

log = logging.getLogger(__name__)

FILE_NAME = "__group_configs.json"
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
_APPLIED = frozenset({SESSION, HEARTBEAT})
_PAIRS = (("consumer.", "consumer"), ("share.", "share"), ("streams.", "streams"))


def _setting(name: str, kind: str, default: str | None) -> Setting:
    applied = name in _APPLIED
    doc = "Applied by the KIP-848 group coordinator." if applied else "Stored and reported; no effect in tidelog."
    setting = Setting(name, Type[kind], None, doc, Scope.BROKER, True)
    return setting if default is None else Setting(name, setting.type, setting.parse(default), doc, Scope.BROKER, True)


GROUP_SETTINGS: dict[str, Setting] = {name: _setting(name, kind, default) for name, (kind, _, default) in KAFKA_GROUP_KEYS.items()}


class GroupConfigs:
    """Every group's own config values, on disk and in the coordinator."""

    def __init__(self, directory: Path, broker: BrokerConfig) -> None:
        self.path = Path(directory) / FILE_NAME
        self.broker = broker
        self.groups: dict[str, dict[str, Value]] = self._load()

    def _load(self) -> dict[str, dict[str, Value]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        groups: dict[str, dict[str, Value]] = {}
        for group_id, values in data.get("groups", {}).items():
            known = {k: GROUP_SETTINGS[k].parse(v) for k, v in values.items() if k in GROUP_SETTINGS}
            if known:
                groups[group_id] = known
        return groups

    def _save(self) -> None:
        rendered = {g: {k: GROUP_SETTINGS[k].render(v) for k, v in sorted(vals.items())} for g, vals in sorted(self.groups.items())}
        temp = self.path.with_suffix(".tmp")
        with temp.open("w") as out:
            json.dump({"version": 1, "groups": rendered}, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reads ---------------------------------------------------------------------------------------

    def overrides(self, group_id: str) -> dict[str, Value]:
        return dict(self.groups.get(group_id, {}))

    def effective(self, group_id: str) -> list[tuple[str, str | None, ConfigSource, list[tuple[str, str | None, ConfigSource]]]]:
        """(key, value, source, synonyms most specific first) of every group key, for DescribeConfigs."""
        own = self.groups.get(group_id, {})
        entries = []
        for name, setting in sorted(GROUP_SETTINGS.items()):
            synonyms = self._broker_synonyms(name)
            if name in own:
                synonyms.insert(0, (name, setting.render(own[name]), ConfigSource.GROUP_CONFIG))
            value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (setting.render(setting.default), ConfigSource.DEFAULT_CONFIG)
            entries.append((name, value, source, synonyms))
        return entries

    def _broker_synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        broker_key = KAFKA_GROUP_KEYS[name][1]
        if broker_key is None or broker_key not in BROKER_SETTINGS:
            return []
        setting = BROKER_SETTINGS[broker_key]
        return [(key, setting.render(value), source) for key, value, source in self.broker.synonyms(broker_key)]

    def _broker_value(self, key: str) -> int | None:
        if key not in BROKER_SETTINGS:
            return None
        value = self.broker.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    # -- changes -------------------------------------------------------------------------------------

    def validate(self, values: Mapping[str, Value]) -> None:
        """INVALID_CONFIG, naming the key, when ``values`` break Kafka's rules for group configs."""
        for name, value in values.items():
            for prefix, kind in _PAIRS:
                if not name.startswith(prefix) or not isinstance(value, int) or isinstance(value, bool):
                    continue
                rest = name[len(prefix):]
                low = self._broker_value(f"group.{kind}.min.{rest}")
                high = self._broker_value(f"group.{kind}.max.{rest}")
                if low is not None and value < low:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be greater than or equal to group.{kind}.min.{rest}")
                if high is not None and value > high:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be less than or equal to group.{kind}.max.{rest}")
        session = values.get(SESSION, self._broker_value("group.consumer.session.timeout.ms"))
        heartbeat = values.get(HEARTBEAT, self._broker_value("group.consumer.heartbeat.interval.ms"))
        if isinstance(session, int) and isinstance(heartbeat, int) and heartbeat >= session:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{HEARTBEAT} must be less than {SESSION}")

    def parse(self, name: str, raw: str | None) -> Value:
        setting = GROUP_SETTINGS.get(name)
        if setting is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        try:
            return setting.parse(raw)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None

    def replace(self, group_id: str, values: dict[str, Value], consumer: ConsumerGroupManager | None) -> None:
        """Make ``values`` the group's whole set of own configs, durably, then apply them."""
        self.validate(values)
        previous = self.groups.get(group_id)
        if values:
            self.groups[group_id] = dict(values)
        else:
            self.groups.pop(group_id, None)
        try:
            self._save()
        except OSError as exc:
            if previous is None:
                self.groups.pop(group_id, None)
            else:
                self.groups[group_id] = previous
            log.error("writing %s failed: %s", self.path, exc)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"group configs not written: {exc}") from None
        if consumer is not None:
            self.apply(group_id, consumer)

    def apply(self, group_id: str, consumer: ConsumerGroupManager) -> None:
        own = self.groups.get(group_id, {})
        session, heartbeat = own.get(SESSION), own.get(HEARTBEAT)
        consumer.set_group_timeouts(group_id, session if isinstance(session, int) else None,
                                    heartbeat if isinstance(heartbeat, int) else None)

    def apply_all(self, consumer: ConsumerGroupManager) -> None:
        for group_id in self.groups:
            self.apply(group_id, consumer)
