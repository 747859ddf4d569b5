"""The gateway's ACL decisions (gateway/acls.py) over a DescribeAcls stand-in (the seam is ours: a
coroutine answering bindings or raising as ``describe_acls`` does), and their settings. The wire call
itself is exercised against a broker in tests/integration/test_gateway_acls.py and against Kafka in
the compat tier."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tidelog.common.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from tidelog.gateway.acls import GatewayAcls, SecurityDisabled
from tidelog.gateway.config import ConfigError, parse_config
from tidelog.web.errors import ApiError

READ, WRITE, DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


class Cluster:
    """What DescribeAcls answers next: bindings, or an exception."""

    def __init__(self) -> None:
        self.answer: list[AclBinding] | Exception = []

    async def describe(self) -> list[AclBinding]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def binding(principal: str, name: str, operation: AclOperation, *, prefixed: bool = False,
            deny: bool = False, host: str = "*") -> AclBinding:
    return AclBinding(TOPIC, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL, principal, host,
                      operation, AclPermissionType.DENY if deny else AclPermissionType.ALLOW)


def acls_over(cluster: Cluster, **kwargs: object) -> GatewayAcls:
    return GatewayAcls(cluster.describe, enabled=True, **kwargs)  # type: ignore[arg-type]


def test_kafkas_rules_apply_to_the_bindings_read() -> None:
    cluster = Cluster()
    cluster.answer = [binding("User:alice", "logs.", AclOperation.WRITE, prefixed=True),
                      binding("User:*", "logs.secret", AclOperation.ALL, deny=True),
                      binding("User:bob", "logs.web", AclOperation.READ, host="10.0.0.1")]
    acls = acls_over(cluster, super_users={"User:ops"})
    assert asyncio.run(acls.refresh())
    assert acls.allowed("User:alice", "127.0.0.1", WRITE, TOPIC, "logs.web")
    assert acls.allowed("User:alice", "127.0.0.1", DESCRIBE, TOPIC, "logs.web")  # implied by WRITE
    assert not acls.allowed("User:alice", "127.0.0.1", READ, TOPIC, "logs.web")
    assert not acls.allowed("User:alice", "127.0.0.1", WRITE, TOPIC, "logs.secret")  # deny wins
    assert acls.allowed("User:bob", "10.0.0.1", READ, TOPIC, "logs.web")
    assert not acls.allowed("User:bob", "10.0.0.2", READ, TOPIC, "logs.web")  # another host
    assert not acls.allowed("User:carol", "127.0.0.1", WRITE, TOPIC, "other")  # no ACL at all: denied
    assert acls.allowed("User:ops", "127.0.0.1", WRITE, TOPIC, "logs.secret")  # a super user
    with pytest.raises(ApiError) as refused:
        acls.check("User:alice", "127.0.0.1", READ, GROUP, "readers")
    assert refused.value.status == 403 and refused.value.code == "GROUP_AUTHORIZATION_FAILED"
    assert "User:alice may not READ group 'readers'" in refused.value.message


def test_no_acl_found_allows_when_configured_so() -> None:
    cluster = Cluster()
    acls = acls_over(cluster, allow_if_no_acl=True)
    asyncio.run(acls.refresh())
    assert acls.allowed("User:anyone", "127.0.0.1", WRITE, TOPIC, "t")


def test_before_the_first_read_requests_get_503_and_a_failed_refresh_keeps_the_last_set() -> None:
    cluster = Cluster()
    cluster.answer = ConnectionError("broker 127.0.0.1:9092: connection refused")
    acls = acls_over(cluster)
    assert not asyncio.run(acls.refresh())
    with pytest.raises(ApiError) as unavailable:
        acls.check("User:alice", "127.0.0.1", WRITE, TOPIC, "t")
    assert unavailable.value.status == 503 and "not read yet" in unavailable.value.message
    cluster.answer = [binding("User:alice", "t", AclOperation.WRITE)]
    assert asyncio.run(acls.refresh())
    acls.check("User:alice", "127.0.0.1", WRITE, TOPIC, "t")
    cluster.answer = RuntimeError("timed out")
    assert not asyncio.run(acls.refresh())
    acls.check("User:alice", "127.0.0.1", WRITE, TOPIC, "t")  # the last set still decides


def test_a_cluster_without_an_authorizer_allows_everything_and_disabled_checks_nothing() -> None:
    cluster = Cluster()
    cluster.answer = SecurityDisabled("no authorizer")
    acls = acls_over(cluster)
    assert asyncio.run(acls.refresh())
    acls.check("User:anyone", "127.0.0.1", WRITE, TOPIC, "t")
    off = GatewayAcls(cluster.describe, enabled=False)
    off.check("User:anyone", "127.0.0.1", WRITE, TOPIC, "t")  # never read, never needed


def test_settings(tmp_path: Path) -> None:
    assert not parse_config({}).acls_enabled  # no tokens: every caller is the same anonymous principal
    tokens = {"gateway.auth.tokens.file": str(tmp_path / "tokens")}
    assert parse_config(tokens).acls_enabled
    assert not parse_config({**tokens, "gateway.acl.enable": "false"}).acls_enabled
    assert parse_config({"gateway.acl.enable": "true"}).acls_enabled
    config = parse_config({"gateway.super.users": "User:ops; User:admin", "gateway.acl.refresh.ms": "250",
                           "gateway.acl.allow.everyone.if.no.acl.found": "true"})
    assert config.super_users == {"User:ops", "User:admin"} and config.acl_refresh_ms == 250
    assert config.acl_allow_if_no_acl
    for key, value in (("gateway.acl.enable", "maybe"), ("gateway.super.users", "ops"),
                       ("gateway.acl.refresh.ms", "5"), ("gateway.acl.allow.everyone.if.no.acl.found", "yes")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            parse_config({key: value})
