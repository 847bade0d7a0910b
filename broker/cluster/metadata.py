"""Cluster metadata: value types (brokers, topics, partition states) and the interface of
the metadata store.

The store holds what Kafka keeps in ZooKeeper (Kafka's znode layout, znodes.py) and has
two implementations with the same coroutines: ZooKeeper itself (store/zkclient.py,
KafkaZkClient, for a cluster) and the embedded file store (store/file.py, for a broker
alone). Both raise the errors of store/errors.py (StoreError and its subclasses) for
the same situations. The controller and the topic administration write it; request
handlers never read it: they read the MetadataCache (cache.py), which the controller
keeps current.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from broker.metrics.stats import Histogram

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass
class BrokerInfo:
    """A live broker. host and port are its inter-broker listener's (what brokers use to
    reach it); `endpoints` has every listener's, by listener name (Metadata answers each
    client with the listener it came in on)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1  # the broker epoch (its registration's czxid), when known
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def endpoint(self, listener_name: str) -> tuple[str, int] | None:
        """(host, port) of the listener, None if the broker has none of that name."""
        if not self.endpoints:
            return self.host, self.port
        return self.endpoints.get(listener_name)


@dataclass
class PartitionState:
    """Kafka's /brokers/topics/<t>/partitions/<p>/state."""

    partition: int
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = 0
    partition_epoch: int = 0  # the state znode's version (Kafka's zkVersion)
    leader_recovery_state: int = 0
    offline_replicas: list[int] = field(default_factory=list)  # UpdateMetadata's: dead, or in a failed log dir


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    @property
    def replication_factor(self) -> int:
        return len(next(iter(self.partitions.values())).replicas) if self.partitions else 0


class SessionEvent(enum.Enum):
    """What a store's session listeners are told, on the loop: the ZooKeeper store's
    connection was lost, came back within the session, or the session expired and a new
    one began (the broker registers again). The embedded file store has no session."""

    DISCONNECTED = "disconnected"
    RECONNECTED = "reconnected"
    EXPIRED = "expired"
    NEW_SESSION = "new session"


#: the feature kbroker has (KIP-584): KIP-890 part 2's transactions at level 2. A broker
#: supports it up to its config of that name; the controller finalizes, in /feature, the
#: level every live broker supports (controller.py's _finalize_features)
TRANSACTION_VERSION = "transaction.version"
FEATURES = (TRANSACTION_VERSION,)


class MetadataStore(Protocol):
    """What the broker, the controller and the topic administration need of the store
    (KafkaZkClient's coroutines; the embedded file store offers the same). Watches call
    back on the event loop after each change."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def add_session_listener(self, callback: Callable[[SessionEvent], None]) -> None: ...
    @property
    def connected(self) -> bool:
        """Whether the store answers now (ZooKeeper: the session is connected; the file
        store always)."""
        ...

    @property
    def request_latency(self) -> Histogram | None:
        """The round trips of its requests (ZooKeeper's; None: the file store makes none)."""
        ...

    async def get_or_create_cluster_id(self, proposed: str) -> str: ...
    async def sync(self, path: str = "/") -> None: ...
    # brokers
    async def register_broker(
        self, registration: Any, holder_gone: Callable[[Any], Awaitable[str | None]] | None = None
    ) -> int: ...
    async def get_brokers_and_epochs(self) -> dict[int, tuple[Any, int]]: ...
    async def watch_broker_ids(self, callback: Callable[[frozenset[int]], None]) -> frozenset[int]: ...
    # controller
    async def try_elect_controller(self, broker_id: int) -> tuple[int, int] | None: ...
    async def get_controller_id(self) -> int | None: ...
    async def get_controller_epoch(self) -> tuple[int, int] | None: ...
    async def watch_controller(self, callback: Callable[[int | None], None]) -> int | None: ...
    # finalized features (/feature: name -> level, and their epoch), the controller's to write
    async def get_finalized_features(self) -> tuple[dict[str, int], int]: ...
    async def watch_finalized_features(
        self, callback: Callable[[tuple[dict[str, int], int]], None]
    ) -> tuple[dict[str, int], int]: ...
    async def set_finalized_features(self, levels: Mapping[str, int], controller_epoch_zk_version: int) -> int: ...
    # topics
    async def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, Iterable[int]], configs: Mapping[str, str]
    ) -> None: ...
    async def get_topic_names(self) -> frozenset[str]: ...
    async def watch_topics(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]: ...
    async def get_topic(self, name: str) -> tuple[uuid.UUID | None, dict[int, list[int]], int]: ...
    async def watch_topic(self, name: str, callback: Callable[[Any], None]) -> Any: ...
    def unwatch_topic(self, name: str) -> None: ...
    async def set_topic_assignment(
        self, name: str, topic_id: uuid.UUID | None, assignment: Mapping[int, Iterable[int]], expected_version: int
    ) -> int: ...
    # reassignments (KIP-455): the whole topic node, written by the controller only
    async def get_topic_assignment(self, name: str) -> tuple[Any, int]: ...
    async def set_topic_reassignment(
        self, name: str, assignment: Any, expected_version: int, controller_epoch_zk_version: int
    ) -> int: ...
    # partition states (the controller's, fenced by its epoch)
    async def get_partition_states(self, topic: str) -> dict[int, tuple[Any, int]]: ...
    async def create_partition_states(
        self, topic: str, states: Mapping[int, Any], controller_epoch_zk_version: int
    ) -> dict[int, Any]: ...
    async def update_partition_states(
        self, updates: Mapping[tuple[str, int], tuple[Any, int]], controller_epoch_zk_version: int
    ) -> dict[tuple[str, int], Any]: ...
    # configs
    async def get_topic_configs(self, name: str) -> dict[str, str]: ...
    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...
    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> None: ...
    # dynamic broker configs: '<id>' or '<default>' (/config/brokers/<entity>)
    async def get_broker_config(self, entity: str) -> dict[str, str]: ...
    async def set_broker_config(self, entity: str, configs: Mapping[str, str]) -> None: ...
    # group configs, by group id (/config/groups/<sanitized group id>)
    async def get_group_configs(self) -> dict[str, dict[str, str]]: ...
    async def get_group_config(self, group: str) -> dict[str, str]: ...
    async def set_group_config(self, group: str, configs: Mapping[str, str]) -> None: ...
    # deletion
    async def mark_topic_for_deletion(self, name: str) -> None: ...
    async def get_topics_marked_for_deletion(self) -> frozenset[str]: ...
    async def watch_topic_deletions(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]: ...
    async def delete_topic_znodes(self, name: str, controller_epoch_zk_version: int) -> None: ...
    # log dir failures (Kafka's /log_dir_event_notification)
    async def create_log_dir_event_notification(self, broker_id: int) -> None: ...
    async def get_log_dir_events(self) -> dict[str, int | None]: ...
    async def delete_log_dir_events(self, names: Iterable[str], controller_epoch_zk_version: int) -> None: ...
    async def watch_log_dir_events(self, callback: Callable[[list[str]], None]) -> None: ...
    # users (SCRAM credentials as Kafka stores them: mechanism -> "salt=...,iterations=N")
    async def get_user_configs(self) -> dict[str, dict[str, str]]: ...
    async def get_user_config(self, user: str) -> dict[str, str]: ...
    async def set_user_config(self, user: str, configs: Mapping[str, str]) -> None: ...
    # client quotas: the config maps of users/<u>, clients/<c> and users/<u>/clients/<c>
    # (names sanitized, <default> as is), by that entity path
    async def get_client_quota_configs(self) -> dict[str, dict[str, str]]: ...
    async def get_entity_config(self, path: str) -> dict[str, str]: ...
    async def set_entity_config(self, path: str, configs: Mapping[str, str]) -> None: ...
    # ACLs (Kafka's /kafka-acl layout; every broker's authorizer follows the notifications)
    async def get_acls(self) -> list[Any]: ...
    async def get_resource_acls(self, resource: Any) -> list[Any]: ...
    async def update_acls(self, changes: Mapping[Any, Callable[[set[Any]], set[Any]]]) -> dict[Any, set[Any]]: ...
    async def watch_acl_changes(self, callback: Callable[[list[Any]], None]) -> None: ...
    # producer ids
    async def allocate_producer_id_block(self, broker_id: int, size: int = 1000) -> tuple[int, int]: ...
