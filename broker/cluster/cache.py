"""MetadataCache: the read-only view of the cluster that request handlers read (Kafka's
MetadataCache / ZkMetadataCache).

It holds the live brokers with their endpoints, the controller, every topic with its
topic id, configs and partition states (replicas, leader, leader epoch, ISR), and the
effective LogConfig of each topic (its overrides over the broker's defaults). Handlers read it and never change it; only the broker's own metadata path
writes it:

    on a broker alone      the in-process controller, after each change it decides
    in a cluster           UpdateMetadata requests from the controller (and the
                           config-change notifications for topic configs)

so that every broker answers Metadata with what the controller last told it, as in
Kafka. Readers get the objects the cache holds: they must not mutate them. A writer
replaces a TopicInfo or PartitionState rather than changing it in place, so a reader
that took a reference keeps a consistent snapshot.

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.config import BrokerConfig, LogConfig, validate_topic_configs
from broker.timeouts import wait_for


class MetadataCache:
    def __init__(self, broker_id: int, config: BrokerConfig):
        self.broker_id = broker_id
        self.config = config
        self._log_configs: dict[str, LogConfig] = {}
        #: the schema check of a topic that validates schemas (SchemaValidation.check_for),
        #: put on its LogConfig (schema_check); None: no topic is checked
        self.schema_checks: Callable[[str, LogConfig], Any] | None = None
        self._configs: dict[str, dict[str, str]] = {}  # topic -> its overrides (the store's)
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._topic_ids: dict[uuid.UUID, str] = {}
        self.controller_id: int = -1
        self.controller_epoch: int = -1
        self.cluster_id: str | None = None
        self.initialized = False  # a controller has told this broker the cluster once
        self._waiters: list[asyncio.Future[None]] = []
        #: told every topic's overrides as they are set (None: the topic is gone), e.g. the
        #: replication throttles' lists (Kafka's TopicConfigHandler)
        self.topic_config_listeners: list[Callable[[str, Mapping[str, str] | None], None]] = []

    # ------------------------------------------------------------------ reads

    def brokers(self) -> Mapping[int, BrokerInfo]:
        """The live brokers."""
        return self._brokers

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    def is_alive(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_ids.get(topic_id)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        info = self._topics.get(topic)
        return info.partitions.get(partition) if info is not None else None

    def log_config(self, topic: str) -> LogConfig:
        """The topic's effective log settings (the broker's defaults for an unknown topic)."""
        cfg = self._log_configs.get(topic)
        if cfg is None:
            raw = self._configs.get(topic)
            try:
                overrides = validate_topic_configs(raw) if raw else {}
            except ValueError:
                overrides = {}  # written by a newer or foreign broker: the defaults
            cfg = self.config.log_config(overrides)
            if self.schema_checks is not None:
                cfg.schema_check = self.schema_checks(topic, cfg)
            if raw is not None:
                self._log_configs[topic] = cfg
        return cfg

    def leader_of(self, topic: str, partition: int) -> BrokerInfo | None:
        """The live leader of a partition, None when it has none (or is unknown)."""
        state = self.partition_state(topic, partition)
        if state is None or state.leader < 0:
            return None
        return self._brokers.get(state.leader)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Waits until predicate() holds after some update (or timeout); its last value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            fut = loop.create_future()
            self._waiters.append(fut)
            try:
                await wait_for(fut, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
        return True

    def changed(self) -> None:
        """Wakes wait_for() callers (after a batch of updates)."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ writes (metadata path only)

    def set_brokers(self, brokers: Iterable[BrokerInfo]) -> None:
        self._brokers = {b.broker_id: b for b in brokers}

    def set_controller(self, controller_id: int, controller_epoch: int) -> None:
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch

    def has_topic_configs(self, topic: str) -> bool:
        return topic in self._configs

    def preset_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """A topic's overrides, known before the topic is (logs open with them)."""
        self._configs[topic] = dict(configs)
        self._log_configs.pop(topic, None)
        self._tell_configs(topic, configs)

    def _tell_configs(self, topic: str, configs: Mapping[str, str] | None) -> None:
        for fn in self.topic_config_listeners:
            fn(topic, configs)

    def put_topic(self, info: TopicInfo) -> None:
        if info.name in self._configs:
            info = TopicInfo(info.name, info.topic_id, info.partitions, dict(self._configs[info.name]), info.internal)
        old = self._topics.get(info.name)
        if old is not None and old.topic_id != info.topic_id:
            self._topic_ids.pop(old.topic_id, None)
        self._topics[info.name] = info
        self._topic_ids[info.topic_id] = info.name
        self._log_configs.pop(info.name, None)

    def remove_topic(self, name: str) -> TopicInfo | None:
        info = self._topics.pop(name, None)
        self._log_configs.pop(name, None)
        if self._configs.pop(name, None) is not None:
            self._tell_configs(name, None)
        if info is not None:
            self._topic_ids.pop(info.topic_id, None)
        return info

    def update_partitions(self, topic: str, states: Iterable[PartitionState]) -> None:
        """New states for some partitions of a known topic (a new TopicInfo replaces the
        old one, so a reader's reference stays consistent)."""
        info = self._topics.get(topic)
        if info is None:
            return
        parts = dict(info.partitions)
        for s in states:
            parts[s.partition] = s
        self._topics[topic] = TopicInfo(info.name, info.topic_id, parts, info.configs, info.internal)

    def broker_defaults_changed(self) -> None:
        """The broker's defaults changed (dynamic broker configs): every topic's effective
        settings are computed again."""
        self._log_configs.clear()

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        self._configs[topic] = dict(configs)
        info = self._topics.get(topic)
        if info is not None:
            self._topics[topic] = TopicInfo(info.name, info.topic_id, info.partitions, dict(configs), info.internal)
        self._log_configs.pop(topic, None)
        self._tell_configs(topic, configs)
