"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, topic configs and
Metadata's auto-creation (Kafka's ZkAdminManager / AdminZkClient).

Every change is validated here, written to the metadata store, and then applied to this
broker's metadata cache and replicas. Errors that clients must see are raised as
KafkaProtocolError(code, message).

All methods run on the event loop thread.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.cluster.metadata import MetadataStore, TopicInfo
from broker.config import BrokerConfig, ConfigError, validate_topic_configs
from broker.log import TopicPartition
from broker.log.manager import validate_topic_name
from broker.protocol.errors import ErrorCode, KafkaProtocolError

if TYPE_CHECKING:
    from broker.cluster.cache import MetadataCache
    from broker.cluster.replica.manager import ReplicaManager
    from broker.log import LogManager

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TopicAdmin:
    def __init__(self, config: BrokerConfig, store: MetadataStore, metadata: MetadataCache,
                 replicas: ReplicaManager, logs: LogManager):
        self.config = config
        self.store = store
        self.metadata = metadata
        self.replicas = replicas
        self.logs = logs
        self._topic_deleted_listeners: list = []

    def on_topic_deleted(self, fn) -> None:
        """fn(topic name) once a topic is gone (the group coordinator drops its offsets)."""
        self._topic_deleted_listeners.append(fn)

    def apply(self, info: TopicInfo) -> None:
        """Makes the cache and the local replicas show `info` (as the store has it)."""
        # the cache holds its own copy: the store may change its objects in place
        info = TopicInfo(info.name, info.topic_id, dict(info.partitions), dict(info.configs), info.internal)
        self.metadata.put_topic(info)
        self.replicas.apply_states(info.name, info.topic_id, info.partitions.values())

    # ------------------------------------------------------------------ assignment

    def _assign(self, num_partitions: int, replication_factor: int, first: int = 0) -> dict[int, list[int]]:
        brokers = sorted(self.store.brokers())
        if replication_factor > len(brokers):
            raise KafkaProtocolError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                     f"Replication factor: {replication_factor} larger than available "
                                     f"brokers: {len(brokers)}.")
        return {first + p: [brokers[(first + p + r) % len(brokers)] for r in range(replication_factor)]
                for p in range(num_partitions)}

    # ------------------------------------------------------------------ create

    def check_create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str], assignments: dict[int, list[int]] | None = None
                           ) -> dict[int, list[int]]:
        """Validates a CreateTopics entry; returns the replica assignment."""
        problem = validate_topic_name(name)
        if problem:
            raise KafkaProtocolError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if name in self.store.topics():
            raise KafkaProtocolError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        try:
            validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if assignments:
            if num_partitions not in (-1, len(assignments)) or replication_factor != -1:
                raise KafkaProtocolError(ErrorCode.INVALID_REQUEST,
                                         "both replica assignments and partition count/replication factor given")
            known = set(self.store.brokers())
            for p, replicas in assignments.items():
                if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= known:
                    raise KafkaProtocolError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                             f"invalid replicas {replicas} for partition {p}")
            if sorted(assignments) != list(range(len(assignments))):
                raise KafkaProtocolError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be 0..n-1")
            return assignments
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if num_partitions <= 0:
            raise KafkaProtocolError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise KafkaProtocolError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                     "Replication factor must be larger than 0.")
        return self._assign(num_partitions, replication_factor)

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, assignments: dict[int, list[int]] | None = None,
                     internal: bool = False) -> TopicInfo:
        configs = dict(configs or {})
        assignment = self.check_create_topic(name, num_partitions, replication_factor, configs, assignments)
        info = self.store.create_topic(name, assignment, configs, internal or name in INTERNAL_TOPICS)
        self.apply(info)
        log.info("created topic %s (%d partitions, replication factor %d)", name, len(assignment),
                 len(next(iter(assignment.values()))))
        return info

    def auto_create_topic(self, name: str) -> TopicInfo | None:
        """Metadata auto-creation (auto.create.topics.enable), with the broker defaults."""
        if not self.config["auto.create.topics.enable"] or validate_topic_name(name):
            return None
        try:
            return self.create_topic(name)
        except KafkaProtocolError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return self.metadata.topic(name)
            raise

    # ------------------------------------------------------------------ delete

    def delete_topic(self, name: str) -> None:
        if not self.config["delete.topic.enable"]:
            raise KafkaProtocolError(ErrorCode.TOPIC_DELETION_DISABLED)
        info = self.metadata.topic(name)
        if info is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self.store.delete_topic(name)
        self.metadata.remove_topic(name)
        self.replicas.stop_replicas([TopicPartition(name, p) for p in info.partitions], delete=True)
        for fn in self._topic_deleted_listeners:
            fn(name)
        log.info("deleted topic %s", name)

    # ------------------------------------------------------------------ partitions

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                          validate_only: bool = False) -> None:
        info = self.metadata.topic(name)
        if info is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        current = len(info.partitions)
        if count <= current:
            raise KafkaProtocolError(ErrorCode.INVALID_PARTITIONS,
                                     f"Topic currently has {current} partitions, {count} would not be an increase.")
        if assignments:
            if len(assignments) != count - current:
                raise KafkaProtocolError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"{len(assignments)} assignments for {count - current} new partitions")
            new = {current + i: list(r) for i, r in enumerate(assignments)}
        else:
            new = self._assign(count - current, info.replication_factor, current)
        if validate_only:
            return
        self.apply(self.store.add_partitions(name, new))

    # ------------------------------------------------------------------ configs

    def set_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        if self.metadata.topic(name) is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if validate_only:
            return
        self.store.set_topic_configs(name, configs)
        self.metadata.set_topic_configs(name, configs)
        self.logs.update_config(name)
