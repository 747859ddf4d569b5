"""The authorizer against Kafka's rules, one table row per rule (see common/acl_authorizer.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tidelog.common.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_problem,
)
from tidelog.common.acl_authorizer import Authorizer, operations_bitfield

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def acl(
    rt: ResourceType, name: str, op: AclOperation, perm: AclPermissionType = ALLOW, *,
    pattern: PatternType = LIT, principal: str = "User:alice", host: str = "*",
) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


@dataclass(frozen=True)
class Case:
    why: str
    acls: tuple[AclBinding, ...]
    op: AclOperation
    rt: ResourceType
    name: str
    expected: bool
    principal: str = "User:alice"
    host: str = "10.0.0.1"
    allow_if_no_acl: bool = False
    super_users: tuple[str, ...] = ()


CASES = [
    Case("no ACL anywhere: default deny", (), Op.READ, T, "orders", False),
    Case("no ACL anywhere: allow.everyone.if.no.acl.found", (), Op.READ, T, "orders", True, allow_if_no_acl=True),
    Case("ACLs for the resource exist, none for the caller: deny even with allow.everyone",
         (acl(T, "orders", Op.READ, principal="User:bob"),), Op.READ, T, "orders", False, allow_if_no_acl=True),
    Case("ACLs only on other resources: the default applies",
         (acl(T, "payments", Op.READ),), Op.READ, T, "orders", True, allow_if_no_acl=True),
    Case("literal allow", (acl(T, "orders", Op.READ),), Op.READ, T, "orders", True),
    Case("literal allow is for that name only", (acl(T, "orders", Op.READ),), Op.READ, T, "orders2", False),
    Case("literal allow is for that operation only", (acl(T, "orders", Op.READ),), Op.WRITE, T, "orders", False),
    Case("literal allow is for that resource type only", (acl(T, "orders", Op.READ),), Op.READ, G, "orders", False),
    Case("wildcard resource", (acl(T, "*", Op.WRITE),), Op.WRITE, T, "anything", True),
    Case("prefixed allow matches longer names", (acl(T, "app-", Op.WRITE, pattern=PRE),), Op.WRITE, T, "app-orders", True),
    Case("prefixed allow matches the prefix itself", (acl(T, "app-", Op.WRITE, pattern=PRE),), Op.WRITE, T, "app-", True),
    Case("prefixed allow does not match other names", (acl(T, "app-", Op.WRITE, pattern=PRE),), Op.WRITE, T, "ap", False),
    Case("a literal ACL is not a prefix", (acl(T, "app", Op.WRITE),), Op.WRITE, T, "app-orders", False),
    Case("ALL allows every operation", (acl(T, "orders", Op.ALL),), Op.ALTER_CONFIGS, T, "orders", True),
    Case("READ implies DESCRIBE", (acl(T, "orders", Op.READ),), Op.DESCRIBE, T, "orders", True),
    Case("WRITE implies DESCRIBE", (acl(T, "orders", Op.WRITE),), Op.DESCRIBE, T, "orders", True),
    Case("DELETE implies DESCRIBE", (acl(T, "orders", Op.DELETE),), Op.DESCRIBE, T, "orders", True),
    Case("ALTER implies DESCRIBE", (acl(T, "orders", Op.ALTER),), Op.DESCRIBE, T, "orders", True),
    Case("CREATE does not imply DESCRIBE", (acl(T, "orders", Op.CREATE),), Op.DESCRIBE, T, "orders", False),
    Case("DESCRIBE does not imply READ", (acl(T, "orders", Op.DESCRIBE),), Op.READ, T, "orders", False),
    Case("ALTER_CONFIGS implies DESCRIBE_CONFIGS", (acl(T, "orders", Op.ALTER_CONFIGS),), Op.DESCRIBE_CONFIGS, T, "orders", True),
    Case("DESCRIBE_CONFIGS does not imply ALTER_CONFIGS", (acl(T, "orders", Op.DESCRIBE_CONFIGS),), Op.ALTER_CONFIGS, T, "orders", False),
    Case("deny wins over allow", (acl(T, "orders", Op.READ), acl(T, "orders", Op.READ, DENY)), Op.READ, T, "orders", False),
    Case("a prefixed deny wins over a literal allow",
         (acl(T, "orders", Op.READ), acl(T, "ord", Op.READ, DENY, pattern=PRE)), Op.READ, T, "orders", False),
    Case("a wildcard deny wins over a literal allow",
         (acl(T, "orders", Op.READ), acl(T, "*", Op.READ, DENY)), Op.READ, T, "orders", False),
    Case("deny ALL denies every operation", (acl(T, "orders", Op.READ), acl(T, "orders", Op.ALL, DENY)), Op.READ, T, "orders", False),
    Case("a deny of READ does not deny DESCRIBE (implication is for ALLOW only)",
         (acl(T, "orders", Op.READ), acl(T, "orders", Op.READ, DENY)), Op.DESCRIBE, T, "orders", True),
    Case("a deny for someone else does not matter",
         (acl(T, "orders", Op.READ), acl(T, "orders", Op.READ, DENY, principal="User:bob")), Op.READ, T, "orders", True),
    Case("a deny from another host does not matter",
         (acl(T, "orders", Op.READ), acl(T, "orders", Op.READ, DENY, host="10.9.9.9")), Op.READ, T, "orders", True),
    Case("a deny from the caller's host counts",
         (acl(T, "orders", Op.READ), acl(T, "orders", Op.READ, DENY, host="10.0.0.1")), Op.READ, T, "orders", False),
    Case("host filter: allow from another host only", (acl(T, "orders", Op.READ, host="10.0.0.2"),), Op.READ, T, "orders", False),
    Case("host filter: allow from the caller's host", (acl(T, "orders", Op.READ, host="10.0.0.1"),), Op.READ, T, "orders", True),
    Case("IPv6 hosts compare as addresses", (acl(T, "orders", Op.READ, host="0:0:0:0:0:0:0:1"),), Op.READ, T, "orders", True, host="::1"),
    Case("User:* matches every principal", (acl(T, "orders", Op.READ, principal="User:*"),), Op.READ, T, "orders", True, principal="User:zed"),
    Case("principals compare exactly", (acl(T, "orders", Op.READ, principal="User:Alice"),), Op.READ, T, "orders", False),
    Case("a super user passes everything", (acl(T, "orders", Op.ALL, DENY, principal="User:*"),), Op.DELETE, T, "orders", True,
         principal="User:root", super_users=("User:root",)),
    Case("super users are principals, not names", (), Op.READ, T, "orders", False, principal="User:root", super_users=("root",)),
    Case("cluster ACL", (acl(C, "kafka-cluster", Op.IDEMPOTENT_WRITE),), Op.IDEMPOTENT_WRITE, C, "kafka-cluster", True),
    Case("group ACL, prefixed", (acl(G, "team-", Op.READ, pattern=PRE),), Op.READ, G, "team-a", True),
    Case("transactional id ACL", (acl(X, "tx-1", Op.WRITE),), Op.WRITE, X, "tx-1", True),
    Case("several prefix lengths are all consulted",
         (acl(T, "a", Op.READ, pattern=PRE, principal="User:bob"), acl(T, "abc-", Op.READ, pattern=PRE)), Op.READ, T, "abc-d", True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_authorize(case: Case) -> None:
    authorizer = Authorizer(case.super_users, case.allow_if_no_acl)
    authorizer.load(case.acls)
    assert authorizer.authorize(case.principal, case.host, case.op, case.rt, case.name) is case.expected


ANY_CASES = [
    ("no ACLs, default deny", (), False, False),
    ("no ACLs, default allow", (), True, True),
    ("a literal allow on some topic", (acl(T, "orders", Op.WRITE),), False, True),
    ("a prefixed allow", (acl(T, "app-", Op.WRITE, pattern=PRE),), False, True),
    ("ALL counts", (acl(T, "orders", Op.ALL),), False, True),
    ("implied operations do not count", (acl(T, "orders", Op.READ),), False, False),
    ("a literal allow denied by the same literal", (acl(T, "orders", Op.WRITE), acl(T, "orders", Op.WRITE, DENY)), False, False),
    ("a literal allow denied by a prefix", (acl(T, "orders", Op.WRITE), acl(T, "ord", Op.WRITE, DENY, pattern=PRE)), False, False),
    ("a prefixed allow denied by a shorter prefix", (acl(T, "app-", Op.WRITE, pattern=PRE), acl(T, "ap", Op.WRITE, DENY, pattern=PRE)), False, False),
    ("a prefixed allow is not denied by a literal of the same name",
     (acl(T, "app-", Op.WRITE, pattern=PRE), acl(T, "app-", Op.WRITE, DENY)), False, True),
    ("a wildcard deny denies all", (acl(T, "orders", Op.WRITE), acl(T, "*", Op.WRITE, DENY)), False, False),
    ("a wildcard allow", (acl(T, "*", Op.WRITE),), False, True),
    ("an allow for another principal", (acl(T, "orders", Op.WRITE, principal="User:bob"),), False, False),
    ("an allow from another host", (acl(T, "orders", Op.WRITE, host="10.9.9.9"),), False, False),
]


@pytest.mark.parametrize(("why", "acls", "default_allow", "expected"), ANY_CASES, ids=[c[0] for c in ANY_CASES])
def test_authorize_any_topic(why: str, acls: tuple[AclBinding, ...], default_allow: bool, expected: bool) -> None:
    authorizer = Authorizer((), default_allow)
    authorizer.load(acls)
    assert authorizer.authorize_any("User:alice", "10.0.0.1", Op.WRITE, T) is expected


def test_authorize_any_lets_super_users_in() -> None:
    authorizer = Authorizer(("User:root",))
    authorizer.load([acl(T, "*", Op.ALL, DENY, principal="User:*")])
    assert authorizer.authorize_any("User:root", "h", Op.WRITE, T)


def test_authorized_operations_and_bitfield() -> None:
    authorizer = Authorizer()
    authorizer.load([acl(T, "orders", Op.READ), acl(T, "orders", Op.ALTER_CONFIGS)])
    ops = authorizer.authorized_operations("User:alice", "h", T, "orders")
    assert set(ops) == {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert operations_bitfield(ops) == (1 << 3) | (1 << 8) | (1 << 11) | (1 << 10)


class Stored:
    """The metadata image's form of an ACL: plain codes."""

    def __init__(self, binding: AclBinding) -> None:
        self.resource_type = int(binding.resource_type)
        self.resource_name = binding.resource_name
        self.pattern_type = int(binding.pattern_type)
        self.principal = binding.principal
        self.host = binding.host
        self.operation = int(binding.operation)
        self.permission_type = int(binding.permission_type)


def test_sync_reloads_only_a_different_collection() -> None:
    authorizer = Authorizer()
    first = (Stored(acl(T, "orders", Op.READ)),)
    authorizer.sync(first)
    assert authorizer.authorize("User:alice", "h", Op.READ, T, "orders")
    authorizer.load([])  # simulate a stale index: sync with the same collection must not reload
    authorizer.sync(first)
    assert not authorizer.authorize("User:alice", "h", Op.READ, T, "orders")
    authorizer.sync((Stored(acl(T, "orders", Op.WRITE)),))
    assert authorizer.authorize("User:alice", "h", Op.WRITE, T, "orders")


def test_duplicate_bindings_are_kept_once() -> None:
    authorizer = Authorizer()
    authorizer.load([acl(T, "a", Op.READ), acl(T, "a", Op.READ)])
    assert len(authorizer.bindings) == 1


FILTER_CASES = [
    ("everything", AclBindingFilter(), {"lit-orders", "pre-ord", "wild", "group", "deny-bob"}),
    ("topics only", AclBindingFilter(resource_type=T), {"lit-orders", "pre-ord", "wild", "deny-bob"}),
    ("ANY pattern: exact name of any pattern type", AclBindingFilter(T, "ord", PatternType.ANY), {"pre-ord"}),
    ("LITERAL exact", AclBindingFilter(T, "orders", PatternType.LITERAL), {"lit-orders", "deny-bob"}),
    ("PREFIXED exact", AclBindingFilter(T, "ord", PatternType.PREFIXED), {"pre-ord"}),
    ("MATCH: what applies to 'orders'", AclBindingFilter(T, "orders", PatternType.MATCH), {"lit-orders", "pre-ord", "wild", "deny-bob"}),
    ("MATCH: what applies to 'other'", AclBindingFilter(T, "other", PatternType.MATCH), {"wild"}),
    ("principal", AclBindingFilter(principal="User:bob"), {"deny-bob"}),
    ("host", AclBindingFilter(host="10.0.0.5"), {"group"}),
    ("operation", AclBindingFilter(operation=Op.WRITE), {"wild"}),
    ("permission", AclBindingFilter(permission_type=DENY), {"deny-bob"}),
]
NAMED = {
    "lit-orders": acl(T, "orders", Op.READ),
    "pre-ord": acl(T, "ord", Op.READ, pattern=PRE),
    "wild": acl(T, "*", Op.WRITE),
    "group": acl(G, "g", Op.READ, host="10.0.0.5"),
    "deny-bob": acl(T, "orders", Op.READ, DENY, principal="User:bob"),
}


@pytest.mark.parametrize(("why", "flt", "expected"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filters(why: str, flt: AclBindingFilter, expected: set[str]) -> None:
    assert {name for name, b in NAMED.items() if flt.matches(b)} == expected


@pytest.mark.parametrize(
    ("binding", "problem"),
    [
        (acl(ResourceType.ANY, "x", Op.READ), "Invalid resourceType"),
        (AclBinding(T, "x", PatternType.MATCH, "User:a", "*", Op.READ, ALLOW), "Invalid patternType"),
        (acl(T, "x", Op.ANY), "Invalid operation"),
        (acl(T, "x", Op.READ, AclPermissionType.ANY), "Invalid permissionType"),
        (acl(T, "", Op.READ), "should not be empty"),
        (acl(C, "other", Op.ALTER), "kafka-cluster"),
        (acl(G, "g", Op.WRITE), "not valid for resource type GROUP"),
        (acl(T, "x", Op.READ, principal="alice"), "Could not parse principal"),
        (acl(T, "x", Op.READ, host=""), "Invalid host"),
    ],
)
def test_create_acls_validation(binding: AclBinding, problem: str) -> None:
    found = binding_problem(binding)
    assert found is not None and problem in found


def test_valid_binding_has_no_problem() -> None:
    assert binding_problem(acl(T, "x", Op.ALL)) is None
    assert binding_problem(acl(C, "kafka-cluster", Op.IDEMPOTENT_WRITE)) is None
