"""Producer id allocation for idempotent producers (InitProducerId without a transactional id).

Ids are handed out from blocks of ``BLOCK_SIZE`` reserved in the metadata store, so an id is never
handed out twice, even across crashes: a restart starts a fresh block after the last reserved one
(the unused rest of the old block is skipped, as in Kafka).
"""

from __future__ import annotations

from tidelog.metadata.local_store import LocalMetadataStore

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, store: LocalMetadataStore) -> None:
        self.store = store
        self._next = 0
        self._end = 0

    def allocate(self) -> int:
        if self._next >= self._end:
            start = self.store.image.producer_id_block_end
            self.store.commit(self.store.image.with_producer_id_block_end(start + BLOCK_SIZE))
            self._next, self._end = start, start + BLOCK_SIZE
        producer_id = self._next
        self._next += 1
        return producer_id
