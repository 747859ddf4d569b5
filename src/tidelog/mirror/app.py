"""Run one mirror process: the copy loop on the main thread, /metrics, /healthz and /readyz on another.

The HTTP surface is the shared web stack's (``tidelog.web``): ``create_app`` with no routes of its
own, served by hypercorn on its own event loop in a daemon thread, so that a slow scrape never
holds the copy loop. ``/readyz`` answers 200 once the process has joined the link group.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from tidelog.mirror import memory
from tidelog.mirror.config import MirrorConfig
from tidelog.mirror.copier import Mirror
from tidelog.mirror.metrics import MirrorMetrics
from tidelog.mirror.preserve import PreservingMirror
from tidelog.web.app import create_app
from tidelog.web.server import ListenerConfig, serve

log = logging.getLogger(__name__)


def listener_of(listen: str) -> ListenerConfig:
    host, _, port = listen.rpartition(":")
    return ListenerConfig(host.strip("[]") or "127.0.0.1", int(port))


def _serve_http(mirror: Mirror | PreservingMirror, listen: str, stop: threading.Event, bound: threading.Event) -> None:
    def ready() -> tuple[bool, str]:
        return (True, "") if mirror.joined.is_set() else (False, "not in the link group yet")

    app = create_app([], registry=mirror.metrics.registry, readiness=[("group", ready)])

    async def main() -> None:
        halt = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(halt.set)), daemon=True).start()
        bound.set()
        await serve(app, listener_of(listen), halt)

    try:
        asyncio.run(main())
    except OSError as exc:
        log.error("metrics listener %s: %s", listen, exc)
        bound.set()


def run(config: MirrorConfig, stop: threading.Event) -> Mirror | PreservingMirror:
    """Start the link's process and copy until ``stop`` is set; returns the stopped mirror."""
    tuned = memory.tune()  # before the first librdkafka client (memory.py)
    if tuned:
        log.info("malloc: %s", ", ".join(f"{key}={value}" for key, value in sorted(tuned.items())))
    mirror = PreservingMirror(config, MirrorMetrics()) if config.preserves_offsets else Mirror(config, MirrorMetrics())
    if config.metrics_listen:
        bound = threading.Event()
        threading.Thread(target=_serve_http, args=(mirror, config.metrics_listen, stop, bound),
                         name="mirror-http", daemon=True).start()
        bound.wait(10)
    mirror.start()
    mirror.run(stop)
    return mirror
