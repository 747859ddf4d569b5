"""etcd keys ↔ image (pure): building the image from keys, corrupt values, what a commit writes."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from tidelog.common.errors import ConfigError
from tidelog.metadata import codec
from tidelog.metadata.etcd_layout import KeyTable, plan_commit
from tidelog.metadata.etcd_session import LeaseTimer
from tidelog.metadata.etcd_store import parse_store_url
from tidelog.metadata.image import (
    AclEntry,
    BrokerEndpoint,
    BrokerRegistration,
    ClusterImage,
    PartitionImage,
    add_partitions,
    new_topic,
)


def enc(doc: object) -> bytes:
    return codec.encode(doc)


def topic_doc(topic_id: uuid.UUID, replicas: list[list[int]]) -> bytes:
    return enc({"topic_id": str(topic_id), "configs": {"retention.ms": 5}, "replicas": replicas})


def state(leader: int, isr: list[int], epoch: int = 0) -> bytes:
    return enc({"leader": leader, "leader_epoch": epoch, "isr": isr, "partition_epoch": epoch})


def loaded(*keys: tuple[str, bytes], revision: int = 10) -> tuple[KeyTable, ClusterImage]:
    table = KeyTable()
    for i, (key, value) in enumerate(keys, start=1):
        assert table.put(key, value, i, i) is None, key
    return table, table.image(ClusterImage(cluster_id=""), revision)


def test_keys_build_the_whole_image() -> None:
    topic_id = uuid.uuid4()
    registration = BrokerRegistration(2, None, (BrokerEndpoint("PLAINTEXT", "h", 1, "PLAINTEXT"),), "i")
    _, image = loaded(
        ("cluster_id", enc("abc")),
        ("topics/t", topic_doc(topic_id, [[1, 2], [2, 1]])),
        ("partitions/t/0", state(1, [1, 2])),
        ("partitions/t/1", state(2, [2], 3)),
        ("brokers/2", enc(codec.broker_to_json(registration))),
        ("controller", enc({"node_id": 2, "epoch": 4})),
        ("controller_epoch", enc(4)),
        ("producer_id_block_end", enc(3000)),
        ("acls", enc([codec.acl_to_json(AclEntry(2, "t", 3, "User:a", "*", 3, 3))])),
        ("broker_configs", enc({"log.retention.ms": 1})),
    )
    assert image.cluster_id == "abc" and image.revision == 10
    topic = image.topics["t"]
    assert topic.topic_id == topic_id and dict(topic.configs) == {"retention.ms": 5}
    assert topic.partitions == (PartitionImage(0, 1, 0, (1, 2), (1, 2)), PartitionImage(1, 2, 3, (2, 1), (2,), 3))
    assert image.brokers == {2: registration} and image.live_brokers() == (registration,)
    assert (image.controller_id, image.controller_epoch, image.producer_id_block_end) == (2, 4, 3000)
    assert len(image.acls) == 1 and dict(image.broker_configs) == {"log.retention.ms": 1}


def test_a_corrupt_value_keeps_the_previous_one_and_a_new_corrupt_key_is_left_out() -> None:
    topic_id = uuid.uuid4()
    table, image = loaded(("topics/t", topic_doc(topic_id, [[1]])), ("partitions/t/0", state(1, [1])))
    assert table.put("partitions/t/0", b"garbage", 20, 2) == "not JSON: Expecting value: line 1 column 1 (char 0)"
    assert "missing field" in (table.put("brokers/9", enc({"node_id": 9}), 21, 21) or "")
    assert "does not match the key" in (table.put("brokers/8", enc(codec.broker_to_json(
        BrokerRegistration(7, None, (), "i"))), 22, 22) or "")
    assert table.put("surprise", b"1", 23, 23) == "unexpected key"
    after = table.image(image, 23)
    assert after.topics["t"].partitions[0] == image.topics["t"].partitions[0]
    assert after.brokers == {}
    assert table.mod_revision("partitions/t/0") == 20  # a writer compares against the corrupt value's revision


def test_a_corrupt_value_of_a_recreated_key_does_not_bring_back_the_old_value() -> None:
    table, image = loaded(("topics/t", topic_doc(uuid.uuid4(), [[1]])), ("partitions/t/0", state(1, [1])))
    table.delete("partitions/t/0")
    table.put("partitions/t/0", b"[]", 30, 30)  # a new life of the key, corrupt from the start
    partition = table.image(image, 30).topics["t"].partitions[0]
    assert (partition.leader, partition.isr, partition.replicas) == (-1, (), (1,))  # offline, not the old leader


def test_partitions_without_their_topic_are_ignored_and_a_deleted_topic_goes() -> None:
    table, image = loaded(("partitions/ghost/0", state(1, [1])), ("topics/t", topic_doc(uuid.uuid4(), [[1]])))
    assert set(image.topics) == {"t"}
    table.delete("topics/t")
    assert table.image(image, 11).topics == {}


def base_image() -> ClusterImage:
    topic = new_topic("t", 2, 1, {})
    return ClusterImage(cluster_id="c", revision=5).with_topic(topic).with_producer_id_block_end(1000)


def test_an_unchanged_image_writes_nothing() -> None:
    base = base_image()
    assert plan_commit(base, replace(base)).empty


def test_an_isr_change_writes_one_partition_guarded_by_its_topic() -> None:
    base = base_image()
    p0 = base.topics["t"].partitions[0]
    plan = plan_commit(base, base.with_partition("t", replace(p0, isr=(), partition_epoch=1)))
    assert list(plan.puts) == ["partitions/t/0"] and plan.parents == ("topics/t",)
    assert codec.decode(plan.puts["partitions/t/0"]) == {"leader": 1, "leader_epoch": 0, "isr": [],
                                                         "partition_epoch": 1, "replicas": [1]}


def test_a_config_change_writes_the_topic_key_only() -> None:
    base = base_image()
    plan = plan_commit(base, base.with_topic(base.topics["t"].with_configs({"retention.ms": 1})))
    assert list(plan.puts) == ["topics/t"] and plan.parents == ()


def test_new_deleted_and_recreated_topics() -> None:
    base = base_image()
    created = plan_commit(base, base.with_topic(new_topic("u", 2, 1, {})))
    assert sorted(created.puts) == ["topics/u"]  # partitions in their initial state need no key
    assert plan_commit(base, base.without_topic("t")).deleted_topics == ("t",)
    recreated = plan_commit(base, base.with_topic(new_topic("t", 1, 1, {})))
    assert sorted(recreated.puts) == ["topics/t"]
    assert sorted(recreated.deletes) == ["partitions/t/0", "partitions/t/1"]  # the old topic's states go


def test_a_topic_of_thousands_of_partitions_is_created_and_grown_by_one_key() -> None:
    """etcd refuses transactions of more than 128 operations by default: creation must not scale with partitions."""
    base = base_image()
    big = new_topic("big", 2000, 1, {})
    assert list(plan_commit(base, base.with_topic(big)).puts) == ["topics/big"]
    created = base.with_topic(big)
    grown = plan_commit(created, created.with_topic(add_partitions(big, 5000, 1)))
    assert list(grown.puts) == ["topics/big"] and grown.deletes == ()
    led_elsewhere = replace(big, partitions=(*big.partitions[:-1], PartitionImage(1999, 1, 1, (1,), (1,), 1)))
    assert sorted(plan_commit(base, base.with_topic(led_elsewhere)).puts) == ["partitions/big/1999", "topics/big"]


def test_a_partition_whose_key_was_never_written_is_in_its_initial_state() -> None:
    _, image = loaded(("topics/t", topic_doc(uuid.uuid4(), [[2, 1], [1, 2]])), ("partitions/t/1", state(2, [2])))
    assert image.topics["t"].partitions == (PartitionImage(0, 2, 0, (2, 1), (2, 1)),
                                            PartitionImage(1, 2, 0, (1, 2), (2,)))


def test_cluster_wide_values_are_written_when_changed_and_session_fields_never() -> None:
    base = base_image()
    new = replace(base.with_producer_id_block_end(2000).with_acls((AclEntry(2, "t", 3, "User:a", "*", 3, 3),)),
                  controller_id=3, controller_epoch=9, brokers={})
    assert sorted(plan_commit(base, new).puts) == ["acls", "producer_id_block_end"]


def test_with_partition_refuses_an_index_the_topic_does_not_have() -> None:
    with pytest.raises(IndexError):
        base_image().with_partition("t", PartitionImage(5, 1, 0, (1,), (1,)))


def test_the_session_is_valid_until_the_margin_after_the_last_successful_renewal_was_sent() -> None:
    timer = LeaseTimer(9000, 2000)
    assert timer.margin_ms == 5000 and timer.ttl_s == 9
    assert not timer.valid(0)
    timer.renewed(1000)
    assert timer.valid(5999) and not timer.valid(6000)
    timer.renewed(500)  # a late answer to an older renewal does not move the deadline back
    assert timer.deadline_ms() == 6000
    timer.lost()
    assert not timer.valid(1001)
    assert LeaseTimer(2500, 500).ttl_s == 3


def test_a_session_timeout_without_room_for_two_heartbeats_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"broker\.session\.timeout\.ms \(4000\) must be more than twice"):
        LeaseTimer(4000, 2000)


@pytest.mark.parametrize(("url", "endpoints", "prefix"), [
    ("etcd://h1:2379,h2:2380/clusters/a", (("h1", 2379), ("h2", 2380)), "clusters/a"),
    ("etcd://127.0.0.1:2379", (("127.0.0.1", 2379),), "tidelog"),
    ("etcd://[::1]:2379/x/", (("::1", 2379),), "x"),
])
def test_store_url(url: str, endpoints: tuple[tuple[str, int], ...], prefix: str) -> None:
    parsed = parse_store_url(url)
    assert (parsed.endpoints, parsed.prefix) == (endpoints, prefix)


@pytest.mark.parametrize("url", ["http://h:1/x", "etcd://h/x", "etcd://h:99999", "etcd://h:1/a b", "etcd://:1"])
def test_a_bad_store_url_names_the_setting(url: str) -> None:
    with pytest.raises(ConfigError, match=r"metadata\.store"):
        parse_store_url(url)
