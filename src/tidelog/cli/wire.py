"""One Kafka request on its own connection, for the CLI commands librdkafka cannot do itself.

``tidelog groups delete-offsets`` (OffsetDelete) and ``tidelog transactions list|describe``
(ListTransactions, DescribeTransactions) build their requests and read their answers; this module
carries them over the listener's security protocol, configured with the librdkafka keys the rest of
the CLI reads (``--command-config``, ``-X``):

- ``security.protocol``, ``sasl.*`` and ``ssl.*`` as ``tidelog.clients.security`` reads them (the
  governor's own connections read the same): TLS from its context; SASL PLAIN, SCRAM-SHA-256 or
  SCRAM-SHA-512 as SaslHandshake v1, then SaslAuthenticate v1 carrying ``SaslClient``'s tokens (whose
  SCRAM server-final signature is checked).

Frames: a request is ``int32 size`` + the header and body the caller encoded; the answer is the
frame after its size. The SASL requests are encoded here (both are non-flexible at v1).
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from tidelog.cli.common import CliError
from tidelog.clients.security import ClientSecurity, SaslAuthenticationError, SaslClient, read_exactly
from tidelog.common.errors import ConfigError

__all__ = ["Wire"]

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class Wire:
    """Connections to the brokers of one CLI invocation's client configuration."""

    def __init__(self, config: Mapping[str, Any], timeout: float) -> None:
        self.timeout = timeout
        try:
            self.security = ClientSecurity.from_config(config)
        except ConfigError as exc:
            raise CliError(str(exc), 2) from None
        first = str(config["bootstrap.servers"]).split(",")[0].strip()
        self.bootstrap = _address(first.split("://", 1)[-1])

    def call(self, address: tuple[str, int], payload: bytes) -> bytes:
        """Send one request (header and body, encoded) on a new connection; the answer's frame."""
        try:
            with self._connect(address) as sock:
                _send(sock, payload)
                return _receive(sock)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot talk to {address[0]}:{address[1]}: {exc}") from None

    def _connect(self, address: tuple[str, int]) -> socket.socket:
        sock = socket.create_connection(address, timeout=self.timeout)
        try:
            if self.security.tls is not None:
                sock = self.security.tls.wrap_socket(sock, server_hostname=address[0])
            if self.security.sasl:
                self._authenticate(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def _authenticate(self, sock: socket.socket) -> None:
        mechanism = self.security.mechanism
        _send(sock, _request(SASL_HANDSHAKE, 1, 1, _string(mechanism)))
        answer = _receive(sock)
        (error,) = struct.unpack_from(">h", answer, 4)
        if error:
            raise CliError(f"the broker does not offer SASL mechanism {mechanism} (error {error})")
        client = SaslClient(self.security)
        token: bytes | None = client.first()
        try:
            while token is not None:
                token = client.next(self._token(sock, token))
        except SaslAuthenticationError as exc:
            raise CliError(str(exc)) from None

    def _token(self, sock: socket.socket, token: bytes) -> bytes:
        """One SaslAuthenticate v1 exchange; the broker's token."""
        _send(sock, _request(SASL_AUTHENTICATE, 1, 2, struct.pack(">i", len(token)) + token))
        answer = _receive(sock)
        pos = 4  # correlation id
        (error,) = struct.unpack_from(">h", answer, pos)
        (length,) = struct.unpack_from(">h", answer, pos + 2)
        message = answer[pos + 4 : pos + 4 + length].decode(errors="replace") if length >= 0 else ""
        pos += 4 + max(length, 0)
        if error:
            raise CliError(f"SASL {self.security.mechanism} authentication as {self.security.username!r} failed: "
                           f"{message or f'error {error}'}")
        (size,) = struct.unpack_from(">i", answer, pos)
        return answer[pos + 4 : pos + 4 + max(size, 0)]


def _address(text: str) -> tuple[str, int]:
    host, _sep, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise CliError(f"bootstrap server {text!r} is not HOST:PORT", 2)
    return host.strip("[]"), int(port)


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A request with header v1 (api key, version, correlation id, client id)."""
    return struct.pack(">hhi", api_key, version, correlation_id) + _string("tidelog-cli") + body


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def _receive(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", read_exactly(sock, 4))
    return read_exactly(sock, size)
