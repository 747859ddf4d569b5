"""One connection's SASL authentication, sequenced as Kafka's SaslServerAuthenticator does it.

On a SASL listener a connection starts unauthenticated and may send only ApiVersions, SaslHandshake
and SaslAuthenticate; anything else closes it. The exchange::

    HANDSHAKE ──SaslHandshake v1 (enabled mechanism)──▶ AUTHENTICATE ──SaslAuthenticate…──▶ COMPLETE
        │      ──SaslHandshake v0 (enabled mechanism)──▶ RAW ──bare length-prefixed tokens…──▶ COMPLETE
        └──── unknown mechanism, wrong order, bad token, wrong credentials ──▶ FAILED (close)

With handshake v0 (old clients) the tokens that follow are frames without a Kafka header, answered
with bare length-prefixed tokens. After COMPLETE the connection's principal is ``User:<name>``.
This class only sequences; the mechanisms are ``tidelog.protocol.sasl``'s state machines.

For the failed-authentication throttle it also tells which user a token names (``claimed_user``)
and whether the next token is the one that decides (``decides_next``: PLAIN's only token, SCRAM's
client-final), so the throttle's wait can come before the credentials are checked.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from tidelog.common.errors import ErrorCode
from tidelog.protocol.sasl import (
    PLAIN,
    SCRAM_MECHANISMS,
    PlainServer,
    SaslError,
    SaslIllegalState,
    ScramCredential,
    ScramServer,
    Step,
    parse_client_first,
)
from tidelog.security.auth_throttle import FailedAuthThrottle
from tidelog.security.credentials import PlainUsers

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PRE_AUTHENTICATION_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


class AuthState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW = "raw"
    COMPLETE = "complete"
    FAILED = "failed"


def _new_nonce() -> str:
    return secrets.token_urlsafe(24)


@dataclass(frozen=True)
class SaslSettings:
    """What one SASL listener offers and how it checks credentials."""

    mechanisms: tuple[str, ...]
    scram_lookup: Callable[[str, str], ScramCredential | None]  # (mechanism, user) → stored credential
    plain_users: PlainUsers | None = None
    fake_salt_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    new_nonce: Callable[[], str] = _new_nonce
    throttle: FailedAuthThrottle | None = None  # broker-wide, shared by the SASL listeners


class SaslAuthenticator:
    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.state = AuthState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._server: PlainServer | ScramServer | None = None
        self._tokens = 0  # tokens of this exchange checked so far
        self._user: str | None = None  # the user the exchange names, once a token said it

    @property
    def raw_tokens(self) -> bool:
        """The next frames are bare SASL tokens (after a v0 handshake)."""
        return self.state is AuthState.RAW

    @property
    def failed(self) -> bool:
        return self.state is AuthState.FAILED

    def allows(self, api_key: int) -> bool:
        """May a request with this key be served before authentication completes?"""
        return api_key in PRE_AUTHENTICATION_APIS

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        if self.state is not AuthState.HANDSHAKE:
            self.state = AuthState.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.settings.mechanisms:
            self.state = AuthState.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = AuthState.RAW if version == 0 else AuthState.AUTHENTICATE
        return ErrorCode.NONE

    def _new_server(self, mechanism: str) -> PlainServer | ScramServer:
        settings = self.settings
        if mechanism == PLAIN:
            users = settings.plain_users
            return PlainServer(users.verify if users is not None else (lambda _user, _password: False))
        if mechanism in SCRAM_MECHANISMS:
            return ScramServer(
                mechanism, lambda user: settings.scram_lookup(mechanism, user), settings.new_nonce(), settings.fake_salt_key
            )
        raise ValueError(f"no SASL server for {mechanism}")

    @property
    def decides_next(self) -> bool:
        """The next token's check settles the exchange (PLAIN's token, SCRAM's client-final)."""
        return self.mechanism == PLAIN or self._tokens >= 1

    def claimed_user(self, token: bytes) -> str | None:
        """The user name this exchange names, from ``token`` or an earlier one; None if it does not parse."""
        if self._user is not None:
            return self._user
        if self.mechanism == PLAIN:
            parts = token.split(b"\x00")
            name = parts[1].decode("utf-8", "replace") if len(parts) == 3 else ""
        elif self.mechanism in SCRAM_MECHANISMS and self._tokens == 0:
            try:
                name = parse_client_first(token).username
            except SaslError:
                name = ""
        else:
            name = ""
        self._user = name or None
        return self._user

    def authenticate(self, token: bytes) -> Step:
        """One client token; raises SaslError (the connection must then close)."""
        server = self._server
        if self.state not in (AuthState.AUTHENTICATE, AuthState.RAW) or server is None:
            self.state = AuthState.FAILED
            raise SaslIllegalState("Unexpected SaslAuthenticate request: no SaslHandshake came first")
        if self._tokens == 0:
            self.claimed_user(token)  # SCRAM names its user in the first token only
        self._tokens += 1
        try:
            step = server.step(token)
        except SaslError:
            self.state = AuthState.FAILED
            raise
        if step.complete:
            self.state = AuthState.COMPLETE
            self.principal = f"User:{server.authorization_id}"
        return step
