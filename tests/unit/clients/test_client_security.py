"""tidelog.clients.security without a broker: the settings it accepts and refuses, and its SASL token
sequence run against the broker's own server state machines (tidelog.protocol.sasl), including a
server that does not know the password (its signature must not be trusted)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from tidelog.clients.security import ClientSecurity, SaslAuthenticationError, SaslClient
from tidelog.common.errors import ConfigError
from tidelog.protocol.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    PlainServer,
    SaslAuthenticationFailed,
    ScramServer,
    scram_credential,
)
from unit.security.pki import Pki


def scram(mechanism: str, user: str, password: str) -> ClientSecurity:
    return ClientSecurity.from_config({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                       "sasl.username": user, "sasl.password": password})


def run(client: SaslClient, server: PlainServer | ScramServer) -> str | None:
    """Drive one exchange to its end, as the connection does; the server's authorization id."""
    token: bytes | None = client.first()
    while token is not None:
        step = server.step(token)
        token = client.next(step.challenge)
    assert server.complete
    return server.authorization_id


def scram_server(mechanism: str, users: dict[str, str]) -> ScramServer:
    credentials = {u: scram_credential(mechanism, p, f"salt-{u}".encode(), 4096) for u, p in users.items()}
    return ScramServer(mechanism, credentials.get, "server-nonce", b"fake-salt-key")


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_exchange_authenticates_against_the_brokers_server(mechanism: str) -> None:
    server = scram_server(mechanism, {"gov": "gov-secret"})
    assert run(SaslClient(scram(mechanism, "gov", "gov-secret")), server) == "gov"


def test_scram_with_a_wrong_password_is_refused_by_the_server() -> None:
    server = scram_server(SCRAM_SHA_512, {"gov": "gov-secret"})
    with pytest.raises(SaslAuthenticationFailed, match="SCRAM-SHA-512"):
        run(SaslClient(scram(SCRAM_SHA_512, "gov", "guess")), server)


def test_a_server_signature_from_a_server_without_the_password_is_not_trusted() -> None:
    # an impostor answers with a signature made from another password: the client refuses to go on
    client = SaslClient(scram(SCRAM_SHA_256, "gov", "gov-secret"))
    impostor = scram_server(SCRAM_SHA_256, {"gov": "gov-secret"})
    honest_first = impostor.step(client.first()).challenge
    client_final = client.next(honest_first)
    assert client_final is not None
    forged = b"v=" + b"QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="
    with pytest.raises(SaslAuthenticationError, match=r"SCRAM-SHA-256 .*does not know this password") as caught:
        client.next(forged)
    assert caught.value.error == "SASL_AUTHENTICATION_FAILED"


def test_plain_sends_one_token() -> None:
    security = ClientSecurity.from_config({"security.protocol": "SASL_SSL", "sasl.mechanisms": "plain",
                                           "sasl.username": "gov", "sasl.password": "pw",
                                           "enable.ssl.certificate.verification": "false"})
    assert security.mechanism == "PLAIN" and security.tls is not None
    assert run(SaslClient(security), PlainServer(lambda u, p: (u, p) == ("gov", "pw"))) == "gov"


@pytest.mark.parametrize(("config", "names"), [
    ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism='GSSAPI'"),  # librdkafka's default, not ours
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism='OAUTHBEARER'"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.password": "x"}, "sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.password"),
    ({"security.protocol": "TLS"}, "security.protocol='TLS'"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location"),
    ({"security.protocol": "SSL", "ssl.key.location": "/k.pem"}, "ssl.key.location"),
])
def test_settings_that_cannot_be_honoured_are_refused_by_name(config: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace("(", r"\(")):
        ClientSecurity.from_config(config)


def test_plaintext_has_neither_tls_nor_sasl() -> None:
    security = ClientSecurity.from_config({"bootstrap.servers": "h:1"})
    assert (security.protocol, security.tls, security.sasl) == ("PLAINTEXT", None, False)
    assert security.connection("h", 1, "t", timeout_s=1).authenticate is None


def test_tls_context_verifies_the_broker_and_loads_a_client_certificate(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    client = pki.client("/CN=governor")
    security = ClientSecurity.from_config({
        "security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert),
        "ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)})
    assert security.tls is not None and security.certificate and security.hint() == ""
    assert security.tls.verify_mode == ssl.CERT_REQUIRED and security.tls.check_hostname
    relaxed = ClientSecurity.from_config({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert),
                                          "ssl.endpoint.identification.algorithm": "none"})
    assert relaxed.tls is not None and not relaxed.tls.check_hostname and relaxed.tls.verify_mode == ssl.CERT_REQUIRED
    assert "ssl.certificate.location" in relaxed.hint()  # a refused connection may be a missing certificate
    with pytest.raises(ConfigError, match=r"ssl\.certificate\.location"):
        ClientSecurity.from_config({"security.protocol": "SSL", "ssl.certificate.location": str(client.cert),
                                    "ssl.key.location": str(pki.ca_cert)})
