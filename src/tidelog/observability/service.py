"""Everything a broker process needs for observability, in one object the node owns.

``ObservabilityService(host, port)`` builds the registry, the broker's metrics, the runtime monitors
(event-loop lag, GC pauses, ``process_*``), ``tidelog_build_info`` and, when ``port`` is set, the HTTP
endpoint. Metrics are kept whether or not the endpoint is served, so hooks never need a guard.

Life cycle (docs/dev/metrics-hooks.md): ``await start()`` first thing in the node's start, so
``/healthz`` answers and ``/readyz`` says 503 while logs load; ``readiness.add(name, check)`` for each
condition; ``await stop()`` last thing in the node's stop.
"""

from __future__ import annotations

from importlib import metadata

from tidelog.observability.broker_metrics import BrokerMetrics
from tidelog.observability.http import MetricsServer, Readiness
from tidelog.observability.registry import Registry
from tidelog.observability.runtime import EventLoopLagMonitor, GcMonitor, collect_process, register_build_info


def tidelog_version() -> str:
    try:
        return metadata.version("tidelog")
    except metadata.PackageNotFoundError:
        return "unknown"


class ObservabilityService:
    def __init__(self, host: str = "0.0.0.0", port: int | None = None) -> None:
        self.registry = Registry()
        self.metrics = BrokerMetrics(self.registry)
        self.readiness = Readiness()
        register_build_info(self.registry, tidelog_version())
        self.registry.add_collector(collect_process)
        self.gc = GcMonitor(self.registry)
        self.lag = EventLoopLagMonitor(self.registry)
        self.server = MetricsServer(self.registry, host, port, self.readiness) if port is not None else None

    @property
    def port(self) -> int | None:
        """The bound HTTP port (after ``start``), or None when the endpoint is off."""
        return None if self.server is None else self.server.port

    async def start(self) -> None:
        self.gc.install()
        self.lag.start()
        if self.server is not None:
            await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()
        await self.lag.stop()
        self.gc.uninstall()
