"""The stop handler of ``tidelog agent`` and ``tidelog mirror`` (cli/stop_signals.py)."""

from __future__ import annotations

import os
import signal
import threading

from tidelog.cli.stop_signals import setter_for, stop_on_signals


def test_the_handler_returns_while_the_main_thread_holds_the_events_lock() -> None:
    # A signal arriving while the main thread is inside stop.wait() with the event's lock held: the
    # handler must not take that lock itself (it would wait for ever); the event is set once it is free.
    stop = threading.Event()
    lock = stop._cond  # type: ignore[attr-defined]  # the Condition whose plain Lock set() needs
    handled = threading.Event()
    with lock:
        caller = threading.Thread(target=lambda: (setter_for(stop)(signal.SIGTERM, None), handled.set()))
        caller.start()
        assert handled.wait(5), "the handler blocked on the event's lock"
        assert not stop.is_set()
    assert stop.wait(5)


def test_sigterm_sets_the_event_and_the_previous_handler_comes_back() -> None:
    stop = threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
    assert signal.getsignal(signal.SIGTERM) is before
