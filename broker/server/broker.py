"""The broker process: the composition root.

    Broker(config) -> await start() -> serve until stop() -> await shutdown()

Builds and wires the parts, and starts and stops them in order; it decides nothing
itself:

    config          BrokerConfig (server.properties)
    store           the metadata store (the embedded file store on a broker alone)
    metadata        MetadataCache, the read-only view handlers read
    logs            LogManager, every partition log on this broker's disks
    purgatory       requests waiting for partitions to move
    replicas        ReplicaManager, the partitions hosted here
    admin           TopicAdmin, topic administration
    coordinator     the group coordinator
    server          the listening socket and request dispatch

Runs on one asyncio event loop; see docs/architecture.md.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import time

from broker.cluster.cache import MetadataCache
from broker.cluster.file_store import FileMetadataStore
from broker.cluster.metadata import BrokerInfo, MetadataStore
from broker.cluster.replica.manager import ReplicaManager
from broker.config import BrokerConfig
from broker.group.coordinator import GroupCoordinator
from broker.group.metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from broker.log import LogManager
from broker.server.admin import TopicAdmin
from broker.server.partition_writer import ReplicaPartitionWriter
from broker.server.purgatory import Purgatory
from broker.server.server import Server

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None):
        self.config = config
        self.broker_id = config.broker_id
        listen_host, listen_port = config.listeners[0]
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.server = Server(self, listen_host, listen_port)
        self.purgatory = Purgatory()
        self.metadata = MetadataCache(self.broker_id, config)
        self.logs = LogManager(config, self.metadata.log_config)
        self.replicas = ReplicaManager(self.broker_id, self.logs, self.metadata, self.purgatory)
        self._store = store
        self.admin: TopicAdmin | None = None
        self._stopped: asyncio.Event | None = None
        self.started_at = 0.0
        self.group_manager = GroupMetadataManager(config, ReplicaPartitionWriter(self.replicas, self.purgatory),
                                                  self.metadata, self._create_offsets_topic)
        self.coordinator = GroupCoordinator(config, self.group_manager)   # loads its partitions in start()
        self.replicas.on_leadership_change(self.group_manager.leadership_changed)

    def _create_offsets_topic(self, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        self.admin.create_topic(OFFSETS_TOPIC, partitions, replication_factor, configs, internal=True)

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
        return BrokerInfo(self.broker_id, host, port, self.config["broker.rack"])

    async def start(self) -> None:
        t0 = time.monotonic()
        self._stopped = asyncio.Event()
        if self._store is None:
            # topic configs must be known before the logs load (segment.bytes,
            # cleanup.policy ... of every topic): the store opens first
            os.makedirs(self.config.log_dirs[0], exist_ok=True)
            self._store = FileMetadataStore(self.config.log_dirs[0], self.broker_info())
        self.admin = TopicAdmin(self.config, self.store, self.metadata, self.replicas, self.logs)
        self.admin.on_topic_deleted(self.coordinator.topic_deleted)
        for topic in self.store.topics().values():
            self.metadata.put_topic(topic)
        self.logs.startup()
        self.metadata.cluster_id = self.logs.cluster_id
        try:
            self.server.start()
        except OSError:
            # e.g. the port is taken: the logs are loaded (and recovered if need be) but
            # nothing was served; close them cleanly so the next start is not a recovery
            self.logs.shutdown()
            raise
        if isinstance(self._store, FileMetadataStore):
            self._store.set_broker(self.broker_info())   # the port the server actually bound
        self.metadata.set_brokers(self.store.brokers().values())
        self.metadata.set_controller(self.broker_id, 0)
        for topic in list(self.store.topics().values()):
            self.admin.apply(topic)
        await self.coordinator.startup()
        self.logs.start_background()
        # everything loaded so far (modules, generated codecs, configs) lives as long as
        # the process: keep it out of the cyclic GC's scans, which otherwise pause the
        # event loop for milliseconds (tail latency)
        gc.freeze()
        self.started_at = time.time()
        log.info("broker %d listening on %s:%d (cluster %s), started in %.3f s", self.broker_id,
                 self.listen_host or "*", self.server.port, self.cluster_id, time.monotonic() - t0)

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
