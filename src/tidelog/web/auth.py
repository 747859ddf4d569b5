"""Bearer-token authentication, mapping each token to a Kafka principal (``User:alice``).

Tokens file format (``load_tokens``): one ``TOKEN PRINCIPAL`` pair per line, blank lines and ``#``
comments ignored; a principal is ``Type:name`` as in Kafka ACLs. A duplicate token or a line that does
not parse is an error at start-up, never a silent skip.

``BearerAuth`` is a pure ASGI middleware: a request to any path outside ``open_paths`` must carry
``Authorization: Bearer TOKEN`` with a known token, else it is answered 401 with
``WWW-Authenticate: Bearer`` and the JSON error body. Tokens are compared in constant time. The
principal is put in ``scope["state"]["principal"]`` (``request.state.principal`` in Starlette);
without this middleware the principal is ``ANONYMOUS``.

Client certificates: with a ``PrincipalMapper`` (``cert_principal``), a request without an
``Authorization`` header whose connection presented a verified certificate (ASGI's TLS extension,
``scope["extensions"]["tls"]["client_cert_name"]``, which ``server`` fills in) gets the principal
the mapping rules give its subject; a subject no rule maps is answered 401. Without tokens, a
request with neither is ``ANONYMOUS`` (a listener that only *requests* certificates), as in Kafka.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from tidelog.web.cert_principal import PrincipalMapper

ANONYMOUS = "User:ANONYMOUS"
NEED_TOKEN = "a valid 'Authorization: Bearer TOKEN' header is required"


class TokenFileError(ValueError):
    """The tokens file does not parse; the message names the line."""


def parse_tokens(text: str, origin: str = "tokens") -> dict[str, str]:
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or ":" not in parts[1] or parts[1].startswith(":"):
            raise TokenFileError(f"{origin}:{number}: expected 'TOKEN Type:name', got {line[:40]!r}")
        if parts[0] in tokens:
            raise TokenFileError(f"{origin}:{number}: the token is listed twice")
        tokens[parts[0]] = parts[1]
    return tokens


def load_tokens(path: Path) -> dict[str, str]:
    return parse_tokens(path.read_text(), str(path))


def principal_of(scope: Scope) -> str:
    state = scope.get("state") or {}
    return str(state.get("principal", ANONYMOUS))


def client_cert_name(scope: Scope) -> str | None:
    """The verified client certificate's subject (RFC 2253), when the server put it in the scope."""
    tls = (scope.get("extensions") or {}).get("tls") or {}
    name = tls.get("client_cert_name")
    return name if isinstance(name, str) else None


class BearerAuth:
    def __init__(self, app: ASGIApp, tokens: dict[str, str] | None, open_paths: Iterable[str] = ("/healthz", "/readyz"),
                 certificates: PrincipalMapper | None = None) -> None:
        self.app = app
        self.tokens = [(token.encode(), principal) for token, principal in (tokens or {}).items()]
        self.require = tokens is not None
        self.certificates = certificates
        self.open_paths = frozenset(open_paths)

    def _principal(self, scope: Scope) -> tuple[str | None, str]:
        """The principal, or None and why not."""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() != b"bearer":
                    return None, NEED_TOKEN
                found = None
                for known, principal in self.tokens:  # every token compared: no early exit to time
                    if hmac.compare_digest(known, token.strip()):
                        found = principal
                return found, NEED_TOKEN
        if self.certificates is not None and (subject := client_cert_name(scope)) is not None:
            mapped = self.certificates.principal(subject)
            return mapped, f"no ssl.principal.mapping.rules rule maps the client certificate {subject!r}"
        if not self.require:
            return ANONYMOUS, ""
        return None, NEED_TOKEN if self.certificates is None else \
            "a valid 'Authorization: Bearer TOKEN' header or client certificate is required"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        principal, why = self._principal(scope)
        if principal is None:
            await _unauthorized(send, why)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


async def _unauthorized(send: Send, message: str) -> None:
    body = json.dumps({"error": {"code": "UNAUTHORIZED", "message": message}}).encode()
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                          (b"www-authenticate", b"Bearer")]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
