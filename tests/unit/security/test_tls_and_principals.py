"""TLS contexts from Kafka's PEM settings, and principals from certificates (mapping rules)."""

from __future__ import annotations

import pathlib
import socket
import ssl
import threading

import pytest

from tidelog.common.config import BrokerConfig
from tidelog.common.errors import ConfigError
from tidelog.security.principal import (
    ANONYMOUS,
    NoMatchingRule,
    SslPrincipalMapper,
    distinguished_name,
    parse_rules,
)
from tidelog.security.tls import TlsSettings, server_context
from unit.security.pki import Pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> dict[str, object] | None:
    """Run one TLS handshake over a socket pair; the server side's view of the client certificate."""
    left, right = socket.socketpair()
    seen: dict[str, object] = {}

    def serve() -> None:
        try:
            with server.wrap_socket(left, server_side=True) as tls:
                seen["cert"] = tls.getpeercert()
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            seen["error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(right, server_hostname="localhost") as tls:
            tls.sendall(b"x")
    except (ssl.SSLError, OSError) as exc:
        seen.setdefault("client_error", exc)
    thread.join(5)
    if "error" in seen or "client_error" in seen:
        return None
    cert = seen.get("cert")
    return cert if isinstance(cert, dict) else {}


def client_context(pki: Pki, cert: pathlib.Path | None = None, key: pathlib.Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def test_server_context_from_a_pem_keystore_serves_tls(pki: Pki) -> None:
    server = pki.server()
    context = server_context(TlsSettings(str(server.bundle)))
    assert handshake(context, client_context(pki)) == {}, "no client certificate asked for"


def test_an_encrypted_key_needs_its_password(pki: Pki) -> None:
    server = pki.server("server-enc")
    bundle = pki.encrypted_bundle(server, "s3cret")
    context = server_context(TlsSettings(str(bundle), key_password="s3cret"))
    assert handshake(context, client_context(pki)) == {}
    with pytest.raises(ConfigError, match=r"ssl\.key\.password"):
        server_context(TlsSettings(str(bundle), key_password="wrong"))


def test_required_client_auth_refuses_a_client_without_certificate(pki: Pki) -> None:
    server = pki.server()
    context = server_context(TlsSettings(str(server.bundle), truststore_location=str(pki.ca_cert), client_auth="required"))
    assert handshake(context, client_context(pki)) is None
    alice = pki.client("/C=US/O=Acme/OU=eng/CN=alice", "alice")
    cert = handshake(context, client_context(pki, alice.cert, alice.key))
    assert cert is not None
    assert distinguished_name(cert) == "CN=alice,OU=eng,O=Acme,C=US"


def test_requested_client_auth_accepts_both(pki: Pki) -> None:
    server = pki.server()
    context = server_context(TlsSettings(str(server.bundle), truststore_location=str(pki.ca_cert), client_auth="requested"))
    assert handshake(context, client_context(pki)) == {}
    bob = pki.client("/CN=bob", "bob")
    assert handshake(context, client_context(pki, bob.cert, bob.key)) not in (None, {})


def test_a_certificate_from_another_ca_is_refused(pki: Pki, tmp_path: pathlib.Path) -> None:
    other = Pki(tmp_path / "other", "someone else")
    mallory = other.client("/CN=mallory", "mallory")
    context = server_context(TlsSettings(str(pki.server().bundle), truststore_location=str(pki.ca_cert), client_auth="requested"))
    assert handshake(context, client_context(pki, mallory.cert, mallory.key)) is None


def test_tls_1_3_only(pki: Pki) -> None:
    context = server_context(TlsSettings(str(pki.server().bundle), enabled_protocols=("TLSv1.3",)))
    old_client = client_context(pki)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake(context, old_client) is None
    assert handshake(context, client_context(pki)) == {}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (TlsSettings(None), "ssl.keystore.location"),
        (TlsSettings("/nonexistent.pem"), "does not exist"),
        (TlsSettings("KEYSTORE", client_auth="required"), "ssl.truststore.location"),
        (TlsSettings("KEYSTORE", client_auth="sometimes"), "ssl.client.auth"),
        (TlsSettings("KEYSTORE", enabled_protocols=("TLSv1",)), "ssl.enabled.protocols"),
        (TlsSettings("CA"), "cannot load"),
    ],
)
def test_bad_settings_name_the_setting(pki: Pki, settings: TlsSettings, message: str) -> None:
    keystore = str(pki.server().bundle)
    location = {"KEYSTORE": keystore, "CA": str(pki.ca_cert)}.get(settings.keystore_location or "", settings.keystore_location)
    fixed = TlsSettings(location, None, None, None, settings.client_auth, settings.enabled_protocols)
    with pytest.raises(ConfigError, match=message):
        server_context(fixed)


def test_per_listener_settings_win(pki: Pki) -> None:
    config = BrokerConfig.from_properties({
        "ssl.keystore.location": "/plain",
        "listener.name.secure.ssl.keystore.location": "/for-secure",
        "listener.name.secure.ssl.client.auth": "required",
    })
    assert TlsSettings.for_listener(config, "SECURE").keystore_location == "/for-secure"
    assert TlsSettings.for_listener(config, "SECURE").client_auth == "required"
    assert TlsSettings.for_listener(config, "OTHER").keystore_location == "/plain"
    with pytest.raises(ConfigError, match="PEM"):
        TlsSettings.for_listener(BrokerConfig(static={"ssl.keystore.type": "JKS"}), "X")


# -- principals ------------------------------------------------------------------------------------

DN = "CN=alice,OU=ServiceUsers,O=Acme,L=Paris,ST=IDF,C=FR"


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("DEFAULT", DN),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "alice"),
        ("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L", "alice@serviceusers"),
        ("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U", "ALICE@SERVICEUSERS"),
        ("RULE:^CN=bob,.*$/bob/, RULE:^CN=(.*?),.*$/svc-$1/", "svc-alice"),
        ("RULE:^CN=bob,.*$/bob/,DEFAULT", DN),
        ("RULE:^CN=(.*?),.*$/a\\/b-$1/", "a/b-alice"),
        ("RULE:^CN=(.*?),.*$/cost: \\$1/", "cost: $1"),
        ("RULE:^CN=(.*?),.*$/$1/\nDEFAULT", "alice"),
    ],
)
def test_mapping_rules(rules: str, expected: str) -> None:
    assert SslPrincipalMapper(rules).name(DN) == expected


def test_no_matching_rule_is_an_error() -> None:
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=bob$/bob/").name(DN)


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*)$", "RULE:^CN=(.*)$/$1/X", "NOPE", "RULE:([/x/", "DEFAULT junk"])
def test_bad_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError):
        parse_rules(rules)


def test_principal_from_a_certificate_subject() -> None:
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc."),), (("commonName", "alice"),))}
    assert distinguished_name(cert) == "CN=alice,O=Acme\\, Inc.,C=US"
    assert SslPrincipalMapper().principal(cert) == "User:CN=alice,O=Acme\\, Inc.,C=US"
    assert SslPrincipalMapper().principal({}) == ANONYMOUS
    assert SslPrincipalMapper().principal(None) == ANONYMOUS


def test_email_address_is_written_as_java_does() -> None:
    cert = {"subject": ((("emailAddress", "a@b.c"),), (("commonName", "alice"),))}
    assert distinguished_name(cert) == "CN=alice,1.2.840.113549.1.9.1=#1605614062" + "2e63"
