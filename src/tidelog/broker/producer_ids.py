"""Producer id allocation for idempotent producers (InitProducerId without a transactional id).

Ids are handed out from blocks of ``BLOCK_SIZE`` reserved in the metadata store, so an id is never
handed out twice, even across crashes: a restart starts a fresh block after the last reserved one
(the unused rest of the old block is skipped, as in Kafka).
"""

from __future__ import annotations

from typing import Protocol

BLOCK_SIZE = 1000


class ProducerIdSource(Protocol):
    async def allocate_producer_ids(self, count: int) -> int: ...


class ProducerIdAllocator:
    """Hands out ids from the current block. ``reserve`` (async: it may write to the metadata store)
    makes sure an id is available; ``take`` then hands it out synchronously, so a pure state machine
    (the transaction coordinator) can be given ``take`` as its id source."""

    def __init__(self, store: ProducerIdSource) -> None:
        self.store = store
        self._next = 0
        self._end = 0

    async def reserve(self) -> None:
        if self._next >= self._end:
            start = await self.store.allocate_producer_ids(BLOCK_SIZE)
            self._next, self._end = start, start + BLOCK_SIZE

    def take(self) -> int:
        if self._next >= self._end:
            raise RuntimeError("no producer id reserved: await reserve() first")
        producer_id = self._next
        self._next += 1
        return producer_id

    async def allocate(self) -> int:
        await self.reserve()
        return self.take()
