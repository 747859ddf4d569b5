"""The pull-read routes (design: ``sessions``; request forms: ``read_model``).

- ``POST /v1/sessions``: open a session (a group member) for ``group`` over ``topics``; 201 with its id
  and URL. 404 for a topic the cluster does not have, 429 at ``gateway.read.sessions.max``.
- ``GET /v1/sessions/{id}/records``: long-poll: answers as soon as any record is there, else after
  ``waitMs`` with none. JSON (``records`` and ``next``, the offsets to commit for them) or raw lines
  (``format=raw`` or ``Accept: text/plain``; the count in ``X-Tidelog-Records``).
- ``POST /v1/sessions/{id}/commit``: commit given offsets, or (empty body) everything delivered.
  409 ``PARTITIONS_NOT_ASSIGNED`` when a named partition has moved to another reader, 409 with Kafka's
  error name when the group is rebalancing (retry), 400 past what was delivered.
- ``GET /v1/sessions/{id}``: the session's assignment, delivered positions, buffer; ``DELETE``: close it.

A session's requests may reach any instance of the deployment: one that does not hold the session
forwards the request to the instance its id names (``sessions``), once; an unknown session (expired,
deleted, its instance gone) is 404 ``UNKNOWN_SESSION``.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from confluent_kafka import KafkaError, KafkaException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidelog.common.acl import AclOperation, ResourceType
from tidelog.gateway.acls import authorize_read, client_host
from tidelog.gateway.api import FORWARDED_BY, read_body
from tidelog.gateway.model import InvalidRequest
from tidelog.gateway.read_model import (
    MAX_WAIT_MS,
    Offset,
    offsets_json,
    parse_commit,
    parse_poll,
    parse_session,
    raw_lines,
    record_json,
)
from tidelog.gateway.reader import BeyondDelivered, CommitFailed, PartitionsNotAssigned
from tidelog.gateway.service import Gateway
from tidelog.gateway.sessions import Sessions, TooManySessions, UnknownSession, instance_of
from tidelog.gateway.topics import UnknownTopic
from tidelog.web.auth import principal_of
from tidelog.web.errors import ApiError, bad_request, unavailable

_BODY_LIMIT = 1024 * 1024
_FORWARDED_REQUEST_HEADERS = ("content-type", "authorization", "accept")
_FORWARDED_ANSWER_HEADERS = ("content-type", "retry-after", "x-tidelog-records")
# The group moved on while the commit was sent: the client may commit again (or find its partitions moved).
_REBALANCING = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                KafkaError.FENCED_INSTANCE_ID}


def _unknown(session_id: str) -> ApiError:
    return ApiError(404, "UNKNOWN_SESSION", f"no read session {session_id[:100]!r}: it expired, was deleted, or "
                    "the gateway instance that held it is gone; open a new one (it resumes from the group's commits)")


class ReadApi:
    def __init__(self, gateway: Gateway, sessions: Sessions, http: httpx.AsyncClient) -> None:
        self.gateway = gateway
        self.sessions = sessions
        self.http = http

    def routes(self) -> list[Route]:
        return [Route("/v1/sessions", self.create, methods=["POST"]),
                Route("/v1/sessions/{session}", self.describe, methods=["GET"]),
                Route("/v1/sessions/{session}", self.delete, methods=["DELETE"]),
                Route("/v1/sessions/{session}/records", self.poll, methods=["GET"]),
                Route("/v1/sessions/{session}/commit", self.commit, methods=["POST"])]

    async def create(self, request: Request) -> Response:
        config = self.gateway.config
        body = await read_body(request, _BODY_LIMIT)
        try:
            parsed = parse_session(body, default_timeout_ms=config.read_session_timeout_ms,
                                   own_group=config.group_id, state_topic=config.state_topic)
        except InvalidRequest as exc:
            raise bad_request(str(exc)) from None
        authorize_read(self.gateway.acls, request, parsed.group, parsed.named_topics)
        try:
            for topic in parsed.named_topics:
                await self.gateway.topics.partition_count(topic)
            session = await self.sessions.create(parsed, principal_of(request.scope))
        except UnknownTopic as exc:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"topic {exc} does not exist") from None
        except TooManySessions as exc:
            raise ApiError(429, "TOO_MANY_SESSIONS", f"{exc}; retry when one has ended", retry_after_s=1) from None
        except KafkaException as exc:
            raise unavailable(f"the cluster did not answer: {exc}") from None
        url = f"{config.url}/v1/sessions/{session.id}"
        return JSONResponse({"sessionId": session.id, "url": url, "group": parsed.group, "topics": list(parsed.topics),
                             "timeoutMs": parsed.timeout_ms, "autoOffsetReset": parsed.auto_offset_reset},
                            status_code=201, headers={"Location": url})

    async def describe(self, request: Request) -> Response:
        session_id = request.path_params["session"]
        try:
            async with self.sessions.use(session_id, principal_of(request.scope)) as session:
                return JSONResponse(session.describe(time.monotonic()))
        except UnknownSession:
            return await self._elsewhere(request, session_id)

    async def delete(self, request: Request) -> Response:
        session_id = request.path_params["session"]
        try:
            await self.sessions.delete(session_id, principal_of(request.scope))
        except UnknownSession:
            return await self._elsewhere(request, session_id)
        return Response(status_code=204)

    async def poll(self, request: Request) -> Response:
        session_id = request.path_params["session"]
        try:
            async with self.sessions.use(session_id, principal_of(request.scope)) as session:
                try:
                    asked = parse_poll(request.query_params, buffer_bytes=session.buffer_bytes,
                                       accept=request.headers.get("accept", ""))
                except InvalidRequest as exc:
                    raise bad_request(str(exc)) from None
                async with session.poll_lock:  # one poll at a time per session: batches keep their order
                    records = await session.poll(asked.wait_ms / 1000, asked.max_records, asked.max_bytes)
                if not records and session.closed:
                    raise _unknown(session_id)  # deleted while the poll waited
                if not records and not session.alive:
                    raise unavailable(f"the session's consumer stopped ({session.error}); open a new session")
        except UnknownSession:
            return await self._elsewhere(request, session_id)
        # A data-centre pattern matches topics named nowhere in the request: those the caller may not
        # READ are left out, as a Kafka consumer's pattern never matches a topic it may not see.
        principal, host, acls = principal_of(request.scope), client_host(request), self.gateway.acls
        readable = {t: acls.allowed(principal, host, AclOperation.READ, ResourceType.TOPIC, t)
                    for t in {r.topic for r in records}}
        if not all(readable.values()):
            records = [r for r in records if readable[r.topic]]
        counts: dict[str, int] = {}
        following: dict[tuple[str, int], int] = {}
        for record in records:
            counts[record.topic] = counts.get(record.topic, 0) + 1
            following[(record.topic, record.partition)] = record.offset + 1
        for topic, count in counts.items():
            self.sessions.count_read(topic, count)
        if asked.raw:
            return Response(raw_lines(records), media_type="text/plain; charset=utf-8",
                            headers={"X-Tidelog-Records": str(len(records))})
        next_offsets = [Offset(t, p, o) for (t, p), o in sorted(following.items())]
        return JSONResponse({"records": [record_json(r) for r in records], "next": offsets_json(next_offsets)})

    async def commit(self, request: Request) -> Response:
        session_id = request.path_params["session"]
        body = await read_body(request, _BODY_LIMIT)
        try:
            offsets = parse_commit(body)
        except InvalidRequest as exc:
            raise bad_request(str(exc)) from None
        try:
            async with self.sessions.use(session_id, principal_of(request.scope)) as session:
                committed = await session.commit(offsets)
        except UnknownSession:
            return await self._elsewhere(request, session_id, body)
        except BeyondDelivered as exc:
            raise bad_request(str(exc)) from None
        except PartitionsNotAssigned as exc:
            raise ApiError(409, "PARTITIONS_NOT_ASSIGNED", str(exc), partitions=_partitions(exc.partitions)) from None
        except CommitFailed as exc:
            if exc.error.code() in _REBALANCING:
                raise ApiError(409, exc.error.name(), f"{exc}; the group is rebalancing: poll, then commit again "
                               "what this session still holds") from None
            raise unavailable(f"{exc}; committing the same offsets again is safe") from None
        return JSONResponse({"committed": offsets_json(committed)})


    async def _elsewhere(self, request: Request, session_id: str, body: bytes = b"") -> Response:
        """Forward to the instance the session's id names, if it is one of ours and not this one."""
        own = self.gateway.config.url
        owner = instance_of(session_id)
        if owner is None or owner == own or FORWARDED_BY in request.headers \
                or not await self.gateway.router.is_instance(owner):
            raise _unknown(session_id)
        headers = {name: request.headers[name] for name in _FORWARDED_REQUEST_HEADERS if name in request.headers}
        headers[FORWARDED_BY] = own
        url = owner.rstrip("/") + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            answer = await self.http.request(request.method, url, content=body, headers=headers,
                                             timeout=MAX_WAIT_MS / 1000 + 30)
        except httpx.HTTPError as error:
            raise unavailable(f"the gateway instance holding the session ({owner}) did not answer: {error}") from None
        keep = {k: v for k, v in answer.headers.items() if k.lower() in _FORWARDED_ANSWER_HEADERS}
        return Response(answer.content, status_code=answer.status_code, headers=keep)


def _partitions(partitions: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in partitions]
