"""Credentials the broker checks: SASL/PLAIN users from a file, and SCRAM secrets for new users.

SCRAM credentials live in the cluster metadata (salted: salt, StoredKey, ServerKey, iterations, never
the password) and are managed with AlterUserScramCredentials; the broker hands the SASL layer a
lookup into the current metadata image. PLAIN users live in a file named by
``sasl.plain.users.file``, read again whenever its modification time or size changes::

    # one user per line: name = secret     (blank lines and lines starting with # are ignored)
    alice = alice-secret
    bob = pbkdf2_sha256$100000$c2FsdHNhbHQ=$<base64 of PBKDF2-HMAC-SHA256(password, salt, iterations)>

A secret that starts with ``pbkdf2_sha256$`` is a hash (make one with ``hash_plain_password``); any
other secret is the password itself, so keep the file readable by the broker only. The name ends at
the first ``=`` (names cannot contain one) and both sides are stripped of surrounding blanks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import pathlib
import threading
from dataclasses import dataclass

from tidelog.common.errors import ConfigError

log = logging.getLogger(__name__)

HASH_PREFIX = "pbkdf2_sha256$"
DEFAULT_HASH_ITERATIONS = 100_000


def hash_plain_password(password: str, salt: bytes | None = None, iterations: int = DEFAULT_HASH_ITERATIONS) -> str:
    """A ``pbkdf2_sha256$<iterations>$<salt>$<hash>`` line value for the PLAIN users file."""
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{HASH_PREFIX}{iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


@dataclass(frozen=True, slots=True)
class _Secret:
    plain: bytes | None = None
    salt: bytes = b""
    iterations: int = 0
    digest: bytes = b""

    def matches(self, password: str) -> bool:
        if self.plain is not None:
            return hmac.compare_digest(self.plain, password.encode())
        candidate = hashlib.pbkdf2_hmac("sha256", password.encode(), self.salt, self.iterations)
        return hmac.compare_digest(candidate, self.digest)


def _parse_secret(value: str, where: str) -> _Secret:
    if not value.startswith(HASH_PREFIX):
        return _Secret(plain=value.encode())
    try:
        iterations, salt, digest = value[len(HASH_PREFIX):].split("$")
        return _Secret(None, base64.b64decode(salt, validate=True), int(iterations), base64.b64decode(digest, validate=True))
    except (ValueError, binascii.Error):
        raise ConfigError(f"{where}: malformed {HASH_PREFIX} hash") from None


def parse_plain_users(text: str, source: str = "sasl.plain.users.file") -> dict[str, _Secret]:
    users: dict[str, _Secret] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, secret = line.partition("=")
        name, secret = name.strip(), secret.strip()
        where = f"{source} line {number}"
        if not sep or not name or not secret:
            raise ConfigError(f"{where}: expected 'name = password'")
        users[name] = _parse_secret(secret, where)
    return users


class PlainUsers:
    """The PLAIN users file, re-read when it changes. ``verify`` is thread-safe."""

    def __init__(self, path: str | pathlib.Path) -> None:
        self.path = pathlib.Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, _Secret] = {}
        self._reload(strict=True)

    def _reload(self, strict: bool) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            users = parse_plain_users(self.path.read_text(), str(self.path))
        except (OSError, UnicodeDecodeError, ConfigError) as exc:
            if strict:
                raise ConfigError(f"cannot read sasl.plain.users.file {self.path}: {exc}") from None
            log.error("keeping the previous PLAIN users: cannot read %s: %s", self.path, exc)
            return
        self._users, self._stamp = users, stamp
        log.info("loaded %d SASL/PLAIN user(s) from %s", len(users), self.path)

    def verify(self, username: str, password: str) -> bool:
        with self._lock:
            self._reload(strict=False)
            secret = self._users.get(username)
        if secret is None:
            hmac.compare_digest(password.encode(), password.encode())  # keep the unknown-user path similar in cost
            return False
        return secret.matches(password)

    def __len__(self) -> int:
        return len(self._users)
