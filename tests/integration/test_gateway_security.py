"""The gateway's HTTP listener secured: TLS (HTTP/2 by ALPN), bearer tokens, client certificates.

Certificates come from a CA made for the test (``unit.security.pki``, the openssl command).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json
from unit.security.pki import Pki

secure_broker = module_broker("secure_broker", GATEWAY_TEST_BROKER)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def trusting(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_cert))


@pytest.fixture(scope="module")
def tls_gateway(pki: Pki, secure_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("tls-gateway")
    server = pki.server()
    tokens = workdir / "tokens"
    tokens.write_text("# token principal\ns3cret-alice User:alice\ns3cret-bob User:bob\n")
    settings = {"gateway.ssl.certfile": server.cert, "gateway.ssl.keyfile": server.key,
                "gateway.auth.tokens.file": tokens}
    with GatewayProcess(workdir, secure_broker.bootstrap, settings).start(verify=trusting(pki)) as gateway:
        yield gateway


def test_tls_listener_speaks_http2_and_requires_a_known_bearer_token(tls_gateway: GatewayProcess, pki: Pki,
                                                                     secure_broker: BrokerProcess) -> None:
    topic = create_topic(secure_broker.bootstrap, unique_topic())
    with httpx.Client(verify=trusting(pki), http2=True) as client:
        assert client.get(f"{tls_gateway.url}/healthz").status_code == 200  # probes need no token
        body = {"sourceId": "s", "chunks": [{"seqno": 1, "records": [{"value": "v"}]}]}
        url = f"{tls_gateway.url}/v1/topics/{topic}/write"
        missing = client.post(url, json=body)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert missing.json()["error"]["code"] == "UNAUTHORIZED"
        assert client.post(url, json=body, headers={"authorization": "Bearer wrong"}).status_code == 401
        assert client.get(f"{tls_gateway.url}/metrics").status_code == 401
        ok = client.post(url, json=body, headers={"authorization": "Bearer s3cret-alice"})
        assert ok.status_code == 200, ok.text
        assert ok.http_version == "HTTP/2"


def test_a_read_session_serves_only_the_principal_that_opened_it(tls_gateway: GatewayProcess, pki: Pki,
                                                                 secure_broker: BrokerProcess) -> None:
    topic = create_topic(secure_broker.bootstrap, unique_topic())
    alice, bob = ({"authorization": f"Bearer s3cret-{name}"} for name in ("alice", "bob"))
    with httpx.Client(verify=trusting(pki), http2=True, timeout=30) as client:
        opened = client.post(f"{tls_gateway.url}/v1/sessions", headers=alice,
                             json={"group": "alice-readers", "topics": [topic], "autoOffsetReset": "earliest"})
        assert opened.status_code == 201, opened.text
        url = opened.json()["url"]
        assert url.startswith("https://")
        written = client.post(f"{tls_gateway.url}/v1/topics/{topic}/write", headers=alice,
                              json={"sourceId": "s", "chunks": [{"seqno": 1, "records": [{"value": "v"}]}]})
        assert written.status_code == 200, written.text
        assert client.get(f"{url}/records", params={"waitMs": 10_000}).status_code == 401
        assert client.get(f"{url}/records", params={"waitMs": 10_000}, headers=bob).status_code == 404
        polled = client.get(f"{url}/records", params={"waitMs": 10_000}, headers=alice)
        assert [r["value"] for r in polled.json()["records"]] == ["v"] and polled.http_version == "HTTP/2"
        assert client.delete(url, headers=bob).status_code == 404
        assert client.delete(url, headers=alice).status_code == 204


def test_plaintext_client_cannot_talk_to_the_tls_listener(tls_gateway: GatewayProcess) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(tls_gateway.url.replace("https://", "http://") + "/healthz", timeout=3)


def test_required_client_certificate_is_checked(pki: Pki, secure_broker: BrokerProcess, tmp_path: Path) -> None:
    server, client_cert = pki.server("mtls-server"), pki.client("/CN=shipper-1", "shipper")
    settings = {"gateway.ssl.certfile": server.cert, "gateway.ssl.keyfile": server.key,
                "gateway.ssl.cafile": pki.ca_cert, "gateway.ssl.client.auth": "required"}
    with_cert = ssl.create_default_context(cafile=str(pki.ca_cert))
    with_cert.load_cert_chain(str(client_cert.cert), str(client_cert.key))
    topic = create_topic(secure_broker.bootstrap, unique_topic())
    with GatewayProcess(tmp_path, secure_broker.bootstrap, settings).start(verify=with_cert) as gateway:
        assert write_json(gateway.url, topic, "s", [(1, ["v"])], verify=with_cert).status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{gateway.url}/healthz", verify=trusting(pki), timeout=3)
