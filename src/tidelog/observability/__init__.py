"""observability layer (L2); see ARCHITECTURE.md.

- ``registry``: counters, gauges and histograms cheap enough for the request path, scrape-time
  collectors, and the Prometheus text exposition format 0.0.4;
- ``broker_metrics``: the broker's named metrics and the hooks it calls (docs/dev/metrics-hooks.md);
- ``runtime``: event-loop lag, GC pauses and process metrics;
- ``http``: the asyncio HTTP endpoint serving ``/metrics``, ``/healthz`` and ``/readyz``;
- ``logs``: text and JSON log formatters with per-event context;
- ``service``: all of the above bundled for the broker node.

Nothing here imports the broker or storage: the broker hands in what is read at scrape time through
the small protocols in ``broker_metrics``.
"""
