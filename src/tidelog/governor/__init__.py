"""The governor: a platform process that balances, heals and drains a cluster through the Kafka
protocol alone, so it governs tidelog and Apache Kafka alike (docs/governor.md).

Pure parts (no I/O, tested on synthetic clusters): ``model`` (the cluster as compact arrays),
``state`` (the planner's mutable placement with per-broker aggregates), ``goals`` (one small class per
goal: score, propose, accept), ``planner`` (goals in priority order; lower goals never undo higher
ones), ``prealloc`` (placing a new topic by declared traffic), ``execution`` (which moves to start,
throttle values, stall detection), ``breaker`` (circuit breaker), ``healing`` (self-healing rules),
``synthetic`` (cluster generator for tests and the bench).

Shells: ``cluster`` (confluent-kafka AdminClient plus the kio codec over a socket for the admin calls
librdkafka lacks), ``metrics`` (Prometheus scrapes), ``store`` (the governor's state in a compacted
topic), ``engine`` (one round: observe, heal, plan, execute), ``api``/``app`` (the HTTP service).
"""
