"""``tidelog console``: the web console and the lag evaluator (L5; ARCHITECTURE.md, "Platform processes").

A separate process that reaches a cluster only through the Kafka protocol (confluent-kafka's
AdminClient, Consumer and Producer) and the brokers' Prometheus endpoints, so it works against
tidelog and Apache Kafka alike. It serves on the shared web stack (``tidelog.web``: Starlette on
hypercorn) and never imports the broker, storage or metadata packages (an import-linter contract).

Modules, from pure to shell:

- ``lag``: Burrow's evaluation rules over a window of samples (pure);
- ``reset``: planning an offset reset (pure); ``scrape``: Prometheus text parsing (pure) and fetching;
- ``config``: ``console.*`` settings and the ``kafka.*`` client passthrough (SASL/SCRAM, TLS);
- ``kafka``: ``KafkaView``, the cluster as plain data (cached Metadata, offsets, configs, groups, ACLs);
- ``messages``: browsing a partition and producing a record;
- ``sampler``: polls committed and end offsets, keeps the windows, evaluates, exports metrics;
- ``auth``: password file (scrypt), signed session cookies, roles, CSRF tokens;
- ``burrow``: Burrow v3-compatible JSON endpoints; ``pages``: server-rendered pages and forms;
- ``app``: assembly, the login gate, and ``run``.
"""
