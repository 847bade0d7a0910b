"""What request handlers see of the broker: the BrokerServices protocol (Kafka's
KafkaApis gets its collaborators one by one in the same spirit).

A handler reaches the broker only through `ctx.services`, never through the Broker
itself: the process's lifecycle (start, stop, registration, the store's session, the
listener) stays out of its reach, and a test can hand a handler any object with these
members. `Broker` (server/broker.py) is the one implementation; mypy checks that it is one
(`Server` takes a BrokerServices and is given the Broker).

    config            the broker's settings (server.properties)
    metadata          the MetadataCache: brokers, topics, partition states, topic configs
    replicas          the ReplicaManager: this broker's partitions, append_records (every
                      append as leader, and its waits), fetch_records (every read as
                      leader, and its long poll), the purgatory, the log manager
    coordinator       the group coordinator
    consumer_coordinator  KIP-848 consumer groups' heartbeats
    share_partitions  KIP-932 share groups' delivery: the share partitions led here and
                      the share sessions (broker/share/manager.py)
    share_coordinator     KIP-932 share groups' membership (heartbeats, listeners)
    group_configs     group configs (GROUP resources; broker/group/group_configs.py)
    txn_coordinator   the transaction coordinator (broker/txn/)
    share_state_coordinator  the share coordinator (Kafka's ShareCoordinator,
                      broker/share/coordinator.py: share-partition state on __share_group_state)
    share_persister   share-partition state wherever its share coordinator is
                      (broker/share/persister.py)
    admin             topic administration (create, delete, partitions, configs)
    producer_ids      producer ids (InitProducerId)
    transaction_version, features_epoch
                      the transaction.version served (the config's; in a cluster at most
                      what the controller finalized) and the finalized features' epoch

and, for the inter-broker APIs (LeaderAndIsr, UpdateMetadata, StopReplica,
AlterPartition, ControlledShutdown, ElectLeaders):

    broker_id, broker_epoch    this broker's id and its registration's epoch
    controller                 this broker's controller (active or not), None before start
    check_control_request      does a control request come from the controller ZooKeeper
                               names, for this broker's registration?
    ensure_topic_configs       read the configs of topics not seen yet before their logs open

and for security:

    credentials                SCRAM credentials (the store's /config/users, cached)
    get/set_user_config        a user's entry in the store (SCRAM credentials), written
                               with a change notification every broker follows
    quotas                     the client quotas (server/quotas.py: the store's
                               /config/users and /config/clients, cached; the sensors)
    get/set_entity_config      a quota entity's config in the store (users/<u>,
                               clients/<c>, users/<u>/clients/<c>), with a notification
    authorizer                 the ACL authorizer (None: none configured, all allowed);
                               handlers check through ctx.has_right
    update_acls                change resource patterns' ACLs in the store

Everything runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from broker.cluster.cache import MetadataCache
    from broker.cluster.controller.controller import Controller
    from broker.cluster.producer_ids import ProducerIdManager
    from broker.cluster.replica.manager import ReplicaManager
    from broker.cluster.store.acls import Resource
    from broker.config import BrokerConfig
    from broker.group.consumer_coordinator import ConsumerGroupCoordinator
    from broker.group.coordinator import GroupCoordinator
    from broker.group.group_configs import GroupConfigs
    from broker.group.share_coordinator import ShareGroupCoordinator
    from broker.security.acl import AclBinding, Authorizer
    from broker.security.credentials import CredentialCache
    from broker.server.admin import TopicAdmin
    from broker.server.quotas import ClientQuotas
    from broker.share.coordinator import ShareCoordinator
    from broker.share.manager import SharePartitionManager
    from broker.share.persister import Persister
    from broker.txn.coordinator import TransactionCoordinator


class BrokerServices(Protocol):
    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metadata(self) -> MetadataCache: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def coordinator(self) -> GroupCoordinator: ...

    @property
    def consumer_coordinator(self) -> ConsumerGroupCoordinator: ...

    @property
    def share_coordinator(self) -> ShareGroupCoordinator: ...

    @property
    def share_partitions(self) -> SharePartitionManager: ...

    @property
    def group_configs(self) -> GroupConfigs: ...

    @property
    def txn_coordinator(self) -> TransactionCoordinator: ...

    @property
    def share_state_coordinator(self) -> ShareCoordinator: ...

    @property
    def share_persister(self) -> Persister: ...

    @property
    def admin(self) -> TopicAdmin: ...

    @property
    def producer_ids(self) -> ProducerIdManager: ...

    @property
    def transaction_version(self) -> int: ...

    @property
    def features_epoch(self) -> int: ...

    # ------------------------------------------------------------------ the inter-broker APIs

    @property
    def broker_id(self) -> int: ...

    @property
    def broker_epoch(self) -> int: ...

    @property
    def controller(self) -> Controller | None: ...

    async def check_control_request(
        self, api: str, controller_id: int, controller_epoch: int, broker_epoch: int
    ) -> int: ...

    async def ensure_topic_configs(self, topics: Iterable[str]) -> None: ...

    # ------------------------------------------------------------------ security

    @property
    def credentials(self) -> CredentialCache: ...

    async def get_user_config(self, user: str) -> Mapping[str, str]: ...

    async def set_user_config(self, user: str, configs: Mapping[str, str]) -> None: ...

    @property
    def quotas(self) -> ClientQuotas: ...

    async def get_entity_config(self, path: str) -> Mapping[str, str]: ...

    async def set_entity_config(self, path: str, configs: Mapping[str, str]) -> None: ...

    @property
    def authorizer(self) -> Authorizer | None: ...

    async def update_acls(
        self, changes: Mapping[Resource, Callable[[set[AclBinding]], set[AclBinding]]]
    ) -> dict[Resource, set[AclBinding]]: ...
