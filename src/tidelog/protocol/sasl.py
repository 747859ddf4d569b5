"""SASL exchanges as pure state machines: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677).

Each server object is one exchange: feed it the client's tokens in order with ``step`` and send back
the challenge it returns, until the step says ``complete``; then ``authorization_id`` names the user.
Nothing here reads a socket, a clock or a random source: the server nonce and the key that derives
fake salts for unknown users are given to the constructor, and users are looked up through a
callable. ``ScramClient`` is the other side, for tests and for brokers that talk to other brokers.

SCRAM in one picture (``H`` the hash, ``HMAC`` keyed with its first argument)::

    client-first   n,,n=<user>,r=<client nonce>                 (gs2 header "n,," then the "bare" part)
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 ClientProof>  ("biws" is base64 of "n,,")
    server-final   v=<base64 ServerSignature>

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key")     StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof
    ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server keeps only StoredKey and ServerKey (a ``ScramCredential``), never the password: it checks
``H(ClientProof XOR HMAC(StoredKey, AuthMessage)) == StoredKey``. As in Kafka, passwords are used as
their UTF-8 bytes (no SASLprep), channel binding is refused, and the only extension understood is
Kafka's ``tokenauth`` (delegation tokens), which tidelog refuses because it has no tokens.

An unknown user gets a server-first message with a salt derived from the user name and a secret
key, so the exchange looks the same as for a known user and fails only at the proof: the answer never
tells whether a user exists.

Failures are exceptions, all ``SaslError``::

    SaslError                 root
    ├── SaslMalformed         the token breaks the mechanism's grammar (the client's fault)
    ├── SaslAuthenticationFailed
    │                         well-formed, but the credentials are wrong or the user unknown
    └── SaslIllegalState      a token after the exchange ended (a replayed client-final, say)

Once a step has raised, every later step raises ``SaslIllegalState``: an exchange is one attempt.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"

# Kafka's bounds for SCRAM iterations (ScramMechanism.minIterations; AlterUserScramCredentials' max).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
MAX_USERNAME_BYTES = 1024


class SaslError(Exception):
    """Root of every SASL failure; ``str(error)`` is safe to send to the client."""


class SaslMalformed(SaslError):
    """The token does not follow the mechanism's grammar."""


class SaslAuthenticationFailed(SaslError):
    """Wrong password, unknown user or refused authorisation id."""


class SaslIllegalState(SaslError):
    """A step was attempted after the exchange completed or failed."""


@dataclass(frozen=True, slots=True)
class Step:
    """What the server answers to one client token."""

    challenge: bytes
    complete: bool


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    hash_name: str

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


SCRAM_MECHANISMS = {
    SCRAM_SHA_256: ScramMechanism(SCRAM_SHA_256, "sha256"),
    SCRAM_SHA_512: ScramMechanism(SCRAM_SHA_512, "sha512"),
}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and mechanism (RFC 5802 section 3): no password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def scram_credential(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
    """The stored form of ``password`` for ``mechanism``."""
    mech = SCRAM_MECHANISMS[mechanism]
    salted = mech.salted_password(password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The stored form from an already salted password (AlterUserScramCredentials sends that)."""
    mech = SCRAM_MECHANISMS[mechanism]
    client_key = mech.hmac(salted, b"Client Key")
    return ScramCredential(salt, mech.hash(client_key), mech.hmac(salted, b"Server Key"), iterations)


# -- message grammar ------------------------------------------------------------------------------


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    """``a=1,b=2`` → [("a", "1"), ("b", "2")]; attribute names are single letters (RFC 5802 5.1)."""
    pairs = []
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1 or not name.isalpha():
            # Extensions (Kafka's "tokenauth=true") have longer names; the caller handles them.
            if sep and name.isalnum():
                pairs.append((name, value))
                continue
            raise SaslMalformed(f"invalid SCRAM {what}: attribute {part[:32]!r}")
        pairs.append((name, value))
    return pairs


def _decode_saslname(value: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ',', ``=3D`` is '='; any other '=' is an error."""
    out = []
    i = 0
    while i < len(value):
        char = value[i]
        if char == "=":
            code = value[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise SaslMalformed("invalid SCRAM user name encoding")
            i += 3
        else:
            out.append(char)
            i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _valid_nonce(nonce: str) -> bool:
    # printable ASCII except ',' (RFC 5802 section 7)
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SaslMalformed(f"invalid base64 in SCRAM {what}") from None


def _text(token: bytes, what: str) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslMalformed(f"SCRAM {what} is not UTF-8") from None


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    bare: str
    username: str
    authzid: str | None
    nonce: str
    extensions: dict[str, str]


def parse_client_first(token: bytes) -> ClientFirst:
    text = _text(token, "client-first message")
    flag, sep1, rest = text.partition(",")
    authz, sep2, bare = rest.partition(",")
    if not (sep1 and sep2):
        raise SaslMalformed("invalid SCRAM client-first message")
    if flag == "y" or flag.startswith("p="):
        raise SaslMalformed("SCRAM channel binding is not supported")
    if flag != "n":
        raise SaslMalformed("invalid SCRAM gs2 header")
    authzid = None
    if authz:
        if not authz.startswith("a="):
            raise SaslMalformed("invalid SCRAM authorization id")
        authzid = _decode_saslname(authz[2:])
    attrs = _attributes(bare, "client-first message")
    if attrs and attrs[0][0] == "m":
        raise SaslMalformed("SCRAM mandatory extensions are not supported")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise SaslMalformed("invalid SCRAM client-first message: expected n=<user>,r=<nonce>")
    username = _decode_saslname(attrs[0][1])
    if not username or len(username.encode()) > MAX_USERNAME_BYTES:
        raise SaslMalformed("invalid SCRAM user name")
    nonce = attrs[1][1]
    if not _valid_nonce(nonce):
        raise SaslMalformed("invalid SCRAM client nonce")
    return ClientFirst(f"{flag},{authz},", bare, username, authzid, nonce, dict(attrs[2:]))


@dataclass(frozen=True, slots=True)
class ClientFinal:
    without_proof: str
    channel_binding: bytes
    nonce: str
    proof: bytes


def parse_client_final(token: bytes) -> ClientFinal:
    text = _text(token, "client-final message")
    without_proof, sep, proof_attr = text.rpartition(",")
    if not sep or not proof_attr.startswith("p="):
        raise SaslMalformed("invalid SCRAM client-final message: no proof")
    attrs = _attributes(without_proof, "client-final message")
    if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
        raise SaslMalformed("invalid SCRAM client-final message: expected c=...,r=...")
    return ClientFinal(
        without_proof, _b64decode(attrs[0][1], "channel binding"), attrs[1][1], _b64decode(proof_attr[2:], "proof")
    )


# -- servers --------------------------------------------------------------------------------------


class _State(enum.Enum):
    INITIAL = "initial"
    CHALLENGED = "challenged"
    COMPLETE = "complete"
    FAILED = "failed"


class PlainServer:
    """SASL/PLAIN: one token ``authzid NUL authcid NUL password``; ``verify(user, password)`` decides."""

    mechanism = PLAIN

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        self._verify = verify
        self._state = _State.INITIAL
        self.authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def step(self, token: bytes) -> Step:
        if self._state is not _State.INITIAL:
            raise SaslIllegalState("SASL/PLAIN exchange already finished")
        self._state = _State.FAILED
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslMalformed("invalid SASL/PLAIN message: expected authzid NUL authcid NUL password")
        try:
            authzid, username, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslMalformed("SASL/PLAIN message is not UTF-8") from None
        if not username:
            raise SaslMalformed("Authentication failed: username not specified")
        if not password:
            raise SaslMalformed("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if not self._verify(username, password):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        self._state = _State.COMPLETE
        self.authorization_id = username
        return Step(b"", True)


class ScramServer:
    """The server side of one SCRAM exchange (two client tokens: client-first, client-final)."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        server_nonce: str,
        fake_salt_key: bytes,
        fake_iterations: int = MIN_ITERATIONS,
    ) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism}")
        if not _valid_nonce(server_nonce):
            raise ValueError("server nonce must be printable ASCII without ','")
        self.mechanism = mechanism
        self._mech = SCRAM_MECHANISMS[mechanism]
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._fake_salt_key = fake_salt_key
        self._fake_iterations = fake_iterations
        self._state = _State.INITIAL
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._known_user = False
        self.authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def step(self, token: bytes) -> Step:
        state = self._state
        if state in (_State.COMPLETE, _State.FAILED):
            raise SaslIllegalState(f"{self.mechanism} exchange already finished")
        self._state = _State.FAILED  # until this step succeeds
        if state is _State.INITIAL:
            challenge = self._on_client_first(token)
            self._state = _State.CHALLENGED
            return Step(challenge, False)
        challenge = self._on_client_final(token)
        self._state = _State.COMPLETE
        return Step(challenge, True)

    def _on_client_first(self, token: bytes) -> bytes:
        first = parse_client_first(token)
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise SaslAuthenticationFailed("Authentication failed: delegation tokens are not supported")
        if first.authzid is not None and first.authzid != first.username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credential = self._lookup(first.username)
        self._known_user = credential is not None
        if credential is None:
            credential = self._fake_credential(first.username)
        self._first = first
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={first.nonce}{self._server_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _fake_credential(self, username: str) -> ScramCredential:
        salt = hmac.new(self._fake_salt_key, username.encode(), "sha256").digest()[:16]
        unguessable = hmac.new(self._fake_salt_key, b"stored key " + username.encode(), "sha512").digest()
        size = self._mech.digest_size
        return ScramCredential(salt, unguessable[:size], unguessable[:size], self._fake_iterations)

    def _on_client_final(self, token: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        final = parse_client_final(token)
        if final.channel_binding != first.gs2_header.encode():
            raise SaslMalformed("SCRAM channel binding does not match the gs2 header")
        if final.nonce != first.nonce + self._server_nonce:
            raise SaslAuthenticationFailed("Authentication failed: invalid SCRAM nonce")
        if len(final.proof) != self._mech.digest_size:
            raise SaslMalformed("invalid SCRAM proof length")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        client_signature = self._mech.hmac(credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(final.proof, client_signature, strict=True))
        if not (hmac.compare_digest(self._mech.hash(client_key), credential.stored_key) and self._known_user):
            raise SaslAuthenticationFailed(
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism {self.mechanism}"
            )
        self.authorization_id = first.username
        signature = self._mech.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(signature)


# -- client ---------------------------------------------------------------------------------------


class ScramClient:
    """The client side of SCRAM: ``first()``, then ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str, client_nonce: str) -> None:
        self._mech = SCRAM_MECHANISMS[mechanism]
        self._password = password
        self._nonce = client_nonce
        self._bare = f"n={encode_saslname(username)},r={client_nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first, "server-first message")
        attrs = dict(_attributes(text, "server-first message"))
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or not iterations.isdigit():
            raise SaslMalformed("invalid SCRAM server-first message")
        salted = self._mech.salted_password(self._password, _b64decode(salt, "salt"), int(iterations))
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = self._mech.hmac(salted, b"Client Key")
        signature = self._mech.hmac(self._mech.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._mech.hmac(self._mech.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        text = _text(server_final, "server-final message")
        if not text.startswith("v="):
            return False
        return hmac.compare_digest(_b64decode(text[2:], "server signature"), self._server_signature)
