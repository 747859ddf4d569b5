"""Back-pressure: the in-flight budget is bounded and a wait for it is bounded too."""

from __future__ import annotations

import asyncio

from tidelog.gateway.budget import ByteBudget


def test_reservation_beyond_the_budget_waits_then_gives_up() -> None:
    async def scenario() -> None:
        budget = ByteBudget(100)
        assert await budget.acquire(80, 0.01)
        assert not await budget.acquire(30, 0.02)
        assert budget.used == 80

    asyncio.run(scenario())


def test_release_lets_a_waiting_reservation_through() -> None:
    async def scenario() -> None:
        budget = ByteBudget(100)
        assert await budget.acquire(80, 0.01)
        waiting = asyncio.create_task(budget.acquire(50, 5))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        budget.release(80)
        assert await waiting
        assert budget.used == 50

    asyncio.run(scenario())


def test_request_larger_than_the_budget_runs_alone() -> None:
    async def scenario() -> None:
        budget = ByteBudget(100)
        assert await budget.acquire(1000, 0.01)
        assert budget.used == 100
        assert not await budget.acquire(1, 0.01)
        budget.release(1000)
        assert budget.used == 0

    asyncio.run(scenario())
