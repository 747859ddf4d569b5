"""The few etcd v3 operations tidelog needs, over ``aetcd``, with endpoint failover.

Why aetcd: it is maintained (1.0.0, 2026), asyncio-native over gRPC (etcd's own protocol, the one
``etcdctl`` speaks; no JSON gateway in between, so revisions, leases and watches arrive as etcd sends
them) and ships etcd's generated protobuf stubs. It works against Debian's etcd 3.4.23 (our tests run
it). Two things it does not do the way a metadata store needs, so this module does them on top:

- Several endpoints: an ``aetcd.Client`` talks to one ``host:port``. We keep one client per endpoint
  and move to the next on an unavailable/timeout error, so a 3-member etcd cluster that loses a member
  keeps serving us. A retried transaction is harmless: every write is a compare-and-set, so a retry of
  one that did land fails its compare (the caller re-reads and sees its own write).
- Watches in whole responses: aetcd's watcher hands events one at a time; we open etcd's ``Watch``
  stream with aetcd's stubs ourselves so that one etcd transaction (one revision) arrives as one
  :class:`WatchBatch`, and so that a broken stream resumes from the revision after the last event
  delivered. A start revision already compacted away yields a :class:`WatchReset` with the whole
  prefix re-read instead (the caller rebuilds its state from it).

Everything else (range, txn, lease grant/keep-alive/revoke) goes through ``aetcd.Client``. gRPC and
aetcd errors never leave this module: unreachable etcd is ``MetadataStoreUnavailable`` naming the
endpoints; any other etcd error is ``MetadataStoreUnavailable`` too, with etcd's message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import aetcd
from aetcd import rpc

from tidelog.metadata.errors import MetadataStoreUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
Endpoint = tuple[str, int]

# gRPC keep-alive pings on an otherwise silent watch stream, so a cut link is noticed. etcd refuses
# pings more often than every 5 s (--grpc-keepalive-min-time) by closing the connection.
_CHANNEL_OPTIONS = {
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.http2.max_pings_without_data": 0,
}
_WATCH_BACKOFF_S = (0.05, 0.2, 0.5, 1.0)


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: tuple[KeyValue, ...]
    revision: int  # the store revision the range was read at


@dataclass(frozen=True, slots=True)
class Compare:
    """``target(key) op value``; over every key of [key, range_end) when range_end is set."""

    key: bytes
    target: Literal["mod", "create"]
    op: Literal["==", "!=", "<", ">"]
    value: int
    range_end: bytes | None = None


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: bytes
    range_end: bytes | None = None


@dataclass(frozen=True, slots=True)
class Get:
    key: bytes


Op = Put | Delete | Get


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    gets: tuple[KeyValue | None, ...]  # one per Get of the branch that ran, None: key absent


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    kv: KeyValue  # for a delete: key and mod_revision (the revision of the delete) only


@dataclass(frozen=True, slots=True)
class WatchBatch:
    revision: int  # every change up to this revision has been delivered
    events: tuple[WatchEvent, ...]


@dataclass(frozen=True, slots=True)
class WatchReset:
    """The watch could not resume (compaction): here is the whole prefix as of ``snapshot.revision``."""

    snapshot: RangeResult


def prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def _kv(message: Any) -> KeyValue:
    return KeyValue(
        bytes(message.key), bytes(message.value), int(message.mod_revision), int(message.create_revision),
        int(message.lease),
    )


class _Compacted(Exception):
    pass


class _Moved(Exception):
    pass


_UNAVAILABLE_CODES = (rpc.StatusCode.UNAVAILABLE, rpc.StatusCode.DEADLINE_EXCEEDED, rpc.StatusCode.CANCELLED)
_UNAVAILABLE = (aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError, rpc.AioRpcError, TimeoutError)


class EtcdClient:
    """One logical connection to an etcd cluster (any of ``endpoints``)."""

    def __init__(self, endpoints: Sequence[Endpoint], *, timeout_s: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = tuple(endpoints)
        self.timeout_s = timeout_s
        self._clients = [
            aetcd.Client(host, port, timeout=timeout_s, options=_CHANNEL_OPTIONS) for host, port in endpoints
        ]
        self._current = 0
        self._closed = False
        # The open watch stream and its endpoint: a request failing on that endpoint moves it too (a
        # silent stream to a partitioned member would otherwise wait for gRPC keep-alive to notice).
        self._watch_call: Any = None
        self._watch_index = 0
        self._watch_moved = False

    def describe(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.endpoints)

    async def _call(self, what: str, call: Callable[[Any], Awaitable[T]],
                    attempt_timeout_s: float | None = None) -> T:
        """Run ``call(client)`` on the current endpoint, moving on to the next ones when unreachable."""
        problem: BaseException | None = None
        for _ in range(len(self._clients)):
            index = self._current
            try:
                return await asyncio.wait_for(call(self._clients[index]), attempt_timeout_s or self.timeout_s)
            except _UNAVAILABLE as exc:
                if isinstance(exc, rpc.AioRpcError) and exc.code() not in _UNAVAILABLE_CODES:
                    raise MetadataStoreUnavailable(
                        f"etcd at {self.describe()} refused {what}: {_describe_error(exc)}"
                    ) from exc
                problem = exc
                self._move_on_from(index)
            except aetcd.ClientError as exc:
                raise MetadataStoreUnavailable(f"etcd at {self.describe()} refused {what}: {exc}") from exc
        raise MetadataStoreUnavailable(
            f"etcd unreachable at {self.describe()} ({what}): {_describe_error(problem)}"
        ) from problem

    def _move_on_from(self, index: int) -> None:
        """Endpoint ``index`` failed: use the next one, and move the watch stream off it too."""
        if self._current == index:
            self._current = (index + 1) % len(self._clients)
        if self._watch_call is not None and self._watch_index == index and len(self._clients) > 1:
            self._watch_moved = True
            self._watch_call.cancel()

    async def get_prefix(self, prefix: bytes) -> RangeResult:
        result = await self._call("a read", lambda c: c.get_prefix(prefix))
        return RangeResult(tuple(_kv(kv) for kv in result), int(result.header.revision))

    async def txn(self, compares: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        def build(client: Any) -> Any:
            request = rpc.TxnRequest(
                compare=[_compare_message(c) for c in compares],
                success=[_op_message(op) for op in success],
                failure=[_op_message(op) for op in failure],
            )
            return client.kvstub.Txn(request, timeout=self.timeout_s, metadata=client.metadata)

        async def run(client: Any) -> Any:
            await client.connect()
            return await build(client)

        response = await self._call("a transaction", run)
        gets: list[KeyValue | None] = []
        for item in response.responses:
            if item.WhichOneof("response") == "response_range":
                kvs = item.response_range.kvs
                gets.append(_kv(kvs[0]) if kvs else None)
        return TxnResult(bool(response.succeeded), int(response.header.revision), tuple(gets))

    async def lease_grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (id, granted TTL in seconds; etcd may raise a too-short TTL)."""
        lease = await self._call("a lease grant", lambda c: c.lease(ttl_s))
        return int(lease.id), int(lease.ttl)

    async def lease_keepalive(self, lease_id: int, timeout_s: float | None = None) -> int:
        """Renew a lease: its TTL in seconds, <= 0 when it no longer exists (expired or revoked).

        ``timeout_s`` bounds the whole renewal: each endpoint's attempt gets an equal share of it, so
        a silent member costs its share and the next member is still tried in time.
        """
        attempt_s = None if timeout_s is None else timeout_s / len(self._clients)
        reply = await self._call("a lease keep-alive", lambda c: c.refresh_lease(lease_id), attempt_s)
        return -1 if reply is None else int(reply.TTL)

    async def lease_revoke(self, lease_id: int) -> None:
        try:
            await self._call("a lease revoke", lambda c: c.revoke_lease(lease_id))
        except MetadataStoreUnavailable as exc:
            if "not found" not in str(exc):
                raise

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> AsyncIterator[WatchBatch | WatchReset]:
        """Every change under ``prefix`` from ``start_revision`` on, for ever (until closed or cancelled).

        A broken stream is reopened (on the next endpoint, with a short backoff) from the revision after
        the last one delivered; a compacted start revision yields a WatchReset and goes on from there.
        """
        next_revision = start_revision
        failures = 0
        while not self._closed:
            try:
                async for batch in self._watch_stream(prefix, next_revision):
                    failures = 0
                    next_revision = batch.revision + 1
                    yield batch
                failures += 1  # the server ended the stream
            except _Moved:
                continue  # another request found this endpoint dead: reopen on the current one now
            except _Compacted:
                try:
                    snapshot = await self.get_prefix(prefix)
                except MetadataStoreUnavailable as exc:
                    log.warning("etcd watch: re-read after compaction failed: %s", exc)
                    failures += 1
                else:
                    next_revision = snapshot.revision + 1
                    failures = 0
                    yield WatchReset(snapshot)
                    continue
            except (*_UNAVAILABLE, aetcd.ClientError, MetadataStoreUnavailable) as exc:
                failures += 1
                if failures == 1:
                    log.warning("etcd watch on %s interrupted (%s); resuming from revision %d",
                                self.describe(), _describe_error(exc), next_revision)
                self._move_on_from(self._current)
            if not self._closed:
                await asyncio.sleep(_WATCH_BACKOFF_S[min(failures, len(_WATCH_BACKOFF_S)) - 1])

    async def _watch_stream(self, prefix: bytes, start_revision: int) -> AsyncIterator[WatchBatch]:
        index = self._current
        client = self._clients[index]
        await client.connect()
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                key=prefix, range_end=prefix_end(prefix), start_revision=start_revision,
            ))
            await stop.wait()

        call = rpc.WatchStub(client.channel).Watch(requests(), metadata=client.metadata)
        self._watch_call, self._watch_index, self._watch_moved = call, index, False
        try:
            async for response in self._responses(call):
                if response.compact_revision:
                    raise _Compacted()
                if response.canceled:
                    raise MetadataStoreUnavailable(f"etcd cancelled the watch: {response.cancel_reason}")
                if response.events:
                    events = tuple(
                        WatchEvent("delete" if e.type == rpc.Event.DELETE else "put", _kv(e.kv))
                        for e in response.events
                    )
                    yield WatchBatch(events[-1].kv.mod_revision, events)
        finally:
            self._watch_call = None
            stop.set()
            call.cancel()

    async def _responses(self, call: Any) -> AsyncIterator[Any]:
        try:
            async for response in call:
                yield response
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._watch_moved and task is not None and not task.cancelling():
                raise _Moved() from None  # cancelled by _move_on_from, not by our caller
            raise

    async def close(self) -> None:
        self._closed = True
        for client in self._clients:
            try:
                await client.close()
            except Exception:  # closing must not fail the caller's shutdown
                log.debug("closing an etcd client failed", exc_info=True)


def _describe_error(exc: BaseException | None) -> str:
    if isinstance(exc, rpc.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


_TARGETS = {"mod": rpc.Compare.MOD, "create": rpc.Compare.CREATE}
_RESULTS = {"==": rpc.Compare.EQUAL, "!=": rpc.Compare.NOT_EQUAL, "<": rpc.Compare.LESS, ">": rpc.Compare.GREATER}


def _compare_message(compare: Compare) -> Any:
    message = rpc.Compare(key=compare.key, target=_TARGETS[compare.target], result=_RESULTS[compare.op])
    if compare.target == "mod":
        message.mod_revision = compare.value
    else:
        message.create_revision = compare.value
    if compare.range_end is not None:
        message.range_end = compare.range_end
    return message


def _op_message(op: Op) -> Any:
    if isinstance(op, Put):
        return rpc.RequestOp(request_put=rpc.PutRequest(key=op.key, value=op.value, lease=op.lease))
    if isinstance(op, Delete):
        request = rpc.DeleteRangeRequest(key=op.key)
        if op.range_end is not None:
            request.range_end = op.range_end
        return rpc.RequestOp(request_delete_range=request)
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=op.key))
