"""The broker's metrics and the hooks the broker calls to update them (docs/dev/metrics-hooks.md).

Names follow Prometheus conventions (``tidelog_`` prefix, base units: seconds and bytes, ``_total`` for
counters) and Kafka's meaning: the request phases are those of Kafka's RequestMetrics.

One request, as ``RequestTimer`` measures it (all times from ``time.perf_counter``)::

    received ── queue ──▶ decoded ── local (+ remote waits) ──▶ handled ── throttle + send ──▶ sent
    │ frame read off       │ handler starts     │ purgatory time     │ response built │ written
    │ the socket           │                    │ reported by the    │                │ to the
    │                      │                    │ handler            │                │ transport

- queue: from the frame's arrival to the start of its handler (time behind earlier requests on the
  same connection, and decoding);
- local: handler time, less the time it waited in purgatory;
- remote: time in purgatory (acks=all produce, fetch.min.bytes fetch), reported with ``add_remote``;
- throttle: time a quota held the response back, reported with ``add_throttle``;
- send: from the response being built to its bytes being handed to the transport (less throttle);
- total: from arrival to sent.

Gauges that describe state (log offsets and sizes, log dirs, groups) are read at scrape time from
sources the broker registers (``watch_logs``, ``watch_groups``), never pushed on the hot path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from tidelog.observability.registry import Labels, MetricFamily, Registry, observe_into
from tidelog.protocol.apis import ApiKey

# -- what is read at scrape time ----------------------------------------------------------------


class ProducerStateView(Protocol):
    @property
    def producers(self) -> Mapping[int, object]: ...


class PartitionLogView(Protocol):
    """What the metrics read from one partition log (storage's ``PartitionLog`` has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def offline(self) -> bool: ...
    @property
    def producers(self) -> ProducerStateView: ...
    @property
    def recovery_truncations(self) -> int: ...
    @property
    def truncated_bytes(self) -> int: ...
    @property
    def damaged_ranges(self) -> Sequence[object]: ...


class LogDirView(Protocol):
    """One log dir (storage's ``LogDirInfo``)."""

    @property
    def path(self) -> Path: ...
    @property
    def offline(self) -> bool: ...
    @property
    def partition_sizes(self) -> Mapping[tuple[str, int], int]: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def usable_bytes(self) -> int: ...


class ScrubberView(Protocol):
    """storage's ``Scrubber``: its running totals."""

    @property
    def verified_bytes(self) -> int: ...
    @property
    def damage_found(self) -> int: ...


class LogSource(Protocol):
    """What the metrics read from the log manager (storage's ``LogManager`` has it)."""

    @property
    def scrubber(self) -> ScrubberView: ...

    def all_logs(self) -> Sequence[PartitionLogView]: ...
    def describe_log_dirs(self) -> Sequence[LogDirView]: ...


GroupStates = Callable[[], Mapping[str, int]]
GroupLag = Callable[[], Iterable[tuple[str, str, int, int]]]


def api_name(api_key: int) -> str:
    """Kafka's name of an API key: 18 → ``ApiVersions``; unknown keys → ``ApiKey<n>``."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"ApiKey{api_key}"


class RequestTimer:
    """The phases of one request; created by ``BrokerMetrics.request_received``."""

    __slots__ = ("_metrics", "decoded_at", "handled_at", "labels", "listener", "received_at",
                 "remote_s", "request_bytes", "throttle_s")

    def __init__(self, metrics: BrokerMetrics, listener: str, received_at: float) -> None:
        self._metrics = metrics
        self.listener = listener
        self.received_at = received_at
        self.decoded_at = received_at
        self.handled_at = received_at
        self.labels: Labels = ()
        self.remote_s = 0.0
        self.throttle_s = 0.0
        self.request_bytes = 0

    def decoded(self, api_key: int, api_version: int, request_bytes: int) -> None:
        """The request is decoded and its handler starts now."""
        self.decoded_at = time.perf_counter()
        self.labels = self._metrics.api_labels(api_key, api_version)
        self.request_bytes = request_bytes

    def add_remote(self, seconds: float) -> None:
        """The handler waited ``seconds`` in purgatory (may be called more than once)."""
        self.remote_s += seconds

    def add_throttle(self, seconds: float) -> None:
        """A quota held the response back for ``seconds``."""
        self.throttle_s += seconds

    def handled(self) -> None:
        """The handler returned its response (or None for acks=0)."""
        self.handled_at = time.perf_counter()

    def sent(self, response_bytes: int) -> None:
        """The response's bytes were handed to the transport (0 when there is no response). Records."""
        now = time.perf_counter()
        self._metrics.record_request(self, now, response_bytes)


class BrokerMetrics:
    """The broker's metrics in ``registry`` and the hooks that update them."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        r, api = registry, ("api", "version")
        self.requests = r.counter("tidelog_requests_total", "Requests answered, by API and version.", api)
        self.request_bytes = r.counter("tidelog_request_bytes_total", "Bytes of request frames, by API and version.", api)
        self.response_bytes = r.counter("tidelog_response_bytes_total", "Bytes of responses, by API and version.", api)
        self.queue_time = r.histogram("tidelog_request_queue_time_seconds", "From a request's arrival to the start of its handler.", api)
        self.local_time = r.histogram("tidelog_request_local_time_seconds", "Handler time, less purgatory waits.", api)
        self.remote_time = r.histogram("tidelog_request_remote_time_seconds", "Time in purgatory (acks=all produce, long-poll fetch).", api)
        self.throttle_time = r.histogram("tidelog_request_throttle_time_seconds", "Time a quota held the response back.", api)
        self.send_time = r.histogram("tidelog_response_send_time_seconds", "From the response being built to its bytes reaching the transport.", api)
        self.total_time = r.histogram("tidelog_request_total_time_seconds", "From a request's arrival to its response being sent.", api)
        topic = ("topic",)
        self.bytes_in = r.counter("tidelog_topic_bytes_in_total", "Record batch bytes appended by producers, by topic.", topic)
        self.messages_in = r.counter("tidelog_topic_messages_in_total", "Records appended by producers, by topic.", topic)
        self.bytes_out = r.counter("tidelog_topic_bytes_out_total", "Record batch bytes returned to fetchers, by topic.", topic)
        self.failed_produce = r.counter("tidelog_topic_failed_produce_requests_total", "Partition appends answered with an error, by topic.", topic)
        self.failed_fetch = r.counter("tidelog_topic_failed_fetch_requests_total", "Partition reads answered with an error, by topic.", topic)
        self.consumer_fetches = r.counter("tidelog_consumer_fetch_partitions_total", "Partitions of consumers' fetches answered with records by this broker as leader or as follower (nearest-replica reads), or sent to a preferred read replica (redirected), by role.", ("role",))
        listener = ("listener",)
        self.connections_opened = r.counter("tidelog_connections_opened_total", "Connections accepted, by listener.", listener)
        self.connections_closed = r.counter("tidelog_connections_closed_total", "Connections closed, by listener.", listener)
        self.connections = r.gauge("tidelog_connections", "Open connections, by listener.", listener)
        self.protocol_errors = r.counter("tidelog_protocol_errors_total", "Connections closed for a protocol error (bad frame, unknown API, bad version, malformed body), by listener and error.", ("listener", "error"))
        self.connections_refused = r.counter("tidelog_connections_refused_total", "New connections closed at once by a limit (max.connections, max.connections.per.ip, max.connection.creation.rate), by listener and limit.", ("listener", "limit"))
        self.request_read_timeouts = r.counter("tidelog_request_read_timeouts_total", "Connections closed because a request did not arrive within socket.request.read.timeout.ms, by listener.", listener)
        auth = ("listener", "mechanism")
        self.auth_failures = r.counter("tidelog_authentication_failures_total", "Failed SASL authentications, by listener and mechanism.", auth)
        self.auth_successes = r.counter("tidelog_authentication_successes_total", "Successful SASL authentications, by listener and mechanism.", auth)
        self.auth_throttled = r.counter("tidelog_authentication_throttled_total", "SASL attempts the failed-authentication throttle delayed before checking them, or refused unchecked, by listener and outcome.", ("listener", "outcome"))
        self.reauth_successes = r.counter("tidelog_reauthentication_successes_total", "Successful SASL re-authentications (connections.max.reauth.ms), by listener and mechanism.", auth)
        self._api_labels: dict[int, Labels] = {}
        self._phases: dict[Labels, tuple[list[float], ...]] = {}

    # -- requests ----------------------------------------------------------------------------

    def api_labels(self, api_key: int, api_version: int) -> Labels:
        key = api_key << 16 | api_version
        labels = self._api_labels.get(key)
        if labels is None:
            labels = self._api_labels[key] = (api_name(api_key), str(api_version))
        return labels

    def request_received(self, listener: str, received_at: float | None = None) -> RequestTimer:
        """A request frame was read off the socket (``received_at``: ``time.perf_counter()`` of the read)."""
        return RequestTimer(self, listener, time.perf_counter() if received_at is None else received_at)

    def _phase_series(self, labels: Labels) -> tuple[list[float], ...]:
        """The six phase histograms' series for one API and version, looked up once."""
        found = self._phases.get(labels)
        if found is None:
            found = self._phases[labels] = tuple(h.state(labels) for h in (
                self.queue_time, self.local_time, self.remote_time, self.throttle_time, self.send_time,
                self.total_time,
            ))
        return found

    def record_request(self, timer: RequestTimer, sent_at: float, response_bytes: int) -> None:
        labels = timer.labels
        if not labels:
            return  # never decoded: counted as a protocol error instead
        self.requests.inc(labels)
        self.request_bytes.inc(labels, timer.request_bytes)
        self.response_bytes.inc(labels, response_bytes)
        queue, local, remote, throttle, send, total = self._phase_series(labels)
        bounds = self.queue_time.bounds  # every phase histogram has the latency buckets
        handled_at = max(timer.handled_at, timer.decoded_at)
        observe_into(queue, bounds, timer.decoded_at - timer.received_at)
        observe_into(local, bounds, max(0.0, handled_at - timer.decoded_at - timer.remote_s))
        observe_into(remote, bounds, timer.remote_s)
        observe_into(throttle, bounds, timer.throttle_s)
        observe_into(send, bounds, max(0.0, sent_at - handled_at - timer.throttle_s))
        observe_into(total, bounds, sent_at - timer.received_at)

    def protocol_error(self, listener: str, error: str) -> None:
        """A connection is closed for a protocol error; ``error`` is short and bounded (the exception class name)."""
        self.protocol_errors.inc((listener, error))

    # -- topics ------------------------------------------------------------------------------

    def produced(self, topic: str, batch_bytes: int, records: int) -> None:
        """Batches of ``topic`` were appended for a producer (not for replication)."""
        labels = (topic,)
        self.bytes_in.inc(labels, batch_bytes)
        self.messages_in.inc(labels, records)

    def produce_failed(self, topic: str) -> None:
        self.failed_produce.inc((topic,))

    def fetched(self, topic: str, batch_bytes: int) -> None:
        """Record batch bytes of ``topic`` go into a fetch response for a consumer."""
        self.bytes_out.inc((topic,), batch_bytes)

    def consumer_fetch(self, role: str) -> None:
        """A consumer's fetch of one partition was served here (role leader or follower) or redirected."""
        self.consumer_fetches.inc((role,))

    def fetch_failed(self, topic: str) -> None:
        self.failed_fetch.inc((topic,))

    def topic_deleted(self, topic: str) -> None:
        """Forget the per-topic series of a deleted topic."""
        labels = (topic,)
        for counter in (self.bytes_in, self.messages_in, self.bytes_out, self.failed_produce, self.failed_fetch):
            counter.remove(labels)

    # -- connections and authentication -----------------------------------------------------

    def connection_opened(self, listener: str) -> None:
        labels = (listener,)
        self.connections_opened.inc(labels)
        self.connections.inc(labels)

    def connection_closed(self, listener: str) -> None:
        labels = (listener,)
        self.connections_closed.inc(labels)
        self.connections.dec(labels)

    def connection_refused(self, listener: str, limit: str) -> None:
        """A new connection was closed at once: ``limit`` names the setting that refused it."""
        self.connections_refused.inc((listener, limit))

    def request_read_timed_out(self, listener: str) -> None:
        self.request_read_timeouts.inc((listener,))

    def watch_receive_budget(self, reserved: Callable[[], int], waiting: Callable[[], int]) -> None:
        """Report the receive budget (queued.max.request.bytes) at each scrape."""
        def collect() -> list[MetricFamily]:
            return [
                MetricFamily("tidelog_request_receive_budget_reserved_bytes", "Bytes of the receive budget (queued.max.request.bytes) held by requests being received or served.", "gauge").add((), reserved()),
                MetricFamily("tidelog_request_receive_budget_waiting_connections", "Connections whose reading is paused until the receive budget can hold their request.", "gauge").add((), waiting()),
            ]
        self.registry.add_collector(collect)

    def authentication_failed(self, listener: str, mechanism: str) -> None:
        self.auth_failures.inc((listener, mechanism))

    def authentication_throttled(self, listener: str, outcome: str) -> None:
        """``outcome``: ``delayed`` (checked after a wait) or ``refused`` (not checked at all)."""
        self.auth_throttled.inc((listener, outcome))

    def authentication_succeeded(self, listener: str, mechanism: str) -> None:
        self.auth_successes.inc((listener, mechanism))

    def reauthenticated(self, listener: str, mechanism: str) -> None:
        self.reauth_successes.inc((listener, mechanism))

    # -- scrape-time sources -----------------------------------------------------------------

    def watch_logs(self, source: LogSource) -> None:
        """Report per-partition offsets and sizes and per-log-dir usage from ``source`` at each scrape."""
        self.registry.add_collector(lambda: collect_logs(source))

    def watch_groups(self, states: GroupStates, lag: GroupLag) -> None:
        """Report group counts by state (``states()``: state → count) and consumer lag
        (``lag()``: (group, topic, partition, lag) rows) at each scrape."""
        self.registry.add_collector(lambda: collect_groups(states, lag))


def collect_logs(source: LogSource) -> list[MetricFamily]:
    tp = ("topic", "partition")
    start = MetricFamily("tidelog_log_start_offset", "First offset of the partition's log.", "gauge", tp)
    end = MetricFamily("tidelog_log_end_offset", "Offset the next appended record will get.", "gauge", tp)
    hw = MetricFamily("tidelog_log_high_watermark", "High watermark: offsets below it are committed.", "gauge", tp)
    size = MetricFamily("tidelog_log_size_bytes", "Bytes of the partition's segments on disk.", "gauge", tp)
    producers = MetricFamily("tidelog_log_producer_ids", "Producer ids with state in the partition.", "gauge", tp)
    cuts = MetricFamily("tidelog_log_recovery_truncations_total", "Times recovery cut a damaged or torn tail off the partition's log when the broker started (only partitions it happened to).", "counter", tp)
    cut_bytes = MetricFamily("tidelog_log_recovery_truncated_bytes_total", "Bytes recovery removed from the partition's log when the broker started (only partitions it happened to).", "counter", tp)
    damaged = MetricFamily("tidelog_log_damaged_ranges", "Damaged ranges the scrubber knows in the partition's log (fetches of their offsets answer CORRUPT_MESSAGE; only partitions that have some).", "gauge", tp)
    offline_partitions = 0
    for log in source.all_logs():
        if log.offline:
            offline_partitions += 1
            continue
        labels = (log.topic, str(log.partition))
        start.add(labels, log.log_start_offset)
        end.add(labels, log.log_end_offset)
        hw.add(labels, log.high_watermark)
        size.add(labels, log.size_bytes)
        producers.add(labels, len(log.producers.producers))
        if log.recovery_truncations:
            cuts.add(labels, log.recovery_truncations)
            cut_bytes.add(labels, log.truncated_bytes)
        if log.damaged_ranges:
            damaged.add(labels, len(log.damaged_ranges))
    offline = MetricFamily("tidelog_offline_partitions", "Partitions whose log is offline (I/O error).", "gauge").add((), offline_partitions)
    scrubbed = MetricFamily("tidelog_log_scrubber_verified_bytes_total", "Bytes of closed segments the scrubber read and verified.", "counter").add((), source.scrubber.verified_bytes)
    found = MetricFamily("tidelog_log_scrubber_damaged_ranges_found_total", "Damaged ranges the scrubber found since the broker started.", "counter").add((), source.scrubber.damage_found)
    return [start, end, hw, size, producers, cuts, cut_bytes, damaged, offline, scrubbed, found, *collect_log_dirs(source)]


def collect_log_dirs(source: LogSource) -> list[MetricFamily]:
    d = ("dir",)
    total = MetricFamily("tidelog_log_dir_total_bytes", "Size of the file system holding the log dir.", "gauge", d)
    usable = MetricFamily("tidelog_log_dir_usable_bytes", "Free bytes on the file system holding the log dir.", "gauge", d)
    used = MetricFamily("tidelog_log_dir_partition_bytes", "Bytes of the partition logs in the log dir.", "gauge", d)
    partitions = MetricFamily("tidelog_log_dir_partitions", "Partition logs in the log dir.", "gauge", d)
    offline = MetricFamily("tidelog_log_dir_offline", "1 when the log dir is offline after an I/O error.", "gauge", d)
    for info in source.describe_log_dirs():
        labels = (str(info.path),)
        offline.add(labels, 1 if info.offline else 0)
        if info.offline:
            continue
        if info.total_bytes >= 0:
            total.add(labels, info.total_bytes)
            usable.add(labels, info.usable_bytes)
        used.add(labels, sum(info.partition_sizes.values()))
        partitions.add(labels, len(info.partition_sizes))
    return [total, usable, used, partitions, offline]


def collect_groups(states: GroupStates, lag: GroupLag) -> list[MetricFamily]:
    by_state = MetricFamily("tidelog_groups", "Consumer groups, by state.", "gauge", ("state",))
    for state, count in sorted(states().items()):
        by_state.add((state,), count)
    lags = MetricFamily("tidelog_consumer_lag", "High watermark minus the group's committed offset.", "gauge",
                        ("group", "topic", "partition"))
    for group, topic, partition, value in lag():
        lags.add((group, topic, str(partition)), value)
    return [by_state, lags]
