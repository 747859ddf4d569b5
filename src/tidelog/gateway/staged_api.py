"""The legacy staged write API's routes (the design and the crash rules are in ``staged``):

- ``POST /v1/staged/store?topic=T&seqno=N[&transactionId=X]``: keep one chunk in the spool. Without
  ``transactionId`` a new transaction is made and its id answered; a client may also name a new one
  itself (letters, digits, ``_``, ``-``; up to 64), which makes its first /store safe to repeat. The
  body is the write API's: raw lines (``host``, ``file``, ``logType`` in the query) or JSON
  ``{"records": [...], "meta": {...}}``. ``seqno`` grows within the transaction; a repeated one is
  answered ``duplicate`` and stored once;
- ``POST /v1/staged/commit_request?transactionId=X``: write the spooled records to the cluster in an
  open Kafka transaction (invisible to read_committed readers); repeating it is harmless;
- ``POST /v1/staged/commit?transactionId=X``: commit it; every record becomes visible at once;
  repeating it answers the same outcome;
- ``GET /v1/staged/status?transactionId=X``: the transaction's state and, after a crash, what to redo.

Errors carry ``state`` and, when a step must be called again, ``redo`` (``store``,
``commit_request`` or ``commit``): 404 ``TRANSACTIONAL_ID_NOT_FOUND`` (not on this instance: the
spool is local, so a client keeps to the instance that answered its first /store), 409
``INVALID_TXN_STATE`` (a step out of order, or a Kafka transaction aborted by a gateway restart:
``redo: commit_request``), 410 ``TRANSACTION_EXPIRED`` (``gateway.staged.timeout.ms`` passed: store
again), 413, 503 with ``Retry-After``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable
from typing import Any

from confluent_kafka import KafkaException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tidelog.common.acl import AclOperation, ResourceType
from tidelog.gateway.acls import client_host
from tidelog.gateway.api import read_body
from tidelog.gateway.model import InvalidRequest, check_topic, parse_raw, parse_records_json
from tidelog.gateway.service import Gateway
from tidelog.gateway.staged import StagedError, StagedTransactions
from tidelog.gateway.topics import UnknownTopic
from tidelog.web.auth import principal_of
from tidelog.web.errors import ApiError, bad_request, unavailable

_TXN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _transaction_id(request: Request, *, required: bool = True) -> str | None:
    value = request.query_params.get("transactionId")
    if value is None and not required:
        return None
    if value is None or not _TXN_ID.fullmatch(value):
        raise bad_request("'transactionId' must be 1 to 64 letters, digits, '_' or '-'")
    return value


class StagedApi:
    def __init__(self, gateway: Gateway, staged: StagedTransactions) -> None:
        self.gateway = gateway
        self.staged = staged

    def routes(self) -> list[Route]:
        return [Route("/v1/staged/store", self.store, methods=["POST"]),
                Route("/v1/staged/commit_request", self.commit_request, methods=["POST"]),
                Route("/v1/staged/commit", self.commit, methods=["POST"]),
                Route("/v1/staged/status", self.status, methods=["GET"])]

    async def store(self, request: Request) -> Response:
        received_ms = int(time.time() * 1000)
        body = await read_body(request, self.gateway.config.max_request_bytes)
        query = request.query_params
        txn_id = _transaction_id(request, required=False)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            topic = check_topic(query.get("topic", ""))
            if "seqno" not in query:
                raise InvalidRequest("the query needs 'topic' and 'seqno'")
            # The write API's raw form, with the transaction in place of the source; for a JSON body
            # only its seqno check is used.
            raw = parse_raw(topic, {**query, "sourceId": "-"}, b"-" if content_type == "application/json" else body)
            seqno, records, meta = raw.chunks[0].seqno, raw.chunks[0].records, raw.meta
            if content_type == "application/json":
                records, meta = parse_records_json(body)
        except InvalidRequest as exc:
            raise bad_request(str(exc)) from None
        client = client_host(request)
        data_topic = self.gateway.config.data_topic(topic)
        self.gateway.acls.check(principal_of(request.scope), client_host(request), AclOperation.WRITE,
                                ResourceType.TOPIC, data_topic)
        enrichment = self.gateway._enrichment(meta, client, received_ms)
        return await self._answer(self.staged.store(data_topic, txn_id, seqno, records, enrichment))

    async def commit_request(self, request: Request) -> Response:
        return await self._answer(self.staged.commit_request(str(_transaction_id(request))))

    async def commit(self, request: Request) -> Response:
        return await self._answer(self.staged.commit(str(_transaction_id(request))))

    async def status(self, request: Request) -> Response:
        txn_id = str(_transaction_id(request))

        async def now() -> dict[str, Any]:
            return self.staged.status(txn_id)
        return await self._answer(now())

    async def _answer(self, step: Awaitable[dict[str, Any]]) -> Response:
        try:
            result = await step
        except StagedError as exc:
            extra: dict[str, Any] = {k: v for k, v in (("state", exc.state), ("redo", exc.redo)) if v}
            if exc.status == 503:
                raise unavailable(str(exc), **extra) from None
            raise ApiError(exc.status, exc.code, str(exc), **extra) from None
        except UnknownTopic as exc:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"topic {exc} does not exist") from None
        except KafkaException as exc:
            raise unavailable(f"the cluster did not answer: {exc}") from None
        return JSONResponse(result)

