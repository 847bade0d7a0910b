"""The broker process: the composition root.

    Broker(config) -> await start() -> serve until stop() -> await shutdown()

Builds and wires the parts, and starts and stops them in order; it decides nothing
itself:

    config          BrokerConfig (server.properties)
    store           the metadata store: ZooKeeper (zookeeper.connect) or, on a broker
                    alone, the embedded file store
    metadata        MetadataCache, the read-only view handlers read, kept current by the
                    controller's UpdateMetadata requests
    logs            LogManager, every partition log on this broker's disks
    replicas        ReplicaManager, the partitions hosted here, their fetchers, the
                    purgatory where appends and fetches wait for partitions to move
    controller      the controller: every broker runs one, the elected one acts
    admin           TopicAdmin, topic administration through the store
    coordinator     the group coordinator (and its metadata manager)
    consumer_coordinator  KIP-848 consumer groups' heartbeats (same metadata manager)
    share_coordinator     KIP-932 share groups' membership (same metadata manager)
    share_state_coordinator  the share coordinator: share-partition state on
                    __share_group_state (broker/share/coordinator.py)
    share_persister  that state wherever its share coordinator is (broker/share/persister.py)
    producer_ids    ProducerIdManager, producer id blocks claimed from the store
    server          the listening socket and request dispatch

Request handlers see it through the BrokerServices protocol (server/services.py), which
it implements: the parts above that serve requests, never its lifecycle.

Start: the store (ZooKeeper unreachable: one line, exit 1), the cluster id (a data dir of
another cluster: one line, exit 1), topic configs, the logs, the listener (bound: a
taken port is one line, exit 1), the broker's registration (an id already registered:
one line, exit 1), then the listener serves (connections made earlier waited in its
backlog), the controller; then it waits (bounded) for the controller's first word.

Stop (SIGTERM): controlled shutdown first — the controller moves every leadership away
while this broker still serves — then the listener, fetchers, controller, groups, logs
(flushed, checkpointed, clean-shutdown marker) and the store's session.

Runs on one asyncio event loop; see docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from broker.cluster.cache import MetadataCache
from broker.cluster.channel import bind_outgoing, set_client_security
from broker.cluster.controller.controller import Controller
from broker.cluster.controller_client import ControllerClient
from broker.cluster.metadata import TRANSACTION_VERSION, BrokerInfo, MetadataStore, SessionEvent
from broker.cluster.producer_ids import ProducerIdManager
from broker.cluster.registration import holder_gone
from broker.cluster.replica.fetcher import FetcherConfig
from broker.cluster.replica.manager import ReplicaManager
from broker.cluster.replica.throttle import ReplicationQuotas, throttled_rates
from broker.cluster.store.errors import BrokerIdInUse, NoSuchTopic, StoreUnavailable
from broker.cluster.store.file import FileMetadataStore
from broker.cluster.store.znodes import BrokerRegistration, EndPoint, desanitize
from broker.config import (
    DEFAULT_ENTITY,
    IGNORED_KAFKA_KEYS,
    LISTENER_PREFIX,
    BrokerConfig,
    parse_dynamic_lenient,
    parse_listener,
)
from broker.group.consumer_coordinator import ConsumerGroupCoordinator
from broker.group.coordinator import GroupCoordinator
from broker.group.group_configs import GroupConfigs, share_group_values
from broker.group.metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from broker.group.share_coordinator import ShareGroupCoordinator
from broker.log import LogManager
from broker.log.manager import new_cluster_id
from broker.protocol._runtime import Message
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.controlled_shutdown import ControlledShutdownRequest
from broker.security.acl import AclBinding, Authorizer
from broker.security.credentials import CredentialCache
from broker.security.listener import inter_broker_security, listener_securities
from broker.security.tls import TlsConfigError
from broker.server.admin import TopicAdmin
from broker.server.handlers import transaction_version
from broker.server.partition_writer import ReplicaPartitionWriter
from broker.server.quotas import ClientQuotas, parse_entity_path
from broker.server.server import Server, ThrottledLog
from broker.server.stall import StallGuard
from broker.server.txn_markers import MarkerChannels
from broker.share.coordinator import STATE_TOPIC as SHARE_STATE_TOPIC, ShareCoordinator
from broker.share.manager import SharePartitionManager, ShareSettings
from broker.share.offsets import DeleteStateWithGroup
from broker.share.persister import Persister
from broker.txn.coordinator import TXN_TOPIC, TransactionCoordinator

if TYPE_CHECKING:
    import uuid

    from broker.cluster.store.acls import Resource
    from broker.metrics.exporter import BrokerMetrics
    from broker.registry.service import RegistryService
    from broker.server.tier import TieredStorage

log = logging.getLogger(__name__)

METADATA_WAIT_S = 30.0
SHUTDOWN_STEP_S = 10.0
CONTROLLED_SHUTDOWN_WAIT_S = 5.0  # for the LeaderAndIsr that makes this broker a follower


class BrokerStartupError(Exception):
    """The broker cannot start; the message is one line for the operator."""


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None):
        self.config = config
        self.broker_id = config.broker_id
        inter = (
            config.listener(config.inter_broker_listener)
            if any(x.name == config.inter_broker_listener for x in config.endpoints)
            else config.endpoints[0]
        )
        self.listen_host = inter.host
        bind_outgoing(inter.host)  # to brokers and ZooKeeper: from the inter-broker listener's address
        #: client quotas, from the store's /config/users and /config/clients, kept current by notifications
        self.quotas = ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"])
        #: in a cluster, /feature as last read (levels, epoch): the controller's finalized
        #: features; ({}, -1) until read, or while absent
        self.finalized_features: tuple[dict[str, int], int] = ({}, -1)
        #: metrics.listener set: the server, the replicas and the connections count what
        #: moves with traffic (broker/metrics/stats.py); else they keep no figures
        measure = bool(config["metrics.listener"])
        self.server = Server(self, config.endpoints, measure=measure)  # self: the handlers' BrokerServices
        self.metadata = MetadataCache(self.broker_id, config)
        self.logs = LogManager(config, self.metadata.log_config)
        fetcher = FetcherConfig(
            self.broker_id,
            max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            partition_max_bytes=config["replica.fetch.max.bytes"],
            backoff_s=config["replica.fetch.backoff.ms"] / 1000,
            request_timeout_s=config["request.timeout.ms"] / 1000,
            num_fetchers=config["num.replica.fetchers"],
        )
        self.replicas = ReplicaManager(
            self.broker_id,
            self.logs,
            self.metadata,
            fetcher,
            config["replica.lag.time.max.ms"],
            ReplicationQuotas(
                self.broker_id, config["replication.quota.window.num"], config["replication.quota.window.size.seconds"]
            ),
            measure=measure,
        )
        # the topics' throttled-replicas lists follow their configs (Kafka's TopicConfigHandler)
        self.metadata.topic_config_listeners.append(self.replicas.quotas.topic_configs_changed)
        self._store = store
        self.controller: Controller | None = None
        self.controller_client: ControllerClient | None = None
        self._admin: TopicAdmin | None = None
        self._producer_ids: ProducerIdManager | None = None
        self.broker_epoch = -1
        self._verified_controller: tuple[int, int] = (-1, -1)
        self._control_refused = ThrottledLog()
        self._stopped: asyncio.Event | None = None
        self.started_at = 0.0
        #: SCRAM credentials, from the store's /config/users, kept current by notifications
        self.credentials = CredentialCache()
        self._broker_configs_lock = asyncio.Lock()
        #: the ACL authorizer (authorizer.class.name), None without one: every request allowed
        self.authorizer: Authorizer | None = None
        if config["authorizer.class.name"]:
            self.authorizer = Authorizer(
                [p.strip() for p in config["super.users"].split(";") if p.strip()],
                config["allow.everyone.if.no.acl.found"],
            )
        self.group_manager = GroupMetadataManager(
            config, ReplicaPartitionWriter(self.replicas), self.metadata, self._create_offsets_topic
        )
        self.coordinator = GroupCoordinator(config, self.group_manager)
        #: group configs (GROUP resources), from the store's /config/groups, kept current by notifications
        self.group_configs = GroupConfigs(config)
        self.consumer_coordinator = ConsumerGroupCoordinator(
            self.group_manager,
            lambda: self.metadata.topics().keys(),
            config["group.consumer.assignors"],
            config["group.consumer.session.timeout.ms"],
            config["group.consumer.heartbeat.interval.ms"],
            self.group_configs,
        )
        self.share_coordinator = ShareGroupCoordinator(
            self.group_manager,
            lambda: self.metadata.topics().keys(),
            self._share_group_settings,
            config["group.share.max.size"],
            config["group.share.enable"],
        )
        self.replicas.on_leadership_change(self.group_manager.leadership_changed)
        self.marker_channels = MarkerChannels(self)
        self.txn_coordinator = TransactionCoordinator(
            config,
            ReplicaPartitionWriter(self.replicas),
            self.metadata,
            _LazyProducerIds(self),
            self.marker_channels,
            self._create_txn_topic,
        )
        self.replicas.on_leadership_change(self.txn_coordinator.leadership_changed)
        self.share_state_coordinator = ShareCoordinator(
            config,
            ReplicaPartitionWriter(self.replicas),
            self.metadata,
            self._create_share_state_topic,
            self._topic_partitions,
            delete_records=lambda tp, offset: self.replicas.leader_partition(tp.topic, tp.partition).log.delete_records(
                offset
            ),
        )
        self.replicas.on_leadership_change(self.share_state_coordinator.leadership_changed)
        #: share-partition state wherever its share coordinator is (broker/share/persister.py)
        self.share_persister = Persister(self.broker_id, self.share_state_coordinator, self.metadata)
        #: KIP-932: the share partitions led here and the share sessions (broker/share/), their
        #: state read from and written through the share persister
        self.share_partitions = SharePartitionManager(
            config,
            self.replicas,
            self.share_persister,
            config["group.share.max.share.sessions"],
            self._share_settings,
        )
        self.replicas.on_leadership_change(self.share_partitions.leadership_changed)
        # a member that leaves its share group loses its share sessions and acquired records
        self.share_coordinator.add_listener(self.share_partitions)
        # a deleted share group's state goes with it, as Kafka's DeleteGroups does
        self.share_coordinator.add_listener(DeleteStateWithGroup(self, self.share_state_coordinator.runtime.spawn))
        # what waits on the metadata for leadership to move (the controlled shutdown) is
        # woken by the LeaderAndIsr itself, not only by the UpdateMetadata that may follow
        self.replicas.on_leadership_change(lambda _led, _followed: self.metadata.changed())
        self.replicas.on_log_dir_failure = self._log_dir_failed
        self._log_dir_tasks: set[asyncio.Task[None]] = set()
        self.metrics: BrokerMetrics | None = None
        if measure:
            from broker.metrics.exporter import BrokerMetrics

            host, port = parse_listener(config["metrics.listener"], "metrics.listener")
            self.metrics = BrokerMetrics(self, host, port, config.metrics_web)
        #: the schema registry (schema.registry.listener), None without one (docs/schema-registry.md)
        self.registry: RegistryService | None = None
        if config["schema.registry.listener"]:
            from broker.registry.service import RegistryService

            self.registry = RegistryService(
                config,
                self.broker_id,
                ReplicaPartitionWriter(self.replicas),
                self.metadata,
                self.credentials.get,
                lambda: self.authorizer,
                lambda name, n, rf, configs: self.admin.create_topic(name, n, rf, configs, wait=False),
            )
            self.replicas.on_leadership_change(self.registry.leadership_changed)
        #: tiered storage (remote.log.storage.system.enable; docs/tiered-storage.md), None without it
        self.tier: TieredStorage | None = None
        if config.remote_log_storage_system_enabled:
            from broker.server.tier import TieredStorage

            self.tier = TieredStorage(
                config,
                self.broker_id,
                ReplicaPartitionWriter(self.replicas),
                lambda: list(self.replicas.partitions.items()),
                lambda name, n, rf, configs: self.admin.create_topic(name, n, rf, configs, wait=False),
                self.metadata.wait_for,
            )
            self.replicas.remote_reads = self.tier
            self.replicas.deleted_listeners.append(self.tier.partition_deleted)
        #: schema validation on produce (confluent.*.schema.validation topic configs): each
        #: validating topic's LogConfig gets its check (broker/registry/validation.py)
        from broker.registry.validation import SchemaValidation

        self.schema_validation = SchemaValidation(self.registry)
        self.metadata.schema_checks = self.schema_validation.check_for

    @property
    def store(self) -> MetadataStore:
        assert self._store is not None, "broker not started"
        return self._store

    @property
    def admin(self) -> TopicAdmin:
        assert self._admin is not None, "broker not started"
        return self._admin

    @property
    def producer_ids(self) -> ProducerIdManager:
        assert self._producer_ids is not None, "broker not started"
        return self._producer_ids

    @property
    def cluster_id(self) -> str | None:
        return self.metadata.cluster_id

    @property
    def in_cluster(self) -> bool:
        return bool(self.config["zookeeper.connect"])

    @property
    def transaction_version(self) -> int:
        """The transaction.version this broker serves (the versions and the feature
        ApiVersions answers): its config's; in a cluster no higher than the level the
        controller finalized in /feature, which every live broker supports (0 until read)."""
        level = transaction_version(self.config)
        if self.in_cluster:
            level = min(level, self.finalized_features[0].get(TRANSACTION_VERSION, 0))
        return level

    @property
    def features_epoch(self) -> int:
        """ApiVersions' finalized_features_epoch: /feature's zk version in a cluster (-1
        while absent); 0 for a broker alone."""
        return self.finalized_features[1] if self.in_cluster else 0

    def _features_changed(self, finalized: tuple[dict[str, int], int]) -> None:
        before = self.transaction_version
        self.finalized_features = finalized
        self.server.update_version_caps()
        if self.transaction_version != before:
            log.info(
                "broker %d: transaction.version %d -> %d (finalized %s at epoch %d; configured %d)",
                self.broker_id,
                before,
                self.transaction_version,
                finalized[0],
                finalized[1],
                transaction_version(self.config),
            )

    def advertised_endpoints(self) -> tuple[EndPoint, ...]:
        """Every advertised listener; without advertised.listeners, the bound ports (listen
        on :0 in tests) and 127.0.0.1 for a wildcard address."""
        out = []
        for x in self.config.advertised_endpoints:
            host, port = x.host, x.port
            if self.config["advertised.listeners"] is None:
                port = self.server.bound_port(x.name)
            if host in ("", "0.0.0.0", "::"):
                host = "127.0.0.1"
            out.append(EndPoint(x.name, host, port, x.security_protocol))
        return tuple(out)

    def broker_info(self) -> BrokerInfo:
        """This broker as others reach it: the inter-broker listener's endpoint."""
        endpoints = self.advertised_endpoints()
        ep = next((e for e in endpoints if e.listener_name == self.config.inter_broker_listener), endpoints[0])
        return BrokerInfo(
            self.broker_id,
            ep.host,
            ep.port,
            self.config["broker.rack"],
            endpoints={e.listener_name: (e.host, e.port) for e in endpoints},
        )

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        t0 = time.monotonic()
        self._stopped = asyncio.Event()
        # TLS stores and SASL settings first: one that cannot be used stops the broker at once
        try:
            self.server.set_securities(listener_securities(self.config, self.credentials.get))
            set_client_security(inter_broker_security(self.config))
        except TlsConfigError as exc:
            raise BrokerStartupError(str(exc)) from None
        if self._store is None:
            self._store = self._make_store()
        if self.in_cluster:
            timeout_ms = self.config["zookeeper.connection.timeout.ms"] or self.config["zookeeper.session.timeout.ms"]
            log.info(
                "broker %d: connecting to ZooKeeper at %s (retrying for up to %d ms)",
                self.broker_id,
                self.config["zookeeper.connect"],
                timeout_ms,
            )
        try:
            await self._store.start()
        except StoreUnavailable as exc:
            raise BrokerStartupError(str(exc)) from None
        self._store.add_session_listener(self._session_event)
        # the cluster id: ZooKeeper's (or the embedded store's) and the data dirs' must agree
        local = self.logs.read_cluster_id()
        # ZooKeeper without a cluster id gets a fresh one, as Kafka's: a data dir of
        # another cluster is never adopted (the embedded store adopts its own dir's)
        proposed = new_cluster_id() if self.in_cluster or local is None else local
        cluster_id = await self._store.get_or_create_cluster_id(proposed)
        if local is not None and local != cluster_id:
            where = self.config["zookeeper.connect"] or self.config.log_dirs[0]
            raise BrokerStartupError(
                f"the data dir {self.config.log_dirs[0]} belongs to cluster {local}, "
                f"but {where} holds cluster {cluster_id}; refusing to start"
            )
        self.metadata.cluster_id = cluster_id
        # dynamic broker configs (/config/brokers) over server.properties, before the logs
        # load (their defaults) and the listeners serve (their key stores)
        await self._reload_broker_configs(startup=True)
        # topic configs must be known before the logs load (segment.bytes, cleanup.policy ...),
        # and topic ids rebuild a damaged partition.metadata
        topic_ids = await self._load_topics()
        self.logs.startup(cluster_id, topic_ids)
        try:
            self.server.start(serve=False)  # bound now, serving once registered
        except OSError:
            # e.g. the port is taken: the logs are loaded (and recovered if need be) but
            # nothing was served; close them cleanly so the next start is not a recovery
            self.logs.shutdown()
            raise
        if self.metrics is not None:
            try:
                await self.metrics.start(asyncio.get_running_loop())
            except OSError:
                self.server.stop_listening()
                self.logs.shutdown()
                raise
        if self.registry is not None:
            try:
                await self.registry.start(self.broker_info().host)
            except (OSError, TlsConfigError) as exc:
                self.server.stop_listening()
                self.logs.shutdown()
                raise BrokerStartupError(str(exc)) from None
        self._admin = TopicAdmin(self.config, self.store, self.metadata, self.logs.check_capacity)
        self._producer_ids = ProducerIdManager(self.store, self.broker_id)
        await self._store.watch_config_changes(self._config_changed)
        await self._reload_broker_configs()  # a change made before the watch: not missed
        self.group_configs.store = self._store
        await self.group_configs.load()
        self.credentials.load(await self._store.get_user_configs())
        self.quotas.load(await self._store.get_client_quota_configs())
        if self.authorizer is not None:
            # watch first, then load: a change made in between is read again, never missed
            await self._store.watch_acl_changes(self._acls_changed)
            self.authorizer.load(await self._store.get_acls())
            log.info("broker %d: %d ACLs loaded", self.broker_id, len(self.authorizer.acls()))
        if self.in_cluster:
            # the versions served follow the cluster's finalized transaction.version
            self._features_changed(await self._store.watch_finalized_features(self._features_changed))
        self.controller_client = ControllerClient(
            self.broker_id, self.metadata, self._to_local_controller, self.config["request.timeout.ms"] / 1000
        )
        self.replicas.controller = self.controller_client
        self.controller = Controller(self.broker_id, self.config, self._store, self._deliver_locally)
        await self._register()
        if self.in_cluster:
            # requests wait after the process stood still until ZooKeeper has said whether
            # the session lives (broker/server/stall.py)
            session_s = self.config["zookeeper.session.timeout.ms"] / 1000
            self.server.stall = StallGuard(asyncio.get_running_loop(), session_s / 3, self._store.sync, session_s)
        self.server.serve()
        self.replicas.start()
        await self.controller.startup()
        if not await self.metadata.wait_for(lambda: self.metadata.initialized, METADATA_WAIT_S):
            log.warning(
                "broker %d: no word from a controller after %.0f s; serving what it knows",
                self.broker_id,
                METADATA_WAIT_S,
            )
        await self.coordinator.startup()
        await self.txn_coordinator.startup()
        await self.share_state_coordinator.startup()
        self.logs.start_background()
        if self.tier is not None:
            await self.tier.start()
        # everything loaded so far (modules, generated codecs, configs) lives as long as
        # the process: keep it out of the cyclic GC's scans, which otherwise pause the
        # event loop for milliseconds (tail latency)
        gc.freeze()
        self.started_at = time.time()
        log.info(
            "broker %d listening on %s (cluster %s%s), started in %.3f s",
            self.broker_id,
            ", ".join(f"{a.name}://{a.host or '*'}:{a.port}" for a in self.server.acceptors),
            self.cluster_id,
            f", ZooKeeper {self.config['zookeeper.connect']}" if self.in_cluster else "",
            time.monotonic() - t0,
        )
        if self.metrics is not None:
            host = self.metrics.host or "127.0.0.1"
            scheme = self.metrics.scheme
            log.info(
                "broker %d: metrics at %s://%s:%d/metrics, status page at %s://%s:%d/",
                self.broker_id,
                scheme,
                host,
                self.metrics.port,
                scheme,
                host,
                self.metrics.port,
            )

    def _make_store(self) -> MetadataStore:
        connect = self.config["zookeeper.connect"]
        if connect:
            from broker.cluster.store.zkclient import KafkaZkClient

            return KafkaZkClient(
                connect,
                session_timeout_ms=self.config["zookeeper.session.timeout.ms"],
                connection_timeout_ms=self.config["zookeeper.connection.timeout.ms"],
            )
        os.makedirs(self.config.log_dirs[0], mode=self.config.log_dirs_mode, exist_ok=True)
        return FileMetadataStore(self.config.log_dirs[0])

    async def _load_topics(self) -> dict[str, uuid.UUID]:
        """Every topic's configs (into the cache) and id, from the store."""
        ids = {}
        for name in await self.store.get_topic_names():
            self.metadata.preset_topic_configs(name, await self.store.get_topic_configs(name))
            try:
                topic_id, _assignment, _version = await self.store.get_topic(name)
            except NoSuchTopic:
                continue
            if topic_id is not None:
                ids[name] = topic_id
        return ids

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(
            self.broker_id,
            self.advertised_endpoints(),
            self.config["broker.rack"],
            features={TRANSACTION_VERSION: (0, transaction_version(self.config))},
            timestamp=int(time.time() * 1000),
        )

    async def _register(self) -> None:
        own = self._registration()
        try:
            # a registration left by a dead broker (kill -9) is waited out, a live one's refused
            self.broker_epoch = await self.store.register_broker(own, lambda held: holder_gone(own, held))
        except BrokerIdInUse as exc:
            self.server.stop_listening()
            self.logs.shutdown()
            who = "a running broker" if exc.live else "a session that did not expire"
            raise BrokerStartupError(
                f"broker.id {self.broker_id} is already registered by {who} ({exc}); refusing to start"
            ) from None
        self.replicas.broker_epoch = self.broker_epoch

    def _session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            log.warning(
                "broker %d: the ZooKeeper session expired: this broker is gone from the cluster until "
                "a new session registers it again",
                self.broker_id,
            )
            self.replicas.resign_leadership("the ZooKeeper session expired")
        elif event is SessionEvent.NEW_SESSION:
            log.info("broker %d: new ZooKeeper session: registering again", self.broker_id)
            asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        try:
            await self._register()
        except Exception:
            log.exception("broker %d: registering again failed", self.broker_id)

    # ------------------------------------------------------------------ wiring

    def _log_dir_failed(self, log_dir: str) -> None:
        """A log dir went offline (its partitions already are): the controller hears of it
        through the store, as Kafka's LogDirFailureHandler propagates the event. With no
        log dir left the broker stops (Kafka halts it)."""
        if not self.logs.online_dirs:
            log.error("broker %d: every log dir (%s) is offline; stopping", self.broker_id, ", ".join(self.logs.dirs))
            self.stop()
            return
        task = asyncio.get_running_loop().create_task(self._notify_log_dir_failure(log_dir))
        self._log_dir_tasks.add(task)
        task.add_done_callback(self._log_dir_tasks.discard)

    async def _notify_log_dir_failure(self, log_dir: str) -> None:
        delay = 0.5
        while True:
            try:
                await self.store.create_log_dir_event_notification(self.broker_id)
                log.info("broker %d: the controller is told that log dir %s failed", self.broker_id, log_dir)
                return
            except Exception as exc:
                log.warning(
                    "broker %d: cannot tell the controller that log dir %s failed (%s); trying again in %.1f s",
                    self.broker_id,
                    log_dir,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _deliver_locally(self, request: Message) -> Message:
        """The controller's requests to this broker, without a socket."""
        from broker.server.handlers import CONTROL_APIS

        assert request.API_KEY is not None, request
        return await CONTROL_APIS[request.API_KEY].apply(self, request)

    async def _to_local_controller(self, request: Message) -> Message:
        """This broker's requests to its own controller, without a socket."""
        from broker.server.handlers import CONTROL_APIS

        assert request.API_KEY is not None, request
        return await CONTROL_APIS[request.API_KEY].apply(self, request)

    async def check_control_request(
        self, api: str, controller_id: int, controller_epoch: int, broker_epoch: int
    ) -> int:
        """LeaderAndIsr, UpdateMetadata and StopReplica arriving over the network must come
        from the controller ZooKeeper names, at the epoch it names, for this broker's own
        registration (its broker epoch). Kafka takes any controller epoch at least the
        newest seen and any broker epoch not older than its own, so that one request with
        epoch 2**31 - 1 from any client would have the broker ignore its real controller
        from then on; here a claim newer than what is known is checked against ZooKeeper
        (one read, once per controller change) and refused unless it holds. A broker
        without ZooKeeper has no controller but itself, which never uses the network:
        those requests are refused outright. NONE, or the error code to answer.

        Each check against ZooKeeper syncs first: the ZooKeeper server this broker is
        connected to may not yet have seen the new controller's election (or this broker's
        registration), and a refusal for that would be wrong; the controller also sends
        refused requests again (channel_manager.py)."""
        if not self.in_cluster:
            self._control_refused(
                logging.WARNING,
                "refused a %s from the network: this broker runs without ZooKeeper and its only controller is itself",
                api,
            )
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        if controller_epoch < self.replicas.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if (controller_id, controller_epoch) != self._verified_controller:
            await self._sync_store()
            zk_id = await self.store.get_controller_id()
            zk_epoch = await self.store.get_controller_epoch()
            if zk_epoch is not None and controller_epoch < zk_epoch[0]:
                return ErrorCode.STALE_CONTROLLER_EPOCH
            if zk_id != controller_id or zk_epoch is None or zk_epoch[0] != controller_epoch:
                self._control_refused(
                    logging.WARNING,
                    "refused a %s claiming controller %d epoch %d: ZooKeeper names controller %s epoch %s",
                    api,
                    controller_id,
                    controller_epoch,
                    zk_id,
                    None if zk_epoch is None else zk_epoch[0],
                )
                return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            self._verified_controller = (controller_id, controller_epoch)
        if broker_epoch != self.broker_epoch:
            if 0 <= broker_epoch < self.broker_epoch:
                return ErrorCode.STALE_BROKER_EPOCH
            # the controller may see this broker's (re)registration before the broker itself
            # hears that its create succeeded: ZooKeeper has the last word
            await self._sync_store()
            mine = (await self.store.get_brokers_and_epochs()).get(self.broker_id)
            if mine is None or mine[1] != broker_epoch:
                self._control_refused(
                    logging.WARNING,
                    "refused a %s for broker epoch %d: this broker's is %d",
                    api,
                    broker_epoch,
                    self.broker_epoch if mine is None else mine[1],
                )
                return ErrorCode.STALE_BROKER_EPOCH
        return ErrorCode.NONE

    async def _sync_store(self) -> None:
        """Reads sent after this see every write ZooKeeper had committed (ZooKeeper's sync)."""
        await self.store.sync()

    def _config_changed(self, paths: list[str]) -> None:
        topics = {p.split("/", 1)[1] for p in paths if p.startswith("topics/")}
        if topics:
            asyncio.get_running_loop().create_task(self._reload_configs(topics))
        users = {desanitize(p.split("/", 1)[1]) for p in paths if p.startswith("users/") and p.count("/") == 1}
        if users:
            asyncio.get_running_loop().create_task(self._reload_users(users))
        brokers = {p.split("/", 1)[1] for p in paths if p.startswith("brokers/")}
        if brokers & {DEFAULT_ENTITY, str(self.broker_id)}:
            # this broker's own entity: its key store files are read again even when the
            # config did not change (Kafka's reloadUpdatedFilesWithoutConfigChange)
            asyncio.get_running_loop().create_task(
                self._reload_broker_configs(reload_tls=str(self.broker_id) in brokers)
            )
        groups = {desanitize(p.split("/", 1)[1]) for p in paths if p.startswith("groups/") and p.count("/") == 1}
        for group in groups:
            asyncio.get_running_loop().create_task(self._reload_group_config(group))
        quota_paths = {p for p in paths if parse_entity_path(p) is not None}
        if quota_paths:
            asyncio.get_running_loop().create_task(self._reload_quotas(quota_paths))

    def _share_group_settings(self, group_id: str) -> tuple[int, int]:
        """A share group's (session timeout, heartbeat interval): its group configs, else the broker's."""
        v = share_group_values(self.group_configs, group_id)
        return v.session_timeout_ms, v.heartbeat_interval_ms

    async def _reload_group_config(self, group: str) -> None:
        try:
            await self.group_configs.reload(group)
        except Exception:
            log.exception("broker %d: cannot read the configs of group %s", self.broker_id, group)

    async def _reload_broker_configs(self, startup: bool = False, reload_tls: bool = False) -> None:
        """Reads this broker's dynamic configs and the cluster default from the store and
        applies what changed without a restart (Kafka's DynamicBrokerConfig)."""
        async with self._broker_configs_lock:  # one read-and-apply at a time, in order
            await self._reload_broker_configs_locked(startup, reload_tls)

    async def _reload_broker_configs_locked(self, startup: bool, reload_tls: bool) -> None:
        try:
            default = await self.store.get_broker_config(DEFAULT_ENTITY)
            mine = await self.store.get_broker_config(str(self.broker_id))
        except Exception:
            if startup:
                raise
            log.exception("broker %d: cannot read the dynamic broker configs", self.broker_id)
            return
        before = {**self.config.dynamic_default, **self.config.dynamic_broker}
        changed = self.config.apply_dynamic(
            parse_dynamic_lenient(default, False, "the cluster default"),
            parse_dynamic_lenient(mine, True, f"broker {self.broker_id}"),
        )
        for key, value in {**self.config.dynamic_default, **self.config.dynamic_broker}.items():
            if key in IGNORED_KAFKA_KEYS and before.get(key) != value:
                log.warning(
                    "broker %d: dynamic config %s=%s has no effect: %s",
                    self.broker_id,
                    key,
                    value,
                    IGNORED_KAFKA_KEYS[key],
                )
        self._apply_replication_rates()
        if changed:
            log.info(
                "broker %d: dynamic configs applied: %s",
                self.broker_id,
                ", ".join(
                    f"{k}={'[hidden]' if k.startswith(LISTENER_PREFIX) else self._shown(k)}" for k in sorted(changed)
                ),
            )
        if startup:
            if changed & {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}:
                try:
                    self.server.reconfigure_connection_limits()
                except OSError as exc:
                    raise BrokerStartupError(f"dynamic config max.connections.per.ip.overrides: {exc}") from None
            if any(k.startswith(LISTENER_PREFIX) for k in changed):
                try:
                    self.server.set_securities(listener_securities(self.config, self.credentials.get))
                except TlsConfigError as exc:
                    raise BrokerStartupError(f"dynamic listener config: {exc}") from None
            return
        self.apply_config_changes(changed, reload_tls)

    def _apply_replication_rates(self) -> None:
        """leader/follower.replication.throttled.rate, this broker's or else the cluster
        default's, bound the replication throttles at once."""
        leader, follower = throttled_rates(self.config.dynamic_broker, self.config.dynamic_default)
        if self.replicas.quotas.set_rates(leader, follower):
            log.info(
                "broker %d: replication throttles now %s B/s (leader), %s B/s (follower)",
                self.broker_id,
                "unbounded" if leader is None else f"{leader:.0f}",
                "unbounded" if follower is None else f"{follower:.0f}",
            )

    def _shown(self, key: str) -> object:
        try:
            return self.config[key]
        except KeyError:
            return "?"

    def apply_config_changes(self, changed: set[str], reload_tls: bool = False) -> None:
        """What a change of the effective broker config does at once: topics without an
        override follow new log defaults, connection limits move, listeners take a new key
        store for their new connections."""
        if any(not k.startswith(LISTENER_PREFIX) for k in changed):
            self.metadata.broker_defaults_changed()
            for topic in {tp.topic for tp in self.logs.logs}:
                self.logs.update_config(topic)
        if changed & {"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}:
            try:
                self.server.reconfigure_connection_limits()
            except OSError as exc:
                log.error("broker %d: max.connections.per.ip.overrides not applied: %s", self.broker_id, exc)
        if reload_tls or any(k.startswith(LISTENER_PREFIX) for k in changed):
            try:
                self.server.set_securities(listener_securities(self.config, self.credentials.get))
                # the inter-broker listener's trust store is also what this broker trusts in others
                set_client_security(inter_broker_security(self.config))
            except TlsConfigError as exc:
                log.error(
                    "broker %d: listener key stores not reloaded (the old ones serve on): %s", self.broker_id, exc
                )

    async def _reload_quotas(self, paths: set[str]) -> None:
        for path in paths:
            try:
                self.quotas.update(path, await self.store.get_entity_config(path))
            except Exception:
                log.exception("cannot read the quotas of %s", path)

    async def get_entity_config(self, path: str) -> dict[str, str]:
        return await self.store.get_entity_config(path)

    async def set_entity_config(self, path: str, configs: Mapping[str, str]) -> None:
        """Writes a quota entity's config (users/<u>, clients/<c>, users/<u>/clients/<c>)
        to the store (every broker follows its notification), and this broker's quotas at once."""
        await self.store.set_entity_config(path, configs)
        self.quotas.update(path, configs)

    async def get_user_config(self, user: str) -> dict[str, str]:
        return await self.store.get_user_config(user)

    async def set_user_config(self, user: str, configs: Mapping[str, str]) -> None:
        """Writes a user's credentials to the store (every broker's cache follows its
        notification), and this broker's cache at once."""
        await self.store.set_user_config(user, configs)
        self.credentials.update(user, configs)

    def _acls_changed(self, resources: list[Resource]) -> None:
        asyncio.get_running_loop().create_task(self._reload_acls(set(resources)))

    async def _reload_acls(self, resources: set[Resource]) -> None:
        assert self.authorizer is not None
        for resource in resources:
            try:
                self.authorizer.set_acls(resource, await self.store.get_resource_acls(resource))
            except Exception:
                log.exception("cannot read the ACLs of %s", resource)

    def _share_settings(self, group_id: str) -> ShareSettings:
        """A share group's delivery settings: its group configs over group.share.*."""
        v = share_group_values(self.group_configs, group_id)
        return ShareSettings(
            v.record_lock_duration_ms,
            v.delivery_count_limit,
            v.partition_max_record_locks,
            v.auto_offset_reset,
            v.isolation_level == "read_committed",
        )

    async def update_acls(
        self, changes: Mapping[Resource, Callable[[set[AclBinding]], set[AclBinding]]]
    ) -> dict[Resource, set[AclBinding]]:
        """Changes resource patterns' ACLs in the store (every broker's authorizer follows
        the notifications) and in this broker's authorizer at once."""
        assert self.authorizer is not None
        new = await self.store.update_acls(changes)
        for resource, acls in new.items():
            self.authorizer.set_acls(resource, acls)
        return new

    async def _reload_users(self, users: set[str]) -> None:
        for user in users:
            try:
                self.credentials.update(user, await self.store.get_user_config(user))
            except Exception:
                log.exception("cannot read the credentials of user %s", user)

    async def _reload_configs(self, topics: set[str]) -> None:
        for topic in topics:
            try:
                configs = await self.store.get_topic_configs(topic)
            except Exception:
                log.exception("cannot read the configs of %s", topic)
                continue
            self.metadata.set_topic_configs(topic, configs)
            self.logs.update_config(topic)
            log.info("topic %s: configs now %s", topic, configs)
        self.metadata.changed()

    async def ensure_topic_configs(self, topics: Iterable[str]) -> None:
        """Reads the configs of topics this broker has not seen yet (before their logs open)."""
        for topic in set(topics):
            if not self.metadata.has_topic_configs(topic):
                self.metadata.preset_topic_configs(topic, await self.store.get_topic_configs(topic))

    async def _create_txn_topic(self, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        await self.admin.create_topic(TXN_TOPIC, partitions, replication_factor, configs, wait=False)

    async def _create_share_state_topic(
        self, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        await self.admin.create_topic(SHARE_STATE_TOPIC, partitions, replication_factor, configs, wait=False)

    def _topic_partitions(self, topic_id: uuid.UUID) -> int | None:
        """The partition count of the topic with this id; None when there is none."""
        name = self.metadata.topic_name(topic_id)
        info = None if name is None else self.metadata.topic(name)
        return None if info is None else len(info.partitions)

    async def _create_offsets_topic(self, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        await self.admin.create_topic(OFFSETS_TOPIC, partitions, replication_factor, configs, wait=False)

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        if self._stopped is not None:
            self._stopped.set()

    async def wait_stopped(self) -> None:
        assert self._stopped is not None, "broker not started"
        await self._stopped.wait()

    async def controlled_shutdown(self) -> bool:
        """Asks the controller to move every leadership away (Kafka's controlled shutdown,
        controlled.shutdown.max.retries tries). True when nothing is left led here."""
        if not self.in_cluster or not self.config["controlled.shutdown.enable"] or self.controller_client is None:
            return True
        others = [b for b in self.metadata.brokers() if b != self.broker_id]
        if not others:
            return True
        req = ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch)
        backoff = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(1, self.config["controlled.shutdown.max.retries"] + 1):
            try:
                resp = await self.controller_client.request(req, timeout=self.config["request.timeout.ms"] / 1000)
            except Exception as exc:
                log.warning("broker %d: controlled shutdown attempt %d failed: %s", self.broker_id, attempt, exc)
                await asyncio.sleep(backoff)
                continue
            if resp.error_code == ErrorCode.NONE and not resp.remaining_partitions:
                # wait (bounded) for the LeaderAndIsr that makes this broker a follower
                if not await self.metadata.wait_for(
                    lambda: (
                        self.replicas.leader_count() == 0
                        or all(len(p.state.replicas) < 2 for p in self.replicas.partitions.values() if p.is_leader)
                    ),
                    CONTROLLED_SHUTDOWN_WAIT_S,
                ):
                    log.warning(
                        "broker %d: the controller moved every leadership, but %d partitions were still "
                        "led here after %.0f s; stopping anyway",
                        self.broker_id,
                        self.replicas.leader_count(),
                        CONTROLLED_SHUTDOWN_WAIT_S,
                    )
                log.info("broker %d: controlled shutdown succeeded", self.broker_id)
                return True
            log.info(
                "broker %d: controlled shutdown attempt %d: %s, %d partitions still led here",
                self.broker_id,
                attempt,
                ErrorCode(resp.error_code).name,
                len(resp.remaining_partitions),
            )
            await asyncio.sleep(backoff)
        log.warning("broker %d: controlled shutdown did not complete; stopping anyway", self.broker_id)
        return False

    async def shutdown(self) -> None:
        """Clean shutdown: controlled shutdown, no new connections, close the open ones,
        flush and checkpoint every log, leave the clean-shutdown marker, end the session."""
        await self.controlled_shutdown()
        if self.registry is not None:
            await self._step("closing the schema registry", self.registry.close())
        self.server.stop_listening()
        await self._step("closing connections", self.server.close_connections())
        await self._step("stopping the fetchers", self.replicas.shutdown())
        if self.controller is not None:
            await self._step("stopping the controller", self.controller.shutdown())
        if self.controller_client is not None:
            await self._step("closing the controller channel", self.controller_client.close())
        await self._step("stopping the KIP-848 group timers", self.consumer_coordinator.shutdown())
        await self._step("stopping the share partitions' timers", self.share_partitions.shutdown())
        await self._step("stopping the share group timers", self.share_coordinator.shutdown())
        await self._step("stopping the group coordinator", self.coordinator.shutdown())
        await self._step("stopping the transaction coordinator", self.txn_coordinator.shutdown())
        await self._step("closing the marker channels", self.marker_channels.close())
        await self._step("stopping the share coordinator", self.share_state_coordinator.shutdown())
        await self._step("closing the share persister's channels", self.share_persister.close())
        if self.tier is not None:
            await self._step("stopping tiered storage", self.tier.close())
        await self._step("stopping the log cleaner and timers", self.logs.stop_background())
        self.logs.shutdown()
        if self.metrics is not None:
            await self._step("closing the metrics listener", self.metrics.close())
        if self._store is not None:
            await self._step("closing the metadata store", self._store.close())
        log.info("broker %d stopped cleanly", self.broker_id)

    async def _step(self, what: str, coro: Coroutine[Any, Any, object], timeout: float = SHUTDOWN_STEP_S) -> None:
        """One step of the shutdown, bounded: a step that hangs is logged with where it
        waits and left behind, cancelled but not awaited (asyncio.wait_for would wait for
        the cancellation to finish, forever if something under it does not give way); the
        logs are still flushed and closed cleanly."""
        log.debug("broker %d: %s", self.broker_id, what)
        task = asyncio.ensure_future(coro)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            log.error(
                "broker %d: %s did not finish within %.0f s; going on (it waits at %s)",
                self.broker_id,
                what,
                timeout,
                _where(task),
            )
            task.cancel()
            return
        exc = task.exception()
        if exc is not None:
            log.error("broker %d: %s failed", self.broker_id, what, exc_info=exc)


def _where(task: asyncio.Task[Any]) -> str:
    """The innermost frame a waiting task is suspended at, as file:line (function)."""
    frames = task.get_stack()
    if not frames:
        return "an unknown place"
    f = frames[-1]
    return f"{f.f_code.co_filename}:{f.f_lineno} ({f.f_code.co_name})"


class _LazyProducerIds:
    """The broker's ProducerIdManager, which exists once the broker started."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def generate(self) -> int:
        return await self.broker.producer_ids.generate()


async def run_broker(config: BrokerConfig, ready: Callable[[Broker], object] | None = None) -> None:
    """Starts a broker, serves until SIGINT/SIGTERM (or broker.stop()), shuts down cleanly."""
    import signal

    broker = Broker(config)
    try:
        await broker.start()
    except BaseException:
        if broker._store is not None:
            try:
                await broker._store.close()
            except Exception:
                pass
        raise
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
