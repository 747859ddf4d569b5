"""The HTTP gateway (L4): exactly-once writes per source over HTTP, and pull reads through consumer
groups, to and from any Kafka cluster.

A process of its own (``tidelog gateway``) that reaches the cluster only through the Kafka protocol
(confluent-kafka), so it fronts tidelog and Apache Kafka alike. Modules, from pure to shell:

- ``seqno``: the exactly-once rule (which chunks to write, to which partition), pure;
- ``state_codec``: the state topic's keys and values, shards, transactional ids;
- ``model``: write requests parsed and checked before anything is written;
- ``config``: ``gateway.*`` settings;
- ``shard``: one shard's transactional producer and state, on its own thread;
- ``membership``: shard ownership through a consumer group over the state topic;
- ``router``: a shard's owner URL, from the group's description; ``group_wire``: that description
  over the gateway's own Kafka connections (DescribeGroups);
- ``budget``: back-pressure, a bounded budget of bytes in flight;
- ``topics``: partition counts, the state topic;
- ``service``: the core on the event loop; ``api``: the routes; ``app``: assembly and run;
- pull reads: ``read_model`` (requests and record JSON, pure), ``read_consumer`` (the Kafka consumer's
  settings and librdkafka workarounds), ``reader`` (one session's consumer thread and bounded buffer),
  ``sessions`` (limits, expiry, session ids; the design), ``read_api`` (the routes, forwarding);
- the legacy staged API: ``staged_spool`` (the durable local spool's file format), ``staged`` (states,
  one Kafka transaction per staged transaction, expiry, crash recovery; the design), ``staged_api``.

Design and API: docs/gateway.md.
"""
