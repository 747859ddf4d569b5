"""Topic lifecycle: create, delete, add partitions, change configs.

Each operation validates like Kafka's controller (same checks, same error codes and messages where
clients show them) and commits the new cluster image to the metadata store first.

On a single node it then creates or deletes the partition logs; on start,
:meth:`TopicAdmin.reconcile_logs` repairs the one window a crash can leave (image committed, logs not
yet created or not yet deleted).

In a cluster (``clustered``) any broker may serve these requests: replicas are placed over the live
brokers by the topic's ``placement.policy`` (``controller.placement_policy``: Kafka's rack-aware
assignment by default, or the weighted consistent-hash ring; CreateTopics' own policy override counts,
and explicit replica assignments bypass placement), each partition starts led by its
first replica with every replica in the ISR, and the commit is a compare-and-set in etcd (a racing
creation of the same topic loses with TOPIC_ALREADY_EXISTS). A commit that cannot be written (the
metadata disk is full) changes nothing and answers KAFKA_STORAGE_ERROR, as Kafka answers a failed log dir. Logs are created and deleted by each
broker's replica manager when the change reaches it through the store's watch.

``admit`` (create, delete, add partitions) is the client's controller_mutation_rate (KIP-599,
``broker/quota_runtime.py``): called with the partitions a topic creates or deletes once the topic
passed every other check (validate-only requests too, as Kafka's controller does); False refuses
the topic with THROTTLING_QUOTA_EXCEEDED and changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from tidelog.common.config import BrokerConfig, Value, parse_topic_configs, resolve_topic_config, with_dynamic
from tidelog.common.errors import ConfigError, ErrorCode, KafkaError
from tidelog.common.names import topic_name_problem
from tidelog.controller.placement_policy import PlacementBroker, place
from tidelog.metadata.errors import MetadataStoreUnavailable, StaleMetadataError
from tidelog.metadata.image import ClusterImage, PartitionImage, TopicImage, add_partitions, new_topic
from tidelog.metadata.store import MetadataStore
from tidelog.storage.log_config import LogConfig
from tidelog.storage.manager import LogManager

log = logging.getLogger(__name__)

BROKER_CONFIG_ATTEMPTS = 10  # compare-and-set rounds for one dynamic broker config change

MAX_PARTITIONS = 100_000


@dataclass(frozen=True, slots=True)
class Outcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    topic: TopicImage | None = None

    @property
    def ok(self) -> bool:
        return self.error is ErrorCode.NONE


def _fail(code: ErrorCode, message: str) -> Outcome:
    return Outcome(code, message)


Admit = Callable[[int], bool]
THROTTLED = Outcome(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")


class TopicAdmin:
    def __init__(
        self, config: BrokerConfig, store: MetadataStore, logs: LogManager, node_id: int, *, clustered: bool = False
    ) -> None:
        self.config = config
        self.store = store
        self.logs = logs
        self.node_id = node_id
        self.clustered = clustered

    def _brokers(self) -> list[PlacementBroker]:
        """Live brokers as placement sees them: the registrations in a cluster, this node alone otherwise;
        drained brokers (``placement.excluded.brokers``) are left out."""
        if not self.clustered:
            return [PlacementBroker(self.node_id)]
        listed = self.config.get("placement.excluded.brokers")
        excluded = {int(b) for b in listed} if isinstance(listed, list) else set()
        return [PlacementBroker(b.node_id, b.rack, b.rack_group, b.weight)
                for b in self.store.image.live_brokers() if b.node_id not in excluded]

    def _policy(self, overrides: Mapping[str, Value]) -> str:
        return str(resolve_topic_config(self.config, overrides)["placement.policy"])

    def _placed(self, name: str, replicas: Sequence[Sequence[int]], configs: Mapping[str, Value]) -> TopicImage:
        topic = new_topic(name, len(replicas), self.node_id, configs)
        if not self.clustered:
            return topic
        return replace(topic, partitions=tuple(
            PartitionImage(i, r[0], 0, tuple(r), tuple(r)) for i, r in enumerate(replicas)
        ))

    async def _commit(self, image: ClusterImage) -> Outcome | None:
        """Commit ``image``; an Outcome when a concurrent change in the cluster won the race."""
        try:
            await self.store.commit(image)
        except StaleMetadataError as exc:
            return _fail(ErrorCode.NOT_CONTROLLER, f"The metadata changed concurrently; retry ({exc})")
        except MetadataStoreUnavailable as exc:  # etcd out of reach or refusing the write: nothing changed
            log.warning("the cluster metadata could not be written: %s", exc)
            return _fail(ErrorCode.REQUEST_TIMED_OUT, f"The cluster metadata could not be written: {exc}")
        except OSError as exc:  # the local metadata file could not be written (a full disk); nothing changed
            log.error("the cluster metadata could not be written: %s", exc)
            return _fail(ErrorCode.KAFKA_STORAGE_ERROR, f"The cluster metadata could not be written: {exc.strerror or exc}")
        return None

    # -- queries ---------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.store.image.topics.get(name)

    def resolved_config(self, topic: TopicImage) -> dict[str, Value]:
        return resolve_topic_config(self.config, topic.configs)

    def log_config(self, topic: TopicImage) -> LogConfig:
        return LogConfig.from_topic_config(self.resolved_config(topic))

    # -- create ----------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Sequence[tuple[int, Sequence[int]]] = (),
        configs: Iterable[tuple[str, str | None]] = (),
        validate_only: bool = False,
        admit: Admit | None = None,
    ) -> Outcome:
        problem = topic_name_problem(name)
        if problem:
            return _fail(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if name in self.store.image.topics:
            return _fail(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        collision = self._colliding_topic(name)
        if collision:
            return _fail(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {collision}",
            )
        if assignments and (num_partitions != -1 or replication_factor != -1):
            return _fail(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        if assignments:
            outcome = self._check_assignments(assignments)
            if outcome is not None:
                return outcome
            num_partitions = len(assignments)
        else:
            if num_partitions == -1:
                num_partitions = self.config.get_int("num.partitions")
            if replication_factor == -1:
                replication_factor = self.config.get_int("default.replication.factor")
            if num_partitions <= 0 or num_partitions > MAX_PARTITIONS:
                return _fail(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
            if replication_factor <= 0:
                return _fail(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
            brokers = self._brokers()
            if replication_factor > len(brokers):
                return _fail(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                    f"factor of {replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered.",
                )
        try:
            overrides = self._parse_configs(configs)
        except ConfigError as exc:
            return _fail(ErrorCode.INVALID_CONFIG, str(exc))
        if not assignments:
            try:
                placed = place(self._policy(overrides), self._brokers(), name, 0, num_partitions, replication_factor)
            except KafkaError as exc:
                return _fail(exc.code, exc.message)
            assignments = list(enumerate(placed))
        topic = self._placed(name, [r for _, r in sorted(assignments)], overrides)
        if admit is not None and not admit(len(topic.partitions)):
            return THROTTLED
        if validate_only:
            return Outcome(topic=topic)
        if name in self.store.image.topics:
            return _fail(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        lost = await self._commit(self.store.image.with_topic(topic))
        if lost is not None:
            return _fail(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") if name in self.store.image.topics else lost
        if not self.clustered:
            self.logs.create_logs(name, [p.index for p in topic.partitions], self.log_config(topic))
        log.info("created topic %s with %d partition(s)", name, num_partitions)
        return Outcome(topic=topic)

    def _colliding_topic(self, name: str) -> str | None:
        # '.' and '_' collide in metric names, so Kafka refuses names differing only by them.
        folded = name.replace(".", "_")
        for existing in self.store.image.topics:
            if existing.replace(".", "_") == folded:
                return existing
        return None

    def _check_assignments(self, assignments: Sequence[tuple[int, Sequence[int]]]) -> Outcome | None:
        indexes = sorted(index for index, _ in assignments)
        if indexes != list(range(len(indexes))):
            return _fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions should be a consecutive 0-based integer sequence")
        for _, replicas in assignments:
            if not replicas:
                return _fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list.")
            if len(set(replicas)) != len(replicas):
                return _fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes duplicate replicas.")
            # Drained brokers may still be named explicitly (Kafka checks registration only).
            live = {b.node_id for b in self.store.image.live_brokers()} if self.clustered else {self.node_id}
            unknown = [r for r in replicas if r not in live]
            if unknown:
                return _fail(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {unknown[0]}, but no such broker is registered.",
                )
        return None

    @staticmethod
    def _parse_configs(configs: Iterable[tuple[str, str | None]]) -> dict[str, Value]:
        pairs = list(configs)
        for key, value in pairs:
            if value is None:
                raise ConfigError(f"Null value not supported for topic configs: {key}")
        return parse_topic_configs(pairs)

    # -- delete ----------------------------------------------------------------------------------

    async def delete_topic(self, name: str, admit: Admit | None = None) -> Outcome:
        topic = self.store.image.topics.get(name)
        if topic is None:
            return _fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if not self.config.get("delete.topic.enable"):
            return _fail(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        if admit is not None and not admit(len(topic.partitions)):
            return THROTTLED
        lost = await self._commit(self.store.image.without_topic(name))
        if lost is not None:
            return lost
        if not self.clustered:
            for partition in topic.partitions:
                self.logs.delete_log(name, partition.index)
        log.info("deleted topic %s", name)
        return Outcome(topic=topic)

    # -- partitions ------------------------------------------------------------------------------

    async def create_partitions(self, name: str, count: int, validate_only: bool, admit: Admit | None = None) -> Outcome:
        topic = self.store.image.topics.get(name)
        if topic is None:
            return _fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        current = len(topic.partitions)
        if count < current:
            return _fail(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
            )
        if count == current:
            return _fail(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if count > MAX_PARTITIONS:
            return _fail(ErrorCode.INVALID_PARTITIONS, f"Topic would have more than {MAX_PARTITIONS} partitions.")
        if self.clustered:
            try:
                placed = place(self._policy(topic.configs), self._brokers(), name, current, count - current,
                               len(topic.partitions[0].replicas))
            except KafkaError as exc:
                return _fail(exc.code, exc.message)
            grown = replace(topic, partitions=topic.partitions + tuple(
                PartitionImage(current + i, r[0], 0, r, r) for i, r in enumerate(placed)
            ))
        else:
            grown = add_partitions(topic, count, self.node_id)
        if admit is not None and not admit(count - current):
            return THROTTLED
        if validate_only:
            return Outcome(topic=grown)
        lost = await self._commit(self.store.image.with_topic(grown))
        if lost is not None:
            return lost
        if not self.clustered:
            self.logs.create_logs(name, [p.index for p in grown.partitions[current:]], self.log_config(grown))
        return Outcome(topic=grown)

    # -- configs ---------------------------------------------------------------------------------

    async def set_topic_configs(self, name: str, overrides: Mapping[str, Value], validate_only: bool) -> Outcome:
        """Replace the topic's overrides (validated already by the caller)."""
        topic = self.store.image.topics.get(name)
        if topic is None:
            return _fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        changed = topic.with_configs(overrides)
        if validate_only:
            return Outcome(topic=changed)
        lost = await self._commit(self.store.image.with_topic(changed))
        if lost is not None:
            return lost
        self.apply_log_configs(changed)
        return Outcome(topic=changed)

    def apply_log_configs(self, topic: TopicImage) -> None:
        self.logs.update_config(topic.name, self.log_config(topic))

    async def set_broker_configs(self, values: Mapping[str, Value], validate_only: bool, node_id: int | None = None) -> None:
        """Replace the cluster-wide defaults (``node_id`` None) or one broker's own dynamic values."""
        if validate_only:
            return
        # Brokers' own values and the defaults share one key: Kafka's tools set every broker's at once
        # (kafka-reassign-partitions --throttle), so a lost compare-and-set is redone on the new image.
        for attempt in range(1, BROKER_CONFIG_ATTEMPTS + 1):
            stored = with_dynamic(self.store.image.broker_configs, node_id, values)
            try:
                await self.store.commit(self.store.image.with_broker_configs(stored))
                break
            except StaleMetadataError as exc:
                if attempt == BROKER_CONFIG_ATTEMPTS:
                    raise KafkaError(ErrorCode.NOT_CONTROLLER, f"The metadata changed concurrently; retry ({exc})") from exc
                await asyncio.sleep(0.02 * attempt)  # the watch brings the change that won
            except MetadataStoreUnavailable as exc:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"The cluster metadata could not be written: {exc}") from exc
            except OSError as exc:  # the local metadata file could not be written (a full disk); nothing changed
                log.error("the cluster metadata could not be written: %s", exc)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"The cluster metadata could not be written: {exc.strerror or exc}") from exc
        self.config.load_dynamic(stored, self.node_id)
        for topic in self.store.image.topics.values():
            self.apply_log_configs(topic)

    # -- start-up --------------------------------------------------------------------------------

    def reconcile_logs(self) -> None:
        """Create logs the image names but the disk lacks; delete logs of topics no longer in the image.

        Logs found on disk were opened with their topic's settings already (LogManager.startup).
        """
        image = self.store.image
        for topic in image.topics.values():
            missing = [p.index for p in topic.partitions if self.logs.get_log(topic.name, p.index) is None]
            if missing:
                self.logs.create_logs(topic.name, missing, self.log_config(topic))
        for topic_name, index in list(self.logs.all_partitions()):
            known = image.topics.get(topic_name)
            if known is None or index >= len(known.partitions):
                log.warning("deleting log %s-%d: its topic is not in the metadata", topic_name, index)
                self.logs.delete_log(topic_name, index)
