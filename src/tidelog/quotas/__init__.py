"""Client quotas as Kafka defines them, and tidelog's priority tiers: pure maths and rules, no I/O.

- ``entity``: quota entities (user, client-id, ip, and their defaults), the quota keys and Kafka's
  validation of AlterClientQuotas and DescribeClientQuotas filters;
- ``rate``: Kafka's sampled rate (``quota.window.num`` windows of ``quota.window.size.seconds``) and
  the throttle time that brings a rate back under its bound;
- ``manager``: which configured entity a connection's (user, client-id) takes each quota from
  (Kafka's precedence), the shared sensors, and the throttle time of a recorded value;
- ``mutation``: KIP-599's token bucket for ``controller_mutation_rate``, strict and permissive;
- ``cold_reads``: Guardian's page-cache estimate (cold or hot reads) and which partitions' cold
  reads a busy log dir throttles;
- ``tiers``: priority tiers (high, medium, low), the tier-wide throttles and pauses, and the
  saturation rule that throttles the lowest tier first.
"""
