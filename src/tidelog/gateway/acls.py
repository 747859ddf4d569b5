"""Kafka ACLs applied per principal: the gateway authorises each request as a broker would its client.

A request's principal comes from its bearer token (``tidelog.web.auth``; ``User:ANONYMOUS`` without
tokens). The gateway writes and reads with its own Kafka identity, so the cluster cannot tell its
callers apart: the gateway applies the caller's ACLs itself, before it acts.

- **Which ACLs**: the cluster's, read with DescribeAcls (every binding) over the gateway's own
  Kafka-protocol connections (``group_wire``: librdkafka's describe_acls drops the answer's error code,
  so a cluster without an authorizer would look like one with no ACLs) at start and then every
  ``gateway.acl.refresh.ms`` (5 s), and decided by ``tidelog.common.acl_authorizer`` (Kafka's
  StandardAuthorizer rules: deny wins, LITERAL, PREFIXED and ``*`` patterns, ``User:*``, hosts,
  READ/WRITE/DELETE/ALTER imply DESCRIBE). The gateway's own principal needs DESCRIBE on the cluster
  to read them. A refresh that fails keeps the last set (logged), as a broker whose metadata lags
  keeps deciding on what it has.
- **A cluster without an authorizer** answers SECURITY_DISABLED: there is nothing to apply, and every
  caller may do what the gateway may (logged once), as every client of such a cluster may.
- **Not read yet** (the cluster unreachable since start): a request that needs a decision gets 503.
- ``gateway.super.users`` (Kafka's ``super.users`` form, ``User:a;User:b``) are never checked;
  ``gateway.acl.allow.everyone.if.no.acl.found`` is Kafka's key of that name (false).
- **When**: ``gateway.acl.enable`` is ``auto`` (on when ``gateway.auth.tokens.file`` is set: without
  tokens every caller is the same anonymous principal), ``true`` or ``false``.

What each route needs (the resource names are the Kafka ones, so a topic written as ``<dc>.<topic>``
is authorised under that name):

| route | needs |
|---|---|
| write chunks, staged store | WRITE on the topic |
| a source's state | DESCRIBE on the topic |
| open a read session, create a push subscription | READ on each topic, READ on the group |
| poll a read session | records of topics the caller may not READ are left out (data-centre patterns) |

A refusal is 403 with Kafka's error code (TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED) and a
message naming the principal, the operation and the resource; nothing is written or read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.describe_acls.v1.request import DescribeAclsRequest
from kio.static.primitive import i8

from tidelog.common.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    normalise_host,
)
from tidelog.common.acl_authorizer import Authorizer
from tidelog.gateway.group_wire import GroupWire, error_name
from tidelog.web.auth import principal_of
from tidelog.web.errors import ApiError, unavailable

log = logging.getLogger(__name__)

ANY, SECURITY_DISABLED = 1, 54  # Kafka's "any" filter code; its error code of a cluster without authorizer
REFUSED_CODES = {ResourceType.TOPIC: "TOPIC_AUTHORIZATION_FAILED", ResourceType.GROUP: "GROUP_AUTHORIZATION_FAILED"}


class SecurityDisabled(Exception):
    """The cluster has no authorizer (DescribeAcls answered SECURITY_DISABLED)."""


async def describe_acls(wire: GroupWire) -> list[AclBinding]:
    """Every ACL binding of the cluster (DescribeAcls v1, filter ANY), over the gateway's own connections.
    Bindings with a code this version does not know are left out (it cannot decide on them)."""
    answer = await wire.call_any(DescribeAclsRequest(
        resource_type_filter=i8(ANY), resource_name_filter=None, pattern_type_filter=i8(ANY), principal_filter=None,
        host_filter=None, operation=i8(ANY), permission_type=i8(ANY)))
    code = int(answer.error_code)
    if code == SECURITY_DISABLED:
        raise SecurityDisabled(answer.error_message or "no authorizer")
    if code:
        raise RuntimeError(f"DescribeAcls: {error_name(code)}: {answer.error_message or ''}")
    found = []
    for resource in answer.resources:
        for entry in resource.acls:
            try:
                found.append(AclBinding(ResourceType(int(resource.resource_type)), str(resource.resource_name),
                                        PatternType(int(resource.pattern_type)), str(entry.principal), str(entry.host),
                                        AclOperation(int(entry.operation)), AclPermissionType(int(entry.permission_type))))
            except ValueError:
                continue
    return found


class GatewayAcls:
    """The cluster's ACLs as last read, and the decisions made on them (see the module docstring)."""

    def __init__(self, describe: Callable[[], Awaitable[list[AclBinding]]], *, enabled: bool,
                 super_users: Iterable[str] = (), allow_if_no_acl: bool = False, refresh_s: float = 5.0) -> None:
        self.enabled = enabled
        self.refresh_s = refresh_s
        self._describe = describe  # every binding of the cluster; SecurityDisabled without an authorizer
        self._authorizer = Authorizer(super_users, allow_if_no_acl)
        self.loaded = False
        self.cluster_authorizer = True  # False once the cluster said SECURITY_DISABLED
        self._task: asyncio.Task[None] | None = None
        self._last_error = ""

    # -- the ACL set -----------------------------------------------------------------------------

    async def refresh(self) -> bool:
        """Read the cluster's ACLs once; True when they were read (or the cluster has no authorizer)."""
        try:
            bindings = await self._describe()
        except SecurityDisabled:
            if self.cluster_authorizer:
                log.warning("the cluster has no authorizer (DescribeAcls: SECURITY_DISABLED): every caller "
                            "may do what the gateway's own principal may")
            self.cluster_authorizer, self.loaded = False, True
            return True
        except Exception as exc:  # unreachable, timed out, refused (the gateway may not DESCRIBE the cluster)
            self._failed(f"DescribeAcls failed: {exc}")
            return False
        self._authorizer.load(bindings)
        if self._last_error:
            log.info("the cluster's ACLs are read again (%d bindings)", len(bindings))
        self.cluster_authorizer, self.loaded, self._last_error = True, True, ""
        return True

    def _failed(self, message: str) -> None:
        if message != self._last_error:
            log.warning("%s; %s", message, "keeping the last ACLs" if self.loaded else "requests that need them get 503")
        self._last_error = message

    def start(self) -> None:
        """Read again every ``refresh_s`` (the first read is the caller's: :meth:`refresh`)."""
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            await self.refresh()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- decisions -------------------------------------------------------------------------------

    def allowed(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        if not self.enabled or not self.cluster_authorizer:
            return True
        return self._authorizer.authorize(principal, normalise_host(host), operation, resource_type, name)

    def check(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
              name: str) -> None:
        """Raise the API's 403 (or 503 before the ACLs were ever read) unless the caller may."""
        if not self.enabled:
            return
        if not self.loaded:
            raise unavailable(f"the cluster's ACLs are not read yet ({self._last_error or 'starting'})")
        if not self.allowed(principal, host, operation, resource_type, name):
            raise ApiError(403, REFUSED_CODES.get(resource_type, "CLUSTER_AUTHORIZATION_FAILED"),
                           f"{principal} may not {operation.name} {resource_type.name.lower()} {name!r} "
                           "(Kafka ACLs, applied by the gateway)")


def client_host(request: Any) -> str:
    """The caller's address as the listener saw it (the host an ACL names)."""
    return str(request.client.host) if request.client else ""


def authorize_read(acls: GatewayAcls, request: Any, group: str, topics: Iterable[str]) -> None:
    """A read session or push subscription: READ on its group, then on each topic it names."""
    principal, host = principal_of(request.scope), client_host(request)
    acls.check(principal, host, AclOperation.READ, ResourceType.GROUP, group)
    for topic in topics:
        acls.check(principal, host, AclOperation.READ, ResourceType.TOPIC, topic)
