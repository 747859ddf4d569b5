"""Console login pieces without a server: password hashes, the users file, session cookies, CSRF tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.console.auth import Authenticator, UsersFileError, hash_password, parse_users, verify_password


def fast_hash(password: str) -> str:
    return hash_password(password, n=2**10)


def test_a_hash_verifies_its_password_only_and_is_salted() -> None:
    encoded = fast_hash("s3cret")
    assert encoded.startswith("scrypt$1024$8$1$")
    assert verify_password("s3cret", encoded)
    assert not verify_password("s3cret ", encoded)
    assert fast_hash("s3cret") != encoded  # a new salt each time
    assert not verify_password("s3cret", "scrypt$garbage")
    assert not verify_password("s3cret", "md5$1$2$3$4$5")


def test_users_file_errors_name_the_line_and_never_echo_the_hash() -> None:
    good = fast_hash("pw")
    users = parse_users(f"# comment\n\nalice admin {good}\nbob read-only {good}\n")
    assert {u.name: u.role for u in users.values()} == {"alice": "admin", "bob": "read-only"}
    with pytest.raises(UsersFileError, match=r"users:2: expected") as bad_role:
        parse_users(f"alice admin {good}\ncarol superuser {good}\n")
    assert good not in str(bad_role.value)
    with pytest.raises(UsersFileError, match="listed twice"):
        parse_users(f"alice admin {good}\nalice read-only {good}\n")


def test_session_cookies_are_signed_expire_and_follow_the_users_file(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(f"alice admin {fast_hash('pw')}\n")
    auth = Authenticator(path, b"k" * 32, max_age_s=60)
    assert auth.login("alice", "pw") is not None
    assert auth.login("alice", "nope") is None and auth.login("mallory", "pw") is None
    cookie = auth.issue("alice", "admin", now=1000)
    session = auth.session(cookie, now=1030)
    assert session is not None and session.admin
    assert auth.session(cookie, now=1061) is None  # expired
    forged = cookie.replace("alice|admin", "mallory|admin")
    assert auth.session(forged, now=1030) is None
    assert Authenticator(path, b"x" * 32).session(cookie, now=1030) is None  # another secret
    path.write_text(f"alice read-only {fast_hash('pw')}\n")
    demoted = auth.session(cookie, now=1030)
    assert demoted is not None and not demoted.admin  # the file wins over the cookie's role


def test_csrf_tokens_are_bound_to_the_session() -> None:
    auth = Authenticator(None, b"k" * 32)
    assert not auth.enabled
    token = auth.csrf_token("nonce-a")
    assert auth.csrf_ok("nonce-a", token)
    assert not auth.csrf_ok("nonce-b", token)
    assert not auth.csrf_ok("", auth.csrf_token(""))
