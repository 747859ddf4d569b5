"""Burrow v3-compatible JSON endpoints over the lag sampler, so Burrow's alerting can point here.

Paths and shapes follow Burrow's HTTP API v3 (``/v3/kafka/...``): every answer carries
``error`` (bool), ``message`` and ``request`` (``url``, ``host``); a missing cluster or group is 404
with ``error: true``. Served:

- ``GET /v3/kafka``: ``clusters`` (one: ``console.cluster.name``);
- ``GET /v3/kafka/{cluster}``: ``module`` (class ``kafka``, the bootstrap servers);
- ``GET /v3/kafka/{cluster}/topic``: ``topics``; ``.../topic/{topic}``: ``offsets`` (log end per partition);
- ``GET /v3/kafka/{cluster}/consumer``: ``consumers``;
- ``GET /v3/kafka/{cluster}/consumer/{group}``: ``topics`` -> per partition the window of
  ``offsets`` (``offset``, ``timestamp``, ``observedAt``, ``lag``), ``owner``, ``client_id``, ``current-lag``;
- ``GET /v3/kafka/{cluster}/consumer/{group}/status``: the group's status with only the partitions
  that are not OK; ``.../lag``: the same with every partition.

A status object is ``{cluster, group, status, complete, partitions, partition_count, maxlag, totallag}``
and each partition ``{topic, partition, owner, client_id, status, start, end, current_lag, complete}``
as in Burrow, plus ``lag_seconds`` (the age of the first unconsumed record), which Burrow lacks.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tidelog.console.kafka import KafkaView
from tidelog.console.lag import GroupResult, PartitionResult, Sample, Status
from tidelog.console.sampler import LagSampler

HOST = socket.gethostname()


def _answer(request: Request, message: str, status_code: int = 200, **body: Any) -> JSONResponse:
    doc = {"error": status_code >= 400, "message": message, **body,
           "request": {"url": request.url.path, "host": HOST}}
    return JSONResponse(doc, status_code=status_code)


def _sample(sample: Sample) -> dict[str, int]:
    return {"offset": sample.offset, "timestamp": sample.timestamp_ms, "observedAt": sample.observed_ms or sample.timestamp_ms,
            "lag": sample.lag}


def partition_doc(cluster: str, p: PartitionResult) -> dict[str, Any]:
    return {"topic": p.topic, "partition": p.partition, "owner": p.owner, "client_id": p.client_id,
            "status": p.status.name, "start": _sample(p.window[0]) if p.window else None,
            "end": _sample(p.window[-1]) if p.window else None, "current_lag": p.current_lag,
            "complete": p.complete, "lag_seconds": round(p.lag_seconds, 3)}


def status_doc(cluster: str, result: GroupResult, *, every_partition: bool) -> dict[str, Any]:
    partitions = [p for p in result.partitions if every_partition or p.status is not Status.OK]
    return {"cluster": cluster, "group": result.group, "status": result.status.name, "complete": result.complete,
            "partitions": [partition_doc(cluster, p) for p in partitions],
            "partition_count": len(result.partitions),
            "maxlag": partition_doc(cluster, result.max_lag) if result.max_lag is not None else None,
            "totallag": result.total_lag}


class BurrowApi:
    def __init__(self, cluster: str, sampler: LagSampler, view: KafkaView) -> None:
        self.cluster = cluster
        self.sampler = sampler
        self.view = view

    def routes(self) -> list[Route]:
        base = "/v3/kafka"
        return [
            Route(base, self.clusters, methods=["GET"]),
            Route(base + "/{cluster}", self.cluster_detail, methods=["GET"]),
            Route(base + "/{cluster}/topic", self.topics, methods=["GET"]),
            Route(base + "/{cluster}/topic/{topic}", self.topic, methods=["GET"]),
            Route(base + "/{cluster}/consumer", self.consumers, methods=["GET"]),
            Route(base + "/{cluster}/consumer/{group}", self.consumer, methods=["GET"]),
            Route(base + "/{cluster}/consumer/{group}/status", self.status, methods=["GET"]),
            Route(base + "/{cluster}/consumer/{group}/lag", self.lag, methods=["GET"]),
        ]

    def _known_cluster(self, request: Request) -> JSONResponse | None:
        if request.path_params["cluster"] != self.cluster:
            return _answer(request, "cluster not found", 404)
        return None

    async def clusters(self, request: Request) -> JSONResponse:
        return _answer(request, "cluster list returned", clusters=[self.cluster])

    async def cluster_detail(self, request: Request) -> JSONResponse:
        if (missing := self._known_cluster(request)) is not None:
            return missing
        module = {"class-name": "kafka", "servers": self.view.config.bootstrap_servers.split(","),
                  "client-profile": {"name": "tidelog-console", "client-id": "tidelog-console"},
                  "topic-refresh": self.view.config.metadata_max_age_ms // 1000,
                  "offset-refresh": self.view.config.lag_interval_ms // 1000}
        return _answer(request, "cluster module detail returned", module=module)

    async def topics(self, request: Request) -> JSONResponse:
        if (missing := self._known_cluster(request)) is not None:
            return missing
        info = await asyncio.to_thread(self.view.cluster)
        return _answer(request, "topic list returned", topics=list(info.topics))

    async def topic(self, request: Request) -> JSONResponse:
        if (missing := self._known_cluster(request)) is not None:
            return missing
        info = await asyncio.to_thread(self.view.cluster)
        topic = info.topics.get(request.path_params["topic"])
        if topic is None:
            return _answer(request, "topic not found", 404)
        ends = await asyncio.to_thread(self.view.offsets, [(topic.name, p.partition) for p in topic.partitions])
        return _answer(request, "topic offsets returned",
                       offsets=[ends.get((topic.name, p.partition), -1) for p in topic.partitions])

    async def consumers(self, request: Request) -> JSONResponse:
        if (missing := self._known_cluster(request)) is not None:
            return missing
        return _answer(request, "consumer list returned", consumers=sorted(self.sampler.results))

    def _group(self, request: Request) -> GroupResult | JSONResponse:
        if (missing := self._known_cluster(request)) is not None:
            return missing
        result = self.sampler.results.get(request.path_params["group"])
        if result is None:
            return _answer(request, "cluster or consumer not found", 404)
        return result

    async def consumer(self, request: Request) -> JSONResponse:
        result = self._group(request)
        if isinstance(result, JSONResponse):
            return result
        topics: dict[str, list[dict[str, Any]]] = {}
        for p in result.partitions:
            partitions = topics.setdefault(p.topic, [])
            partitions.extend({} for _ in range(p.partition + 1 - len(partitions)))
            partitions[p.partition] = {"offsets": [_sample(s) for s in p.window], "owner": p.owner,
                                       "client_id": p.client_id, "current-lag": p.current_lag}
        return _answer(request, "consumer detail returned", topics=topics)

    async def status(self, request: Request) -> JSONResponse:
        result = self._group(request)
        if isinstance(result, JSONResponse):
            return result
        return _answer(request, "consumer status returned",
                       status=status_doc(self.cluster, result, every_partition=False))

    async def lag(self, request: Request) -> JSONResponse:
        result = self._group(request)
        if isinstance(result, JSONResponse):
            return result
        return _answer(request, "consumer status returned",
                       status=status_doc(self.cluster, result, every_partition=True))
