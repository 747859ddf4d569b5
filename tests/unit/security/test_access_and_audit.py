"""The access gate (enforce vs audit per listener) and the audit record, report and suggestions."""

from __future__ import annotations

import json
import pathlib

from tidelog.common.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from tidelog.common.acl_authorizer import Authorizer
from tidelog.metadata.image import AclEntry
from tidelog.security.access import AccessGate, Action, Mode
from tidelog.security.audit import (
    AuditLog,
    build_report,
    load_into,
    read_report,
    suggested_acls,
    write_report,
)

Op, T, C = AclOperation, ResourceType.TOPIC, ResourceType.CLUSTER


class Clock:
    def __init__(self) -> None:
        self.now = 1000

    def __call__(self) -> int:
        return self.now


def gate(modes: dict[str, Mode], acls: list[AclBinding] | None = None, max_entries: int = 100) -> tuple[AccessGate, Clock]:
    clock = Clock()
    stored = tuple(
        AclEntry(int(b.resource_type), b.resource_name, int(b.pattern_type), b.principal, b.host, int(b.operation), int(b.permission_type))
        for b in acls or []
    )
    return AccessGate(Authorizer(), lambda: stored, modes.__getitem__, AuditLog(max_entries), clock), clock


def allow(name: str, op: AclOperation, principal: str = "User:app") -> AclBinding:
    return AclBinding(T, name, PatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)


def test_enforce_refuses_and_records_nothing() -> None:
    g, _ = gate({"L": Mode.ENFORCE})
    assert not g.check("User:app", "10.0.0.1", "L", "c1", [Action(Op.WRITE, T, "orders")])
    assert g.audit.entries() == []


def test_audit_allows_and_records_once_per_key_with_counts_and_times() -> None:
    g, clock = gate({"L": Mode.AUDIT})
    for now in (1000, 2000, 3000):
        clock.now = now
        assert g.check("User:app", "10.0.0.1", "L", "c1", [Action(Op.WRITE, T, "orders")])
    g.check("User:app", "10.0.0.2", "L", "c1", [Action(Op.WRITE, T, "orders")])
    [first, second] = g.audit.entries()
    assert (first.count, first.first_seen_ms, first.last_seen_ms, first.host) == (3, 1000, 3000, "10.0.0.1")
    assert second.host == "10.0.0.2" and second.count == 1


def test_audit_does_not_record_allowed_requests_or_filters() -> None:
    g, _ = gate({"L": Mode.AUDIT}, [allow("orders", Op.WRITE)])
    assert g.check("User:app", "h", "L", None, [Action(Op.WRITE, T, "orders")])
    assert g.check("User:app", "h", "L", None, [Action(Op.DESCRIBE, T, "hidden")], record=False)
    assert g.audit.entries() == []


def test_modes_are_per_listener() -> None:
    g, _ = gate({"OPEN": Mode.AUDIT, "LOCKED": Mode.ENFORCE})
    assert g.check("User:app", "h", "OPEN", None, [Action(Op.READ, T, "t")])
    assert not g.check("User:app", "h", "LOCKED", None, [Action(Op.READ, T, "t")])
    assert [e.listener for e in g.audit.entries()] == ["OPEN"]


def test_alternatives_record_the_first() -> None:
    g, _ = gate({"L": Mode.AUDIT})
    g.check("User:app", "h", "L", None, [Action(Op.IDEMPOTENT_WRITE, C, "kafka-cluster"), Action(Op.WRITE, T, None)])
    [entry] = g.audit.entries()
    assert (entry.resource_type, entry.resource_name, entry.operation) == (C, "kafka-cluster", Op.IDEMPOTENT_WRITE)


def test_any_allowed_alternative_allows() -> None:
    g, _ = gate({"L": Mode.ENFORCE}, [allow("orders", Op.WRITE)])
    assert g.check("User:app", "h", "L", None, [Action(Op.IDEMPOTENT_WRITE, C, "kafka-cluster"), Action(Op.WRITE, T, None)])


def test_the_record_is_bounded() -> None:
    g, _ = gate({"L": Mode.AUDIT}, max_entries=2)
    for i in range(5):
        g.check("User:app", "h", "L", None, [Action(Op.READ, T, f"t{i}")])
    assert len(g.audit.entries()) == 2 and g.audit.dropped == 3


def test_suggestions_drop_implied_operations_and_make_enforcement_pass() -> None:
    g, _ = gate({"L": Mode.AUDIT})
    wanted = [(Op.DESCRIBE, "orders"), (Op.WRITE, "orders"), (Op.DESCRIBE, "audit"), (Op.DESCRIBE_CONFIGS, "cfg"), (Op.ALTER_CONFIGS, "cfg")]
    for op, name in wanted:
        g.check("User:app", "h", "L", "c", [Action(op, T, name)])
    g.check("User:app", "h", "L", "c", [Action(Op.IDEMPOTENT_WRITE, C, "kafka-cluster")])
    suggested = suggested_acls(g.audit.entries())
    assert {(b.resource_name, b.operation) for b in suggested} == {
        ("orders", Op.WRITE), ("audit", Op.DESCRIBE), ("cfg", Op.ALTER_CONFIGS), ("kafka-cluster", Op.IDEMPOTENT_WRITE),
    }
    enforcing = Authorizer()
    enforcing.load(suggested)
    for op, name in wanted:
        assert enforcing.authorize("User:app", "h", op, T, name)
    assert not enforcing.authorize("User:other", "h", Op.WRITE, T, "orders"), "only the recorded principal gets in"


def test_report_marks_what_is_still_denied_and_survives_a_round_trip(tmp_path: pathlib.Path) -> None:
    g, _ = gate({"L": Mode.AUDIT})
    g.check("User:app", "h", "L", "c", [Action(Op.WRITE, T, "orders")])
    g.check("User:app", "h", "L", "c", [Action(Op.READ, T, "payments")])
    now_allowed = Authorizer()
    now_allowed.load([allow("orders", Op.WRITE)])
    report = build_report(g.audit, now_allowed, {"L": "audit"}, 5000)
    assert {r["resource_name"]: r["still_denied"] for r in report["entries"]} == {"orders": False, "payments": True}
    assert [a["resource_name"] for a in report["suggested_acls"]] == ["payments"]
    assert report["principals"]["User:app"]["clients"] == ["c"]
    path = tmp_path / "__acl_audit.json"
    write_report(path, report)
    assert read_report(path) == json.loads(path.read_text())
    restored = AuditLog()
    load_into(restored, path)
    assert [(e.resource_name, e.count) for e in restored.entries()] == [("orders", 1), ("payments", 1)]
    load_into(restored, path)
    assert [e.count for e in restored.entries()] == [2, 2], "reloading merges counts"
