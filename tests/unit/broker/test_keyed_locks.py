"""KeyedLocks: one key's holders in turn, other keys alongside, no entry left behind."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.broker.keyed_locks import KeyedLocks


def test_one_keys_holders_run_in_turn_and_other_keys_alongside() -> None:
    asyncio.run(_one_keys_holders_run_in_turn_and_other_keys_alongside())


async def _one_keys_holders_run_in_turn_and_other_keys_alongside() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    events: list[str] = []

    async def hold(name: str, key: str) -> None:
        async with locks.hold(key):
            events.append(f"{name} in")
            await asyncio.sleep(0.01)
            events.append(f"{name} out")

    await asyncio.gather(hold("a1", "a"), hold("a2", "a"), hold("b1", "b"))
    assert events.index("a1 out") < events.index("a2 in")  # same key: one after the other
    assert events.index("b1 in") < events.index("a1 out")  # another key: not kept waiting
    assert len(locks) == 0


def test_holders_of_several_keys_take_them_in_one_order_so_none_waits_in_a_circle() -> None:
    asyncio.run(_holders_of_several_keys_take_them_in_one_order_so_none_waits_in_a_circle())


async def _holders_of_several_keys_take_them_in_one_order_so_none_waits_in_a_circle() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    done: list[str] = []

    async def hold(name: str, *keys: str) -> None:
        async with locks.hold(*keys):
            await asyncio.sleep(0.005)
            done.append(name)

    await asyncio.wait_for(asyncio.gather(hold("xy", "x", "y"), hold("yx", "y", "x"), hold("y", "y")), 2)
    assert sorted(done) == ["xy", "y", "yx"]
    assert len(locks) == 0


def test_a_waiter_cancelled_releases_nothing_it_did_not_take_and_leaves_no_entry() -> None:
    asyncio.run(_a_waiter_cancelled_releases_nothing_it_did_not_take_and_leaves_no_entry())


async def _a_waiter_cancelled_releases_nothing_it_did_not_take_and_leaves_no_entry() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("k"):
            inside.set()
            await leave.wait()

    first = asyncio.create_task(holder())
    await inside.wait()

    async def waiter() -> None:
        async with locks.hold("j", "k"):  # takes j, waits for k
            pytest.fail("never reached")

    second = asyncio.create_task(waiter())
    await asyncio.sleep(0.01)
    assert locks.locked("j") and locks.locked("k")
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert not locks.locked("j")
    assert locks.locked("k")  # still the first holder's
    leave.set()
    await first
    assert len(locks) == 0
