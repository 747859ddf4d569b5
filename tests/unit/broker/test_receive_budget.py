"""The receive budget (queued.max.request.bytes): who may read a large request, and in what order."""

from __future__ import annotations

from tidelog.broker.receive_budget import ReceiveBudget


def test_a_request_larger_than_the_whole_budget_is_admitted_alone() -> None:
    budget = ReceiveBudget(100)
    assert budget.try_reserve(500)
    assert not budget.try_reserve(1)
    budget.release(500)
    assert budget.try_reserve(60) and budget.try_reserve(40) and not budget.try_reserve(1)


def test_waiting_connections_are_granted_in_the_order_they_asked() -> None:
    budget = ReceiveBudget(100)
    granted: list[str] = []
    assert budget.try_reserve(80)
    budget.wait(50, lambda: granted.append("big"))
    budget.wait(10, lambda: granted.append("small"))
    assert not budget.try_reserve(5), "a newcomer jumped the line"
    budget.release(80)
    assert granted == ["big", "small"] and budget.reserved == 60 and budget.waiting == 0


def test_a_cancelled_waiter_is_skipped_and_a_head_that_does_not_fit_blocks_the_line() -> None:
    budget = ReceiveBudget(100)
    granted: list[int] = []
    assert budget.try_reserve(90)
    gone = budget.wait(20, lambda: granted.append(20))
    budget.wait(95, lambda: granted.append(95))
    budget.wait(6, lambda: granted.append(6))
    budget.cancel(gone)
    assert granted == [] and budget.waiting == 2
    budget.release(90)
    assert granted == [95]  # the 6 waits behind it though it would fit: no starvation of large requests
    budget.release(95)
    assert granted == [95, 6]


def test_no_limit_grants_everything() -> None:
    budget = ReceiveBudget(-1)
    assert all(budget.try_reserve(10**9) for _ in range(5))
