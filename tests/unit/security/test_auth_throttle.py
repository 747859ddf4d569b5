"""The failed-authentication throttle's policy, with times passed in."""

from __future__ import annotations

from tidelog.security.auth_throttle import FORGET_AFTER_S, FailedAuthThrottle

BASE_MS, CAP_MS = 100, 2000


def throttle() -> FailedAuthThrottle:
    return FailedAuthThrottle(lambda: (BASE_MS, CAP_MS))


def test_failures_from_one_address_space_its_attempts_exponentially_up_to_the_cap() -> None:
    t = throttle()
    waits = []
    now = 0.0
    for _ in range(8):
        wait = t.before_attempt("admin", "10.0.0.1", now)
        assert wait is not None
        waits.append(round(wait, 3))
        now += wait
        t.failed("admin", "10.0.0.1", now)
    assert waits == [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_parallel_attempts_from_one_address_take_turns_and_those_beyond_the_cap_are_refused_unchecked() -> None:
    t = throttle()
    for _ in range(6):
        t.failed(None, "10.0.0.1", 0.0)
    turns = [t.before_attempt(f"user{i}", "10.0.0.1", 0.0) for i in range(4)]
    assert turns == [0.0, 2.0, None, None]  # delay(6) = 2 s apart; a turn more than 2 s away is refused


def test_a_user_under_attack_still_logs_in_at_once_where_it_did_before_and_within_the_cap_elsewhere() -> None:
    t = throttle()
    assert t.before_attempt("admin", "10.9.9.9", 0.0) == 0.0
    t.succeeded("admin", "10.9.9.9")
    for attacker in range(50):  # one guess from each of 50 addresses
        t.failed("admin", f"10.0.1.{attacker}", 1.0)
    assert t.before_attempt("admin", "10.9.9.9", 2.0) == 0.0
    assert t.before_attempt("admin", "10.7.7.7", 2.0) == CAP_MS / 1000
    assert t.before_attempt("bob", "10.7.7.7", 2.0) == 0.0


def test_failures_are_forgotten_after_a_quiet_while_and_a_zero_cap_turns_the_throttle_off() -> None:
    t = throttle()
    for _ in range(10):
        t.failed("admin", "10.0.0.1", 0.0)
    assert t.before_attempt("admin", "10.0.0.1", FORGET_AFTER_S + 1) == 0.0
    off = FailedAuthThrottle(lambda: (BASE_MS, 0))
    for _ in range(10):
        off.failed("admin", "10.0.0.1", 0.0)
    assert off.before_attempt("admin", "10.0.0.1", 0.0) == 0.0


def test_a_trusted_user_is_not_held_up_by_another_clients_failures_at_its_address_until_it_fails_there() -> None:
    t = throttle()
    t.succeeded("app", "10.0.0.1")
    for _ in range(10):
        t.failed("misconfigured", "10.0.0.1", 0.0)
    assert t.before_attempt("app", "10.0.0.1", 0.0) == 0.0
    assert t.before_attempt("other", "10.0.0.1", 0.0) is not None
    t.failed("app", "10.0.0.1", 0.0)
    assert t.before_attempt("app", "10.0.0.1", 0.0) == CAP_MS / 1000  # now it waits its turn like any other
