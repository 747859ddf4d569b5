"""The PLAIN users file and the per-connection SASL sequence (what may come before authentication)."""

from __future__ import annotations

import os
import pathlib

import pytest

from tidelog.common.errors import ConfigError, ErrorCode
from tidelog.protocol.sasl import (
    SCRAM_SHA_512,
    SaslAuthenticationFailed,
    SaslIllegalState,
    ScramClient,
    scram_credential,
)
from tidelog.security.authenticator import AuthState, SaslAuthenticator, SaslSettings
from tidelog.security.credentials import PlainUsers, hash_plain_password, parse_plain_users


def test_users_file_plain_and_hashed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "users"
    path.write_text(f"# users\nalice = alice-secret\n\nbob={hash_plain_password('bob-secret', iterations=1000)}\n")
    users = PlainUsers(path)
    assert len(users) == 2
    assert users.verify("alice", "alice-secret") and not users.verify("alice", "bob-secret")
    assert users.verify("bob", "bob-secret") and not users.verify("bob", "alice-secret")
    assert not users.verify("carol", "x")


def test_users_file_is_reread_when_it_changes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "users"
    path.write_text("alice = one\n")
    users = PlainUsers(path)
    path.write_text("alice = two\ncarol = three\n")
    os.utime(path, ns=(1, 1))  # a different modification time, whatever the clock's resolution
    assert users.verify("alice", "two") and users.verify("carol", "three")
    path.write_text("broken line without equals\n")
    os.utime(path, ns=(2, 2))
    assert users.verify("alice", "two"), "a broken file keeps the previous users"


@pytest.mark.parametrize("text", ["alice\n", "= secret\n", "alice =\n", "bob = pbkdf2_sha256$x$y\n"])
def test_malformed_users_file(text: str) -> None:
    with pytest.raises(ConfigError, match="line 1"):
        parse_plain_users(text)


def test_missing_users_file_is_a_config_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match=r"sasl\.plain\.users\.file"):
        PlainUsers(tmp_path / "nope")


# -- the sequence ----------------------------------------------------------------------------------


def settings(tmp_path: pathlib.Path, mechanisms: tuple[str, ...] = ("PLAIN", SCRAM_SHA_512)) -> SaslSettings:
    path = tmp_path / "users"
    path.write_text("alice = secret\n")
    creds = {(SCRAM_SHA_512, "alice"): scram_credential(SCRAM_SHA_512, "secret", b"0123456789abcdef", 4096)}
    return SaslSettings(mechanisms, lambda mech, user: creds.get((mech, user)), PlainUsers(path), b"k", lambda: "servernonce")


def test_only_handshake_and_api_versions_before_authentication(tmp_path: pathlib.Path) -> None:
    auth = SaslAuthenticator(settings(tmp_path))
    assert auth.allows(18) and auth.allows(17) and auth.allows(36)
    assert not auth.allows(0) and not auth.allows(3)


def test_plain_over_handshake_v1(tmp_path: pathlib.Path) -> None:
    auth = SaslAuthenticator(settings(tmp_path))
    assert auth.handshake("PLAIN", 1) is ErrorCode.NONE
    assert auth.state is AuthState.AUTHENTICATE and not auth.raw_tokens
    assert auth.authenticate(b"\x00alice\x00secret").complete
    assert auth.state is AuthState.COMPLETE and auth.principal == "User:alice"


def test_scram_over_handshake_v0_uses_raw_tokens(tmp_path: pathlib.Path) -> None:
    auth = SaslAuthenticator(settings(tmp_path))
    assert auth.handshake(SCRAM_SHA_512, 0) is ErrorCode.NONE
    assert auth.raw_tokens
    client = ScramClient(SCRAM_SHA_512, "alice", "secret", "clientnonce")
    first = auth.authenticate(client.first())
    final = auth.authenticate(client.final(first.challenge))
    assert final.complete and client.verify(final.challenge) and auth.principal == "User:alice"


def test_unknown_mechanism_fails_the_connection(tmp_path: pathlib.Path) -> None:
    auth = SaslAuthenticator(settings(tmp_path, (SCRAM_SHA_512,)))
    assert auth.handshake("PLAIN", 1) is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert auth.failed


def test_authenticate_before_handshake_fails(tmp_path: pathlib.Path) -> None:
    auth = SaslAuthenticator(settings(tmp_path))
    with pytest.raises(SaslIllegalState):
        auth.authenticate(b"\x00alice\x00secret")
    assert auth.failed


def test_second_handshake_is_illegal(tmp_path: pathlib.Path) -> None:
    auth = SaslAuthenticator(settings(tmp_path))
    auth.handshake("PLAIN", 1)
    assert auth.handshake("PLAIN", 1) is ErrorCode.ILLEGAL_SASL_STATE


def test_wrong_password_fails_and_stays_failed(tmp_path: pathlib.Path) -> None:
    auth = SaslAuthenticator(settings(tmp_path))
    auth.handshake("PLAIN", 1)
    with pytest.raises(SaslAuthenticationFailed):
        auth.authenticate(b"\x00alice\x00nope")
    assert auth.failed and auth.principal is None
    with pytest.raises(SaslIllegalState):
        auth.authenticate(b"\x00alice\x00secret")
