"""Assemble and run one gateway instance: the core (``service``), its routes (``api``), the shared
web stack (``tidelog.web``), the pull-read sessions (``sessions``, ``read_api``), the push
subscriptions (``push_store``, ``push``, ``push_api``) and the legacy staged API (``staged``,
``staged_api``), until a stop event is set.

Start-up order: the state topic is created or checked (a mismatch stops the process with a message),
the instance joins the ownership group, the staged spool is recovered, the push subscriptions are read
from their topic and start, then the HTTP listener opens; ``/readyz`` answers 200 once the instance is
in the group and every shard it was given has been fenced and loaded. Shutdown: the listener stops
taking requests and drains, the push subscriptions stop (a batch in flight stays uncommitted), the read
sessions leave their groups, staged transactions waiting for /commit are aborted (their spools stay),
the instance leaves the ownership group (its writers finish their transaction in progress), and the
process exits.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

import httpx

from tidelog.gateway.api import GatewayApi
from tidelog.gateway.config import GatewayConfig
from tidelog.gateway.push import PushManager
from tidelog.gateway.push_api import PushApi
from tidelog.gateway.push_store import SubscriptionStore
from tidelog.gateway.read_api import ReadApi
from tidelog.gateway.service import Gateway
from tidelog.gateway.sessions import Sessions
from tidelog.gateway.staged import StagedTransactions
from tidelog.gateway.staged_api import StagedApi
from tidelog.observability.registry import Registry
from tidelog.web.app import create_app
from tidelog.web.auth import load_tokens
from tidelog.web.server import serve

log = logging.getLogger(__name__)


def peer_client(config: GatewayConfig) -> httpx.AsyncClient:
    """The client used to forward to other instances: trusts ``gateway.ssl.cafile`` and presents this
    instance's own certificate (so forwarding works when the instances require client certificates)."""
    verify: ssl.SSLContext | bool = True
    if config.ssl_cafile is not None:
        context = ssl.create_default_context(cafile=str(config.ssl_cafile))
        if config.ssl_certfile is not None and config.ssl_keyfile is not None:
            context.load_cert_chain(str(config.ssl_certfile), str(config.ssl_keyfile))
        verify = context
    return httpx.AsyncClient(verify=verify, limits=httpx.Limits(max_connections=64))


async def run(config: GatewayConfig, stop: asyncio.Event) -> None:
    registry = Registry()
    tokens = load_tokens(config.auth_tokens_file) if config.auth_tokens_file is not None else None
    gateway = Gateway(config, registry)
    sessions = Sessions(config, registry)
    store = SubscriptionStore(config, gateway.admin)
    pushes = PushManager(config, registry, store)
    staged = StagedTransactions(config, gateway.topics, registry)
    async with peer_client(config) as http:
        routes = (GatewayApi(gateway, http).routes() + ReadApi(gateway, sessions, http).routes()
                  + PushApi(gateway, pushes).routes() + StagedApi(gateway, staged).routes())
        app = create_app(routes, registry=registry, readiness=[("shards", gateway.readiness)], tokens=tokens,
                         certificates=config.certificate_principals())
        await gateway.start()
        if gateway.acls.enabled:
            await gateway.acls.refresh()  # before the listener opens; failing, requests get 503 until read
            gateway.acls.start()
        await staged.start()
        sessions.start()
        await store.start()
        pushes.start()
        log.info("gateway %s: group %s, state topic %s (%d shards), cluster %s", config.url, config.group_id,
                 config.state_topic, config.state_partitions, config.bootstrap_servers)
        async def interrupt_polls() -> None:
            await stop.wait()
            sessions.interrupt()

        interrupter = asyncio.get_running_loop().create_task(interrupt_polls())
        try:
            await serve(app, config.listener(), stop)
        finally:
            interrupter.cancel()
            await pushes.stop()
            await asyncio.to_thread(store.stop)
            await sessions.stop()
            await staged.stop()
            await gateway.acls.stop()
            await gateway.stop()
