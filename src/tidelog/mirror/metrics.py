"""The mirror's Prometheus metrics (served at /metrics by the shared web stack, app.py).

Per partition (labels ``topic``, ``partition``: the source's):

- ``tidelog_mirror_lag_records``: source high watermark minus the next offset to copy (committed
  position). Control records and aborted data count until the mirror has read past them.
- ``tidelog_mirror_lag_seconds``: 0 while caught up; else how long the partition has been behind,
  i.e. since lag was last seen at 0 (an upper bound on how long the oldest uncopied record waited).
- ``tidelog_mirror_records_total``, ``tidelog_mirror_bytes_total``: copied into transactions
  (an aborted transaction's records are counted again when copied again).

Per process: ``tidelog_mirror_transactions_total``, ``tidelog_mirror_aborts_total``,
``tidelog_mirror_errors_total{kind}`` (source, destination, fenced, metadata),
``tidelog_mirror_shards_owned``, ``tidelog_mirror_budget_in_flight_bytes``.
Values are set on the mirror's own thread once a second; the web thread only renders them.
"""

from __future__ import annotations

from tidelog.mirror.shard import PartitionState
from tidelog.observability.registry import Registry


class MirrorMetrics:
    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry or Registry()
        r = self.registry
        self.lag_records = r.gauge("tidelog_mirror_lag_records", "Source records not yet mirrored, per source "
                                   "partition", ("topic", "partition"))
        self.lag_seconds = r.gauge("tidelog_mirror_lag_seconds", "How long the partition has been behind its "
                                   "source (0 when caught up)", ("topic", "partition"))
        self.records = r.counter("tidelog_mirror_records_total", "Records copied into destination transactions",
                                 ("topic", "partition"))
        self.bytes = r.counter("tidelog_mirror_bytes_total", "Bytes (keys and values) copied into destination "
                               "transactions", ("topic", "partition"))
        self.transactions = r.counter("tidelog_mirror_transactions_total", "Destination transactions committed")
        self.aborts = r.counter("tidelog_mirror_aborts_total", "Destination transactions aborted or lost to a fence")
        self.errors = r.counter("tidelog_mirror_errors_total", "Errors, by kind", ("kind",))
        self.shards = r.gauge("tidelog_mirror_shards_owned", "Shards of the link this process owns")
        self.budget = r.gauge("tidelog_mirror_budget_in_flight_bytes", "Bytes in open destination transactions")
        self._labels: dict[tuple[str, int], tuple[str, str]] = {}

    def _label(self, topic: str, partition: int) -> tuple[str, str]:
        labels = self._labels.get((topic, partition))
        if labels is None:
            labels = self._labels[(topic, partition)] = (topic, str(partition))
        return labels

    def count(self, topic: str, partition: int, size: int) -> None:
        labels = self._label(topic, partition)
        self.records.inc(labels)
        self.bytes.inc(labels, size)

    def copied(self, topic: str, partition: int, records: int, size: int) -> None:
        """Whole batches written at their source offsets (offsets = "preserve": sizes are batch bytes)."""
        labels = self._label(topic, partition)
        self.records.inc(labels, records)
        self.bytes.inc(labels, size)

    def observe(self, state: PartitionState, now_s: float) -> None:
        labels = self._label(state.topic, state.partition)
        position = state.committed.next if state.committed is not None else 0
        lag = max(0, state.high - position) if state.high >= 0 else 0
        if lag == 0 or state.caught_up_at == 0.0:
            state.caught_up_at = now_s
        self.lag_records.set(labels, lag)
        self.lag_seconds.set(labels, 0.0 if lag == 0 else now_s - state.caught_up_at)

    def total(self, name: str) -> float:
        """The sum of a counter over its labels (tests and the end-of-run log line)."""
        metric = self.registry.get(name)
        return 0.0 if metric is None else sum(sample[3] for sample in metric.family().samples)
