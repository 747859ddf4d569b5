"""Back-pressure: a bounded budget of bytes in flight, waited for at most a bounded time.

Every write request reserves its size before it is queued and gives it back when its transaction
has ended (committed or not), never earlier: the bytes stay in the producer's queue until then. A
request that cannot reserve within ``wait_s`` is refused (the gateway answers 503 with
``Retry-After``), so memory stays bounded by ``capacity`` plus the requests being read, and nothing
queues without bound when the cluster is slow or down. A request larger than the whole budget
reserves the whole budget (it runs alone) rather than never running.

Event-loop only: ``release`` from another thread goes through ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: list[asyncio.Future[None]] = []

    def cost(self, size: int) -> int:
        return min(max(size, 1), self.capacity)

    async def acquire(self, size: int, wait_s: float) -> bool:
        cost = self.cost(size)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while self.used + cost > self.capacity:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return False
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.used += cost
        return True

    def release(self, size: int) -> None:
        """Give back what ``acquire(size)`` took; call on the event loop."""
        self.used -= self.cost(size)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
