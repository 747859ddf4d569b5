"""Replication throttles around a reassignment, set and cleared the way kafka-reassign-partitions does.

``--execute --throttle RATE`` sets, before the moves start (so no byte is copied unthrottled):

- on each topic with a copying move, ``leader.replication.throttled.replicas`` (``partition:broker`` of
  the replicas the partition has now, the ones a new replica copies from) and
  ``follower.replication.throttled.replicas`` (``partition:broker`` of the replicas being added), computed
  by ``reassign_plan.throttle_plan`` over this plan and the moves already in progress;
- on every broker those lists name, ``leader.replication.throttled.rate`` and
  ``follower.replication.throttled.rate`` = RATE (dynamic broker configs: the broker's own value).

``--replica-alter-log-dirs-throttle RATE`` sets ``replica.alter.log.dirs.io.max.bytes.per.second`` on the
brokers with a log-dir move.

``tidelog brokers drain --throttle RATE`` sets the same before each batch (that batch and the moves in
progress) and clears them all once the broker is drained.

``--verify`` (and ``--execute --wait`` once its moves are done), when no partition of the plan is still
moving and no replica is still changing log dir: the three rates are deleted on *every* broker of the
cluster and the two lists on the plan's topics. Kafka's tool clears every broker too, since it cannot
know which brokers an earlier ``--execute`` throttled. The writes are IncrementalAlterConfigs SET and
DELETE, so any other config of those topics and brokers is left as it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tidelog.cli.common import CliError, kafka_error_text
from tidelog.cli.reassign_plan import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    LOG_DIR_RATE,
    ThrottlePlan,
)

VERIFY_WARNING = ("Warning: You must run --verify periodically, until the reassignment completes, "
                  "to ensure the throttle is removed.")


def _alter(admin: AdminClient, resources: list[ConfigResource], timeout: float) -> None:
    """IncrementalAlterConfigs of ``resources``: the topics in one call, each broker in its own (librdkafka
    sends a broker's resource to that broker, one per call); CliError naming every refusal."""
    topics = [r for r in resources if r.restype != ResourceType.BROKER]
    calls = ([topics] if topics else []) + [[r] for r in resources if r.restype == ResourceType.BROKER]
    refused = []
    for call in calls:
        for resource, future in admin.incremental_alter_configs(call, request_timeout=timeout).items():
            try:
                future.result(timeout=timeout)
            except Exception as exc:  # KafkaException, or a timeout: reported per resource
                kind = "broker" if resource.restype == ResourceType.BROKER else "topic"
                refused.append(f"{kind} {resource.name}: {kafka_error_text(exc)}")
    if refused:
        raise CliError("the cluster refused the throttle configs: " + "; ".join(refused))


def _entries(values: Mapping[str, str | None]) -> list[ConfigEntry]:
    return [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
            for k, v in values.items()]


def set_replication_throttle(admin: AdminClient, plan: ThrottlePlan, rate: int, args: argparse.Namespace,
                             say: Callable[[str], None] = print) -> None:
    """The throttled-replica lists on the plan's topics, then ``rate`` on its brokers."""
    _alter(admin, [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=_entries(lists))
                   for topic, lists in sorted(plan.topics.items())], args.timeout)
    rates: dict[str, str | None] = {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)}
    try:
        _alter(admin, [ConfigResource(ResourceType.BROKER, str(b), incremental_configs=_entries(rates))
                       for b in plan.brokers], args.timeout)
    except CliError:
        # No move starts: take the lists back off the topics so that nothing is left half-set.
        lists: dict[str, str | None] = dict.fromkeys((LEADER_REPLICAS, FOLLOWER_REPLICAS))
        _alter(admin, [ConfigResource(ResourceType.TOPIC, t, incremental_configs=_entries(lists)) for t in plan.topics],
               args.timeout)
        raise
    say(f"The inter-broker throttle limit was set to {rate} B/s")


def set_log_dir_throttle(admin: AdminClient, brokers: Iterable[int], rate: int, args: argparse.Namespace) -> None:
    rates: dict[str, str | None] = {LOG_DIR_RATE: str(rate)}
    _alter(admin, [ConfigResource(ResourceType.BROKER, str(b), incremental_configs=_entries(rates))
                   for b in sorted(set(brokers))], args.timeout)
    print(f"The replica-alter-dir throttle limit was set to {rate} B/s")


def clear_throttles(admin: AdminClient, brokers: Iterable[int], topics: Iterable[str], args: argparse.Namespace,
                    say: Callable[[str], None] = print) -> None:
    """Delete the rates on ``brokers`` and the throttled-replica lists on ``topics``."""
    broker_ids = sorted(set(brokers))
    topic_names = sorted(set(topics))
    say("Clearing broker-level throttles on brokers " + ",".join(str(b) for b in broker_ids))
    rates: dict[str, str | None] = dict.fromkeys((LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE))
    _alter(admin, [ConfigResource(ResourceType.BROKER, str(b), incremental_configs=_entries(rates))
                   for b in broker_ids], args.timeout)
    say("Clearing topic-level throttles on topics " + ",".join(topic_names))
    lists: dict[str, str | None] = dict.fromkeys((LEADER_REPLICAS, FOLLOWER_REPLICAS))
    _alter(admin, [ConfigResource(ResourceType.TOPIC, t, incremental_configs=_entries(lists))
                   for t in topic_names], args.timeout)
