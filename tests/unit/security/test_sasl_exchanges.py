"""SASL state machines: RFC 7677's SCRAM-SHA-256 example byte for byte, SHA-512 both ways, PLAIN,
and every way an exchange must fail (bad proof, unknown user, replay, malformed tokens)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.protocol.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    PlainServer,
    SaslAuthenticationFailed,
    SaslError,
    SaslIllegalState,
    SaslMalformed,
    ScramClient,
    ScramCredential,
    ScramServer,
    scram_credential,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def users(mechanism: str, **passwords: str) -> dict[str, ScramCredential]:
    return {name: scram_credential(mechanism, pw, name.encode().ljust(16, b"s"), 4096) for name, pw in passwords.items()}


def rfc_server(lookup: dict[str, ScramCredential] | None = None) -> ScramServer:
    creds = lookup if lookup is not None else {"user": scram_credential(SCRAM_SHA_256, "pencil", RFC_SALT, 4096)}
    return ScramServer(SCRAM_SHA_256, creds.get, RFC_SERVER_NONCE, b"secret")


def test_rfc7677_exchange_byte_for_byte() -> None:
    server = rfc_server()
    first = server.step(RFC_CLIENT_FIRST)
    assert first.challenge == RFC_SERVER_FIRST and not first.complete
    final = server.step(RFC_CLIENT_FINAL)
    assert final.challenge == RFC_SERVER_FINAL and final.complete
    assert server.complete and server.authorization_id == "user"


def test_rfc7677_client_side_produces_the_same_messages() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.verify(RFC_SERVER_FINAL)
    assert not client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_client_and_server_agree(mechanism: str) -> None:
    server = ScramServer(mechanism, users(mechanism, alice="wonderland").get, "srvnonce", b"k")
    client = ScramClient(mechanism, "alice", "wonderland", "clinonce")
    challenge = server.step(client.first()).challenge
    done = server.step(client.final(challenge))
    assert done.complete and client.verify(done.challenge)
    assert server.authorization_id == "alice"


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_wrong_password_fails_at_the_proof(mechanism: str) -> None:
    server = ScramServer(mechanism, users(mechanism, alice="wonderland").get, "srvnonce", b"k")
    client = ScramClient(mechanism, "alice", "looking-glass", "clinonce")
    challenge = server.step(client.first()).challenge
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        server.step(client.final(challenge))
    assert not server.complete and server.authorization_id is None


def test_unknown_user_looks_like_a_known_one_until_the_proof() -> None:
    creds = users(SCRAM_SHA_256, alice="pw")
    known = ScramServer(SCRAM_SHA_256, creds.get, "srv", b"k").step(b"n,,n=alice,r=abc").challenge
    unknown_a = ScramServer(SCRAM_SHA_256, creds.get, "srv", b"k").step(b"n,,n=mallory,r=abc").challenge
    unknown_b = ScramServer(SCRAM_SHA_256, creds.get, "srv", b"k").step(b"n,,n=mallory,r=abc").challenge
    shape = [part[:2] for part in known.split(b",")]
    assert [part[:2] for part in unknown_a.split(b",")] == shape
    assert unknown_a == unknown_b, "the fake salt is stable per user, so probing twice reveals nothing"
    server = ScramServer(SCRAM_SHA_256, creds.get, "srv", b"k")
    client = ScramClient(SCRAM_SHA_256, "mallory", "pw", "abc")
    challenge = server.step(client.first()).challenge
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        server.step(client.final(challenge))


def test_replayed_client_final_is_refused() -> None:
    server = rfc_server()
    server.step(RFC_CLIENT_FIRST)
    server.step(RFC_CLIENT_FINAL)
    with pytest.raises(SaslIllegalState):
        server.step(RFC_CLIENT_FINAL)
    # In a new exchange the server nonce differs, so the recorded final message no longer matches.
    fresh = ScramServer(SCRAM_SHA_256, rfc_server()._lookup, "another-nonce", b"secret")
    fresh.step(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationFailed, match="nonce"):
        fresh.step(RFC_CLIENT_FINAL)


def test_a_failed_exchange_cannot_continue() -> None:
    server = rfc_server()
    with pytest.raises(SaslMalformed):
        server.step(b"garbage")
    with pytest.raises(SaslIllegalState):
        server.step(RFC_CLIENT_FIRST)


@pytest.mark.parametrize(
    "client_first",
    [
        b"",
        b"n,,",
        b"y,,n=user,r=abc",  # client supports channel binding
        b"p=tls-unique,,n=user,r=abc",  # client requires channel binding
        b"x,,n=user,r=abc",
        b"n,,m=ext,n=user,r=abc",  # mandatory extension
        b"n,,r=abc,n=user",
        b"n,,n=,r=abc",
        b"n,,n=us=er,r=abc",  # '=' must be escaped as =3D
        b"n,,n=user,r=a,b",
        b"n,,n=user,r=",
        b"n,,n=user,r=\x7fx",
        b"n,a,n=user,r=abc",
        b"n,,n=\xff,r=abc",
        b"n,,n=" + b"u" * 2000 + b",r=abc",
    ],
)
def test_malformed_client_first_is_refused(client_first: bytes) -> None:
    with pytest.raises(SaslMalformed):
        rfc_server().step(client_first)


def test_authorization_id_must_be_the_user() -> None:
    server = rfc_server()
    assert not server.step(b"n,a=user,n=user,r=abc").complete
    with pytest.raises(SaslAuthenticationFailed, match="authorization id"):
        rfc_server().step(b"n,a=admin,n=user,r=abc")


def test_escaped_user_names_are_decoded() -> None:
    creds = users(SCRAM_SHA_256, **{"a,b=c": "pw"})
    server = ScramServer(SCRAM_SHA_256, creds.get, "srv", b"k")
    client = ScramClient(SCRAM_SHA_256, "a,b=c", "pw", "n1")
    assert client.first() == b"n,,n=a=2Cb=3Dc,r=n1"
    challenge = server.step(client.first()).challenge
    assert server.step(client.final(challenge)).complete
    assert server.authorization_id == "a,b=c"


def test_delegation_token_extension_is_refused() -> None:
    with pytest.raises(SaslAuthenticationFailed, match="delegation tokens"):
        rfc_server().step(b"n,,n=user,r=abc,tokenauth=true")


@pytest.mark.parametrize(
    "client_final",
    [
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",  # no proof
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!!",  # bad base64
        b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",  # short proof
        b"r=x,c=biws,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    ],
)
def test_malformed_client_final_is_refused(client_final: bytes) -> None:
    server = rfc_server()
    server.step(RFC_CLIENT_FIRST)
    with pytest.raises(SaslMalformed):
        server.step(client_final)


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_any_tokens_either_progress_or_raise_a_sasl_error(first: bytes, final: bytes) -> None:
    server = rfc_server()
    try:
        step = server.step(first)
        assert not step.complete
        server.step(final)
    except SaslError:
        return
    raise AssertionError("random bytes authenticated")


@given(st.text(max_size=40), st.text(max_size=40))
def test_structured_garbage_in_scram_fields_raises_only_sasl_errors(user: str, nonce: str) -> None:
    server = rfc_server()
    try:
        server.step(f"n,,n={user},r={nonce}".encode())
        server.step(f"c=biws,r={nonce},p={nonce}".encode())
    except SaslError:
        return
    raise AssertionError("garbage authenticated")


# -- PLAIN ----------------------------------------------------------------------------------------


def plain(users: dict[str, str]) -> PlainServer:
    return PlainServer(lambda user, password: users.get(user) == password)


def test_plain_accepts_the_right_password() -> None:
    server = plain({"alice": "secret"})
    step = server.step(b"\x00alice\x00secret")
    assert step.complete and step.challenge == b""
    assert server.authorization_id == "alice"
    with pytest.raises(SaslIllegalState):
        server.step(b"\x00alice\x00secret")


def test_plain_accepts_an_authzid_equal_to_the_user() -> None:
    assert plain({"alice": "secret"}).step(b"alice\x00alice\x00secret").complete


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (b"\x00alice\x00wrong", SaslAuthenticationFailed),
        (b"\x00bob\x00secret", SaslAuthenticationFailed),
        (b"admin\x00alice\x00secret", SaslAuthenticationFailed),
        (b"alice\x00secret", SaslMalformed),
        (b"\x00\x00secret", SaslMalformed),
        (b"\x00alice\x00", SaslMalformed),
        (b"\x00alice\x00secret\x00x", SaslMalformed),
        (b"\x00al\xffice\x00secret", SaslMalformed),
    ],
)
def test_plain_refuses(token: bytes, error: type[SaslError]) -> None:
    with pytest.raises(error):
        plain({"alice": "secret"}).step(token)
