"""The broker process: configuration, metadata store, logs, partitions and the server.

    Broker(config) -> await start() -> serve until stop() -> await shutdown()

Topic administration (create, delete, add partitions, configs) goes through here so
that the metadata store, the logs and the partition objects change together. Errors
that clients must see are raised as KafkaProtocolError(code, message).

Runs on one asyncio event loop; see DESIGN.md "Runtime".
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
import uuid

from broker.cluster.file_store import FileMetadataStore
from broker.cluster.metadata import BrokerInfo, MetadataStore, TopicInfo
from broker.cluster.replica.partition import Partition
from broker.config import BrokerConfig, ConfigError, LogConfig, validate_topic_configs
from broker.log import LogManager, TopicPartition
from broker.log.manager import validate_topic_name
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.server.purgatory import Purgatory
from broker.server.server import Server

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None):
        self.config = config
        self.broker_id = config.broker_id
        listen_host, listen_port = config.listeners[0]
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.server = Server(self, listen_host, listen_port)
        self.purgatory = Purgatory()
        self._store = store
        self.logs = LogManager(config, self.log_config)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_ids: dict[uuid.UUID, str] = {}
        self._log_configs: dict[str, LogConfig] = {}
        self._stopped: asyncio.Event | None = None
        self.started_at = 0.0
        from broker.group import GroupCoordinator
        self.coordinator = GroupCoordinator(self)   # loads its partitions in start()

    # ------------------------------------------------------------------ lifecycle

    @property
    def store(self) -> MetadataStore:
        assert self._store is not None, "broker not started"
        return self._store

    @property
    def cluster_id(self) -> str | None:
        return self.logs.cluster_id

    def broker_info(self) -> BrokerInfo:
        hosts = self.config.advertised_listeners
        host, port = hosts[0]
        if self.config["advertised.listeners"] is None:
            port = self.server.port            # the bound port (listen on :0 in tests)
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        return BrokerInfo(self.broker_id, host, port)

    async def start(self) -> None:
        t0 = time.monotonic()
        self._stopped = asyncio.Event()
        if self._store is None:
            # topic configs must be known before the logs load (segment.bytes,
            # cleanup.policy ... of every topic): the store opens first
            os.makedirs(self.config.log_dirs[0], exist_ok=True)
            self._store = FileMetadataStore(self.config.log_dirs[0], self.broker_info())
        self.logs.startup()
        try:
            self.server.start()
        except OSError:
            # e.g. the port is taken: the logs are loaded (and recovered if need be) but
            # nothing was served; close them cleanly so the next start is not a recovery
            self.logs.shutdown()
            raise
        if isinstance(self._store, FileMetadataStore):
            self._store.set_broker(self.broker_info())   # the port the server actually bound
        for topic in self.store.topics().values():
            self._materialize(topic)
        await self.coordinator.startup()
        self.logs.start_background()
        # everything loaded so far (modules, generated codecs, configs) lives as long as
        # the process: keep it out of the cyclic GC's scans, which otherwise pause the
        # event loop for milliseconds (tail latency)
        gc.freeze()
        self.started_at = time.time()
        log.info("broker %d listening on %s:%d (cluster %s), started in %.3f s", self.broker_id,
                 self.listen_host or "*", self.server.port, self.cluster_id, time.monotonic() - t0)

    def _materialize(self, topic: TopicInfo) -> None:
        """Creates or opens the logs of the topic's partitions this broker hosts."""
        self.topic_ids[topic.topic_id] = topic.name
        self._log_configs.pop(topic.name, None)
        for p, state in topic.partitions.items():
            if self.broker_id not in state.replicas:
                continue
            tp = TopicPartition(topic.name, p)
            lg = self.logs.get_or_create(tp, topic.topic_id)
            lg.update_config(self.log_config(topic.name))
            part = self.partitions.get(tp)
            if part is None:
                part = self.partitions[tp] = Partition(tp, lg, state, self.broker_id, self.purgatory)
                # After a crash the checkpointed high watermark is older than the log:
                # a leader moves it up to what its ISR holds at once (Kafka does so on
                # becoming leader), or acknowledged records stay invisible until the
                # next append.
                part.maybe_increment_high_watermark()
            else:
                part.update_state(state)

    def stop(self) -> None:
        if self._stopped is not None:
            self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def shutdown(self) -> None:
        """Clean shutdown: no new connections, close the open ones, flush and checkpoint
        every log, leave the clean-shutdown marker."""
        self.server.stop_listening()
        await self.server.close_connections()
        await self.coordinator.shutdown()
        await self.logs.stop_background()
        self.logs.shutdown()
        log.info("broker %d stopped cleanly", self.broker_id)

    def controller_id(self) -> int:
        """The active controller (this broker when it runs alone)."""
        return self.broker_id

    # ------------------------------------------------------------------ configs

    def log_config(self, topic: str) -> LogConfig:
        cfg = self._log_configs.get(topic)
        if cfg is None:
            info = self._store.topics().get(topic) if self._store is not None else None
            overrides = validate_topic_configs(info.configs) if info is not None else {}
            cfg = self.config.log_config(overrides)
            self._log_configs[topic] = cfg
        return cfg

    # ------------------------------------------------------------------ lookups

    def topic(self, name: str) -> TopicInfo | None:
        return self.store.topics().get(name)

    def partition(self, topic: str, index: int) -> Partition:
        """The local partition or KafkaProtocolError(UNKNOWN_TOPIC_OR_PARTITION /
        NOT_LEADER_OR_FOLLOWER)."""
        part = self.partitions.get(TopicPartition(topic, index))
        if part is None:
            info = self.topic(topic)
            if info is None or index not in info.partitions:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        part = self.partition(topic, index)
        part.check_leader(current_leader_epoch)
        return part

    # ------------------------------------------------------------------ topic admin

    def _assign(self, num_partitions: int, replication_factor: int, first: int = 0) -> dict[int, list[int]]:
        brokers = sorted(self.store.brokers())
        if replication_factor > len(brokers):
            raise KafkaProtocolError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                     f"Replication factor: {replication_factor} larger than available "
                                     f"brokers: {len(brokers)}.")
        return {first + p: [brokers[(first + p + r) % len(brokers)] for r in range(replication_factor)]
                for p in range(num_partitions)}

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
        self._materialize(info)
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
                return self.topic(name)
            raise

    def delete_topic(self, name: str) -> None:
        if not self.config["delete.topic.enable"]:
            raise KafkaProtocolError(ErrorCode.TOPIC_DELETION_DISABLED)
        info = self.topic(name)
        if info is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self.store.delete_topic(name)
        self.topic_ids.pop(info.topic_id, None)
        self._log_configs.pop(name, None)
        for p in info.partitions:
            tp = TopicPartition(name, p)
            self.partitions.pop(tp, None)
            self.logs.delete(tp)
            self.purgatory.partition_changed(tp)
        self.coordinator.topic_deleted(name)
        log.info("deleted topic %s", name)

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                          validate_only: bool = False) -> None:
        info = self.topic(name)
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
        info = self.store.add_partitions(name, new)
        self._materialize(info)

    def set_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        info = self.topic(name)
        if info is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if validate_only:
            return
        self.store.set_topic_configs(name, configs)
        self._log_configs.pop(name, None)
        self.logs.update_config(name)


async def run_broker(config: BrokerConfig, ready=None) -> None:
    """Starts a broker, serves until SIGINT/SIGTERM (or broker.stop()), shuts down cleanly."""
    import signal

    broker = Broker(config)
    await broker.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, broker.stop)
        except (NotImplementedError, RuntimeError):
            pass
    if ready is not None:
        ready(broker)
    try:
        await broker.wait_stopped()
    finally:
        await broker.shutdown()
