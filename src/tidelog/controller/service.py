"""The controller's shell: while this broker holds the controller key, keep leaders and ISRs right.

Whenever the image changes (a broker registered or vanished, a topic appeared) and once a second
anyway, the controller compares every partition with the live brokers (``elections.partition_changes``)
and writes each needed change as a compare-and-set on that partition's key. A lost compare means a
leader changed the ISR meanwhile: the next pass sees the new state and decides again. Only the broker
that holds the controller key acts; when it loses the key (its lease) it stops at once, and every
write it still had in flight fails its compare if anybody else wrote the partition since.

The same pass completes partition reassignments whose target replicas are all in sync
(``reassignment.reassignment_changes``). A move lives in the partition's own key, so a controller
elected in the middle of one finds it there and carries it on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tidelog.controller.elections import NO_LEADER, partition_changes, preferred_leader_changes
from tidelog.controller.reassignment import reassignment_changes
from tidelog.metadata.image import ClusterImage, PartitionImage

log = logging.getLogger(__name__)

PASS_INTERVAL_S = 1.0


class ControllerStore(Protocol):
    image: ClusterImage

    @property
    def is_controller(self) -> bool: ...

    async def alter_partition(self, topic: str, index: int, expected: PartitionImage, new: PartitionImage) -> bool: ...


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    """Kafka's auto leader rebalance: ``auto.leader.rebalance.enable``,
    ``leader.imbalance.check.interval.seconds``, ``leader.imbalance.per.broker.percentage``."""

    enabled: bool = True
    interval_s: float = 300.0
    imbalance_percentage: int = 10


class ControllerService:
    def __init__(self, store: ControllerStore, unclean_allowed: Callable[[str], bool],
                 rebalance: RebalanceSettings | None = None) -> None:
        self.store = store
        self.unclean_allowed = unclean_allowed
        self.rebalance = rebalance or RebalanceSettings()
        self._next_rebalance = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    async def stop(self) -> None:
        # The flag ends the loop even when the cancellation is lost: Python 3.11's wait_for swallows
        # it if the awaited event is set in the same turn of the loop (and then stop() never returned).
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def on_image(self, old: ClusterImage, new: ClusterImage) -> None:
        if old.brokers.keys() != new.brokers.keys() or old.topics is not new.topics or old.controller_id != new.controller_id:
            self._wake.set()

    def on_controller_change(self, is_controller: bool) -> None:
        # The image that showed the old controller's broker gone may have arrived before this broker
        # won the key: without a pass now, its partitions would wait for the next periodic one.
        if is_controller:
            self._wake.set()

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wake.wait(), PASS_INTERVAL_S)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._stopping or not self.store.is_controller:
                continue
            try:
                await self.run_pass()
                await self._maybe_rebalance()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller pass failed; trying again")

    async def run_pass(self) -> int:
        """One comparison of every partition with the live brokers; the number of partitions changed."""
        image = self.store.image
        live = frozenset(image.brokers)
        changed = 0
        for topic, current, new in list(partition_changes(image, live, self.unclean_allowed)):
            if not self.store.is_controller:
                break
            if await self.store.alter_partition(topic, current.index, current, new):
                changed += 1
                _log_change(topic, current, new)
        return changed + await self._complete_moves()

    async def _complete_moves(self) -> int:
        image = self.store.image
        completed = 0
        for topic, current, new in list(reassignment_changes(image, frozenset(image.brokers))):
            if not self.store.is_controller or self._stopping:
                break
            if await self.store.alter_partition(topic, current.index, current, new):
                completed += 1
                log.info("reassignment of %s-%d complete: replicas %s -> %s, leader %d at epoch %d", topic,
                         new.index, list(current.replicas), list(new.replicas), new.leader, new.leader_epoch)
        return completed


    async def _maybe_rebalance(self) -> int:
        loop = asyncio.get_running_loop()
        if not self.rebalance.enabled or loop.time() < self._next_rebalance:
            return 0
        self._next_rebalance = loop.time() + self.rebalance.interval_s
        image = self.store.image
        moved = 0
        for topic, current, new in preferred_leader_changes(image, frozenset(image.brokers), self.rebalance.imbalance_percentage):
            if not self.store.is_controller or self._stopping:
                break
            if await self.store.alter_partition(topic, current.index, current, new):
                moved += 1
                log.info("preferred leader election: broker %d leads %s-%d again at epoch %d", new.leader, topic,
                         new.index, new.leader_epoch)
        return moved


def _log_change(topic: str, old: PartitionImage, new: PartitionImage) -> None:
    if new.leader != old.leader:
        if new.leader == NO_LEADER:
            log.warning("%s-%d is offline: no live in-sync replica (ISR %s)", topic, new.index, list(new.isr))
        else:
            log.info("elected broker %d leader of %s-%d at epoch %d (ISR %s)", new.leader, topic, new.index,
                     new.leader_epoch, list(new.isr))
    else:
        log.info("ISR of %s-%d: %s -> %s (dead brokers removed)", topic, new.index, list(old.isr), list(new.isr))
