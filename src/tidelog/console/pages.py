"""The console's pages: server-rendered HTML (Jinja2), their JSON twins for live refresh, and forms.

Every page is rendered on the server from what ``KafkaView`` and the lag sampler know; a page that
shows numbers that move (overview, a topic's offsets, a group's lag) also has a JSON twin under
``/api/...`` that ``static/console.js`` polls every few seconds to update those numbers in place and
redraw the charts (SVG drawn by the script; no library, no CDN).

Forms (every POST) carry the CSRF token and need an admin session; a read-only user sees the pages
without their forms and gets 403 on a forged POST. After an action the browser is redirected (303)
to the page it came from with a flash message in a signed cookie: the broker's error name and text
when the cluster refused (e.g. ``TOPIC_AUTHORIZATION_FAILED``).

Lists (topics, groups) are filtered (``q``, substring), sorted (``sort``, ``desc``) and paginated
(``page``, ``PAGE_SIZE`` rows) on the server, so a 10,000-partition cluster costs one cached
Metadata request and one page of rows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import httpx
import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from tidelog.console import messages, quotas, reset
from tidelog.console.auth import COOKIE, PRE_LOGIN_COOKIE, Authenticator, Session
from tidelog.console.charts import BrokerCharts
from tidelog.console.config import ConsoleConfig
from tidelog.console.kafka import KafkaFailure, KafkaView, TopicInfo
from tidelog.console.lag import Status
from tidelog.console.paging import paginate, url_with
from tidelog.console.platform import PlatformView
from tidelog.console.platform_pages import PlatformPages
from tidelog.console.sampler import LagSampler
from tidelog.console.scrape import Scraper
from tidelog.console.wire import Wire

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
FLASH_COOKIE = "tidelog_console_flash"
MAX_FORM_BYTES = 1024 * 1024


class Pages:
    def __init__(self, config: ConsoleConfig, view: KafkaView, sampler: LagSampler, auth: Authenticator,
                 scraper: Scraper, http: httpx.AsyncClient, charts: BrokerCharts, platform: PlatformView) -> None:
        self.config = config
        self.platform = PlatformPages(self, platform)
        self.browsers = messages.ConsumerPool(config)
        self.view = view
        self.sampler = sampler
        self.auth = auth
        self.scraper = scraper
        self.http = http
        self.charts = charts
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
        self.templates = Jinja2Templates(env=env)
        self.templates.env.filters["ms"] = _format_ms
        self.templates.env.filters["bytes"] = _format_bytes
        self.templates.env.filters["pct"] = lambda x: f"{x * 100:.0f}%"

    def routes(self) -> list[BaseRoute]:
        r = Route
        return [
            r("/", self.overview), r("/api/overview", self.overview_json),
            r("/login", self.login_page), r("/login", self.login, methods=["POST"]),
            r("/logout", self.logout, methods=["POST"]),
            r("/topics", self.topics), r("/topics", self.create_topic, methods=["POST"]),
            r("/topics/{topic}", self.topic), r("/api/topics/{topic}", self.topic_json),
            r("/topics/{topic}/partitions", self.add_partitions, methods=["POST"]),
            r("/topics/{topic}/configs", self.edit_configs, methods=["POST"]),
            r("/topics/{topic}/delete", self.delete_topic, methods=["POST"]),
            r("/topics/{topic}/messages", self.messages),
            r("/topics/{topic}/produce", self.produce, methods=["POST"]),
            r("/groups", self.groups), r("/api/groups", self.groups_json),
            r("/groups/{group}", self.group), r("/api/groups/{group}", self.group_json),
            r("/groups/{group}/reset", self.reset_offsets, methods=["POST"]),
            r("/security", self.security),
            r("/quotas", self.quotas), r("/quotas", self.set_quota, methods=["POST"]),
            r("/quotas/delete", self.delete_quota, methods=["POST"]),
            *self.platform.routes(),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]

    # -- plumbing -------------------------------------------------------------------------------

    def session(self, request: Request) -> Session:
        session: Session | None = request.scope.get("state", {}).get("session")
        if session is None:
            raise HTTPException(401, "log in first")
        return session

    def render(self, request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        session: Session | None = request.scope.get("state", {}).get("session")
        flash = self._read_flash(request)
        response: HTMLResponse = self.templates.TemplateResponse(request, name, {
            "session": session, "csrf": self.auth.csrf_token(session.nonce) if session else "",
            "cluster_name": self.config.cluster_name, "flash": flash, "platform": self._platform_urls(),
            "refresh_ms": self.config.refresh_ms,
            **context}, status_code=status_code)
        if flash:
            response.delete_cookie(FLASH_COOKIE)
        return response

    def _read_flash(self, request: Request) -> dict[str, str] | None:
        raw = request.cookies.get(FLASH_COOKIE, "")
        body, _, mac = raw.rpartition("|")
        if not body or not self.auth.csrf_ok("flash|" + body, mac):
            return None
        try:
            kind, _, text = json.loads(body)
        except (ValueError, TypeError):
            return None
        return {"kind": str(kind), "text": str(text)}

    def redirect(self, to: str, kind: str, text: str) -> RedirectResponse:
        response = RedirectResponse(to, status_code=303)
        body = json.dumps([kind, "", text[:2000]])
        response.set_cookie(FLASH_COOKIE, f"{body}|{self.auth.csrf_token('flash|' + body)}", httponly=True,
                            samesite="strict", max_age=60)
        return response

    async def form(self, request: Request, *, admin: bool = True) -> dict[str, str]:
        """The POSTed form, after the CSRF check (403) and, for changes, the admin check (403)."""
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "form too large")
        fields = dict(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))
        session = request.scope.get("state", {}).get("session")
        nonce = session.nonce if session else request.cookies.get(PRE_LOGIN_COOKIE, "")
        if not self.auth.csrf_ok(nonce, fields.get("csrf", "")):
            raise HTTPException(403, "the form's CSRF token is missing or stale: reload the page and retry")
        if admin and (session is None or not session.admin):
            raise HTTPException(403, "this action needs the admin role")
        return fields

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def _platform_urls(self) -> dict[str, str]:
        urls = {"gateway": self.config.gateway_url, "mirror": self.config.mirror_url,
                "governor": self.config.governor_url}
        return {k: v for k, v in urls.items() if v}

    # -- login ----------------------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        nonce = request.cookies.get(PRE_LOGIN_COOKIE) or _new_nonce()
        response: Response = self.templates.TemplateResponse(request, "login.html", {
            "session": None, "csrf": self.auth.csrf_token(nonce), "cluster_name": self.config.cluster_name,
            "error": request.query_params.get("failed") is not None, "platform": {}, "flash": None,
            "next": request.query_params.get("next", "/")})
        response.set_cookie(PRE_LOGIN_COOKIE, nonce, httponly=True, samesite="strict")
        return response

    async def login(self, request: Request) -> Response:
        fields = await self.form(request, admin=False)
        user = await self.call(self.auth.login, fields.get("user", ""), fields.get("password", ""))
        if user is None:
            log.info("console login refused for user %r", fields.get("user", "")[:64])
            return RedirectResponse("/login?failed", status_code=303)
        log.info("console login: %s (%s)", user.name, user.role)
        target = fields.get("next", "/")
        response = RedirectResponse(target if target.startswith("/") and not target.startswith("//") else "/",
                                    status_code=303)
        response.set_cookie(COOKIE, self.auth.issue(user.name, user.role), httponly=True, samesite="strict",
                            secure=self.config.ssl_certfile is not None, max_age=self.auth.max_age_s)
        response.delete_cookie(PRE_LOGIN_COOKIE)
        return response

    async def logout(self, request: Request) -> Response:
        await self.form(request, admin=False)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    # -- overview -------------------------------------------------------------------------------

    async def _overview_data(self) -> dict[str, Any]:
        info = await self.call(self.view.cluster)
        scrape = await self.scraper.scrape(self.http) if self.scraper.enabled else None
        disks = []
        if scrape is not None:
            for url, labels, value in scrape.values("tidelog_log_dir_total_bytes"):
                usable = next((v for u, lb, v in scrape.values("tidelog_log_dir_usable_bytes")
                               if u == url and lb.get("log_dir") == labels.get("log_dir")), 0.0)
                disks.append({"url": url, "log_dir": labels.get("log_dir", ""), "total": value,
                              "used": value - usable})
        statuses = [r.status for r in self.sampler.results.values()]
        versions = sorted({labels.get("version", "") for _, labels, _ in scrape.values("tidelog_build_info")}
                          - {""}) if scrape is not None else []
        return {
            "info": info, "disks": disks, "versions": versions, "charts": self.charts.document(),
            "metrics": self.scraper.enabled,
            "scrape_errors": scrape.errors if scrape else {},
            "values": {
                "brokers": len(info.brokers), "topics": len(info.topics), "partitions": info.partition_count,
                "under_replicated": len(info.under_replicated), "offline": len(info.offline),
                "controller": info.controller, "groups": len(self.sampler.results),
                "groups_warn": sum(s is Status.WARN for s in statuses),
                "groups_err": sum(s is Status.ERR for s in statuses),
                "bytes_in": _rate_text(self.scraper.rate("tidelog_topic_bytes_in_total")),
                "bytes_out": _rate_text(self.scraper.rate("tidelog_topic_bytes_out_total")),
                **{f"leaders:{b.id}": b.leaders for b in info.brokers},
                **{f"replicas:{b.id}": b.replicas for b in info.brokers},
            },
        }

    async def overview(self, request: Request) -> Response:
        data = await self._overview_data()
        return self.render(request, "overview.html", **data)

    async def overview_json(self, request: Request) -> Response:
        data = await self._overview_data()
        return JSONResponse({"values": data["values"], "disks": data["disks"], "charts": data["charts"]})

    # -- topics ---------------------------------------------------------------------------------

    async def topics(self, request: Request) -> Response:
        info = await self.call(self.view.cluster)
        q = request.query_params.get("q", "").strip()
        sort = request.query_params.get("sort", "name")
        desc = request.query_params.get("desc") == "1"
        keys: dict[str, Callable[[TopicInfo], Any]] = {
            "name": lambda t: t.name, "partitions": lambda t: len(t.partitions),
            "replication": lambda t: t.replication_factor, "under_replicated": lambda t: t.under_replicated}
        rows = [t for t in info.topics.values() if q.lower() in t.name.lower()]
        rows.sort(key=keys.get(sort, keys["name"]), reverse=desc)
        page, pages, shown = paginate(rows, request)
        sizes: dict[str, float] = {}
        rates: dict[str, float | None] = {}
        if self.scraper.enabled and await self.scraper.scrape(self.http) is not None:
            wanted = {t.name for t in shown}
            for _, labels, value in self.scraper.last.values("tidelog_log_size_bytes") if self.scraper.last else []:
                if labels.get("topic") in wanted:
                    sizes[labels["topic"]] = sizes.get(labels["topic"], 0.0) + value
            for name in wanted:
                rates[name] = self.scraper.rate("tidelog_topic_bytes_in_total", _topic_is(name))
        return self.render(request, "topics.html", topics=shown, q=q, sort=sort, desc=desc, page=page, pages=pages,
                           total=len(rows), url=url_with(request.url), sizes=sizes, rates=rates,
                           metrics=self.scraper.enabled)

    async def create_topic(self, request: Request) -> Response:
        fields = await self.form(request)
        name = fields.get("name", "").strip()
        try:
            partitions = int(fields.get("partitions") or 1)
            replication = int(fields.get("replication_factor") or -1)
            configs = _parse_configs(fields.get("configs", ""))
            await self.call(self.view.create_topic, name, partitions, replication, configs)
        except ValueError as exc:
            return self.redirect("/topics", "error", f"cannot create topic: {exc}")
        except KafkaFailure as exc:
            return self.redirect("/topics", "error", f"cannot create topic {name!r}: {exc}")
        return self.redirect(f"/topics/{quote(name)}", "ok", f"topic {name} created with {partitions} partitions")

    async def _topic_or_404(self, name: str) -> TopicInfo:
        """The topic from cached metadata, asked afresh when the cache does not know it yet."""
        topic: TopicInfo | None = (await self.call(self.view.cluster)).topics.get(name)
        if topic is None:
            topic = (await self.call(lambda: self.view.cluster(fresh=True))).topics.get(name)
        if topic is None:
            raise HTTPException(404, f"no topic {name!r} (UNKNOWN_TOPIC_OR_PARTITION)")
        return topic

    async def _topic_data(self, name: str) -> dict[str, Any]:
        topic = await self._topic_or_404(name)
        tps = [(name, p.partition) for p in topic.partitions]
        earliest, latest = await asyncio.gather(self.call(self.view.offsets, tps, "earliest"),
                                                self.call(self.view.offsets, tps, "latest"))
        sizes: dict[int, float] = {}
        if self.scraper.enabled:
            scrape = await self.scraper.scrape(self.http)
            for _, labels, value in (scrape.values("tidelog_log_size_bytes") if scrape else []):
                if labels.get("topic") == name:
                    sizes[int(labels.get("partition", -1))] = sizes.get(int(labels.get("partition", -1)), 0) + value
        values = {}
        for p in topic.partitions:
            values[f"start:{p.partition}"] = earliest.get((name, p.partition), "?")
            values[f"end:{p.partition}"] = latest.get((name, p.partition), "?")
        values["records"] = sum(latest.get(tp, 0) - earliest.get(tp, 0) for tp in tps)
        return {"topic": topic, "earliest": earliest, "latest": latest, "sizes": sizes, "values": values}

    async def topic(self, request: Request) -> Response:
        name = request.path_params["topic"]
        data = await self._topic_data(name)
        try:
            configs = await self.call(self.view.topic_configs, name)
            config_error = ""
        except KafkaFailure as exc:
            configs, config_error = [], str(exc)
        groups = sorted(g for g, r in self.sampler.results.items() if any(p.topic == name for p in r.partitions))
        return self.render(request, "topic.html", configs=configs, config_error=config_error, groups=groups, **data)

    async def topic_json(self, request: Request) -> Response:
        data = await self._topic_data(request.path_params["topic"])
        return JSONResponse({"values": data["values"]})

    async def add_partitions(self, request: Request) -> Response:
        name = request.path_params["topic"]
        fields = await self.form(request)
        back = f"/topics/{quote(name)}"
        try:
            total = int(fields.get("total", ""))
            await self.call(self.view.add_partitions, name, total)
        except ValueError:
            return self.redirect(back, "error", "the new partition count must be a number")
        except KafkaFailure as exc:
            return self.redirect(back, "error", f"cannot add partitions: {exc}")
        return self.redirect(back, "ok", f"{name} now has {total} partitions")

    async def edit_configs(self, request: Request) -> Response:
        name = request.path_params["topic"]
        fields = await self.form(request)
        back = f"/topics/{quote(name)}"
        try:
            values = _parse_configs(fields.get("set", ""))
            delete = [k.strip() for k in fields.get("delete", "").split(",") if k.strip()]
            if not values and not delete:
                raise ValueError("nothing to change")
            await self.call(self.view.alter_topic_configs, name, values, delete)
        except ValueError as exc:
            return self.redirect(back, "error", f"cannot change configs: {exc}")
        except KafkaFailure as exc:
            return self.redirect(back, "error", f"cannot change configs: {exc}")
        changed = ", ".join([*(f"{k}={v}" for k, v in values.items()), *(f"{k} reset" for k in delete)])
        return self.redirect(back, "ok", f"configs changed: {changed}")

    async def delete_topic(self, request: Request) -> Response:
        name = request.path_params["topic"]
        fields = await self.form(request)
        if fields.get("confirm", "") != name:
            return self.redirect(f"/topics/{quote(name)}", "error",
                                 "not deleted: type the topic's name to confirm")
        try:
            await self.call(self.view.delete_topic, name)
        except KafkaFailure as exc:
            return self.redirect(f"/topics/{quote(name)}", "error", f"cannot delete {name}: {exc}")
        return self.redirect("/topics", "ok", f"topic {name} deleted")

    # -- messages -------------------------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        name = request.path_params["topic"]
        topic = await self._topic_or_404(name)
        q = request.query_params
        try:
            partition = int(q.get("partition", "0"))
            limit = max(1, min(500, int(q.get("limit", "50"))))
            start_value = int(q.get("offset", "0") or 0)
            ts_text = q.get("timestamp", "")
        except ValueError:
            raise HTTPException(400, "partition, offset and limit must be numbers") from None
        start = q.get("start", "end")
        fmt = q.get("format", "text") if q.get("format") in messages.FORMATS else "text"
        filters = messages.Filters(q.get("key", ""), q.get("header", ""), q.get("contains", ""))
        if partition not in {p.partition for p in topic.partitions}:
            raise HTTPException(404, f"{name} has no partition {partition}")
        shown: list[messages.Shown] = []
        scanned, error, first = 0, "", 0
        try:
            tp = [(name, partition)]
            low = (await self.call(self.view.offsets, tp, "earliest")).get(tp[0], 0)
            high = (await self.call(self.view.offsets, tp, "latest")).get(tp[0], 0)
            by_time = None
            if start == "timestamp":
                by_time = (await self.call(self.view.offsets_for_time, tp, _parse_time_ms(ts_text))).get(tp[0])
            filtering = bool(filters.key or filters.header or filters.contains)
            first = messages.start_offset(low, high, start, start_value, limit if not filtering else 1000, by_time)
            shown, scanned = await self.call(lambda: messages.browse(
                self.config, name, partition, first, high, limit=limit, filters=filters, fmt=fmt,
                pool=self.browsers))
        except ValueError as exc:
            error = str(exc)
        except KafkaFailure as exc:
            error = str(exc)
            low = high = 0
        return self.render(request, "messages.html", topic=topic, partition=partition, shown=shown, scanned=scanned,
                           error=error, start=start, offset=start_value, timestamp=ts_text, limit=limit, fmt=fmt,
                           filters=filters, first=first, formats=messages.FORMATS)

    async def produce(self, request: Request) -> Response:
        name = request.path_params["topic"]
        fields = await self.form(request)
        back = f"/topics/{quote(name)}/messages"
        try:
            partition = int(fields["partition"]) if fields.get("partition", "").strip() else None
            headers = [(h.partition("=")[0].strip(), h.partition("=")[2].encode())
                       for h in fields.get("headers", "").splitlines() if h.strip()]
            key = fields["key"].encode() if fields.get("key") else None
            at = await self.call(messages.produce, self.config, name, partition, key,
                                 fields.get("value", "").encode(), headers)
        except ValueError:
            return self.redirect(back, "error", "partition must be a number")
        except KafkaFailure as exc:
            return self.redirect(back, "error", f"not produced: {exc}")
        return self.redirect(f"{back}?partition={at[0]}&start=offset&offset={at[1]}", "ok",
                             f"produced to partition {at[0]} at offset {at[1]}")

    # -- groups ---------------------------------------------------------------------------------

    async def groups(self, request: Request) -> Response:
        listed = await self.call(self.view.list_groups)
        q = request.query_params.get("q", "").strip()
        sort = request.query_params.get("sort", "name")
        desc = request.query_params.get("desc") == "1"
        results = self.sampler.results
        rows = [{"id": g.group_id, "state": g.state, "type": g.type,
                 "status": results[g.group_id].status.name if g.group_id in results else "",
                 "lag": results[g.group_id].total_lag if g.group_id in results else 0,
                 "lag_seconds": max((p.lag_seconds for p in results[g.group_id].partitions), default=0.0)
                 if g.group_id in results else 0.0}
                for g in listed if q.lower() in g.group_id.lower()]
        key = {"name": "id", "lag": "lag", "status": "status", "state": "state"}.get(sort, "id")
        rows.sort(key=lambda row: row[key], reverse=desc)
        page, pages, shown = paginate(rows, request)
        return self.render(request, "groups.html", groups=shown, q=q, sort=sort, desc=desc, page=page, pages=pages,
                           total=len(rows), url=url_with(request.url))

    async def groups_json(self, request: Request) -> Response:
        return JSONResponse({"values": {f"status:{g}": r.status.name for g, r in self.sampler.results.items()}
                             | {f"lag:{g}": r.total_lag for g, r in self.sampler.results.items()}})

    async def _group_data(self, group: str) -> dict[str, Any]:
        described = await self.call(self.view.describe_groups, [group])
        committed = await self.call(self.view.committed, group)
        latest = await self.call(self.view.offsets, sorted(committed))
        result = self.sampler.results.get(group)
        evaluated = {(p.topic, p.partition): p for p in result.partitions} if result else {}
        rows = []
        for tp, offset in sorted(committed.items()):
            p = evaluated.get(tp)
            end = latest.get(tp)
            rows.append({"topic": tp[0], "partition": tp[1], "committed": offset, "end": end,
                         "lag": max(0, end - offset) if end is not None else None,
                         "lag_seconds": p.lag_seconds if p else None, "status": p.status.name if p else "",
                         "owner": p.client_id if p else ""})
        history = [{"t": h.at_ms, "lag": h.total_lag, "seconds": round(h.max_lag_seconds, 3)}
                   for h in self.sampler.history.get(group, ())]
        values: dict[str, Any] = {"status": result.status.name if result else "NOTFOUND",
                                  "total_lag": sum(r["lag"] or 0 for r in rows)}
        for r in rows:
            k = f"{r['topic']}:{r['partition']}"
            values |= {f"committed:{k}": r["committed"], f"end:{k}": r["end"], f"lag:{k}": r["lag"],
                       f"seconds:{k}": _seconds_text(r["lag_seconds"]), f"status:{k}": r["status"]}
        return {"group": described.get(group), "group_id": group, "rows": rows, "result": result,
                "history": history, "values": values}

    async def group(self, request: Request) -> Response:
        data = await self._group_data(request.path_params["group"])
        if data["group"] is None and not data["rows"]:
            raise HTTPException(404, f"no consumer group {request.path_params['group']!r}")
        plan = self._pending_plan(request)
        return self.render(request, "group.html", plan=plan, targets=reset.TARGETS, **data)

    def _pending_plan(self, request: Request) -> dict[str, Any] | None:
        raw = request.query_params.get("plan")
        if not raw:
            return None
        try:
            doc = json.loads(raw)
            moves = [reset.PlannedMove(str(m[0]), int(m[1]), m[2], int(m[3]), int(m[4])) for m in doc["moves"]]
            return {"target": str(doc["target"]), "value": str(doc.get("value", "")), "moves": moves,
                    "moves_json": json.dumps([[m.topic, m.partition, m.new_offset] for m in moves])}
        except (ValueError, KeyError, TypeError, IndexError):
            return None

    async def group_json(self, request: Request) -> Response:
        data = await self._group_data(request.path_params["group"])
        return JSONResponse({"values": data["values"], "history": data["history"]})

    async def reset_offsets(self, request: Request) -> Response:
        """Without ``execute``: plan and show (dry run). With ``execute=1``: commit exactly the offsets of
        the plan that was shown (``moves``), not a plan made again now."""
        group = request.path_params["group"]
        fields = await self.form(request)
        back = f"/groups/{quote(group)}"
        target = fields.get("target", "")
        if fields.get("execute") == "1":
            try:
                offsets = _parse_moves(fields.get("moves", ""))
                await self.call(self.view.commit_offsets, group, offsets)
            except ValueError as exc:
                return self.redirect(back, "error", f"offsets not reset: {exc}")
            except KafkaFailure as exc:
                hint = " (stop the group's consumers first)" if exc.code in (
                    "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS", "_INCONSISTENT") else ""
                return self.redirect(back, "error", f"offsets not reset: {exc}{hint}")
            return self.redirect(back, "ok", f"offsets of {len(offsets)} partitions reset to {target}")
        try:
            value = 0
            if target == "offset":
                value = int(fields.get("value", ""))
            elif target == "timestamp":
                value = _parse_time_ms(fields.get("value", ""))
            moves = await self.call(self._plan, group, fields.get("topic", ""), target, value)
        except (ValueError, KafkaFailure) as exc:
            return self.redirect(back, "error", f"cannot plan the reset: {exc}")
        doc = {"target": target, "value": fields.get("value", ""),
               "moves": [[m.topic, m.partition, m.committed, m.new_offset, m.latest] for m in moves]}
        return self.redirect(f"{back}?plan={quote(json.dumps(doc))}", "ok",
                             f"dry run: {len(moves)} partitions would move; nothing written yet")

    def _plan(self, group: str, topic: str, target: str, value: int) -> list[reset.PlannedMove]:
        if target not in reset.TARGETS:
            raise ValueError(f"choose one of {', '.join(reset.TARGETS)}")
        committed = self.view.committed(group)
        if topic:
            committed = {tp: o for tp, o in committed.items() if tp[0] == topic}
        if not committed:
            raise ValueError("the group has no committed offsets" + (f" on {topic}" if topic else ""))
        tps = sorted(committed)
        earliest, latest = self.view.offsets(tps, "earliest"), self.view.offsets(tps, "latest")
        at_time = self.view.offsets_for_time(tps, value) if target == "timestamp" else {}
        positions = {tp: reset.Position(committed.get(tp), earliest.get(tp, 0), latest.get(tp, 0), at_time.get(tp))
                     for tp in tps}
        return reset.plan(positions, target, value)

    # -- security and platform ------------------------------------------------------------------

    async def security(self, request: Request) -> Response:
        acls, users, acl_error, user_error = [], {}, "", ""
        try:
            acls = await self.call(self.view.acls)
        except KafkaFailure as exc:
            acl_error = str(exc)
        try:
            users = await self.call(self.view.scram_users)
        except KafkaFailure as exc:
            user_error = str(exc)
        principal = request.query_params.get("principal", "")
        if principal:
            acls = [a for a in acls if principal.lower() in a.principal.lower()]
        return self.render(request, "security.html", acls=acls, users=users, acl_error=acl_error,
                           user_error=user_error, principal=principal, connection=self.config.redacted())

    # -- quotas and tiers -------------------------------------------------------------------------

    def _wire(self) -> Wire:
        return Wire(self.config.kafka_config(), self.view.timeout)

    async def quotas(self, request: Request) -> Response:
        entries: list[quotas.QuotaEntry] = []
        error = rules_error = ""
        try:
            entries = await self.call(lambda: quotas.describe(self._wire()))
        except KafkaFailure as exc:
            error = str(exc)
        rules: list[dict[str, str]] = []
        tier_default = ""
        try:
            info = await self.call(self.view.cluster)
            configs = await self.call(self.view.broker_configs, info.brokers[0].id) if info.brokers else {}
            if "quota.tier.default" in configs:  # a tidelog cluster; Apache Kafka has no tiers
                rules, tier_default = quotas.tier_rules(configs), configs["quota.tier.default"] or ""
        except KafkaFailure as exc:
            rules_error = str(exc)
        q = request.query_params.get("q", "").strip()
        rows = [e for e in entries if q.lower() in quotas.entity_text(e.entity).lower()]
        page, pages, shown = paginate(rows, request)
        return self.render(request, "quotas.html", entries=shown, error=error, rules=rules, rules_error=rules_error,
                           tier_default=tier_default, tiers_known=bool(rules) or any(e.tier for e in entries),
                           q=q, page=page, pages=pages, total=len(rows), url=url_with(request.url),
                           keys=quotas.KEYS, number=quotas.number_text, default=quotas.DEFAULT)

    async def set_quota(self, request: Request) -> Response:
        fields = await self.form(request)
        try:
            entity = quotas.parse_entity(fields)
            key = fields.get("key", "").strip()
            if not key:
                raise ValueError("choose the quota's key")
            value = quotas.parse_value(key, fields.get("value", ""))
            await self.call(lambda: quotas.alter(self._wire(), entity, {key: value}))
        except (ValueError, KafkaFailure) as exc:
            return self.redirect("/quotas", "error", f"quota not set: {exc}")
        return self.redirect("/quotas", "ok",
                             f"quota set: {quotas.entity_text(entity)} {key}={quotas.number_text(value)}")

    async def delete_quota(self, request: Request) -> Response:
        fields = await self.form(request)
        try:
            entity = quotas.parse_entity({"entity": fields.get("entity", "")})
            key = fields.get("key", "").strip()
            if not key:
                raise ValueError("the form names no key: reload the page")
            await self.call(lambda: quotas.alter(self._wire(), entity, {}, (key,)))
        except (ValueError, KafkaFailure) as exc:
            return self.redirect("/quotas", "error", f"quota not deleted: {exc}")
        return self.redirect("/quotas", "ok", f"quota deleted: {quotas.entity_text(entity)} {key}")


# -- helpers --------------------------------------------------------------------------------------

def _topic_is(name: str) -> Callable[[dict[str, str]], bool]:
    return lambda labels: labels.get("topic") == name


def _new_nonce() -> str:
    import secrets
    return secrets.token_hex(16)


def _parse_moves(text: str) -> dict[tuple[str, int], int]:
    """The plan a dry run showed, as the execute form sends it back: ``[[topic, partition, offset], ...]``."""
    try:
        moves = json.loads(text)
        offsets = {(str(t), int(p)): int(o) for t, p, o in moves}
    except (ValueError, TypeError):
        raise ValueError("the plan to execute is missing or damaged: run the dry run again") from None
    if not offsets or any(p < 0 or o < 0 for (_, p), o in offsets.items()):
        raise ValueError("the plan to execute is empty or has negative numbers: run the dry run again")
    return offsets


def _parse_configs(text: str) -> dict[str, str]:
    """``key=value`` pairs, one a line or comma-separated."""
    configs = {}
    for item in text.replace(",", "\n").splitlines():
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"expected key=value, got {item.strip()!r}")
        configs[key.strip()] = value.strip()
    return configs


def _parse_time_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO date-time (UTC when no zone is given)."""
    from datetime import UTC, datetime
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a time (epoch ms or 2024-05-01T12:00:00): {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _format_ms(ms: int) -> str:
    if ms is None or ms < 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _format_bytes(n: float | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _rate_text(rate: float | None) -> str:
    return "" if rate is None else _format_bytes(rate) + "/s"


def _seconds_text(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.1f}"
