"""SIGTERM and SIGINT as a ``threading.Event`` for the commands whose main thread runs the work
(``tidelog agent``, ``tidelog mirror``); SIGUSR1 prints every thread's stack to stderr (also in
``tidelog serve``, whose event loop handles SIGTERM itself).

Why the handler does not call ``stop.set()`` itself: a Python signal handler runs in the main thread
between two bytecodes, possibly while that thread is inside ``stop.wait()`` holding the event's
internal lock (a plain, non-reentrant ``Lock``); ``set()`` then waits for that lock forever and the
process never stops (seen as an agent ignoring SIGTERM in CI). The handler hands the ``set()`` to a
short-lived thread, which takes the lock once the main thread lets it go.
"""

from __future__ import annotations

import faulthandler
import io
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def setter_for(stop: threading.Event) -> Callable[[int, FrameType | None], None]:
    """A signal handler that sets ``stop`` without taking its lock in the handler."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=stop.set, name="stop-signal", daemon=True).start()

    return handler


def stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` prints every thread's stack to stderr (the process's log)."""
    try:
        faulthandler.register(signal.SIGUSR1)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # stderr is not a file (the command run inside another program)


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT set ``stop``; the previous handlers come back after it."""
    stacks_on_sigusr1()
    handler = setter_for(stop)
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
