"""The Platform pages: a summary of the governor, the mirror links and the gateway as the cluster's
state topics show them (``platform.PlatformView``), one page per part with its table (searched with
``q``, sorted with ``sort``/``desc``, ``PAGE_SIZE`` rows a page, all on the server), and the
processes' own readiness and metrics when their URLs are configured. The mirror page has a second
table, the offset-preserving links' partitions, searched with the same ``q`` and paged on its own
(``ppage``).

Every page answers even when a part is not used on the cluster (its topic absent: the page says so)
or its topic cannot be read (the broker's error is shown in the part's panel, the rest still renders).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import httpx
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from tidelog.console.config import ConsoleConfig
from tidelog.console.kafka import KafkaFailure, KafkaView
from tidelog.console.paging import paginate, url_with
from tidelog.console.platform import (
    CheckpointRow,
    GatewayRow,
    MirrorState,
    MoveRow,
    PlatformView,
    PreservedRow,
)


class PageHost(Protocol):
    """What these pages use of the console's main ``Pages`` (which builds them): its settings, its
    cluster view and HTTP client, its template rendering and the platform processes' URLs."""

    config: ConsoleConfig
    view: KafkaView
    http: httpx.AsyncClient

    def render(self, request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse: ...

    def _platform_urls(self) -> dict[str, str]: ...


class PlatformPages:
    def __init__(self, pages: PageHost, platform: PlatformView) -> None:
        self.pages = pages
        self.platform = platform

    def routes(self) -> list[BaseRoute]:
        return [Route("/platform", self.summary), Route("/platform/governor", self.governor),
                Route("/platform/mirror", self.mirror), Route("/platform/gateway", self.gateway)]

    async def _part(self, fn: Callable[[], Any]) -> tuple[Any, str]:
        try:
            return await asyncio.to_thread(fn), ""
        except KafkaFailure as exc:
            return None, str(exc)

    async def _mirror(self) -> tuple[MirrorState | None, str]:
        text, error = None, ""
        url = self.pages.config.mirror_url
        if url:
            try:
                answer = await self.pages.http.get(url.rstrip("/") + "/metrics", timeout=2.0)
                answer.raise_for_status()
                text = answer.text
            except httpx.HTTPError as exc:
                error = f"{url}/metrics not readable ({type(exc).__name__}): lag unknown"
        state: MirrorState | None
        state, failure = await self._part(lambda: self.platform.mirror(text, error))
        return state, failure

    async def summary(self, request: Request) -> Response:
        _, error = await self._part(self.pages.view.cluster)
        if error:  # one error for the three parts rather than three waits for an unreachable cluster
            governor = mirror = gateway = None
            governor_error = mirror_error = gateway_error = error
        else:  # each part has its own consumer: read the three together
            (governor, governor_error), (mirror, mirror_error), (gateway, gateway_error) = await asyncio.gather(
                self._part(self.platform.governor), self._mirror(), self._part(self.platform.gateway))
        return self.pages.render(request, "platform.html", governor=governor, governor_error=governor_error,
                                 mirror=mirror, mirror_error=mirror_error, gateway=gateway,
                                 gateway_error=gateway_error, panels=await self._endpoints())

    async def governor(self, request: Request) -> Response:
        state, error = await self._part(self.platform.governor)
        keys: dict[str, Callable[[MoveRow], Any]] = {
            "partition": lambda r: (r.move.topic, r.move.partition), "state": lambda r: (r.state, r.move.topic),
            "size": lambda r: r.move.size}
        rows = state.moves if state else ()
        only = request.query_params.get("state", "")
        listed = [r for r in rows if not only or r.state == only]
        return self._table(request, "platform_governor.html", listed, keys, "partition",
                           lambda r, q: q in r.move.topic.lower(), state=state, error=error, only=only)

    async def mirror(self, request: Request) -> Response:
        state, error = await self._mirror()
        keys: dict[str, Callable[[CheckpointRow], Any]] = {
            "partition": lambda r: (r.link, r.checkpoint.topic, r.checkpoint.partition),
            "shard": lambda r: (r.link, r.shard, r.checkpoint.topic, r.checkpoint.partition),
            "commit": lambda r: r.checkpoint.at, "lag": lambda r: -1 if r.lag_records is None else r.lag_records}
        preserved, ppage, ppages = self._preserved(request, state)
        return self._table(request, "platform_mirror.html", state.rows if state else (), keys, "partition",
                           lambda r, q: q in r.checkpoint.topic.lower() or q in r.link.lower()
                           or q in r.owner.lower(), state=state, error=error,
                           config_mirror_url=self.pages.config.mirror_url, preserved=preserved, ppage=ppage,
                           ppages=ppages, configured={link.name for link in self.pages.config.mirror_links})

    def _preserved(self, request: Request, state: MirrorState | None) -> tuple[list[PreservedRow], int, int]:
        """The offset-preserving links' partitions: searched with the same ``q``, by lag first when the
        checkpoints are sorted by lag, paged on their own (``ppage``)."""
        needle = request.query_params.get("q", "").strip().lower()
        rows = [r for r in (state.preserved if state else ()) if not needle or needle in r.topic.lower()
                or needle in r.source_topic.lower() or needle in r.link.lower() or needle in r.owner.lower()]
        if request.query_params.get("sort") == "lag":
            rows.sort(key=lambda r: -1 if r.lag_records is None else r.lag_records,
                      reverse=request.query_params.get("desc") == "1")
        page, pages, on_page = paginate(rows, request, "ppage")
        return list(on_page), page, pages

    async def gateway(self, request: Request) -> Response:
        state, error = await self._part(self.platform.gateway)
        keys: dict[str, Callable[[GatewayRow], Any]] = {
            "source": lambda r: (r.source.topic, r.source.source_id), "seqno": lambda r: r.source.seqno,
            "shard": lambda r: (r.shard, r.source.topic, r.source.source_id)}
        return self._table(request, "platform_gateway.html", state.rows if state else (), keys, "source",
                           lambda r, q: q in r.source.topic.lower() or q in r.source.source_id.lower(),
                           state=state, error=error)

    def _table(self, request: Request, template: str, rows: Any, keys: dict[str, Callable[[Any], Any]],
               default: str, match: Callable[[Any, str], bool], **context: Any) -> Response:
        q = request.query_params.get("q", "").strip()
        sort = request.query_params.get("sort", default)
        desc = request.query_params.get("desc") == "1"
        needle = q.lower()
        shown = [r for r in rows if not needle or match(r, needle)]
        shown.sort(key=keys.get(sort, keys[default]), reverse=desc)
        page, pages, rows_on_page = paginate(shown, request)
        return self.pages.render(request, template, rows=rows_on_page, q=q, sort=sort, desc=desc, page=page,
                                 pages=pages, total=len(shown), url=url_with(request.url), **context)

    async def _endpoints(self) -> list[dict[str, Any]]:
        """The processes' readiness and metrics, for those whose URL is configured."""
        panels = []
        for name, url in self.pages._platform_urls().items():
            panel: dict[str, Any] = {"name": name, "url": url, "ok": False, "ready": "", "metrics": []}
            try:
                health = await self.pages.http.get(url.rstrip("/") + "/readyz", timeout=2.0)
                panel["ok"], panel["ready"] = health.status_code == 200, health.text.strip()
                metrics = await self.pages.http.get(url.rstrip("/") + "/metrics", timeout=2.0)
                panel["metrics"] = [line for line in metrics.text.splitlines()
                                    if line and not line.startswith("#") and "_bucket" not in line][:40]
            except httpx.HTTPError as exc:
                panel["ready"] = f"not reachable ({type(exc).__name__})"
            panels.append(panel)
        return panels
