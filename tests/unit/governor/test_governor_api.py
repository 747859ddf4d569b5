"""The governor's HTTP API on the shared web stack, over an engine whose cluster is in memory."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from helpers.governor_fakes import FakeCluster, FakeStore
from tidelog.governor.api import GovernorApi, watch
from tidelog.governor.config import ConfigError, parse_config
from tidelog.governor.engine import Engine
from tidelog.observability.registry import Registry
from tidelog.web.app import create_app


class Http:
    """Synchronous calls into the ASGI app (one event loop per call, like the engine's rounds here)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://governor") as http:
                return await http.request(method, path, **kwargs)
        return asyncio.run(call())

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)


def client() -> tuple[Http, Engine, FakeStore]:
    cluster = FakeCluster({1: "a", 2: "b", 3: "c"}, {("t", p): (1, 2) for p in range(6)})
    store = FakeStore()
    engine = Engine(parse_config({"governor.self.healing": "false"}), cluster, store)  # type: ignore[arg-type]
    registry = Registry()
    watch(engine, registry)
    return Http(create_app(GovernorApi(engine).routes(), registry=registry)), engine, store


def test_state_is_unavailable_before_the_first_round_then_describes_the_cluster() -> None:
    http, engine, _ = client()
    early = http.get("/v1/state")
    assert early.status_code == 503 and early.json()["error"]["code"] == "SERVICE_UNAVAILABLE"
    asyncio.run(engine.tick())
    state = http.get("/v1/state").json()
    assert state["cluster"] == {"brokers": [1, 2, 3], "controller": 1, "partitions": 6, "reassigning": 0}
    assert state["verdict"] == {"action": "ok", "reasons": []}


def test_a_dry_run_plan_changes_nothing_and_execute_stores_it() -> None:
    http, engine, store = client()
    asyncio.run(engine.tick())
    dry = http.post("/v1/plans", json={}).json()
    assert dry["ok"] and dry["partitionMoves"] > 0 and "plan" not in store.records
    stored = http.post("/v1/plans", json={"execute": True, "reason": "test"})
    assert stored.status_code == 200 and store.records["plan"]["id"] == stored.json()["id"]
    again = http.post("/v1/plans", json={"execute": True})
    assert again.status_code == 409 and again.json()["error"]["code"] == "PLAN_IN_PROGRESS"
    moves = http.get("/v1/moves").json()["moves"]
    assert moves and {m["state"] for m in moves} == {"pending"}


def test_a_leadership_only_plan_moves_no_replica() -> None:
    # the six partitions sit on brokers 1 and 2, all led by 1: the full plan copies data onto broker 3,
    # the leadership-only one only hands leaderships to broker 2
    http, engine, _ = client()
    asyncio.run(engine.tick())
    full = http.post("/v1/plans", json={}).json()
    assert full["bytesToCopy"] > 0
    cheap = http.post("/v1/plans", json={"leadershipOnly": True}).json()
    assert cheap["ok"] and cheap["replicaMoves"] == 0 and cheap["bytesToCopy"] == 0 and cheap["leaderMoves"] > 0
    assert all(sorted(m["after"]) == sorted(m["before"]) and m["after"][0] == 2 for m in cheap["moves"])


def test_pause_and_resume_write_the_control_record_and_the_metric() -> None:
    http, engine, store = client()
    asyncio.run(engine.tick())
    assert http.post("/v1/pause", json={"reason": "freeze"}).json()["control"]["reason"] == "freeze"
    assert store.records["control"]["paused"] is True
    assert "tidelog_governor_paused 1" in http.get("/metrics").text
    http.post("/v1/resume")
    assert store.records["control"]["paused"] is False
    assert "tidelog_governor_paused 0" in http.get("/metrics").text


def test_cancel_ends_the_running_plan_and_without_one_answers_no_plan() -> None:
    http, engine, store = client()
    asyncio.run(engine.tick())
    none = http.post("/v1/cancel", json={})
    assert none.status_code == 409 and none.json()["error"]["code"] == "NO_PLAN"
    plan_id = http.post("/v1/plans", json={"execute": True}).json()["id"]
    asyncio.run(engine.tick())  # the first moves start
    answer = http.post("/v1/cancel", json={"reason": "not today"})
    assert answer.status_code == 200 and answer.json()["cancelled"] == plan_id, answer.text
    assert answer.json()["last"]["error"] == "cancelled by the operator: not today"
    assert "plan" not in store.records and http.get("/v1/moves").json()["moves"] == []


def test_a_body_that_is_not_json_is_refused() -> None:
    http, engine, _ = client()
    asyncio.run(engine.tick())
    answer = http.post("/v1/plans", content=b"nope")
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "INVALID_REQUEST"


def test_bad_settings_are_refused_with_the_key_named() -> None:
    for props, key in (({"governor.moves.per.broker": "0"}, "governor.moves.per.broker"),
                       ({"governor.metrics.flavour": "jmx"}, "governor.metrics.flavour"),
                       ({"governor.tenant.acme.brokers": "1,x"}, "governor.tenant.acme.brokers"),
                       ({"governor.auto.balance": "yes"}, "governor.auto.balance")):
        try:
            parse_config(props)
        except ConfigError as exc:
            assert key in str(exc)
        else:
            raise AssertionError(f"{props} accepted")
