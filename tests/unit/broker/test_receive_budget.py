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


def test_received_small_requests_count_and_a_full_budget_stops_only_connections_that_hold_some() -> None:
    budget = ReceiveBudget(100)
    budget.received(70)
    assert budget.may_read(holding=True)
    budget.received(40)  # one read's worth past the limit: charged after it arrived
    assert budget.reserved == 110
    assert not budget.may_read(holding=True)
    assert budget.may_read(holding=False), "a connection holding nothing must still get a request through"
    resumed: list[str] = []
    budget.pause_reading("a", lambda: resumed.append("a"))
    budget.pause_reading("b", lambda: resumed.append("b"))
    budget.forget_reader("b")
    assert budget.waiting == 1
    budget.discharge(5)
    assert resumed == [] and budget.reserved == 105  # still full
    budget.discharge(40)
    assert resumed == ["a"] and budget.waiting == 0 and budget.reserved == 65


def test_a_large_request_passes_received_ones_when_no_other_large_one_is_reserved() -> None:
    budget = ReceiveBudget(100)
    budget.received(60)
    assert budget.try_reserve(50)  # Kafka's non-strict pool: one large request beyond a budget not yet full
    assert budget.reserved == 110 and budget.ahead == 50
    granted: list[int] = []
    budget.wait(40, lambda: granted.append(40))
    budget.discharge(60)
    assert granted == [40] and budget.reserved == 90 and budget.ahead == 90


def test_a_large_request_that_arrived_is_held_as_received_until_served() -> None:
    budget = ReceiveBudget(100)
    granted: list[int] = []
    assert budget.try_reserve(90)
    budget.wait(90, lambda: granted.append(90))
    budget.wait(90, lambda: granted.append(-90))
    budget.settle(90)  # the first arrived; it is held while served, and the next may be read meanwhile
    assert granted == [90] and budget.reserved == 180 and budget.ahead == 90
    budget.discharge(90)
    assert granted == [90] and budget.reserved == 90  # the third waits: 90 ahead + 90 > 100
    budget.release(90)  # the second's connection went away before its request arrived
    assert granted == [90, -90] and budget.reserved == 90


def test_a_large_request_is_not_granted_while_received_requests_fill_the_budget() -> None:
    budget = ReceiveBudget(100)
    budget.received(100)
    assert not budget.try_reserve(10)
    budget.discharge(1)
    assert budget.try_reserve(10)
