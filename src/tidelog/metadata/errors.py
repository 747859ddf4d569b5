"""Errors of the metadata stores.

Tree (all under ``tidelog.common.errors.TidelogError``)::

    MetadataStoreUnavailable   etcd did not answer (the message names the endpoints); retry later
    StaleMetadataError         a compare-and-set lost: someone changed a key this writer read; re-read
                               (the store's watch delivers the change) and decide again
    DuplicateBrokerError       another live broker is registered with this node.id; refuse to start
"""

from __future__ import annotations

from tidelog.common.errors import TidelogError


class MetadataStoreUnavailable(TidelogError):
    """The metadata store cannot be reached (or did not answer in time)."""

    retriable = True


class StaleMetadataError(TidelogError):
    """A write compared revisions that have moved on: the image it was derived from is stale."""

    retriable = True


class DuplicateBrokerError(TidelogError):
    """A broker with this node id is already registered (its lease is alive)."""

    retriable = False

    def __init__(self, node_id: int, holder: str = "") -> None:
        detail = f" ({holder})" if holder else ""
        super().__init__(
            f"node.id {node_id} is already registered by a live broker{detail}; "
            "give this broker another node.id or stop the other one"
        )
        self.node_id = node_id
