"""One Kafka request on its own connection, for the CLI commands librdkafka cannot do itself.

``tidelog groups delete-offsets`` (OffsetDelete) and ``tidelog transactions list|describe``
(ListTransactions, DescribeTransactions) build their requests and read their answers; this module
carries them over the listener's security protocol, configured with the librdkafka keys the rest of
the CLI reads (``--command-config``, ``-X``):

- ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
- ``sasl.mechanism`` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with ``sasl.username`` and
  ``sasl.password``: SaslHandshake v1, then SaslAuthenticate v1 tokens (``protocol.sasl``'s SCRAM
  client, whose server-final signature is checked);
- ``ssl.ca.location`` (else the system's CAs), ``ssl.certificate.location``, ``ssl.key.location``,
  ``ssl.key.password``, ``enable.ssl.certificate.verification`` and
  ``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the host name; ``none``
  does not), as librdkafka reads them.

Frames: a request is ``int32 size`` + the header and body the caller encoded; the answer is the
frame after its size. The SASL requests are encoded here (both are non-flexible at v1).
"""

from __future__ import annotations

import secrets
import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from tidelog.cli.common import CliError
from tidelog.protocol.sasl import PLAIN, SCRAM_MECHANISMS, ScramClient

__all__ = ["Wire"]

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class Wire:
    """Connections to the brokers of one CLI invocation's client configuration."""

    def __init__(self, config: Mapping[str, Any], timeout: float) -> None:
        self.timeout = timeout
        self.protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
        if self.protocol not in _PROTOCOLS:
            raise CliError(f"security.protocol {self.protocol} is not one of {', '.join(_PROTOCOLS)}", 2)
        self.mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI"))).upper()
        self.username = str(config.get("sasl.username", ""))
        self.password = str(config.get("sasl.password", ""))
        if self.protocol.startswith("SASL_") and self.mechanism != PLAIN and self.mechanism not in SCRAM_MECHANISMS:
            raise CliError(f"sasl.mechanism {self.mechanism} is not supported here (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", 2)
        self._tls = _tls_context(config) if self.protocol in ("SSL", "SASL_SSL") else None
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
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=address[0])
            if self.protocol.startswith("SASL_"):
                self._authenticate(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def _authenticate(self, sock: socket.socket) -> None:
        _send(sock, _request(SASL_HANDSHAKE, 1, 1, _string(self.mechanism)))
        answer = _receive(sock)
        (error,) = struct.unpack_from(">h", answer, 4)
        if error:
            raise CliError(f"the broker does not offer SASL mechanism {self.mechanism} (error {error})")
        if self.mechanism == PLAIN:
            self._token(sock, f"\0{self.username}\0{self.password}".encode())
            return
        scram = ScramClient(self.mechanism, self.username, self.password, secrets.token_urlsafe(18))
        server_first = self._token(sock, scram.first())
        server_final = self._token(sock, scram.final(server_first))
        if not scram.verify(server_final):
            raise CliError("the broker's SCRAM signature does not match: it does not know this password")

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
            raise CliError(f"authentication as {self.username!r} failed: {message or f'error {error}'}")
        (size,) = struct.unpack_from(">i", answer, pos)
        return answer[pos + 4 : pos + 4 + max(size, 0)]


def _tls_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    if config.get("ssl.certificate.location"):
        context.load_cert_chain(str(config["ssl.certificate.location"]), config.get("ssl.key.location") or None,
                                config.get("ssl.key.password") or None)
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if str(config.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


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
    (size,) = struct.unpack(">i", _exactly(sock, 4))
    return _exactly(sock, size)


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the broker closed the connection")
        data += chunk
    return bytes(data)
