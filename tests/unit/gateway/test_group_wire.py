"""The router's own group description: assignment bytes decoded, bootstrap lists parsed, and the
router's answers when the description fails (the cluster unreachable) or is under way."""

from __future__ import annotations

import asyncio
import io
import struct

import pytest
from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32

from tidelog.gateway.group_wire import (
    GroupMember,
    GroupWire,
    GroupWireError,
    decode_assignment,
    parse_bootstrap,
)
from tidelog.gateway.router import Router


def assignment_bytes(version: int, pairs: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", version))
    entity_writer(ConsumerProtocolAssignment)(buffer, ConsumerProtocolAssignment(
        assigned_partitions=tuple(TopicPartition(topic=TopicName(t), partitions=tuple(i32(p) for p in ps))
                                  for t, ps in pairs.items()), user_data=user_data))
    return buffer.getvalue()


@pytest.mark.parametrize("version", [0, 1, 3])
def test_an_assignment_of_any_consumer_protocol_version_is_decoded(version: int) -> None:
    data = assignment_bytes(version, {"__state": [0, 2], "other": [1]}, b"sticky")
    assert decode_assignment(data) == (("__state", 0), ("__state", 2), ("other", 1))


def test_a_member_without_an_assignment_yet_owns_nothing() -> None:
    assert decode_assignment(b"") == ()


def test_bootstrap_servers_are_parsed_and_an_empty_list_is_refused() -> None:
    assert parse_bootstrap("a:9092, [::1]:9093") == [("a", 9092), ("::1", 9093)]
    with pytest.raises(ValueError, match="no host:port"):
        parse_bootstrap(" , nonsense")


class FakeWire(GroupWire):
    """The seam: answers scripted descriptions, counting the calls."""

    def __init__(self, answers: list[list[GroupMember] | GroupWireError], delay_s: float = 0.0) -> None:
        super().__init__("127.0.0.1:1", {}, "test")
        self.answers = answers
        self.calls = 0
        self.delay_s = delay_s

    async def describe(self, group: str) -> list[GroupMember]:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        answer = self.answers.pop(0)
        if isinstance(answer, GroupWireError):
            raise answer
        return answer


def test_a_failed_description_is_not_asked_again_within_the_backoff_and_names_why() -> None:
    async def scenario() -> None:
        owner = GroupMember("http://a:1", (("__state", 0), ("data", 5)))
        wire = FakeWire([GroupWireError("broker 127.0.0.1:1: connection refused"), [owner], [owner]])
        router = Router(wire, "g", "__state", failure_backoff_s=0.2)
        assert await router.owner(0) is None
        assert "connection refused" in router.error
        assert await router.owner(0) is None and wire.calls == 1  # within the back-off: answered at once
        await asyncio.sleep(0.25)
        assert await router.owner(0) == "http://a:1" and router.error == ""
        assert await router.owner(5) is None and wire.calls == 3  # another topic's partition; a miss asks again
        assert await router.is_instance("http://a:1")

    asyncio.run(scenario())


def test_requests_needing_a_refresh_at_once_share_one_description() -> None:
    async def scenario() -> None:
        wire = FakeWire([[GroupMember("http://a:1", (("__state", 1),))]], delay_s=0.05)
        router = Router(wire, "g", "__state")
        owners = await asyncio.gather(*(router.owner(1) for _ in range(5)))
        assert owners == ["http://a:1"] * 5 and wire.calls == 1

    asyncio.run(scenario())
