"""Server-side paging shared by every console table: ``PAGE_SIZE`` rows a page, the page number
from a query parameter (clamped to the pages there are), and links that change query parameters
while keeping the others."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from starlette.datastructures import URL
from starlette.requests import Request

PAGE_SIZE = 50
Row = TypeVar("Row")


def paginate(rows: Sequence[Row], request: Request, param: str = "page") -> tuple[int, int, Sequence[Row]]:
    """(page, pages, the page's rows) for the page named by ``param``; a bad number is page 1."""
    pages = max(1, math.ceil(len(rows) / PAGE_SIZE))
    try:
        page = max(1, min(pages, int(request.query_params.get(param, "1"))))
    except ValueError:
        page = 1
    return page, pages, rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]


def url_with(url: URL) -> Callable[..., str]:
    """A template helper: this page's path and query with some parameters changed."""
    def make(**changes: Any) -> str:
        return str(url.include_query_params(**changes).replace(scheme="", netloc="")).removeprefix("//")
    return make
