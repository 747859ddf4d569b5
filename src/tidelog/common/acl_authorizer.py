"""The ACL authorizer, with the semantics of Kafka's StandardAuthorizer.

To decide whether ``principal`` connecting from ``host`` may perform ``operation`` on the resource
``(type, name)``:

1. A super user (``super.users``) may do anything.
2. The ACLs that apply to the resource are those whose pattern matches it: LITERAL with the same
   name, LITERAL ``*``, and PREFIXED with a prefix of the name. If there are none at all (whoever
   they are for), ``allow.everyone.if.no.acl.found`` decides.
3. Among those, an ACL counts if its principal is the caller's or ``User:*`` and its host is the
   caller's address or ``*``.
4. A counting DENY for the operation (or for ALL) denies, whatever else allows: deny wins.
5. Otherwise a counting ALLOW for the operation (or ALL) allows; an ALLOW of READ, WRITE, DELETE or
   ALTER also allows DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS.
6. Otherwise the request is denied (ACLs exist for the resource, just none for this caller).

``authorize_any`` answers "may the caller do this to at least one resource of the type?" (Kafka's
``authorizeByResourceType``, which lets an idempotent producer in when it may write some topic).

The ACL set is indexed once per change: literal names in a dict, prefixed names in a dict probed
only at the prefix lengths that exist, so a check costs a few dict lookups however many ACLs there
are. ``sync`` rebuilds the index when handed a different stored collection (compared by identity,
because the metadata image replaces the collection on every change and never mutates it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable

from tidelog.common.acl import (
    IMPLIES_DESCRIBE,
    IMPLIES_DESCRIBE_CONFIGS,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclRecord,
    PatternType,
    ResourceType,
    normalise_host,
)

_ALL = AclOperation.ALL
_DENY = AclPermissionType.DENY


def _allows(acl: AclBinding, operation: AclOperation) -> bool:
    """Whether an ALLOW entry's operation covers ``operation`` (implied operations included)."""
    granted = acl.operation
    if granted is _ALL or granted is operation:
        return True
    if operation is AclOperation.DESCRIBE:
        return granted in IMPLIES_DESCRIBE
    if operation is AclOperation.DESCRIBE_CONFIGS:
        return granted in IMPLIES_DESCRIBE_CONFIGS
    return False


class Authorizer:
    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._bindings: tuple[AclBinding, ...] = ()
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        self._source: object = None

    # -- the ACL set -------------------------------------------------------------------------------

    @property
    def bindings(self) -> tuple[AclBinding, ...]:
        return self._bindings

    def load(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the ACL set (hosts normalised so ``::1`` and ``0:0:0:0:0:0:0:1`` are one host)."""
        unique = tuple(dict.fromkeys(bindings))
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        lengths: dict[ResourceType, set[int]] = defaultdict(set)
        by_type: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for binding in unique:
            indexed = binding
            host = normalise_host(binding.host)
            if host != binding.host:
                indexed = AclBinding(
                    binding.resource_type, binding.resource_name, binding.pattern_type, binding.principal,
                    host, binding.operation, binding.permission_type,
                )
            key = (binding.resource_type, binding.resource_name)
            if binding.pattern_type is PatternType.PREFIXED:
                prefixed[key].append(indexed)
                lengths[binding.resource_type].add(len(binding.resource_name))
            else:
                literal[key].append(indexed)
            by_type[binding.resource_type].append(indexed)
        self._bindings = unique
        self._literal = dict(literal)
        self._prefixed = dict(prefixed)
        self._prefix_lengths = {rt: tuple(sorted(ls)) for rt, ls in lengths.items()}
        self._by_type = dict(by_type)

    def sync(self, records: Collection[AclRecord]) -> None:
        """Load ``records`` unless they are the very collection loaded last time."""
        if records is self._source:
            return
        self.load(AclBinding.from_record(r) for r in records)
        self._source = records

    def acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self._bindings if flt.matches(b)]

    # -- decisions ---------------------------------------------------------------------------------

    def _applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        literal = self._literal
        exact = literal.get((resource_type, name))
        if exact:
            found.extend(exact)
        if name != WILDCARD:
            wildcard = literal.get((resource_type, WILDCARD))
            if wildcard:
                found.extend(wildcard)
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            matched = self._prefixed.get((resource_type, name[:length]))
            if matched:
                found.extend(matched)
        return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        applicable = self._applicable(resource_type, name)
        if not applicable:
            return self.allow_if_no_acl
        allowed = False
        for acl in applicable:
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.permission_type is _DENY:
                if acl.operation is _ALL or acl.operation is operation:
                    return False
            elif not allowed and _allows(acl, operation):
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the caller perform ``operation`` on at least one resource of ``resource_type``?

        Only the exact operation (or ALL) counts here, as in Kafka. An allowed literal name counts
        unless denied by name or by a prefix of it; an allowed prefix counts unless a denied prefix
        covers it; a wildcard deny denies everything.
        """
        # The empty name is matched by no literal or prefixed ACL, only by `*` ACLs and the default rule.
        if self.authorize(principal, host, operation, resource_type, ""):
            return True
        deny_literal: set[str] = set()
        deny_prefixes: set[str] = set()
        allow: list[AclBinding] = []
        for acl in self._by_type.get(resource_type, ()):
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation is not operation and acl.operation is not _ALL:
                continue
            if acl.permission_type is _DENY:
                if acl.pattern_type is PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False
                (deny_prefixes if acl.pattern_type is PatternType.PREFIXED else deny_literal).add(acl.resource_name)
            else:
                allow.append(acl)
        if any(a.pattern_type is PatternType.LITERAL and a.resource_name == WILDCARD for a in allow):
            return True
        for acl in allow:
            name = acl.resource_name
            if acl.pattern_type is PatternType.LITERAL and name in deny_literal:
                continue
            if any(name[:i] in deny_prefixes for i in range(1, len(name) + 1)):
                continue
            return True
        return False

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> list[AclOperation]:
        """The operations of ``resource_type`` the caller may perform on ``name``."""
        return [
            op for op in SUPPORTED_OPERATIONS.get(resource_type, ())
            if self.authorize(principal, host, op, resource_type, name)
        ]


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``*_authorized_operations`` encoding: bit ``code`` set for each operation."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits
