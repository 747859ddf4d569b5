"""The controller loop's wake-ups: stopping it at the moment it is woken still stops it, and winning
the controller key runs a pass at once.

Python 3.11's ``asyncio.wait_for`` loses a cancellation that arrives in the same turn of the event loop
as the event it waits for: the task then runs on, and a ``stop()`` awaiting it never returns (a
broker's SIGTERM hung for ever while leadership moved during a rolling restart). The replica fetcher
has the same guard; its race (a resting partition woken as the fetcher stops) is not set up here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine

from tidelog.controller.service import ControllerService
from tidelog.metadata.image import ClusterImage, PartitionImage


class IdleStore:
    image = ClusterImage(cluster_id="c")
    is_controller = False

    async def alter_partition(self, topic: str, index: int, expected: PartitionImage, new: PartitionImage) -> bool:
        return False


async def stops_within(stop: Coroutine[None, None, None], seconds: float) -> None:
    # Not wait_for: stop() swallows the cancellation wait_for would send at its timeout.
    done, _ = await asyncio.wait({asyncio.ensure_future(stop)}, timeout=seconds)
    assert done, f"stop() had not returned after {seconds} s"


def test_the_controller_loop_stops_when_woken_in_the_same_turn() -> None:
    async def scenario() -> None:
        service = ControllerService(IdleStore(), lambda _topic: False)
        service.start()
        await asyncio.sleep(0.01)
        service.on_image(ClusterImage(cluster_id="c"), ClusterImage(cluster_id="c", controller_id=1))
        await asyncio.sleep(0)
        await stops_within(service.stop(), 2)

    asyncio.run(scenario())



class CountingStore(IdleStore):
    """Counts the image reads: each controller pass makes at least one."""

    def __init__(self) -> None:
        self.passes = 0
        self.is_controller = False

    @property
    def image(self) -> ClusterImage:
        self.passes += 1
        return ClusterImage(cluster_id="c")


def test_a_broker_that_becomes_controller_runs_a_pass_at_once() -> None:
    async def scenario() -> None:
        store = CountingStore()
        service = ControllerService(store, lambda _topic: False)
        service.start()
        await asyncio.sleep(0.05)
        store.is_controller = True
        service.on_controller_change(True)
        await asyncio.sleep(0.1)  # the periodic pass would come only after 1 s
        assert store.passes > 0
        await stops_within(service.stop(), 2)

    asyncio.run(scenario())
