"""The access gate: the authorizer, each listener's mode (enforce or audit), and the audit record.

Handlers ask one question through the broker's ``authz`` helper: may this connection perform one of
these ``Action``s? The gate answers from the ACLs. When the answer is no:

- on a listener in ``enforce`` mode the request is refused (and the denial logged, at most once a
  minute per principal, resource and operation, under the ``tidelog.authorizer`` logger);
- on a listener in ``audit`` mode the request is allowed, and the denial is recorded in the
  ``AuditLog``: who (principal, client id, address, listener), what (operation, resource), when
  (first and last time) and how often.

So a cluster that has no ACLs yet can run in audit mode, collect exactly the requests enforcement
would refuse, turn them into ACLs (``audit.suggested_acls``), and switch to enforce with no client
noticing. Several actions in one question are alternatives (Kafka's "CREATE on the cluster, else
CREATE on the topic"): any allowed action allows, and the first is the one recorded, so handlers list
the narrowest permission first. Checks that only filter what a client sees (topics listed in an
all-topics Metadata) pass ``record=False``: Kafka does not log them either.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from tidelog.common.acl import AclOperation, AclRecord, ResourceType
from tidelog.common.acl_authorizer import Authorizer
from tidelog.security.audit import AuditLog

denials = logging.getLogger("tidelog.authorizer")

LOG_INTERVAL_S = 60.0


class Mode(enum.Enum):
    ENFORCE = "enforce"
    AUDIT = "audit"


@dataclass(frozen=True, slots=True)
class Action:
    """An operation on a resource; ``name=None`` means "on at least one resource of the type"."""

    operation: AclOperation
    resource_type: ResourceType
    name: str | None


class AccessGate:
    def __init__(
        self,
        authorizer: Authorizer,
        acl_source: Callable[[], Collection[AclRecord]],
        mode_of: Callable[[str], Mode],
        audit: AuditLog,
        now_ms: Callable[[], int],
    ) -> None:
        self.authorizer = authorizer
        self.audit = audit
        self._acl_source = acl_source
        self._mode_of = mode_of
        self._now_ms = now_ms
        self._logged: dict[tuple[str, str, Action], float] = {}

    def current(self) -> Authorizer:
        """The authorizer with the ACLs of the current metadata image loaded."""
        self.authorizer.sync(self._acl_source())
        return self.authorizer

    def allowed(self, principal: str, host: str, action: Action) -> bool:
        """The ACL answer alone, whatever the mode (authorized-operations fields, reports)."""
        authorizer = self.current()
        if action.name is None:
            return authorizer.authorize_any(principal, host, action.operation, action.resource_type)
        return authorizer.authorize(principal, host, action.operation, action.resource_type, action.name)

    def mode(self, listener: str) -> Mode:
        return self._mode_of(listener)

    def check(
        self, principal: str, host: str, listener: str, client_id: str | None, actions: Sequence[Action], *, record: bool = True
    ) -> bool:
        for action in actions:
            if self.allowed(principal, host, action):
                return True
        first = actions[0]
        if self._mode_of(listener) is Mode.AUDIT:
            if record:
                self.audit.record(listener, principal, client_id, host, first.resource_type, first.name, first.operation, self._now_ms())
            return True
        if record:
            self._log_denied(principal, host, listener, first)
        return False

    def _log_denied(self, principal: str, host: str, listener: str, action: Action) -> None:
        key = (principal, host, action)
        now = time.monotonic()
        last = self._logged.get(key)
        if last is not None and now - last < LOG_INTERVAL_S:
            return
        if len(self._logged) > 10_000:
            self._logged.clear()
        self._logged[key] = now
        denials.info(
            "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s (listener %s)",
            principal, action.operation.name, host, action.resource_type.name,
            "*" if action.name is None else action.name, listener,
        )
