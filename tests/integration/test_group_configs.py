"""GROUP resource configs (ConfigResource type 32) over the wire: set with IncrementalAlterConfigs,
described with source GROUP_CONFIG, kept across a broker restart, and used by the KIP-848
coordinator (the heartbeat interval it tells a member)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32

from helpers.broker_process import BrokerProcess, register_failure_report
from helpers.raw_client import RawClient

GROUP = 32
GROUP_CONFIG_SOURCE = 8


@pytest.fixture
def broker(tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[BrokerProcess]:
    register_failure_report(pytestconfig)
    with BrokerProcess(tmp_path / "broker", {"offsets.topic.num.partitions": 1, "group.consumer.min.heartbeat.interval.ms": 1000}) as process:
        yield process


def set_group_configs(broker: BrokerProcess, group: str, values: dict[str, str]) -> int:
    request = IncrementalAlterConfigsRequest(validate_only=False, resources=(AlterConfigsResource(
        resource_type=i8(GROUP), resource_name=group,
        configs=tuple(AlterableConfig(name=k, config_operation=i8(0), value=v) for k, v in values.items())),))
    with RawClient(broker.host, broker.port) as client:
        return int(client.call(request).responses[0].error_code)


def described(broker: BrokerProcess, group: str) -> dict[str, tuple[Any, int]]:
    request = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=i8(GROUP), resource_name=group, configuration_keys=None),),
        include_synonyms=False, include_documentation=False)
    with RawClient(broker.host, broker.port) as client:
        result = client.call(request).results[0]
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def test_a_groups_configs_are_described_kept_across_a_restart_and_applied(broker: BrokerProcess) -> None:
    assert described(broker, "orders")["consumer.heartbeat.interval.ms"] == ("5000", 5)
    assert set_group_configs(broker, "orders", {"consumer.heartbeat.interval.ms": "2500"}) == 0
    assert set_group_configs(broker, "orders", {"consumer.session.timeout.ms": "1"}) == 40  # INVALID_CONFIG
    broker.restart()
    configs = described(broker, "orders")
    assert configs["consumer.heartbeat.interval.ms"] == ("2500", GROUP_CONFIG_SOURCE)
    assert configs["consumer.session.timeout.ms"] == ("45000", 5)
    heartbeat = ConsumerGroupHeartbeatRequest(
        group_id=GroupId("orders"), member_id="", member_epoch=i32(0), instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=("t",), server_assignor=None, topic_partitions=())
    with RawClient(broker.host, broker.port, timeout=15) as client:
        # FindCoordinator creates __consumer_offsets, which the coordinator then loads
        assert client.call(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("orders",))).coordinators[0].error_code == 0
        answer = client.call(heartbeat)
        for _ in range(50):
            if int(answer.error_code) not in (14, 15, 16):
                break
            time.sleep(0.1)
            answer = client.call(heartbeat)
    assert int(answer.error_code) == 0
    assert answer.heartbeat_interval.total_seconds() * 1000 == 2500
