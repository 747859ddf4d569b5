"""The gateway's HTTP routes, on the shared web stack (``tidelog.web``).

- ``POST /v1/topics/{topic}/write``: write chunks of one source (``model`` for the two body forms);
  200 with one entry per chunk, ``written`` (partition, first offset) or ``duplicate``;
- ``GET /v1/topics/{topic}/sources?sourceId=S``: the source's last written seqno and partition, so
  that a client that lost its own count knows where to resume;
- ``GET /openapi.json``: the API's OpenAPI 3.1 document (checked in beside this module).

A request for a source whose shard another instance serves is forwarded to that instance (one hop:
the forwarded request carries ``X-Tidelog-Forwarded-By``, and an instance that is not the owner
either answers 421 ``NOT_OWNER`` with the owner's URL rather than forwarding again). The client
address header of forwarded records is the original client's, passed in ``X-Tidelog-Client-Address``.

Errors (JSON, ``tidelog.web.errors``): 400 ``INVALID_REQUEST``, 404 ``UNKNOWN_TOPIC_OR_PARTITION``,
413 ``REQUEST_TOO_LARGE``, 421 ``NOT_OWNER``, 503 ``SERVICE_UNAVAILABLE`` with ``Retry-After``
(back-pressure, cluster unreachable, shard moving, write outcome unknown: retrying the same chunks
is always safe).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import httpx
from confluent_kafka import KafkaException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidelog.common.acl import AclOperation, ResourceType
from tidelog.gateway.acls import client_host
from tidelog.gateway.model import InvalidRequest, WriteRequest, check_topic, parse_json, parse_raw
from tidelog.gateway.service import Busy, Gateway, NotOwner
from tidelog.gateway.shard import ShardUnavailable, WriteFailed, WriteResult
from tidelog.gateway.topics import UnknownTopic
from tidelog.web.auth import principal_of
from tidelog.web.errors import ApiError, bad_request, unavailable

FORWARDED_BY = "x-tidelog-forwarded-by"
CLIENT_ADDRESS = "x-tidelog-client-address"
_FORWARDED_HEADERS = ("content-type", "authorization")


def openapi_document() -> dict[str, Any]:
    text = resources.files("tidelog.gateway").joinpath("openapi.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "REQUEST_TOO_LARGE", f"the body is larger than gateway.max.request.bytes={limit}")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise ApiError(413, "REQUEST_TOO_LARGE", f"the body is larger than gateway.max.request.bytes={limit}")
        parts.append(part)
    return b"".join(parts)


def result_json(result: WriteResult) -> dict[str, Any]:
    chunks = [{"seqno": c.seqno, "status": "written", "offset": c.offset, "records": c.records} if c.written
              else {"seqno": c.seqno, "status": "duplicate"} for c in result.chunks]
    return {"topic": result.topic, "sourceId": result.source_id, "partition": result.partition,
            "lastSeqno": result.last_seqno, "chunks": chunks}


class GatewayApi:
    def __init__(self, gateway: Gateway, http: httpx.AsyncClient) -> None:
        self.gateway = gateway
        self.http = http

    def routes(self) -> list[Route]:
        return [Route("/v1/topics/{topic}/write", self.write, methods=["POST"]),
                Route("/v1/topics/{topic}/sources", self.source, methods=["GET"]),
                Route("/openapi.json", self.openapi, methods=["GET"])]

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())

    def _client_address(self, request: Request) -> str:
        if FORWARDED_BY in request.headers and CLIENT_ADDRESS in request.headers:
            return request.headers[CLIENT_ADDRESS]
        return request.client.host if request.client else ""

    async def write(self, request: Request) -> Response:
        body = await read_body(request, self.gateway.config.max_request_bytes)
        topic = request.path_params["topic"]
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            parsed = (parse_json(topic, body) if content_type == "application/json"
                      else parse_raw(topic, request.query_params, body))
        except InvalidRequest as exc:
            raise bad_request(str(exc)) from None
        self._authorize(request, AclOperation.WRITE, topic)
        return await self._owned(request, body, lambda: self._write(parsed, request))

    def _authorize(self, request: Request, operation: AclOperation, topic: str) -> None:
        """The caller's Kafka ACLs on the topic as written (``<dc>.<topic>``): 403 unless allowed. The host
        is the connection's peer, never the forwarded-address header (a client could set that)."""
        self.gateway.acls.check(principal_of(request.scope), client_host(request), operation,
                                ResourceType.TOPIC, self.gateway.config.data_topic(topic))

    async def _write(self, parsed: WriteRequest, request: Request) -> Response:
        result = await self.gateway.write(parsed, self._client_address(request))
        return JSONResponse(result_json(result))

    async def source(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        source_id = request.query_params.get("sourceId", "")
        try:
            check_topic(topic)
        except InvalidRequest as exc:
            raise bad_request(str(exc)) from None
        if not 0 < len(source_id) <= 1024:
            raise bad_request("the query needs 'sourceId' (1 to 1024 characters)")
        self._authorize(request, AclOperation.DESCRIBE, topic)

        async def answer() -> Response:
            data_topic, shard, state = await self.gateway.source_state(topic, source_id)
            return JSONResponse({"topic": data_topic, "sourceId": source_id, "shard": shard,
                                 "lastSeqno": state.seqno if state else None,
                                 "partition": state.partition if state else None})

        return await self._owned(request, b"", answer)

    async def _owned(self, request: Request, body: bytes, serve: Callable[[], Awaitable[Response]]) -> Response:
        """Run ``serve`` here, or forward to the owner, mapping the gateway's failures to answers."""
        try:
            return await serve()
        except NotOwner as exc:
            return await self._forward(request, body, exc)
        except UnknownTopic as exc:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"topic {exc} does not exist") from None
        except Busy as exc:
            raise unavailable(f"the gateway is at its in-flight limit ({exc}); retry later") from None
        except (WriteFailed, ShardUnavailable) as exc:
            raise unavailable(f"{exc}; retrying the same chunks is safe") from None
        except KafkaException as exc:
            raise unavailable(f"the cluster did not answer: {exc}") from None

    async def _forward(self, request: Request, body: bytes, exc: NotOwner) -> Response:
        own_url = self.gateway.config.url
        if exc.owner is None or exc.owner == own_url:
            why = exc.why or "it is moving between instances"
            raise unavailable(f"shard {exc.shard} is not served right now: {why}; retry shortly") from None
        if FORWARDED_BY in request.headers:
            raise ApiError(421, "NOT_OWNER", str(exc), owner=exc.owner)
        headers = {name: request.headers[name] for name in _FORWARDED_HEADERS if name in request.headers}
        headers[FORWARDED_BY] = own_url
        headers[CLIENT_ADDRESS] = self._client_address(request)
        url = exc.owner.rstrip("/") + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            answer = await self.http.request(request.method, url, content=body, headers=headers,
                                             timeout=self.gateway.config.request_timeout_ms / 1000 + 5)
        except httpx.HTTPError as error:
            await self.gateway.router.owner(exc.shard, refresh=True)
            raise unavailable(f"the owner of shard {exc.shard} ({exc.owner}) did not answer: {error}") from None
        keep = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "retry-after")}
        return Response(answer.content, status_code=answer.status_code, headers=keep)
