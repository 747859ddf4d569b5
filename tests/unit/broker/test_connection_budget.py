"""A connection's share of the receive budget: every frame it takes off the socket is charged, and
while the budget is full a connection that holds frames stops reading; one that holds none reads on."""

from __future__ import annotations

import asyncio
import struct

from tidelog.broker.connection import KafkaProtocol
from tidelog.broker.receive_budget import ReceiveBudget
from tidelog.protocol.framing import FrameDecoder


class Transport:
    """The part of a transport the protocol uses for reading, with a record of pauses."""

    def __init__(self) -> None:
        self.reading = True
        self.closed = False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


def frames(*sizes: int) -> bytes:
    return b"".join(struct.pack(">i", size) + bytes(size) for size in sizes)


WRITERS: list[asyncio.StreamWriter] = []  # a StreamWriter closes its transport when it is collected


async def nothing(proto: KafkaProtocol, writer: asyncio.StreamWriter) -> None:
    WRITERS.append(writer)


async def close_all() -> None:
    await asyncio.sleep(0)  # every connection's task has started (and kept its writer)
    for writer in WRITERS:
        writer.close()
    WRITERS.clear()


def connection(budget: ReceiveBudget) -> tuple[KafkaProtocol, Transport]:
    proto = KafkaProtocol(FrameDecoder(1 << 20), nothing, over_tls=False, budget=budget)
    transport = Transport()
    proto.connection_made(transport)  # type: ignore[arg-type]
    return proto, transport


async def served(proto: KafkaProtocol) -> None:
    """Take the next frame (the previous one has been answered)."""
    assert await proto.next_frame() is not None


async def answered_all(proto: KafkaProtocol) -> None:
    """The last frame has been answered: the task asks for another, which has not come."""
    try:
        await asyncio.wait_for(proto.next_frame(), 0.01)
    except TimeoutError:
        pass


def test_small_frames_are_charged_and_a_full_budget_stops_only_connections_that_hold_frames() -> None:
    async def scenario() -> None:
        budget = ReceiveBudget(100_000)
        hog, hog_socket = connection(budget)
        hog.data_received(frames(30_000, 30_000))
        assert budget.reserved == 60_000 and hog_socket.reading
        hog.data_received(frames(30_000, 30_000))  # the read that fills the budget is charged, then reading stops
        assert budget.reserved == 120_000 and not hog_socket.reading
        assert budget.waiting == 1

        other, other_socket = connection(budget)
        other.data_received(frames(100))  # it held nothing: its request is read, then it waits to be served
        assert budget.reserved == 120_100 and not other_socket.reading
        await served(other)
        await answered_all(other)
        assert other_socket.reading and budget.reserved == 120_000, "a connection holding nothing must read on"

        await served(hog)
        assert not hog_socket.reading  # being served is not answered: the budget is still full
        await served(hog)  # the first answered: room again
        assert hog_socket.reading and budget.reserved == 90_000 and budget.waiting == 0
        for _ in range(2):
            await served(hog)
        await answered_all(hog)
        assert budget.reserved == 0
        await close_all()

    asyncio.run(scenario())


def test_a_connection_that_goes_away_gives_back_every_frame_it_held() -> None:
    async def scenario() -> None:
        budget = ReceiveBudget(1_000_000)
        proto, _ = connection(budget)
        proto.data_received(frames(10_000, 20_000) + frames(70_000)[:5_000])
        assert budget.reserved == 100_000 and budget.ahead == 70_000  # the large one reserved before read on
        await served(proto)
        proto.connection_lost(None)
        proto.release_budget()
        assert budget.reserved == 0
        await close_all()

    asyncio.run(scenario())
