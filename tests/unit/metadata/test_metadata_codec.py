"""The JSON forms of the image's parts: round trips, and strict refusal of anything else."""

from __future__ import annotations

import json
import uuid
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.metadata import codec
from tidelog.metadata.codec import CorruptValueError
from tidelog.metadata.image import AclEntry, BrokerEndpoint, BrokerRegistration, PartitionImage, TopicImage
from tidelog.protocol.sasl import ScramCredential

node_ids = st.integers(min_value=-1, max_value=2**31 - 1)


def roundtrip(doc: object) -> object:
    return codec.decode(codec.encode(doc))


@given(node_ids, st.integers(0, 2**31 - 1), st.lists(node_ids, max_size=5), st.integers(0, 2**31 - 1))
def test_partition_state_survives_a_round_trip(leader: int, epoch: int, isr: list[int], partition_epoch: int) -> None:
    partition = PartitionImage(4, leader, epoch, (1, 2, 3), tuple(isr), partition_epoch)
    doc = roundtrip(codec.partition_state_to_json(partition))
    assert codec.partition_state_from_json(doc, 4, (1, 2, 3)) == partition


def test_topic_keeps_id_configs_and_replicas_of_every_partition() -> None:
    topic = TopicImage("orders", uuid.uuid4(),
                       (PartitionImage(0, 1, 0, (1, 2), (1, 2)), PartitionImage(1, 2, 0, (2, 3), (2,))),
                       MappingProxyType({"retention.ms": 1000, "cleanup.policy": ["compact"], "x": None}))
    topic_id, configs, replicas = codec.topic_from_json(roundtrip(codec.topic_to_json(topic)))
    assert (topic_id, dict(configs), replicas) == (topic.topic_id, dict(topic.configs), ((1, 2), (2, 3)))


def test_broker_registration_acl_and_scram_survive_a_round_trip() -> None:
    registration = BrokerRegistration(3, "rack-a", (BrokerEndpoint("SSL", "h", 9093, "SSL"),), "inc-1")
    assert codec.broker_from_json(roundtrip(codec.broker_to_json(registration))) == registration
    acl = AclEntry(2, "orders", 3, "User:app", "*", 3, 3)
    assert codec.acl_from_json(roundtrip(codec.acl_to_json(acl))) == acl
    credential = ScramCredential(b"salt\x00", b"stored", b"server", 8192)
    assert codec.scram_from_json(roundtrip(codec.scram_to_json("u", "SCRAM-SHA-256", credential))) == (
        ("u", "SCRAM-SHA-256"), credential)


def test_broker_weight_and_rack_group_survive_a_round_trip() -> None:
    registration = BrokerRegistration(4, "rack-b", (), "inc-2", weight=2.5, rack_group="power-1")
    decoded = codec.broker_from_json(roundtrip(codec.broker_to_json(registration)))
    assert (decoded.weight, decoded.rack_group, decoded.failure_group) == (2.5, "power-1", "power-1")


def test_registration_written_before_weights_reads_as_weight_one_without_group() -> None:
    old = {"node_id": 1, "rack": "r1", "endpoints": [], "incarnation": "i"}
    decoded = codec.broker_from_json(old)
    assert (decoded.weight, decoded.rack_group, decoded.failure_group) == (1.0, None, "r1")


@pytest.mark.parametrize(("decoder", "doc", "complaint"), [
    (lambda d: codec.partition_state_from_json(d, 0, ()), {"leader": True, "leader_epoch": 0, "isr": []},
     "leader: expected an integer"),
    (lambda d: codec.partition_state_from_json(d, 0, ()), {"leader": 1, "isr": []}, "missing field 'leader_epoch'"),
    (lambda d: codec.partition_state_from_json(d, 0, ()), [1, 2], "partition: expected an object"),
    (codec.topic_from_json, {"topic_id": "nope", "configs": {}, "replicas": []}, "topic_id"),
    (codec.topic_from_json, {"topic_id": str(uuid.uuid4()), "configs": {"a": {"b": 1}}, "replicas": []},
     "config a"),
    (codec.topic_from_json, {"topic_id": str(uuid.uuid4()), "configs": {}, "replicas": [["1"]]}, "replicas"),
    (codec.broker_from_json, {"node_id": 1, "rack": 5, "endpoints": [], "incarnation": "i"}, "rack"),
    (codec.broker_from_json, {"node_id": 1, "rack": None, "endpoints": [], "incarnation": "i", "weight": 0}, "weight"),
    (codec.broker_from_json, {"node_id": 1, "rack": None, "endpoints": [], "incarnation": "i", "weight": True}, "weight"),
    (codec.broker_from_json, {"node_id": 1, "rack": None, "endpoints": [], "incarnation": "i", "rack_group": 3},
     "rack_group"),
    (codec.scram_from_json, {"user": "u", "mechanism": "m", "salt": "!!", "stored_key": "", "server_key": "",
                             "iterations": 1}, "salt: not base64"),
    (codec.controller_from_json, {"node_id": 1}, "missing field 'epoch'"),
])
def test_a_value_of_the_wrong_shape_is_refused_saying_what_is_wrong(decoder, doc, complaint) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CorruptValueError, match=complaint):
        decoder(doc)


def test_bytes_that_are_not_json_are_refused() -> None:
    with pytest.raises(CorruptValueError, match="not JSON"):
        codec.decode(b"{oops")
    with pytest.raises(CorruptValueError, match="not JSON"):
        codec.decode(b"\xff\xfe")


def test_encoding_is_stable_so_equal_parts_give_equal_bytes() -> None:
    a = codec.encode({"b": 1, "a": [1, 2]})
    assert a == codec.encode({"a": [1, 2], "b": 1}) == b'{"a":[1,2],"b":1}'
    assert json.loads(a) == {"a": [1, 2], "b": 1}
