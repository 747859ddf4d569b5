"""The broker's security, assembled once from the configuration: what the node builds and runs.

- one ``ListenerSecurity`` per listener (TLS context, SASL settings, certificate principal mapping);
- the ``AccessGate`` when ``authorizer.class.name`` names Kafka's StandardAuthorizer (or the older
  AclAuthorizer), else None: no authorizer, every request allowed;
- the audit record's persistence: loaded from ``<first log dir>/__acl_audit.json`` at start, written
  back every ``authorizer.audit.flush.interval.ms`` when it (or the ACLs it is judged against)
  changed, and at stop.

The node passes two callables into the metadata: the current ACL collection and a SCRAM credential
lookup, so this package needs no import of ``tidelog.metadata``.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
from collections.abc import Callable, Collection, Iterable
from typing import Any

from tidelog.common.acl import AclRecord
from tidelog.common.acl_authorizer import Authorizer
from tidelog.common.config import BrokerConfig
from tidelog.common.errors import ConfigError
from tidelog.protocol.sasl import ScramCredential
from tidelog.security.access import AccessGate, Mode
from tidelog.security.audit import FILE_NAME, AuditLog, build_report, load_into, write_report
from tidelog.security.auth_throttle import FailedAuthThrottle
from tidelog.security.listeners import ListenerSecurity, build_listener_security

log = logging.getLogger(__name__)

AUTHORIZERS = frozenset({"org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer"})


def super_users(config: BrokerConfig) -> list[str]:
    raw = config.get("super.users")
    return [item.strip() for item in str(raw or "").split(";") if item.strip()]


def listener_mode(config: BrokerConfig, listener: str) -> Mode:
    return Mode(str(config.get_for_listener(listener, "authorizer.mode")))


class SecurityService:
    def __init__(
        self,
        config: BrokerConfig,
        listeners: Iterable[tuple[str, str]],
        scram_lookup: Callable[[str, str], ScramCredential | None],
        acl_source: Callable[[], Collection[AclRecord]],
        audit_dir: pathlib.Path,
        now_ms: Callable[[], int],
    ) -> None:
        """``listeners``: (name, security protocol) pairs. Raises ConfigError for a bad setting."""
        self.config = config
        self.listener_names = [name for name, _ in listeners]
        self.auth_throttle = FailedAuthThrottle(lambda: (
            config.get_int("connection.failed.authentication.delay.ms"),
            config.get_int("connection.failed.authentication.backoff.max.ms"),
        ))
        self.listeners: dict[str, ListenerSecurity] = {
            name: build_listener_security(config, name, protocol, scram_lookup, self.auth_throttle)
            for name, protocol in listeners
        }
        self.audit_path = audit_dir / FILE_NAME
        self.gate: AccessGate | None = None
        self._acl_source = acl_source
        self._reported_acls: object = None  # the ACL collection the last report was computed with
        self._now_ms = now_ms
        self._flusher: asyncio.Task[None] | None = None
        name = str(config.get("authorizer.class.name") or "")
        if name:
            if name not in AUTHORIZERS:
                raise ConfigError(f"authorizer.class.name {name} is not supported; use org.apache.kafka.metadata.authorizer.StandardAuthorizer")
            authorizer = Authorizer(super_users(config), bool(config.get("allow.everyone.if.no.acl.found")))
            audit = AuditLog(config.get_int("authorizer.audit.max.entries"))
            self.gate = AccessGate(authorizer, acl_source, lambda listener: listener_mode(config, listener), audit, now_ms)
        for listener in self.listener_names:
            listener_mode(config, listener)  # a bad per-listener mode fails at start, not at the first denial

    def modes(self) -> dict[str, str]:
        return {name: listener_mode(self.config, name).value for name in self.listener_names}

    def report(self) -> dict[str, Any]:
        """The audit report now (the same document as the file), or an empty one without authorizer."""
        gate = self.gate
        if gate is None:
            return build_report(AuditLog(), None, self.modes(), self._now_ms())
        return build_report(gate.audit, gate.current(), self.modes(), self._now_ms())

    async def start(self) -> None:
        gate = self.gate
        if gate is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, load_into, gate.audit, self.audit_path)
        except (OSError, ValueError, KeyError) as exc:
            log.error("ignoring the unreadable ACL audit record %s: %s", self.audit_path, exc)
        audited = [name for name, mode in self.modes().items() if mode == Mode.AUDIT.value]
        if audited:
            log.info("authorizer in audit mode on listener(s) %s: denials are recorded in %s, not enforced", ",".join(audited), self.audit_path)
        self._flusher = asyncio.create_task(self._flush_periodically())

    async def _flush_periodically(self) -> None:
        interval = self.config.get_int("authorizer.audit.flush.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except OSError as exc:
                log.error("cannot write the ACL audit record %s: %s", self.audit_path, exc)

    async def flush(self, force: bool = False) -> None:
        """Write the report file if the record or the ACLs changed (its still_denied marks depend on them)."""
        gate = self.gate
        if gate is None:
            return
        acls = self._acl_source()
        if not (gate.audit.dirty or force or (acls is not self._reported_acls and gate.audit.entries())):
            return
        gate.audit.dirty = False
        self._reported_acls = acls
        report = self.report()
        await asyncio.get_running_loop().run_in_executor(None, write_report, self.audit_path, report)

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
            try:
                await self.flush()
            except OSError as exc:
                log.error("cannot write the ACL audit record %s: %s", self.audit_path, exc)
