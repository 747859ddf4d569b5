"""The etcd metadata store against a real etcd (Debian's 3.4): watch, CAS writes, leases, election.

Most tests share one etcd and take a prefix of their own (a cluster each); the tests that stop etcd
start their own. Sessions are 2 s with 0.5 s heartbeats, so the fencing margin is 1 s.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from helpers.broker_process import free_port
from helpers.etcd_process import EtcdCluster, EtcdProcess, SilentLink
from tidelog.metadata.errors import DuplicateBrokerError, MetadataStoreUnavailable, StaleMetadataError
from tidelog.metadata.etcd_client import EtcdClient, Put, WatchBatch, WatchReset
from tidelog.metadata.etcd_store import EtcdMetadataStore
from tidelog.metadata.image import BrokerEndpoint, BrokerRegistration, ClusterImage, add_partitions, new_topic

T = TypeVar("T")
SESSION_MS, HEARTBEAT_MS = 2000, 500
MARGIN_S = (SESSION_MS - 2 * HEARTBEAT_MS) / 1000


def run(coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


@pytest.fixture(scope="module")
def shared_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    process = EtcdProcess(tmp_path_factory.mktemp("etcd")).start()
    yield process
    process.close()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    process = EtcdProcess(tmp_path / "etcd").start()
    yield process
    process.close()


@pytest.fixture
def url(shared_etcd: EtcdProcess) -> str:
    return shared_etcd.store_url(f"test-{uuid.uuid4().hex[:8]}")


def registration(node_id: int, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(node_id, rack, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + node_id, "PLAINTEXT"),),
                              uuid.uuid4().hex)


async def eventually(check: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> float:
    """Wait until ``check()``; returns the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def broker_store(url: str, node_id: int) -> EtcdMetadataStore:
    store = await EtcdMetadataStore.open(url, connect_timeout_s=3)
    await store.register_broker(registration(node_id), SESSION_MS, HEARTBEAT_MS)
    return store


async def closing(*stores: EtcdMetadataStore) -> None:
    for store in stores:
        await store.close()


def test_first_store_creates_the_cluster_id_and_later_ones_adopt_it(url: str) -> None:
    async def scenario() -> tuple[str, str]:
        first = await EtcdMetadataStore.open(url, cluster_id_hint="first-cluster-id-aaaaa")
        second = await EtcdMetadataStore.open(url, cluster_id_hint="other-cluster-id-bbbbb")
        ids = first.image.cluster_id, second.image.cluster_id
        await closing(first, second)
        return ids

    assert run(scenario()) == ("first-cluster-id-aaaaa", "first-cluster-id-aaaaa")


def test_a_commit_reaches_every_store_through_the_watch(url: str, shared_etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        writer = await EtcdMetadataStore.open(url)
        reader = await EtcdMetadataStore.open(url)
        seen: list[tuple[ClusterImage, ClusterImage]] = []
        reader.subscribe(lambda old, new: seen.append((old, new)))
        topic = new_topic("orders", 3, 1, {"retention.ms": 60_000, "cleanup.policy": ["compact"]})
        await writer.commit(writer.image.with_topic(topic).with_broker_configs({"log.retention.ms": 1000}))
        assert "orders" in writer.image.topics  # read-your-writes: the writer's image has it on return
        await eventually(lambda: "orders" in reader.image.topics, what="reader sees the topic")
        assert reader.image.topics["orders"] == topic
        assert dict(reader.image.broker_configs) == {"log.retention.ms": 1000}
        assert seen[-1][0].topics.get("orders") is None and seen[-1][1].topics["orders"] == topic

        await writer.commit(writer.image.without_topic("orders"))
        await eventually(lambda: "orders" not in reader.image.topics, what="reader sees the deletion")
        raw = EtcdClient([("127.0.0.1", shared_etcd.client_port)])
        assert (await raw.get_prefix(f"/{reader.prefix}/partitions/".encode())).kvs == ()  # gone with the topic
        await raw.close()
        await closing(writer, reader)

    run(scenario())


def test_concurrent_commits_on_one_key_one_wins_the_other_is_stale(url: str) -> None:
    async def scenario() -> None:
        a = await EtcdMetadataStore.open(url)
        b = await EtcdMetadataStore.open(url)
        await a.commit(a.image.with_topic(new_topic("t", 1, 1, {})))
        await eventually(lambda: "t" in b.image.topics)
        topic_a, topic_b = a.image.topics["t"], b.image.topics["t"]
        results = await asyncio.gather(
            a.commit(a.image.with_topic(topic_a.with_configs({"retention.ms": 1}))),
            b.commit(b.image.with_topic(topic_b.with_configs({"retention.ms": 2}))),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["NoneType", "StaleMetadataError"]
        winner = 1 if results[0] is None else 2
        await eventually(lambda: dict(b.image.topics["t"].configs) == {"retention.ms": winner})
        assert isinstance(next(r for r in results if r is not None), StaleMetadataError)

        # Writers of different keys from the same (now old) image both succeed: only changed keys are compared.
        base = a.image
        await a.commit(base.with_topic(new_topic("x", 1, 1, {})))
        await a.commit(base.with_topic(new_topic("y", 1, 1, {})))
        assert {"t", "x", "y"} <= set(a.image.topics)
        await closing(a, b)

    run(scenario())


def test_alter_partition_is_compare_and_set_on_that_partition(url: str) -> None:
    async def scenario() -> None:
        a = await EtcdMetadataStore.open(url)
        b = await EtcdMetadataStore.open(url)
        topic = new_topic("isr", 2, 1, {})
        await a.commit(a.image.with_topic(topic))
        await eventually(lambda: "isr" in b.image.topics)
        expected = topic.partitions[0]
        shrink = type(expected)(0, 1, 0, (1,), (1,), expected.partition_epoch + 1)
        elect = type(expected)(0, -1, 1, (1,), (1,), expected.partition_epoch + 1)
        results = await asyncio.gather(a.alter_partition("isr", 0, expected, shrink),
                                       b.alter_partition("isr", 0, expected, elect))
        assert sorted(results) == [False, True]
        winner = shrink if results[0] else elect
        await eventually(lambda: b.image.topics["isr"].partitions[0] == winner)
        assert a.image.topics["isr"].partitions[1] == topic.partitions[1]
        await closing(a, b)

    run(scenario())


def test_producer_id_blocks_never_overlap_across_stores(url: str) -> None:
    async def scenario() -> list[int]:
        a = await EtcdMetadataStore.open(url)
        b = await EtcdMetadataStore.open(url)
        starts = await asyncio.gather(*(s.allocate_producer_ids(1000) for s in (a, b) * 5))
        await closing(a, b)
        return starts

    starts = run(scenario())
    assert sorted(starts) == list(range(0, 10_000, 1000))


def test_a_second_broker_with_the_same_node_id_is_refused(url: str) -> None:
    async def scenario() -> None:
        first = await broker_store(url, 7)
        second = await EtcdMetadataStore.open(url)
        with pytest.raises(DuplicateBrokerError, match=r"node\.id 7 is already registered.*127\.0\.0\.1:9007"):
            await second.register_broker(registration(7), SESSION_MS, HEARTBEAT_MS)
        await second.register_broker(registration(8), SESSION_MS, HEARTBEAT_MS)
        await eventually(lambda: sorted(first.image.brokers) == [7, 8])
        assert [b.node_id for b in first.image.live_brokers()] == [7, 8]
        await closing(first, second)

    run(scenario())


def test_broker_fences_itself_when_etcd_stops_and_rejoins_when_it_returns(own_etcd: EtcdProcess) -> None:
    url = own_etcd.store_url()

    async def scenario() -> None:
        store = await broker_store(url, 1)
        lost: list[float] = []
        restored: list[float] = []
        store.on_lease_lost(lambda: lost.append(time.monotonic()))
        store.on_lease_restored(lambda: restored.append(time.monotonic()))
        await asyncio.sleep(HEARTBEAT_MS / 1000 * 2)
        assert store.lease_valid()
        stopped = time.monotonic()
        await asyncio.to_thread(own_etcd.kill9)
        # The last renewal that succeeded was sent before the kill: fenced at most the margin later.
        await eventually(lambda: not store.lease_valid(), timeout=MARGIN_S + 0.3, what="fenced")
        assert lost and lost[0] - stopped <= MARGIN_S + 0.3
        await asyncio.to_thread(own_etcd.start)
        await eventually(store.lease_valid, timeout=10, what="lease renewed after etcd restart")
        assert restored
        other = await EtcdMetadataStore.open(url)
        assert 1 in other.image.brokers
        await closing(store, other)

    run(scenario())


def test_a_broker_whose_lease_expired_registers_again(url: str, shared_etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        store = await broker_store(url, 3)
        watcher = await EtcdMetadataStore.open(url)
        await eventually(lambda: 3 in watcher.image.brokers)
        old_lease = store.lease_id
        raw = EtcdClient([("127.0.0.1", shared_etcd.client_port)])
        await raw.lease_revoke(old_lease)  # what etcd does when the lease runs out while we are cut off
        await raw.close()
        await eventually(lambda: store.lease_id != old_lease and store.lease_valid(), what="registered again")
        await eventually(lambda: 3 in watcher.image.brokers, what="registration visible again")
        await closing(store, watcher)

    run(scenario())


def test_controller_moves_when_its_broker_closes(url: str) -> None:
    async def scenario() -> None:
        a = await broker_store(url, 1)
        b = await broker_store(url, 2)
        changes: list[bool] = []
        b.on_controller_change(changes.append)
        assert await a.campaign()
        assert not await b.campaign()
        await eventually(lambda: b.image.controller_id == 1)
        epoch = b.image.controller_epoch
        await a.close()
        took = await eventually(lambda: b.is_controller, timeout=3, what="b takes over")
        assert took < 1.0  # the revoked lease frees the key at once
        assert changes == [True]
        await eventually(lambda: b.image.controller_id == 2 and b.image.controller_epoch == epoch + 1)
        await b.close()

    run(scenario())


def test_controller_moves_when_its_lease_expires(url: str) -> None:
    async def scenario() -> None:
        a = await broker_store(url, 1)
        b = await broker_store(url, 2)
        assert await a.campaign()
        assert not await b.campaign()
        await a.close(revoke_lease=False)  # a dies: its lease runs out after the session timeout
        took = await eventually(lambda: b.is_controller, timeout=SESSION_MS / 1000 + 2, what="b takes over")
        assert took >= MARGIN_S
        await eventually(lambda: sorted(b.image.brokers) == [2], what="a's registration expired")
        await b.close()

    run(scenario())


def test_a_corrupt_value_is_reported_with_its_key_and_the_store_keeps_working(
        url: str, shared_etcd: EtcdProcess, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        store = await EtcdMetadataStore.open(url)
        await store.commit(store.image.with_topic(new_topic("good", 1, 1, {})))
        good = store.image.topics["good"]
        raw = EtcdClient([("127.0.0.1", shared_etcd.client_port)])
        root = f"/{store.prefix}/"
        await raw.txn([], [Put(f"{root}topics/good".encode(), b"{not json"),
                           Put(f"{root}brokers/5".encode(), b'{"node_id": 6}'),
                           Put(f"{root}acls".encode(), b'[{"resource_type": true}]')])
        await store.commit(store.image.with_topic(new_topic("after", 2, 1, {})))
        assert "after" in store.image.topics
        assert store.image.topics["good"] == good  # the previous value is kept
        assert 5 not in store.image.brokers and store.image.acls == ()
        # A writer can repair the corrupt key: its revision is known even though its value is not.
        await store.commit(store.image.with_topic(good.with_configs({"retention.ms": 5})))
        assert dict(store.image.topics["good"].configs) == {"retention.ms": 5}
        await raw.close()
        await store.close()

    with caplog.at_level(logging.ERROR, logger="tidelog.metadata.etcd_store"):
        run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert any("topics/good" in m and "not JSON" in m and "keeping its previous value" in m for m in messages)
    assert any("brokers/5" in m for m in messages)
    assert any("/acls" in m and "resource_type" in m for m in messages)


def test_unreachable_etcd_fails_fast_naming_the_endpoints() -> None:
    ports = free_port(), free_port()
    url = f"etcd://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/tidelog"
    started = time.monotonic()
    with pytest.raises(MetadataStoreUnavailable, match=f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"):
        run(EtcdMetadataStore.open(url, connect_timeout_s=2))
    assert time.monotonic() - started < 3


def test_a_watch_from_a_compacted_revision_restarts_from_a_full_read(shared_etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        client = EtcdClient([("127.0.0.1", shared_etcd.client_port)])
        prefix = f"/compact-{uuid.uuid4().hex[:6]}/".encode()
        first = await client.txn([], [Put(prefix + b"a", b"1")])
        await client.txn([], [Put(prefix + b"b", b"2")])
        import aetcd
        async with aetcd.Client("127.0.0.1", shared_etcd.client_port) as raw:
            await raw.compact(first.revision + 1)
        stream = client.watch_prefix(prefix, first.revision)
        item = await anext(stream)
        assert isinstance(item, WatchReset)
        assert sorted(kv.key for kv in item.snapshot.kvs) == [prefix + b"a", prefix + b"b"]
        await client.txn([], [Put(prefix + b"c", b"3")])
        item = await anext(stream)
        assert isinstance(item, WatchBatch) and [e.kv.key for e in item.events] == [prefix + b"c"]
        await stream.aclose()
        await client.close()

    run(scenario())


def test_the_store_rides_out_the_loss_of_one_etcd_member(tmp_path: Path) -> None:
    cluster = EtcdCluster(tmp_path).start()
    try:
        async def scenario() -> None:
            writer = await EtcdMetadataStore.open(cluster.store_url(), connect_timeout_s=3)
            reader = await EtcdMetadataStore.open(cluster.store_url(), connect_timeout_s=3)
            await writer.commit(writer.image.with_topic(new_topic("before", 1, 1, {})))
            await asyncio.to_thread(cluster.members[0].kill9)  # the endpoint both stores use first
            await writer.commit(writer.image.with_topic(new_topic("after", 1, 1, {})))
            await eventually(lambda: "after" in reader.image.topics, timeout=5, what="reader follows")
            await closing(writer, reader)

        run(scenario())
    finally:
        cluster.close()



def test_brokers_move_off_a_silent_etcd_member_without_being_fenced(tmp_path: Path) -> None:
    cluster = EtcdCluster(tmp_path).start()
    link = SilentLink("127.0.0.1", cluster.members[0].client_port)
    url = f"etcd://{link.endpoint},{cluster.members[1].endpoint},{cluster.members[2].endpoint}/tidelog"
    try:
        async def scenario() -> None:
            stores = []
            lost: list[int] = []
            for node_id in (1, 2):
                store = await EtcdMetadataStore.open(url, connect_timeout_s=2)
                await store.register_broker(registration(node_id), 3000, 500)  # fenced after 2 s silence
                store.on_lease_lost(lambda node_id=node_id: lost.append(node_id))
                stores.append(store)
            writer, reader = stores
            link.cut()
            started = time.monotonic()
            await writer.commit(writer.image.with_topic(new_topic("during", 1, 1, {})))
            await eventually(lambda: "during" in reader.image.topics, timeout=5, what="reader follows")
            assert time.monotonic() - started < 4
            await asyncio.sleep(1.0)
            assert lost == [] and writer.lease_valid() and reader.lease_valid()
            await closing(writer, reader)

        run(scenario())
    finally:
        link.close()
        cluster.close()


def test_a_broker_stays_unfenced_while_etcd_answers_every_request_a_second_late(own_etcd: EtcdProcess) -> None:
    """Renewals are pipelined: a late answer still renews from when it was sent.

    Session 3 s, heartbeat 0.5 s: fenced 2 s after the last renewal sent that succeeded. Answers 1 s
    late leave renewals 0.5 s apart, each known 1 s after sending: never fenced. A broker that waited
    for each answer before sending the next saw renewals 1.5 s apart, known 2.5 s after sending: it
    fenced itself, and (giving up on an answer after a heartbeat once fenced) stayed fenced while every
    renewal kept its lease alive in etcd.
    """
    link = SilentLink("127.0.0.1", own_etcd.client_port)
    try:
        async def scenario() -> None:
            store = await EtcdMetadataStore.open(f"etcd://{link.endpoint}/slow", connect_timeout_s=3)
            await store.register_broker(registration(1), 3000, 500)
            lost: list[float] = []
            store.on_lease_lost(lambda: lost.append(time.monotonic()))
            link.answer_late(1.0)
            await asyncio.sleep(6.0)
            assert lost == [] and store.lease_valid()
            link.answer_late(0.0)
            await asyncio.sleep(2.0)
            assert lost == [] and store.lease_valid()
            await closing(store)

        run(scenario())
    finally:
        link.close()


def test_a_topic_of_thousands_of_partitions_is_created_grown_and_seen_by_another_store(url: str) -> None:
    """One key per creation: etcd refuses transactions of more than 128 operations by default."""

    async def scenario() -> None:
        writer, reader = await broker_store(url, 1), await broker_store(url, 2)
        try:
            await writer.commit(writer.image.with_topic(new_topic("wide", 3000, 1, {})))
            topic = writer.image.topics["wide"]
            await writer.commit(writer.image.with_topic(add_partitions(topic, 4000, 1)))
            await eventually(lambda: len(getattr(reader.image.topics.get("wide"), "partitions", ())) == 4000,
                             what="the other store sees 4000 partitions")
            last = reader.image.topics["wide"].partitions[-1]
            assert (last.index, last.leader, last.isr, last.replicas) == (3999, 1, (1,), (1,))
        finally:
            await closing(writer, reader)

    run(scenario())
