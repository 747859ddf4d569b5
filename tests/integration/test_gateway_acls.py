"""The gateway applies each bearer-token principal's Kafka ACLs (gateway/acls.py), read from a broker
that enforces ACLs (StandardAuthorizer; the gateway connects as ``User:ANONYMOUS``, a super user of
the broker, as a gateway on a private listener would).

- a write needs WRITE on the topic: refused with 403 TOPIC_AUTHORIZATION_FAILED and nothing written,
  allowed once an ACL (here PREFIXED) is created, refused again by a DENY (deny wins);
- a read session needs READ on its group and topic: 403 GROUP_AUTHORIZATION_FAILED without the group's;
- a source's state needs DESCRIBE (implied by WRITE); ``gateway.super.users`` are never checked;
- a gateway in front of a cluster without an authorizer applies nothing (test_gateway_security.py).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import consume, create_topic, unique_topic
from helpers.gateway_process import GATEWAY_TEST_BROKER, GatewayProcess, write_json
from unit.security.pki import Issued, Pki

acl_broker = module_broker("acl_broker", {
    **GATEWAY_TEST_BROKER, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
})
REFRESH_MS = 300
TOKENS = {"alice": "User:alice", "bob": "User:bob", "ops": "User:ops"}


@pytest.fixture(scope="module")
def gateway(acl_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("acl-gateway")
    tokens = workdir / "tokens"
    tokens.write_text("".join(f"t-{name} {principal}\n" for name, principal in TOKENS.items()))
    settings = {"gateway.auth.tokens.file": tokens, "gateway.acl.refresh.ms": REFRESH_MS,
                "gateway.super.users": "User:ops"}
    with GatewayProcess(workdir, acl_broker.bootstrap, settings).start(headers=as_("ops")) as process:
        yield process


def as_(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer t-{name}"}


def grant(broker: BrokerProcess, *bindings: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_acls(list(bindings)).values():
        future.result(15)
    time.sleep(3 * REFRESH_MS / 1000)  # the gateway reads the ACLs again every REFRESH_MS


def acl(principal: str, resource: ResourceType, name: str, operation: AclOperation, *,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
        permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def writer(url: str, topic: str) -> Callable[[str, int], httpx.Response]:
    def write(name: str, seqno: int) -> httpx.Response:
        body = {"sourceId": f"src-{name}", "chunks": [{"seqno": seqno, "records": [{"value": f"{name}-{seqno}"}]}]}
        return httpx.post(f"{url}/v1/topics/{topic}/write", json=body, headers=as_(name), timeout=30)
    return write


def values(broker: BrokerProcess, topic: str, count: int) -> list[str]:
    """Every committed record of the topic (the gateway writes in transactions), expecting ``count``."""
    read = consume(broker.bootstrap, topic, count, settle=0.5, config={"isolation.level": "read_committed"})
    return [(m.value() or b"").decode() for m in read]


def test_a_write_needs_write_on_the_topic_allowed_by_prefix_and_denied_by_a_deny(
        gateway: GatewayProcess, acl_broker: BrokerProcess) -> None:
    topic = create_topic(acl_broker.bootstrap, f"acl-{unique_topic()}")
    write = writer(gateway.url, topic)
    grant(acl_broker, acl("User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE))
    assert write("alice", 1).status_code == 200
    refused = write("bob", 1)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "TOPIC_AUTHORIZATION_FAILED"
    assert error["message"].startswith(f"User:bob may not WRITE topic '{topic}'"), error
    assert values(acl_broker, topic, 1) == ["alice-1"]  # bob's chunk was not written
    grant(acl_broker, acl("User:bob", ResourceType.TOPIC, "acl-", AclOperation.WRITE,
                          pattern=ResourcePatternType.PREFIXED))
    assert write("bob", 1).status_code == 200
    grant(acl_broker, acl("User:bob", ResourceType.TOPIC, topic, AclOperation.ALL,
                          permission=AclPermissionType.DENY))
    assert write("bob", 2).status_code == 403  # deny wins over the prefixed allow
    assert write("alice", 2).status_code == 200
    # a source's state: DESCRIBE, implied by alice's WRITE; ops is a super user of the gateway
    url = f"{gateway.url}/v1/topics/{topic}/sources"
    assert httpx.get(url, params={"sourceId": "src-alice"}, headers=as_("alice")).json()["lastSeqno"] == 2
    assert httpx.get(url, params={"sourceId": "src-alice"}, headers=as_("bob")).status_code == 403
    assert httpx.get(url, params={"sourceId": "src-alice"}, headers=as_("ops")).status_code == 200
    assert values(acl_broker, topic, 3) == ["alice-1", "bob-1", "alice-2"]


def test_a_read_session_needs_read_on_its_group_and_topic(gateway: GatewayProcess, acl_broker: BrokerProcess) -> None:
    topic = create_topic(acl_broker.bootstrap, f"acl-{unique_topic()}")
    grant(acl_broker, acl("User:alice", ResourceType.TOPIC, topic, AclOperation.ALL))
    assert writer(gateway.url, topic)("alice", 1).status_code == 200
    ask = {"group": f"readers-{topic}", "topics": [topic], "autoOffsetReset": "earliest"}
    no_group = httpx.post(f"{gateway.url}/v1/sessions", json=ask, headers=as_("alice"), timeout=30)
    assert no_group.status_code == 403 and no_group.json()["error"]["code"] == "GROUP_AUTHORIZATION_FAILED"
    grant(acl_broker, acl("User:alice", ResourceType.GROUP, "readers-", AclOperation.READ,
                          pattern=ResourcePatternType.PREFIXED),
          acl("User:bob", ResourceType.GROUP, "readers-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED))
    no_topic = httpx.post(f"{gateway.url}/v1/sessions", json=ask, headers=as_("bob"), timeout=30)
    assert no_topic.status_code == 403 and no_topic.json()["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
    opened = httpx.post(f"{gateway.url}/v1/sessions", json=ask, headers=as_("alice"), timeout=30)
    assert opened.status_code == 201, opened.text
    polled = httpx.get(f"{opened.json()['url']}/records", params={"waitMs": 10_000}, headers=as_("alice"), timeout=30)
    assert [r["value"] for r in polled.json()["records"]] == ["alice-1"]
    assert httpx.delete(opened.json()["url"], headers=as_("alice"), timeout=30).status_code == 204


def test_a_client_certificates_subject_is_the_principal_whose_acls_apply(
        acl_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> None:
    """mTLS without tokens: the verified certificate's subject, mapped by Kafka's
    ssl.principal.mapping.rules, is the principal (User:shipper-1); its ACLs decide; a certificate no
    rule maps is refused 401."""
    workdir = tmp_path_factory.mktemp("mtls-gateway")
    pki = Pki(workdir / "pki")
    server = pki.server()
    shipper = pki.client("/O=acme/CN=Shipper-1", "shipper")
    stranger = pki.client("/O=elsewhere/CN=someone", "stranger")
    settings = {"gateway.ssl.certfile": server.cert, "gateway.ssl.keyfile": server.key,
                "gateway.ssl.cafile": pki.ca_cert, "gateway.ssl.client.auth": "required",
                "gateway.ssl.principal.mapping.rules": "RULE:^CN=(.*?),O=acme$/$1/L",
                "gateway.acl.refresh.ms": REFRESH_MS}

    def presenting(issued: Issued) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(issued.cert), str(issued.key))
        return context

    allowed, other = create_topic(acl_broker.bootstrap, unique_topic("mtls")), create_topic(
        acl_broker.bootstrap, unique_topic("mtls-other"))
    with GatewayProcess(workdir, acl_broker.bootstrap, settings).start(verify=presenting(shipper)) as process:
        refused = write_json(process.url, allowed, "s", [(1, ["v"])], verify=presenting(shipper))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "TOPIC_AUTHORIZATION_FAILED"
        assert "User:shipper-1" in refused.json()["error"]["message"]
        grant(acl_broker, acl("User:shipper-1", ResourceType.TOPIC, allowed, AclOperation.WRITE))
        assert write_json(process.url, allowed, "s", [(1, ["v"])], verify=presenting(shipper)).status_code == 200
        assert write_json(process.url, other, "s", [(1, ["v"])], verify=presenting(shipper)).status_code == 403
        unmapped = write_json(process.url, allowed, "s2", [(1, ["v"])], verify=presenting(stranger))
        assert unmapped.status_code == 401
        assert "CN=someone,O=elsewhere" in unmapped.json()["error"]["message"]
    assert values(acl_broker, allowed, 1) == ["v"]
