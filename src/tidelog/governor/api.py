"""The governor's JSON API (what the web console shows), on the shared web stack (``tidelog.web``):

- ``GET /v1/state``: the last round: cluster, health, circuit-breaker verdict, excluded brokers,
  control (paused, by whom, why, drained brokers), the current plan's progress, the last plan;
- ``GET /v1/moves``: the current plan's moves with their state (done, in-flight, pending, cancelled)
  and bytes copied so far;
- ``GET /v1/events``: the last 200 events (plans, starts, elections, pauses, cancellations);
- ``POST /v1/plans``: a proposal on the last observed model (dry run): body ``{"hardOnly": false,
  "leadershipOnly": false, "execute": false}`` (``leadershipOnly``: preferred-leader changes only); with ``"execute": true`` it is stored and the service starts carrying it out
  (409 ``PLAN_IN_PROGRESS`` while another plan runs, 422 ``HARD_GOALS_UNMET`` when it breaks one);
- ``POST /v1/pause`` (body ``{"reason": "..."}``) and ``POST /v1/resume``;
- ``POST /v1/cancel`` (body ``{"reason": "..."}``): end the running plan (in-flight moves cancelled,
  pending ones dropped, throttles removed); 409 ``NO_PLAN`` when none runs;
- ``GET /metrics`` (Prometheus): ``tidelog_governor_moves{state}``, ``tidelog_governor_paused``,
  ``tidelog_governor_excluded_brokers``, ``tidelog_governor_plan_bytes{kind=total|done}``,
  ``tidelog_governor_rounds_total``, plus the web stack's request metrics.

Errors follow ``tidelog.web.errors`` (503 ``SERVICE_UNAVAILABLE`` before the first round).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidelog.governor.engine import Engine
from tidelog.observability.registry import MetricFamily, Registry
from tidelog.web.errors import ApiError, bad_request, unavailable


class GovernorApi:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def routes(self) -> list[Route]:
        return [Route("/v1/state", self.state, methods=["GET"]), Route("/v1/moves", self.moves, methods=["GET"]),
                Route("/v1/events", self.events, methods=["GET"]), Route("/v1/plans", self.plans, methods=["POST"]),
                Route("/v1/pause", self.pause, methods=["POST"]), Route("/v1/resume", self.resume, methods=["POST"]),
                Route("/v1/cancel", self.cancel, methods=["POST"])]

    def _ready(self) -> None:
        if self.engine.model is None:
            raise unavailable("the governor has not observed the cluster yet")

    async def state(self, request: Request) -> Response:
        self._ready()
        return JSONResponse(self.engine.status())

    async def moves(self, request: Request) -> Response:
        self._ready()
        return JSONResponse({"moves": self.engine.moves()})

    async def events(self, request: Request) -> Response:
        return JSONResponse({"events": list(self.engine.events)})

    async def _body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise bad_request("the body is not JSON") from None
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object")
        return body

    async def plans(self, request: Request) -> Response:
        self._ready()
        body = await self._body(request)
        result = self.engine.propose(hard_only=bool(body.get("hardOnly", False)),
                                     leadership_only=bool(body.get("leadershipOnly", False)))
        answer = result.to_json(self.engine.config.throttle)
        if body.get("execute"):
            if self.engine.stored.get("plan"):
                raise ApiError(409, "PLAN_IN_PROGRESS", f"plan {self.engine.stored['plan']['id']} is running")
            if not result.ok:
                raise ApiError(422, "HARD_GOALS_UNMET", f"the plan breaks {', '.join(result.unmet_hard)}")
            answer["id"] = await self.engine.submit(result, str(body.get("reason") or "requested through the API"))
        return JSONResponse(answer)

    async def pause(self, request: Request) -> Response:
        body = await self._body(request)
        await self.engine.set_control(paused=True, pausedBy="operator", reason=str(body.get("reason") or "paused"))
        self.engine.event("pause", f"paused by the operator: {self.engine.control['reason']}")
        return JSONResponse({"control": self.engine.control})

    async def resume(self, request: Request) -> Response:
        await self.engine.set_control(paused=False, pausedBy="", reason="")
        self.engine.event("resume", "resumed by the operator")
        return JSONResponse({"control": self.engine.control})

    async def cancel(self, request: Request) -> Response:
        self._ready()
        body = await self._body(request)
        cancelled = await self.engine.cancel_plan(str(body.get("reason") or "cancelled through the API"))
        if cancelled is None:
            raise ApiError(409, "NO_PLAN", "no plan is running")
        return JSONResponse({"cancelled": cancelled, "last": self.engine.stored.get("last")})


def watch(engine: Engine, registry: Registry) -> None:
    """Governor gauges, computed at scrape time from the engine's last round."""

    def collect() -> list[MetricFamily]:
        moves = MetricFamily("tidelog_governor_moves", "Partition moves of the current plan, by state.", "gauge", ("state",))
        counts: dict[str, int] = {"done": 0, "in-flight": 0, "pending": 0, "cancelled": 0}
        for m in engine.moves():
            counts[m["state"]] = counts.get(m["state"], 0) + 1
        for state, n in counts.items():
            moves.add((state,), n)
        status = engine.status()
        plan = status.get("plan") or {}
        plan_bytes = MetricFamily("tidelog_governor_plan_bytes", "Bytes the current plan copies, in all and done.",
                                  "gauge", ("kind",)).add(("total",), plan.get("bytesTotal", 0)).add(
                                      ("done",), plan.get("bytesDone", 0))
        return [moves, plan_bytes,
                MetricFamily("tidelog_governor_paused", "1 while moves are paused (operator or circuit breaker).",
                             "gauge").add((), 1 if engine.control["paused"] else 0),
                MetricFamily("tidelog_governor_excluded_brokers", "Brokers being emptied (dead, draining, offline dir).",
                             "gauge").add((), len(engine.excluded)),
                MetricFamily("tidelog_governor_rounds_total", "Observe/heal/execute rounds run.", "counter").add(
                    (), engine.rounds)]

    registry.add_collector(collect)
