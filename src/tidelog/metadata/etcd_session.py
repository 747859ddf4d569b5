"""A broker's session in etcd: its lease, its registration key, and the controller election.

Fencing, the timing argument (docs/dev/cluster-design.md):

- The broker holds a lease of TTL ``ceil(broker.session.timeout.ms / 1000)`` seconds (etcd may grant
  more, never less) and sends a keep-alive every ``broker.heartbeat.interval.ms``. ``brokers/<id>``
  and, while it is controller, ``controller`` are attached to that lease.
- etcd counts the TTL from when it *processed* the last keep-alive; we count from when we *sent* it,
  which is earlier. :class:`LeaseTimer` declares the session invalid once no keep-alive sent in the
  last ``session.timeout - 2 * heartbeat.interval`` ms (5 s by default) has succeeded. So the broker
  stops leading (and stops deciding, as controller) at least two heartbeats before etcd can expire the
  lease and a controller can give its partitions to someone else.
- Clock assumption: over one TTL, the broker's monotonic clock and etcd's do not drift apart by more
  than that margin (real clocks drift by microseconds per second).

A keep-alive answered with TTL <= 0 means the lease is gone (expired while we were cut off, or
revoked): the registration was deleted with it. The session then registers again with a new lease
(same registration, same incarnation): a broker cut off from etcd rejoins when the link heals. If
another live broker took the node id meanwhile, it keeps trying, fenced, and logs why.

Election: ``controller`` is created only if absent, under our lease, in the same transaction as
``controller_epoch`` (compared on the revision we read) goes up by one. A candidate whose view shows
no controller campaigns again; the key disappears by itself when its holder's lease ends.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable

from tidelog.common.errors import ConfigError
from tidelog.metadata import codec, etcd_layout
from tidelog.metadata.codec import CorruptValueError
from tidelog.metadata.errors import DuplicateBrokerError, MetadataStoreUnavailable
from tidelog.metadata.etcd_client import Compare, EtcdClient, Get, KeyValue, Put
from tidelog.metadata.image import BrokerRegistration, ClusterImage

log = logging.getLogger(__name__)


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class LeaseTimer:
    """When the session stops being valid, from the send times of successful renewals (pure)."""

    def __init__(self, session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        if heartbeat_interval_ms <= 0 or session_timeout_ms - 2 * heartbeat_interval_ms <= 0:
            raise ConfigError(
                f"broker.session.timeout.ms ({session_timeout_ms}) must be more than twice "
                f"broker.heartbeat.interval.ms ({heartbeat_interval_ms})"
            )
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.margin_ms = session_timeout_ms - 2 * heartbeat_interval_ms
        self._renewal_sent_ms: float | None = None

    @property
    def ttl_s(self) -> int:
        return max(1, math.ceil(self.session_timeout_ms / 1000))

    def renewed(self, sent_ms: float) -> None:
        """A renewal (grant or keep-alive) sent at ``sent_ms`` succeeded."""
        if self._renewal_sent_ms is None or sent_ms > self._renewal_sent_ms:
            self._renewal_sent_ms = sent_ms

    def lost(self) -> None:
        self._renewal_sent_ms = None

    def deadline_ms(self) -> float | None:
        return None if self._renewal_sent_ms is None else self._renewal_sent_ms + self.margin_ms

    def valid(self, now_ms: float) -> bool:
        deadline = self.deadline_ms()
        return deadline is not None and now_ms < deadline


def _notify(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("metadata session callback %r failed", callback)


class BrokerSession:
    """One broker's lease, registration and candidacy; driven by the store's image updates."""

    def __init__(self, client: EtcdClient, root: bytes, registration: BrokerRegistration,
                 timer: LeaseTimer, current_image: Callable[[], ClusterImage], table: etcd_layout.KeyTable,
                 clock: Callable[[], float] = monotonic_ms) -> None:
        self._client = client
        self._root = root
        self.registration = registration
        self.timer = timer
        self._image = current_image
        self._table = table
        self._clock = clock
        self.lease_id = 0
        self._valid_reported = False
        self._lost: list[Callable[[], None]] = []
        self._restored: list[Callable[[], None]] = []
        self._controller_changed: list[Callable[[bool], None]] = []
        self._keepalive: asyncio.Task[None] | None = None
        self._renewal_failures = 0
        self._registering_again = False
        self._fence_timer: asyncio.TimerHandle | None = None
        self._candidate = False
        self._holding_since = 0  # revision of our winning campaign; 0: not holding the controller key
        self._controller_reported = False
        self._campaigning: asyncio.Task[bool] | None = None
        self._closed = False

    def _key(self, relative: str) -> bytes:
        return self._root + relative.encode()

    # -- registration and lease --------------------------------------------------------------------

    async def register(self) -> None:
        """Grant a lease and create ``brokers/<id>`` under it; DuplicateBrokerError if the id is taken."""
        sent = self._clock()
        lease_id, _ = await self._client.lease_grant(self.timer.ttl_s)
        key = self._key(etcd_layout.broker_key(self.registration.node_id))
        result = await self._client.txn(
            [Compare(key, "create", "==", 0)],
            [Put(key, codec.encode(codec.broker_to_json(self.registration)), lease_id)],
            [Get(key)],
        )
        holder = None if result.succeeded else result.gets[0]
        if holder is not None and holder.lease != lease_id:
            await self._client.lease_revoke(lease_id)
            raise DuplicateBrokerError(self.registration.node_id, _describe_holder(holder))
        self.lease_id = lease_id
        self.timer.renewed(sent)
        self._set_valid(True)

    def start(self) -> None:
        self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive(), name="etcd-lease-keepalive")

    async def _keep_alive(self) -> None:
        """Send a renewal every heartbeat, whether or not the earlier ones have been answered.

        Renewals are pipelined (etcd's own clients keep a stream open for the same reason): each may
        take up to the whole session to be answered, and each success renews from the time it was
        *sent*. So an etcd that answers every request late by D stays renewed as long as
        ``D + heartbeat < session - 2 x heartbeat``; waiting for each answer before sending the next
        needed ``2 D + heartbeat`` below that margin, and once fenced gave up on each answer after a
        heartbeat: an etcd slower than a heartbeat kept the lease alive (every renewal landed) while
        the broker stayed fenced for good, refusing as NOT_LEADER with no election to move its
        partitions.
        """
        interval_s = self.timer.heartbeat_interval_ms / 1000
        in_flight: set[asyncio.Task[None]] = set()
        limit = math.ceil(self.timer.session_timeout_ms / self.timer.heartbeat_interval_ms) + 1
        try:
            while not self._closed:
                await asyncio.sleep(interval_s)
                if self._registering_again or len(in_flight) >= limit:
                    self._check_fence()
                    continue
                task = asyncio.get_running_loop().create_task(self._renew(self.lease_id, self._clock()))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
        finally:
            for task in list(in_flight):
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)

    async def _renew(self, lease_id: int, sent: float) -> None:
        try:
            ttl = await self._client.lease_keepalive(lease_id, self.timer.session_timeout_ms / 1000)
        except MetadataStoreUnavailable as exc:
            self._renewal_failures += 1
            if self._renewal_failures == 1:
                log.warning("etcd lease keep-alive failed (%s); fenced in %.0f ms unless renewed",
                            exc, max(0.0, (self.timer.deadline_ms() or sent) - self._clock()))
            self._check_fence()
            return
        if lease_id != self.lease_id or self._closed:
            return  # an answer about a lease we have since replaced
        if self._renewal_failures:
            log.info("etcd lease keep-alive succeeded again after %d failures", self._renewal_failures)
            self._renewal_failures = 0
        if ttl > 0:
            self.timer.renewed(sent)
            self._set_valid(self.lease_valid())  # a late answer may renew a session already past its fence
            return
        if self._registering_again:
            return
        log.error("broker %d: lease %x expired in etcd; registering again", self.registration.node_id,
                  self.lease_id)
        self.timer.lost()
        self._holding_since = 0
        self._set_valid(False)
        self._registering_again = True
        try:
            await self._register_again()
        finally:
            self._registering_again = False

    async def _register_again(self) -> None:
        delay_s = self.timer.heartbeat_interval_ms / 1000
        while not self._closed:
            try:
                await self.register()
            except (MetadataStoreUnavailable, DuplicateBrokerError) as exc:
                log.error("broker %d: registering again failed: %s", self.registration.node_id, exc)
                await asyncio.sleep(delay_s)
                continue
            log.info("broker %d registered again with lease %x", self.registration.node_id, self.lease_id)
            if self._candidate:
                self._campaign_soon()
            return

    def _set_valid(self, valid: bool) -> None:
        if self._fence_timer is not None:
            self._fence_timer.cancel()
            self._fence_timer = None
        deadline = self.timer.deadline_ms()
        if valid and deadline is not None:
            delay_s = max(0.0, (deadline - self._clock()) / 1000)
            self._fence_timer = asyncio.get_running_loop().call_later(delay_s, self._check_fence)
        if valid != self._valid_reported:
            self._valid_reported = valid
            _notify(self._restored if valid else self._lost)
        self._report_controller()

    def _check_fence(self) -> None:
        if self._valid_reported and not self.lease_valid():
            log.error("broker %d: no lease renewal for %d ms: fenced (not leading, not controlling)",
                      self.registration.node_id, self.timer.margin_ms)
            self._set_valid(False)

    def lease_valid(self, now_monotonic_ms: float | None = None) -> bool:
        return self.timer.valid(self._clock() if now_monotonic_ms is None else now_monotonic_ms)

    def on_lease_lost(self, callback: Callable[[], None]) -> None:
        self._lost.append(callback)

    def on_lease_restored(self, callback: Callable[[], None]) -> None:
        self._restored.append(callback)

    # -- election ----------------------------------------------------------------------------------

    @property
    def is_controller(self) -> bool:
        return self._holding_since > 0 and self.lease_valid()

    def on_controller_change(self, callback: Callable[[bool], None]) -> None:
        self._controller_changed.append(callback)

    def _report_controller(self) -> None:
        now = self.is_controller
        if now != self._controller_reported:
            self._controller_reported = now
            log.info("broker %d %s controller", self.registration.node_id, "is now" if now else "is no longer")
            _notify([functools.partial(callback, now) for callback in self._controller_changed])

    async def campaign(self) -> bool:
        """Try to become controller (and stay a candidate); True when this broker holds the key."""
        self._candidate = True
        if not self.lease_valid():
            return False
        image = self._image()
        controller, epoch_key = self._key(etcd_layout.CONTROLLER), self._key(etcd_layout.CONTROLLER_EPOCH)
        epoch = image.controller_epoch
        epoch_revision = self._table.mod_revision(etcd_layout.CONTROLLER_EPOCH)
        for _ in range(10):
            result = await self._client.txn(
                [Compare(controller, "create", "==", 0), Compare(epoch_key, "mod", "==", epoch_revision)],
                [Put(controller, codec.encode(codec.controller_to_json(self.registration.node_id, epoch + 1)),
                     self.lease_id),
                 Put(epoch_key, codec.encode(epoch + 1))],
                [Get(controller), Get(epoch_key)],
            )
            if result.succeeded:
                self._holding_since = result.revision
                log.info("broker %d elected controller, epoch %d", self.registration.node_id, epoch + 1)
                break
            holder, current_epoch = result.gets
            if holder is not None:
                if holder.lease == self.lease_id:  # a retried campaign of ours that did land
                    self._holding_since = holder.mod_revision
                break
            epoch, epoch_revision = _read_epoch(current_epoch, epoch)
        self._report_controller()
        return self.is_controller

    def observe(self, image: ClusterImage) -> None:
        """The store applied a watch batch: notice losing the key, re-campaign when it is free."""
        entry = self._table.entries.get(etcd_layout.CONTROLLER)
        if self._holding_since and image.revision >= self._holding_since and (
                entry is None or entry.lease != self.lease_id):
            self._holding_since = 0
        self._report_controller()
        if entry is None and self._candidate and self.lease_valid() and not self._closed:
            self._campaign_soon()

    def _campaign_soon(self) -> None:
        if self._campaigning is None or self._campaigning.done():
            self._campaigning = asyncio.get_running_loop().create_task(self._campaign_logged())

    async def _campaign_logged(self) -> bool:
        try:
            return await self.campaign()
        except MetadataStoreUnavailable as exc:
            log.warning("broker %d: controller campaign failed: %s", self.registration.node_id, exc)
            return False

    async def close(self, *, revoke_lease: bool) -> None:
        self._closed = True
        for task in (self._keepalive, self._campaigning):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._fence_timer is not None:
            self._fence_timer.cancel()
        if revoke_lease and self.lease_id:
            try:
                await self._client.lease_revoke(self.lease_id)
            except MetadataStoreUnavailable as exc:
                log.warning("broker %d: lease not revoked (it will expire): %s", self.registration.node_id, exc)
        self._holding_since = 0
        self.timer.lost()


def _read_epoch(kv: KeyValue | None, fallback: int) -> tuple[int, int]:
    """(epoch, mod revision) of ``controller_epoch`` as a failed campaign read it."""
    if kv is None:
        return 0, 0
    try:
        return codec.expect_int(codec.decode(kv.value), "controller_epoch"), kv.mod_revision
    except CorruptValueError as exc:
        log.error("etcd key controller_epoch: %s; counting on from %d", exc, fallback)
        return fallback, kv.mod_revision


def _describe_holder(kv: KeyValue) -> str:
    try:
        holder = codec.broker_from_json(codec.decode(kv.value))
    except CorruptValueError:
        return "its registration could not be read"
    endpoints = ", ".join(f"{e.name}://{e.host}:{e.port}" for e in holder.endpoints)
    return f"incarnation {holder.incarnation}, {endpoints or 'no endpoints'}"
