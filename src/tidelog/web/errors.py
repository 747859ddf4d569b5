"""One JSON shape for every error an HTTP surface answers.

Every error body is ``{"error": {"code": CODE, "message": TEXT}}`` plus optional fields (``owner``
for a misdirected request, ``retryAfterSeconds`` for back-pressure). ``CODE`` is a stable, upper-case
name: Kafka's error name when the failure is Kafka's (``UNKNOWN_TOPIC_OR_PARTITION``,
``TOPIC_AUTHORIZATION_FAILED``), else one of ours (``INVALID_REQUEST``, ``NOT_FOUND``,
``SERVICE_UNAVAILABLE``...). A 503 always carries ``Retry-After``.

Whose fault: 4xx are the client's (the message says what to change), 5xx are ours or the
cluster's (the message says whether retrying is safe). An unexpected exception is logged with its
traceback and answered as 500 ``INTERNAL_ERROR`` without details.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

log = logging.getLogger(__name__)

_STARLETTE_CODES = {400: "INVALID_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND",
                    405: "METHOD_NOT_ALLOWED", 413: "REQUEST_TOO_LARGE", 415: "UNSUPPORTED_MEDIA_TYPE"}


class ApiError(Exception):
    """An answer other than success: HTTP status, stable code, human message, extra JSON fields."""

    def __init__(self, status: int, code: str, message: str, *, retry_after_s: int | None = None,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, **self.extra}
        if self.retry_after_s is not None:
            error["retryAfterSeconds"] = self.retry_after_s
        return {"error": error}

    def response(self) -> JSONResponse:
        headers = dict(self.headers)
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(self.retry_after_s)
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def bad_request(message: str, **extra: Any) -> ApiError:
    return ApiError(400, "INVALID_REQUEST", message, **extra)


def unavailable(message: str, retry_after_s: int = 1, **extra: Any) -> ApiError:
    return ApiError(503, "SERVICE_UNAVAILABLE", message, retry_after_s=retry_after_s, **extra)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _STARLETTE_CODES.get(exc.status_code, "HTTP_ERROR")
    return ApiError(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {})).response()


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error serving %s %s", request.method, request.url.path)
    return ApiError(500, "INTERNAL_ERROR", "internal error; see the server's log").response()


EXCEPTION_HANDLERS = {ApiError: _api_error, HTTPException: _http_exception, Exception: _unexpected}
