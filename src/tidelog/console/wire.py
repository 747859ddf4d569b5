"""Kafka requests that librdkafka does not offer, on the console's own connection settings.

confluent-kafka 2.16 has no DescribeClientQuotas or AlterClientQuotas; the quotas page sends them
with the project's codec (kio entities). ``Wire.call`` opens one connection to a bootstrap server
(the first that accepts one, in the order given), authenticates it exactly as the console's
``kafka.*`` settings tell librdkafka to, sends one request, decodes its answer and closes: quota
requests are rare (a page view, a form), so there is no pool to keep healthy. Any broker answers
both requests (a Kafka broker forwards AlterClientQuotas to its controller).

Settings read (librdkafka's names, from ``ConsoleConfig.kafka_config``, by ``clients.security.ClientSecurity``,
shared with the CLI and the governor):

- ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
- ``sasl.mechanism`` (or ``sasl.mechanisms``) PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with
  ``sasl.username`` and ``sasl.password``: SaslHandshake v1 then SaslAuthenticate v1 tokens; the
  SCRAM server signature is checked (``clients.security.SaslClient``);
- ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
  ``enable.ssl.certificate.verification``, ``ssl.endpoint.identification.algorithm``.

Every failure is a ``KafkaFailure``: the broker's error by Kafka's name when it answered with one,
``NETWORK_EXCEPTION`` when the connection failed, ``SASL_AUTHENTICATION_FAILED`` when it refused the
console's credentials, ``UNSUPPORTED_VERSION`` when its answer does not decode (a broker that does not
serve the request). The password never appears in a message.
"""

from __future__ import annotations

import io
import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from kio.index import load_response_schema
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader, entity_writer

from tidelog.clients.security import (
    SASL_MECHANISMS,
    ClientSecurity,
    SaslAuthenticationError,
    SaslClient,
    read_exactly,
)
from tidelog.common.errors import ConfigError, ErrorCode
from tidelog.console.kafka import KafkaFailure

_SIZE = struct.Struct(">i")
MAX_ANSWER_BYTES = 64 * 1024 * 1024
_ERROR_NAMES = {int(e.value): e.name for e in ErrorCode}


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(int(code), f"ERROR_{int(code)}")


class Wire:
    def __init__(self, config: Mapping[str, Any], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        protocol = str(config.get("security.protocol", "PLAINTEXT")).strip().upper()
        mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI"))).strip().upper()
        if protocol.startswith("SASL_") and mechanism not in SASL_MECHANISMS:
            raise KafkaFailure("UNSUPPORTED_SASL_MECHANISM", f"the console speaks PLAIN and SCRAM, not {mechanism}")
        try:
            self.security = ClientSecurity.from_config(config)  # shared with the CLI and the governor
        except ConfigError as exc:
            raise KafkaFailure("INVALID_CONFIG", str(exc)) from None
        self.addresses = [_address(text) for text in str(config["bootstrap.servers"]).split(",") if text.strip()]
        if not self.addresses:
            raise KafkaFailure("INVALID_CONFIG", "bootstrap.servers is empty")
        self._correlation = 0

    def call(self, request: Any) -> Any:
        """Send one request (a kio request entity) on a new connection; its decoded answer. A server
        that cannot be reached is passed over for the next; an error once connected is final."""
        unreachable = []
        for address in self.addresses:
            try:
                sock = socket.create_connection(address, timeout=self.timeout_s)
            except OSError as exc:
                unreachable.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            try:
                with self._secure(sock, address) as ready:
                    return self._exchange(ready, request, "tidelog-console")
            except (OSError, ssl.SSLError) as exc:
                raise KafkaFailure("NETWORK_EXCEPTION", f"{address[0]}:{address[1]}: {exc}") from None
        raise KafkaFailure("NETWORK_EXCEPTION", "no bootstrap server reachable: " + "; ".join(unreachable))

    def _secure(self, sock: socket.socket, address: tuple[str, int]) -> socket.socket:
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
        handshake = self._exchange(sock, SaslHandshakeRequest(mechanism=mechanism), "tidelog-console")
        if handshake.error_code != 0:
            raise KafkaFailure("UNSUPPORTED_SASL_MECHANISM",
                               f"the broker offers {', '.join(handshake.mechanisms)}, not {mechanism}")
        client = SaslClient(self.security)
        token: bytes | None = client.first()
        try:
            while token is not None:
                token = client.next(self._token(sock, token))
        except SaslAuthenticationError as exc:
            raise KafkaFailure(exc.error, str(exc)) from None

    def _token(self, sock: socket.socket, token: bytes) -> bytes:
        answer = self._exchange(sock, SaslAuthenticateRequest(auth_bytes=token), "tidelog-console")
        if answer.error_code != 0:
            raise KafkaFailure(error_name(answer.error_code),
                               f"authentication as {self.security.username!r} failed: {answer.error_message or ''}".strip())
        return bytes(answer.auth_bytes)

    def _exchange(self, sock: socket.socket, request: Any, client_id: str) -> Any:
        self._correlation += 1
        header_type = type(request).__header_schema__
        buffer = io.BytesIO()
        entity_writer(header_type)(buffer, header_type(
            request_api_key=request.__api_key__, request_api_version=request.__version__,
            correlation_id=self._correlation, client_id=client_id))
        entity_writer(type(request))(buffer, request)
        payload = buffer.getvalue()
        sock.sendall(_SIZE.pack(len(payload)) + payload)
        (size,) = _SIZE.unpack(read_exactly(sock, 4))
        if not 0 < size <= MAX_ANSWER_BYTES:
            raise OSError(f"an answer frame of {size} bytes")
        frame = read_exactly(sock, size)
        response_type = load_response_schema(request.__api_key__, request.__version__)
        try:
            header, offset = entity_reader(response_type.__header_schema__)(frame, 0)
            body, _ = entity_reader(response_type)(frame, offset)
        except Exception as exc:  # an answer in another version's shape: a broker without this request
            raise KafkaFailure("UNSUPPORTED_VERSION", f"the answer to {type(request).__name__} "
                               f"v{request.__version__} does not decode ({type(exc).__name__}): "
                               "the broker may not serve it") from None
        if header.correlation_id != self._correlation:
            raise OSError("the broker answered out of order")
        return body


def _address(text: str) -> tuple[str, int]:
    server = text.strip().split("://", 1)[-1]
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        raise KafkaFailure("INVALID_CONFIG", f"bootstrap server {server!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
