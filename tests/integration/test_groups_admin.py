"""Group administration with confluent-kafka's AdminClient: what kafka-consumer-groups.sh (and
``tidelog groups``) rely on: list with state filters, describe members and assignments, read and
reset committed offsets of an empty group, delete a group."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from helpers.broker_process import BrokerProcess, module_broker
from helpers.clients import FAST_CLIENT, consumer, create_topic, unique_topic

GROUP_BROKER = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}


group_broker = module_broker("group_broker", GROUP_BROKER)


@pytest.fixture
def bootstrap(group_broker: BrokerProcess) -> str:
    return group_broker.bootstrap


@pytest.fixture
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})


def test_offsets_of_an_empty_group_can_be_reset_listed_and_deleted(admin: AdminClient, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique_topic("adm"), 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    wanted = [TopicPartition(topic, p, 10 * (p + 1)) for p in range(3)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])[group].result(15)
    assert [(tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [
        (0, 10, None), (1, 20, None), (2, 30, None)]

    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [(0, 10), (1, 20), (2, 30)]

    groups = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(15)
    assert group in {g.group_id for g in groups.valid}

    admin.delete_consumer_groups([group])[group].result(15)
    # librdkafka asks with DescribeGroups v5, which names an unknown group "Dead" (v6 would answer
    # GROUP_ID_NOT_FOUND instead).
    assert admin.describe_consumer_groups([group])[group].result(15).state == ConsumerGroupState.DEAD
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert listed.topic_partitions == []


def test_describe_shows_members_and_assignments_and_delete_refuses_a_live_group(
    admin: AdminClient, bootstrap: str,
) -> None:
    topic = create_topic(bootstrap, unique_topic("adm"), 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    member = consumer(bootstrap, {"group.id": group, "session.timeout.ms": 10_000})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + 15
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.1)
        described = admin.describe_consumer_groups([group])[group].result(15)
        assert described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor == "range"
        (only,) = described.members
        assert sorted(tp.partition for tp in only.assignment.topic_partitions) == [0, 1]
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(15)
        assert group in {g.group_id for g in stable.valid}

        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group])[group].result(15)
        assert "NON_EMPTY_GROUP" in str(refused.value)
        # An admin commit (generation -1, no member id) is refused while the group has members.
        try:
            result = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])])[group].result(15)
            errors = [str(tp.error) for tp in result.topic_partitions]
        except KafkaException as exc:
            errors = [str(exc)]
        assert len(errors) == 1 and "UNKNOWN_MEMBER_ID" in errors[0]
    finally:
        member.close()
