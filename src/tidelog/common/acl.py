"""Kafka's ACL model: resource types, pattern types, operations, permissions, bindings and filters.

The numbers are Kafka's wire codes (``org.apache.kafka.common.acl`` and ``...resource``), so a binding
goes to and from CreateAcls/DescribeAcls/DeleteAcls and the metadata file as plain integers.

An ``AclBinding`` is a resource pattern (type, name, LITERAL or PREFIXED) plus an access control
entry (principal ``Type:name``, host, operation, ALLOW or DENY). A LITERAL pattern named ``*`` matches
every resource of its type; a PREFIXED pattern matches every name that starts with it. A principal
of ``User:*`` matches every principal and a host of ``*`` every host.

An ``AclBindingFilter`` selects bindings for DescribeAcls and DeleteAcls. ``None`` matches any name,
principal or host; ANY matches any type, operation or permission. Its pattern type adds MATCH: the
bindings that would apply to a resource of that name (the literal name, the ``*`` wildcard, and every
prefix of the name), rather than the bindings spelled exactly like it.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import Protocol


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

_Op = AclOperation
# The operations each resource type knows (what authorized-operations fields report).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE),
    ResourceType.CLUSTER: (
        _Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS, _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE, _Op.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (_Op.DESCRIBE,),
    ResourceType.USER: (_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS),
}

# An ALLOW for any of these also allows DESCRIBE (resp. DESCRIBE_CONFIGS). DENY implies nothing.
IMPLIES_DESCRIBE = frozenset({_Op.DESCRIBE, _Op.READ, _Op.WRITE, _Op.DELETE, _Op.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS})


class AclRecord(Protocol):
    """How an ACL is stored (the metadata image's form): the same fields as plain codes."""

    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def pattern_type(self) -> int: ...
    @property
    def principal(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_record(cls, record: AclRecord) -> AclBinding:
        """Raises ValueError for a code this version does not know."""
        return cls(
            ResourceType(record.resource_type),
            record.resource_name,
            PatternType(record.pattern_type),
            record.principal,
            record.host,
            AclOperation(record.operation),
            AclPermissionType(record.permission_type),
        )

    def describe(self) -> str:
        """Kafka's log form: ``(principal=User:a, host=*, operation=READ, permissionType=ALLOW) on TOPIC:LITERAL:t``."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name}) on "
            f"{self.resource_type.name}:{self.pattern_type.name}:{self.resource_name}"
        )


def parse_principal(text: str) -> tuple[str, str]:
    """``User:alice`` → ("User", "alice"); ValueError when there is no type."""
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        raise ValueError(
            f"Could not parse principal from `{text}` (no colon is present separating the principal type from the principal name)"
        )
    return kind, name


def normalise_host(host: str) -> str:
    """IP addresses in their canonical text form (``0:0:0:0:0:0:0:1`` → ``::1``); anything else as is."""
    if host == WILDCARD:
        return host
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def binding_problem(binding: AclBinding) -> str | None:
    """Why CreateAcls must refuse this binding (Kafka's checks and wording), or None."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "Invalid resourceType"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return "Invalid operation"
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return "Invalid permissionType"
    if not binding.resource_name:
        return "Resource name should not be empty"
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if binding.operation is not AclOperation.ALL and binding.operation not in SUPPORTED_OPERATIONS[binding.resource_type]:
        return f"ACL operation {binding.operation.name} is not valid for resource type {binding.resource_type.name}"
    try:
        parse_principal(binding.principal)
    except ValueError as exc:
        return str(exc)
    if not binding.host:
        return "Invalid host: it must be * or an address"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def problem(self) -> str | None:
        """A filter with an UNKNOWN field matches nothing meaningful; Kafka refuses it."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission_type):
            if value.name == "UNKNOWN":
                return f"Invalid filter: {type(value).__name__} UNKNOWN"
        return None

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding) and self._matches_entry(binding)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not binding.resource_type:
            return False
        wanted = self.pattern_type
        if wanted not in (PatternType.ANY, PatternType.MATCH) and wanted is not binding.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if wanted is PatternType.ANY or wanted is binding.pattern_type:
            return name == binding.resource_name
        # MATCH: the bindings that apply to a resource called `name`.
        if binding.pattern_type is PatternType.LITERAL:
            return name == binding.resource_name or binding.resource_name == WILDCARD
        return name.startswith(binding.resource_name)

    def _matches_entry(self, binding: AclBinding) -> bool:
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and normalise_host(self.host) != normalise_host(binding.host):
            return False
        if self.operation is not AclOperation.ANY and self.operation is not binding.operation:
            return False
        return self.permission_type is AclPermissionType.ANY or self.permission_type is binding.permission_type
