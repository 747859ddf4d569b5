"""The state topic's records and the mapping of sources to shards."""

from __future__ import annotations

import pytest

from tidelog.gateway.seqno import SourceState
from tidelog.gateway.state_codec import (
    decode_key,
    decode_state,
    encode_state,
    shard_of,
    state_key,
    transactional_id,
)


@pytest.mark.parametrize(("topic", "source"), [("logs", "web-1"), ("dc1.logs", "host:/var/log/a b.log"),
                                                ("t", 'quo"te,["x"]'), ("t", "юникод")])
def test_key_round_trips_whatever_the_names_hold(topic: str, source: str) -> None:
    assert decode_key(state_key(topic, source)) == (topic, source)


def test_keys_of_different_sources_never_collide() -> None:
    assert state_key("a", "b,c") != state_key("a,b", "c")


def test_state_round_trips_and_its_wire_form_is_stable() -> None:
    state = SourceState(seqno=2**63 - 1, partition=5)
    assert decode_state(encode_state(state)) == state
    assert encode_state(SourceState(3, 1)) == b'{"v":1,"seqno":3,"partition":1}'


@pytest.mark.parametrize("value", [b"{", b"[]", b'{"v":2,"seqno":1,"partition":0}', b'{"v":1,"seqno":"1","partition":0}',
                                   b'{"v":1,"seqno":-1,"partition":0}', b'{"v":1,"seqno":true,"partition":0}'])
def test_a_state_value_that_does_not_decode_is_an_error(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_state(value)


def test_shards_spread_sources_and_transactional_ids_name_the_shard() -> None:
    shards = {shard_of(state_key("logs", f"s{i}"), 8) for i in range(100)}
    assert shards == set(range(8))
    assert transactional_id("tidelog-gateway", 3) == "tidelog-gateway-shard-3"
