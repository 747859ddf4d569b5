"""The client side of a secured Kafka connection that tidelog makes itself, for the requests
librdkafka does not send (the governor's reassignment and log-dir calls, the CLI's OffsetDelete and
transaction listings). It reads the librdkafka settings the rest of the program is given, so one
client configuration serves both:

| key | meaning |
|---|---|
| ``security.protocol`` | PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL |
| ``sasl.mechanism`` (alias ``sasl.mechanisms``) | PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (librdkafka's default, GSSAPI, is refused) |
| ``sasl.username`` / ``sasl.password`` | the credentials; both required with a SASL protocol |
| ``ssl.ca.location`` | CA file (PEM) the broker's certificate must chain to; the system's CAs without it |
| ``ssl.certificate.location`` / ``ssl.key.location`` / ``ssl.key.password`` | a client certificate (mutual TLS) |
| ``enable.ssl.certificate.verification`` | ``false`` accepts any certificate (tests only) |
| ``ssl.endpoint.identification.algorithm`` | ``https`` (default) checks the host name; ``none`` does not |

Invariant: the protocol named is the protocol spoken. There is no fallback: a TLS handshake or an
authentication that fails fails the connection, with an error naming the broker and the mechanism.

SASL runs as Kafka clients run it: SaslHandshake v1 names the mechanism, then each token travels in a
SaslAuthenticate v1 request. ``SaslClient`` is the token sequence without I/O (PLAIN, RFC 4616: one
token; SCRAM, RFC 5802/7677: client-first, client-final, then the server-final signature is checked,
so a broker that does not know the password is not trusted either); the SCRAM arithmetic is
``tidelog.protocol.sasl.ScramClient``, the same the broker's own tests check the server against.
``authenticator`` turns settings into the ``authenticate`` step of a ``tidelog.net.KafkaConnection``.
"""

from __future__ import annotations

import secrets
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tidelog.clients.errors import ClientError
from tidelog.common.errors import ConfigError
from tidelog.net.kafka_connection import KafkaConnection
from tidelog.protocol.sasl import PLAIN, SCRAM_MECHANISMS, SaslError, ScramClient

__all__ = ["PROTOCOLS", "SASL_MECHANISMS", "ClientSecurity", "SaslAuthenticationError", "SaslClient", "authenticator",
           "tls_context"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)


class SaslAuthenticationError(ClientError):
    """The broker refused the credentials, did not offer the mechanism, or could not prove it knows
    the password. ``error`` is Kafka's error name (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM...)."""

    def __init__(self, message: str, error: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = ""  # "" unless the protocol is SASL_*
    username: str = ""
    password: str = ""
    tls: ssl.SSLContext | None = None
    certificate: bool = False  # a client certificate is configured (mutual TLS)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ClientSecurity:
        """The security settings of a librdkafka configuration; ``ConfigError`` naming the key when
        one is missing, unknown or unusable (an unreadable CA or key file included)."""
        protocol = str(config.get("security.protocol", "PLAINTEXT")).strip().upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"security.protocol={protocol!r} must be one of {', '.join(PROTOCOLS)}")
        tls = tls_context(config) if protocol in ("SSL", "SASL_SSL") else None
        certificate = tls is not None and bool(config.get("ssl.certificate.location"))
        if not protocol.startswith("SASL_"):
            return cls(protocol, tls=tls, certificate=certificate)
        mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI"))).strip().upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"sasl.mechanism={mechanism!r} is not supported by tidelog's own connections "
                              f"(supported: {', '.join(SASL_MECHANISMS)})")
        username, password = str(config.get("sasl.username", "")), str(config.get("sasl.password", ""))
        for key, value in (("sasl.username", username), ("sasl.password", password)):
            if not value:
                raise ConfigError(f"{key} is required with security.protocol={protocol} and sasl.mechanism={mechanism}")
        return cls(protocol, mechanism, username, password, tls, certificate)

    def hint(self) -> str:
        """What to add to a failure of a fresh TLS connection: a broker that requires a client
        certificate closes the connection of a client without one, after the handshake."""
        if self.tls is not None and not self.certificate:
            return (" (no client certificate is configured: a listener with ssl.client.auth=required closes such "
                    "connections; see ssl.certificate.location and ssl.key.location)")
        return ""

    def connection(self, host: str, port: int, client_id: str, *, timeout_s: float) -> KafkaConnection:
        """A connection to one broker that speaks this protocol (TLS, then SASL) from its first byte."""
        return KafkaConnection(host, port, client_id, timeout_s=timeout_s, tls=self.tls,
                               authenticate=authenticator(self) if self.sasl else None)


def tls_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """A client TLS context from librdkafka's ``ssl.*`` keys (verifying the broker unless told not to)."""
    ca = config.get("ssl.ca.location") or None
    try:
        context = ssl.create_default_context(cafile=str(ca) if ca else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.ca.location={ca}: {exc}") from None
    certificate = config.get("ssl.certificate.location")
    if certificate:
        try:
            context.load_cert_chain(str(certificate), str(config.get("ssl.key.location") or "") or None,
                                    config.get("ssl.key.password") or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl.certificate.location={certificate} / ssl.key.location: {exc}") from None
    elif config.get("ssl.key.location"):
        raise ConfigError("ssl.key.location is set without ssl.certificate.location")
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).strip().lower() == "none":
        context.check_hostname = False
    if str(config.get("enable.ssl.certificate.verification", "true")).strip().lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class SaslClient:
    """One SASL exchange's client tokens, without I/O: send ``first()``; give each answer of the broker
    to ``next``, which returns the token to send next or None once the exchange is complete."""

    def __init__(self, security: ClientSecurity, *, nonce: str | None = None) -> None:
        self.security = security
        self._scram = (ScramClient(security.mechanism, security.username, security.password,
                                   nonce or secrets.token_urlsafe(24))
                       if security.mechanism in SCRAM_MECHANISMS else None)
        self._step = 0

    def first(self) -> bytes:
        self._step = 1
        if self._scram is None:
            return f"\0{self.security.username}\0{self.security.password}".encode()
        return self._scram.first()

    def next(self, server_token: bytes) -> bytes | None:
        step, self._step = self._step, self._step + 1
        if self._scram is None or step >= 3:
            return None
        try:
            if step == 1:
                return self._scram.final(server_token)
            verified = self._scram.verify(server_token)
        except SaslError as exc:
            raise self._failure(f"the broker's SCRAM message is malformed ({exc})", "SASL_AUTHENTICATION_FAILED") from None
        if not verified:
            raise self._failure("the broker's SCRAM server signature does not match: it does not know this password",
                                "SASL_AUTHENTICATION_FAILED")
        return None

    def _failure(self, why: str, error: str) -> SaslAuthenticationError:
        return SaslAuthenticationError(
            f"SASL {self.security.mechanism} authentication as {self.security.username!r} failed: {why}", error)


def authenticator(security: ClientSecurity) -> Callable[[KafkaConnection], Awaitable[None]]:
    """The ``authenticate`` step of a ``KafkaConnection``: SaslHandshake v1, then SaslAuthenticate v1
    until ``SaslClient`` is done. Raises ``SaslAuthenticationError``; a broken stream raises
    ``BrokerUnreachable`` as any call does."""

    async def authenticate(connection: KafkaConnection) -> None:
        where = f"broker {connection.host}:{connection.port}"
        handshake = await connection.call(SaslHandshakeRequest(mechanism=security.mechanism))
        if int(handshake.error_code) != 0:
            offered = ", ".join(handshake.mechanisms) or "none"
            raise SaslAuthenticationError(
                f"SASL {security.mechanism}: {where} answered {_error_name(handshake.error_code)} "
                f"(mechanisms it offers: {offered})", _error_name(handshake.error_code))
        client = SaslClient(security)
        token: bytes | None = client.first()
        while token is not None:
            answer = await connection.call(SaslAuthenticateRequest(auth_bytes=token))
            if int(answer.error_code) != 0:
                name = _error_name(answer.error_code)
                detail = f": {answer.error_message}" if answer.error_message else ""
                raise SaslAuthenticationError(
                    f"SASL {security.mechanism} authentication as {security.username!r} at {where} failed: "
                    f"{name}{detail}", name)
            token = client.next(answer.auth_bytes)

    return authenticate


def _error_name(code: Any) -> str:
    return str(getattr(code, "name", code)).upper()


def read_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from a blocking socket (the CLI's and the console's one-request connections);
    OSError when the broker closes the connection first."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the broker closed the connection")
        data += chunk
    return bytes(data)
