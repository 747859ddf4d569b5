"""The push-read routes (design: ``push``; request and delivery forms: ``push_model``; storage: ``push_store``).

- ``POST /v1/subscriptions``: create a subscription; 201 with its id, URL and settings (defaults filled
  in). It is stored in the cluster before the answer, so every instance of the deployment runs it, and
  runs it again after a restart. 404 for a topic the cluster does not have, 429 at
  ``gateway.push.subscriptions.max``, 503 when the cluster did not take the record.
- ``GET /v1/subscriptions``: the caller's subscriptions; ``GET /v1/subscriptions/{id}``: one, with
  this instance's view of it (``status``: state, partitions held here, failures in a row, last error).
- ``DELETE /v1/subscriptions/{id}``: delete it; every instance stops delivering it (a batch in flight
  is not committed) and its members leave the group. The group's committed offsets stay.

Only the principal that created a subscription sees it (to any other it does not exist).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import KafkaException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidelog.common.acl import AclOperation, ResourceType
from tidelog.gateway.acls import authorize_read, client_host
from tidelog.gateway.api import read_body
from tidelog.gateway.model import InvalidRequest
from tidelog.gateway.push import PushManager
from tidelog.gateway.push_model import SubscriptionSpec, is_subscription_id, parse_subscription
from tidelog.gateway.push_store import StoreFailed
from tidelog.gateway.service import Gateway
from tidelog.gateway.topics import UnknownTopic
from tidelog.web.auth import principal_of
from tidelog.web.errors import ApiError, bad_request, unavailable

_BODY_LIMIT = 64 * 1024


class PushApi:
    def __init__(self, gateway: Gateway, manager: PushManager) -> None:
        self.gateway = gateway
        self.manager = manager

    def routes(self) -> list[Route]:
        return [Route("/v1/subscriptions", self.create, methods=["POST"]),
                Route("/v1/subscriptions", self.list_all, methods=["GET"]),
                Route("/v1/subscriptions/{subscription}", self.describe, methods=["GET"]),
                Route("/v1/subscriptions/{subscription}", self.delete, methods=["DELETE"])]

    def _url(self, sub_id: str) -> str:
        return f"{self.gateway.config.url}/v1/subscriptions/{sub_id}"

    def _json(self, spec: SubscriptionSpec, *, status: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"subscriptionId": spec.id, "url": self._url(spec.id), "createdMs": spec.created_ms,
                               **spec.request_json()}
        runner = self.manager.runners.get(spec.id)
        if status:
            out["status"] = runner.describe() if runner is not None else {"state": "starting",
                                                                           "consecutiveFailures": 0}
        return out

    def _get(self, request: Request) -> SubscriptionSpec:
        sub_id = request.path_params["subscription"]
        spec = self.manager.store.specs().get(sub_id) if is_subscription_id(sub_id) else None
        if spec is None or spec.principal != principal_of(request.scope):
            raise ApiError(404, "UNKNOWN_SUBSCRIPTION", f"no push subscription {sub_id[:100]!r}")
        return spec

    async def create(self, request: Request) -> Response:
        config = self.gateway.config
        body = await read_body(request, _BODY_LIMIT)
        try:
            spec = parse_subscription(body, principal=principal_of(request.scope), now_ms=int(time.time() * 1000),
                                      own_group=config.group_id, state_topic=config.state_topic)
            request_topics = spec.session_request(own_group=config.group_id, state_topic=config.state_topic)
        except InvalidRequest as exc:
            raise bad_request(str(exc)) from None
        authorize_read(self.gateway.acls, request, spec.group, request_topics.named_topics)
        if spec.dead_letter_topic is not None:
            self.gateway.acls.check(principal_of(request.scope), client_host(request), AclOperation.WRITE,
                                    ResourceType.TOPIC, spec.dead_letter_topic)
        if len(self.manager.store.specs()) >= config.push_subscriptions_max:
            raise ApiError(429, "TOO_MANY_SUBSCRIPTIONS", f"the deployment has gateway.push.subscriptions.max="
                           f"{config.push_subscriptions_max} subscriptions; delete one first", retry_after_s=1)
        try:
            for topic in (*request_topics.named_topics, *filter(None, [spec.dead_letter_topic])):
                await self.gateway.topics.partition_count(topic)
            await asyncio.to_thread(self.manager.store.put, spec)
        except UnknownTopic as exc:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"topic {exc} does not exist") from None
        except (KafkaException, StoreFailed) as exc:
            raise unavailable(f"the cluster did not answer: {exc}") from None
        self.manager.reconcile()
        return JSONResponse(self._json(spec, status=False), status_code=201, headers={"Location": self._url(spec.id)})

    async def list_all(self, request: Request) -> Response:
        principal = principal_of(request.scope)
        mine = sorted((s for s in self.manager.store.specs().values() if s.principal == principal),
                      key=lambda s: (s.created_ms, s.id))
        return JSONResponse({"subscriptions": [self._json(s, status=True) for s in mine]})

    async def describe(self, request: Request) -> Response:
        return JSONResponse(self._json(self._get(request), status=True))

    async def delete(self, request: Request) -> Response:
        spec = self._get(request)
        try:
            await asyncio.to_thread(self.manager.store.delete, spec.id)
        except (KafkaException, StoreFailed) as exc:
            raise unavailable(f"the cluster did not answer: {exc}") from None
        self.manager.reconcile()
        return Response(status_code=204)
