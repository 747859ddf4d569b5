"""What the broker needs of a metadata store, whichever it is.

Two stores implement it: ``local_store.LocalMetadataStore`` (a single node: one JSON file) and
``etcd_store.EtcdMetadataStore`` (a cluster). ``image`` is the current image, replaced (never
mutated) on every change; ``commit`` persists a new image before publishing it (etcd: compare-and-set
on what the writer read, ``StaleMetadataError`` when someone changed it first).
"""

from __future__ import annotations

from typing import Protocol

from tidelog.metadata.image import ClusterImage


class MetadataStore(Protocol):
    image: ClusterImage

    async def commit(self, new_image: ClusterImage) -> None: ...

    async def allocate_producer_ids(self, count: int) -> int: ...
