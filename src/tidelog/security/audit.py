"""The audit record of the authorizer's audit mode, its report, and the ACLs it suggests.

In audit mode (``authorizer.mode=audit``, per listener) every request is served, and each check that
enforcement would have refused is recorded here as one row per (listener, principal, client id,
host, resource, operation) with the first and last time it happened and a count. At most
``authorizer.audit.max.entries`` rows are kept; rows beyond that are only counted (``dropped``), so a
client cycling through random names cannot exhaust memory.

The broker writes the report to ``<first log dir>/__acl_audit.json`` every
``authorizer.audit.flush.interval.ms`` (when something changed) and at shutdown, and reads it back at
start, so the record survives restarts. The file is the report (``read_report`` loads it)::

    {"version": 1,
     "generated_ms": 1700000000000,
     "modes": {"CLIENTS": "audit", "ADMIN": "enforce"},        # each listener's mode when written
     "dropped": 0,
     "entries": [{"listener": "CLIENTS", "principal": "User:app", "client_id": "billing",
                  "host": "10.0.0.7", "resource_type": "TOPIC", "resource_name": "orders",
                  "operation": "WRITE", "first_seen_ms": ..., "last_seen_ms": ..., "count": 42,
                  "still_denied": true}, ...],                   # would enforcement refuse it now?
     "principals": {"User:app": {"clients": ["billing"], "hosts": ["10.0.0.7"], "listeners": ["CLIENTS"],
                                 "requests": 42, "still_denied": 1}},
     "suggested_acls": [{"principal": "User:app", "host": "*", "resource_type": "TOPIC",
                         "resource_name": "orders", "pattern_type": "LITERAL",
                         "operation": "WRITE", "permission_type": "ALLOW"}, ...]}

``suggested_acls`` are the ALLOW ACLs that make exactly the recorded, still-denied requests pass: one
literal ACL per principal, resource and operation, any host, without the DESCRIBE (resp.
DESCRIBE_CONFIGS) ones already implied by a READ, WRITE, DELETE or ALTER (resp. ALTER_CONFIGS) in the
same set. Apply them (CreateAcls, ``tidelog acls add``), check the report shows nothing still denied,
then switch the listener to ``enforce``.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from tidelog.common.acl import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    WILDCARD,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tidelog.common.acl_authorizer import Authorizer

FILE_NAME = "__acl_audit.json"
FORMAT_VERSION = 1

_Key = tuple[str, str, str, str, ResourceType, str, AclOperation]


@dataclass(slots=True)
class AuditEntry:
    listener: str
    principal: str
    client_id: str
    host: str
    resource_type: ResourceType
    resource_name: str
    operation: AclOperation
    first_seen_ms: int
    last_seen_ms: int
    count: int

    @property
    def key(self) -> _Key:
        return (self.listener, self.principal, self.client_id, self.host, self.resource_type, self.resource_name, self.operation)

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["resource_type"] = self.resource_type.name
        doc["operation"] = self.operation.name
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> AuditEntry:
        return cls(
            str(doc["listener"]), str(doc["principal"]), str(doc["client_id"]), str(doc["host"]),
            ResourceType[doc["resource_type"]], str(doc["resource_name"]), AclOperation[doc["operation"]],
            int(doc["first_seen_ms"]), int(doc["last_seen_ms"]), int(doc["count"]),
        )


class AuditLog:
    """In-memory rows of would-be denials. Not thread-safe: used from the event loop."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._entries: dict[_Key, AuditEntry] = {}
        self.dropped = 0
        self.dirty = False

    def record(
        self, listener: str, principal: str, client_id: str | None, host: str,
        resource_type: ResourceType, name: str | None, operation: AclOperation, now_ms: int,
    ) -> None:
        resource = WILDCARD if name is None else name
        key = (listener, principal, client_id or "", host, resource_type, resource, operation)
        entry = self._entries.get(key)
        self.dirty = True
        if entry is not None:
            entry.count += 1
            entry.last_seen_ms = max(entry.last_seen_ms, now_ms)
            return
        if len(self._entries) >= self.max_entries:
            self.dropped += 1
            return
        self._entries[key] = AuditEntry(listener, principal, client_id or "", host, resource_type, resource, operation, now_ms, now_ms, 1)

    def entries(self) -> list[AuditEntry]:
        return sorted(self._entries.values(), key=lambda e: (e.principal, e.resource_type, e.resource_name, e.operation, e.client_id, e.host))

    def clear(self) -> None:
        self._entries.clear()
        self.dropped = 0
        self.dirty = True

    def merge(self, entries: Iterable[AuditEntry], dropped: int = 0) -> None:
        """Add rows read back from a report (at start-up)."""
        for entry in entries:
            known = self._entries.get(entry.key)
            if known is None:
                if len(self._entries) >= self.max_entries:
                    self.dropped += entry.count
                    continue
                self._entries[entry.key] = replace(entry)
            else:
                known.count += entry.count
                known.first_seen_ms = min(known.first_seen_ms, entry.first_seen_ms)
                known.last_seen_ms = max(known.last_seen_ms, entry.last_seen_ms)
        self.dropped += dropped


def _still_denied(entry: AuditEntry, authorizer: Authorizer | None) -> bool:
    if authorizer is None:
        return True
    if entry.resource_name == WILDCARD:
        return not authorizer.authorize_any(entry.principal, entry.host, entry.operation, entry.resource_type)
    return not authorizer.authorize(entry.principal, entry.host, entry.operation, entry.resource_type, entry.resource_name)


def suggested_acls(entries: Iterable[AuditEntry], authorizer: Authorizer | None = None) -> list[AclBinding]:
    """ALLOW ACLs that let the recorded (and, given an authorizer, still denied) requests through."""
    wanted: dict[tuple[str, ResourceType, str], set[AclOperation]] = {}
    for entry in entries:
        if _still_denied(entry, authorizer):
            wanted.setdefault((entry.principal, entry.resource_type, entry.resource_name), set()).add(entry.operation)
    out = []
    for (principal, resource_type, name), operations in sorted(wanted.items()):
        if operations & (IMPLIES_DESCRIBE - {AclOperation.DESCRIBE}):
            operations.discard(AclOperation.DESCRIBE)
        if AclOperation.ALTER_CONFIGS in operations:
            operations -= IMPLIES_DESCRIBE_CONFIGS - {AclOperation.ALTER_CONFIGS}
        for operation in sorted(operations):
            out.append(AclBinding(resource_type, name, PatternType.LITERAL, principal, WILDCARD, operation, AclPermissionType.ALLOW))
    return out


def binding_to_json(binding: AclBinding) -> dict[str, str]:
    return {
        "principal": binding.principal,
        "host": binding.host,
        "resource_type": binding.resource_type.name,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type.name,
        "operation": binding.operation.name,
        "permission_type": binding.permission_type.name,
    }


def build_report(
    audit: AuditLog, authorizer: Authorizer | None, modes: Mapping[str, str], now_ms: int
) -> dict[str, Any]:
    entries = audit.entries()
    rows = []
    principals: dict[str, dict[str, Any]] = {}
    for entry in entries:
        denied = _still_denied(entry, authorizer)
        rows.append(entry.to_json() | {"still_denied": denied})
        group = principals.setdefault(
            entry.principal, {"clients": set(), "hosts": set(), "listeners": set(), "requests": 0, "still_denied": 0}
        )
        group["clients"].add(entry.client_id)
        group["hosts"].add(entry.host)
        group["listeners"].add(entry.listener)
        group["requests"] += entry.count
        group["still_denied"] += int(denied)
    for group in principals.values():
        for name in ("clients", "hosts", "listeners"):
            group[name] = sorted(group[name])
    return {
        "version": FORMAT_VERSION,
        "generated_ms": now_ms,
        "modes": dict(modes),
        "dropped": audit.dropped,
        "entries": rows,
        "principals": principals,
        "suggested_acls": [binding_to_json(b) for b in suggested_acls(entries, authorizer)],
    }


def write_report(path: pathlib.Path, report: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically (temp file, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_report(path: str | pathlib.Path) -> dict[str, Any]:
    """The report file as written by the broker (``<first log dir>/__acl_audit.json``)."""
    doc: dict[str, Any] = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    if doc.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported audit report version {doc.get('version')!r}")
    return doc


def load_into(audit: AuditLog, path: pathlib.Path) -> None:
    """Merge the rows of an earlier report into ``audit`` (a missing file is an empty report)."""
    if not path.exists():
        return
    doc = read_report(path)
    audit.merge((AuditEntry.from_json(row) for row in doc.get("entries", ())), int(doc.get("dropped", 0)))
    audit.dirty = False
