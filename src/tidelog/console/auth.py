"""Console login: a password file, signed session cookies, two roles, and CSRF tokens on every form.

Password file (``console.users.file``): one user per line, ``NAME ROLE HASH``, blank lines and ``#``
comments ignored. ``ROLE`` is ``read-only`` or ``admin``. ``HASH`` is
``scrypt$N$r$p$SALT$KEY`` (``hashlib.scrypt``, base64 salt and key; ``hash_password`` makes one,
``tidelog console hash-password`` prints one). A bad line is an error at start-up naming the line.

Session cookie ``tidelog_console``: ``USER|ROLE|EXPIRY|NONCE|MAC`` where MAC is HMAC-SHA256 over the
rest with the session secret (``console.session.secret.file``, else 32 random bytes per process, so
a restart logs everyone out). The cookie is ``HttpOnly``, ``SameSite=Strict``, and ``Secure`` over TLS.
The user's role is re-read from the password file at each request, so removing a user or demoting
one takes effect at once.

CSRF: every form carries ``csrf`` = HMAC(secret, "csrf|" + NONCE) of the visitor's session; every
POST (login included, whose nonce comes from a pre-login cookie) is refused with 403 unless the field
matches. With SameSite=Strict this is defence in depth.

Without a password file every visitor gets an ``admin`` session named ``anonymous`` (a console on a
developer's loopback); the start-up log says so. Nothing here logs a password, a hash or a cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

ROLES = ("read-only", "admin")
COOKIE = "tidelog_console"
PRE_LOGIN_COOKIE = "tidelog_console_pre"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1


class UsersFileError(ValueError):
    """The password file does not parse; the message names the line (never the hash)."""


@dataclass(frozen=True)
class User:
    name: str
    role: str
    password_hash: str

    @property
    def admin(self) -> bool:
        return self.role == "admin"


@dataclass(frozen=True)
class Session:
    user: str
    role: str
    nonce: str

    @property
    def admin(self) -> bool:
        return self.role == "admin"


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=32)
    return f"scrypt${n}${r}${p}${base64.b64encode(salt).decode()}${base64.b64encode(key).decode()}"


def verify_password(password: str, encoded: str) -> bool:
    try:
        scheme, n, r, p, salt, key = encoded.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(key)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(expected), maxmem=256 * 1024 * 1024)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def parse_users(text: str, origin: str = "users") -> dict[str, User]:
    users: dict[str, User] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3 or parts[1] not in ROLES or not parts[2].startswith("scrypt$") \
                or parts[2].count("$") != 5:
            raise UsersFileError(f"{origin}:{number}: expected 'NAME ROLE scrypt$N$r$p$SALT$KEY' with ROLE one "
                                 f"of {', '.join(ROLES)}")
        if parts[0] in users:
            raise UsersFileError(f"{origin}:{number}: user {parts[0]!r} is listed twice")
        users[parts[0]] = User(parts[0], parts[1], parts[2])
    return users


class Authenticator:
    """Checks passwords, issues and reads session cookies, makes and checks CSRF tokens."""

    def __init__(self, users_file: Path | None, secret: bytes | None = None, max_age_s: int = 8 * 3600) -> None:
        self.users_file = users_file
        self.secret = secret or secrets.token_bytes(32)
        self.max_age_s = max_age_s
        self._users: dict[str, User] = {}
        self._mtime = -1.0
        if users_file is not None:
            self.users()  # a bad file stops start-up

    @property
    def enabled(self) -> bool:
        return self.users_file is not None

    def users(self) -> dict[str, User]:
        if self.users_file is None:
            return {}
        mtime = self.users_file.stat().st_mtime
        if mtime != self._mtime:
            self._users = parse_users(self.users_file.read_text(), str(self.users_file))
            self._mtime = mtime
        return self._users

    def login(self, name: str, password: str) -> User | None:
        user = self.users().get(name)
        if user is None:
            verify_password(password, hash_password("x", n=2**10))  # spend time all the same
            return None
        return user if verify_password(password, user.password_hash) else None

    def _mac(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def issue(self, user: str, role: str, now: float | None = None) -> str:
        expiry = int((now or time.time()) + self.max_age_s)
        body = f"{user}|{role}|{expiry}|{secrets.token_hex(16)}"
        return f"{body}|{self._mac(body)}"

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        if not cookie or cookie.count("|") != 4:
            return None
        body, _, mac = cookie.rpartition("|")
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        user, role, expiry, nonce = body.split("|")
        if not expiry.isdigit() or int(expiry) < (now or time.time()):
            return None
        if self.enabled:
            known = self.users().get(user)
            if known is None:
                return None
            role = known.role
        return Session(user, role, nonce)

    def csrf_token(self, nonce: str) -> str:
        return self._mac("csrf|" + nonce)

    def csrf_ok(self, nonce: str, token: str) -> bool:
        return bool(nonce) and hmac.compare_digest(self.csrf_token(nonce), token)
