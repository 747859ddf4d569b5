"""``tidelog governor run``: the engine's rounds every ``governor.interval.ms`` and the HTTP API
(``api``) on the shared web stack, until the stop event is set. ``/readyz`` is ready once a round
has observed the cluster. Start-up creates the state topic if needed; a round that fails (cluster
unreachable) is logged as an event and the next one tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from confluent_kafka.admin import AdminClient

from tidelog.governor.api import GovernorApi, watch
from tidelog.governor.cluster import Cluster
from tidelog.governor.config import GovernorConfig
from tidelog.governor.engine import Engine
from tidelog.governor.store import Store
from tidelog.observability.registry import Registry
from tidelog.web.app import create_app
from tidelog.web.server import ListenerConfig, serve

log = logging.getLogger(__name__)


def engine_for(config: GovernorConfig, cluster: Cluster | None = None) -> Engine:
    cluster = cluster or Cluster(config.client)
    store = Store(config.client, config.state_topic)
    store.ensure(AdminClient(config.client))
    return Engine(config, cluster, store)


async def rounds(engine: Engine, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await engine.tick()
        except Exception as exc:  # a round must never end the service; the next one starts afresh
            log.exception("governor round failed")
            engine.event("error", f"round failed: {exc}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), engine.config.interval_s)


async def run(config: GovernorConfig, stop: asyncio.Event) -> None:
    cluster = Cluster(config.client)
    await cluster.check_access()  # bad credentials end the service at once, with the mechanism named
    engine = await asyncio.to_thread(engine_for, config, cluster)
    registry = Registry()
    watch(engine, registry)
    app = create_app(GovernorApi(engine).routes(), registry=registry,
                     readiness=[("cluster", lambda: (engine.model is not None, "no round has observed the cluster"))])
    task = asyncio.create_task(rounds(engine, stop))
    log.info("governor on %s:%d for %s", config.listen_host, config.listen_port, config.client["bootstrap.servers"])
    try:
        await serve(app, ListenerConfig(config.listen_host, config.listen_port), stop)
    finally:
        stop.set()
        await task
