"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, topic configs and
Metadata's auto-creation (Kafka's ZkAdminManager / AdminZkClient).

Any broker takes these requests. Each is validated here and written to the metadata
store — a topic's assignment, a deletion marker, a config — and the controller, wherever
it runs, acts on what it finds there: it elects leaders, tells the replicas and updates
every broker's metadata cache. The answer waits (up to the request's timeout) until this
broker's cache shows the outcome, as Kafka's DelayedCreatePartitions and
DelayedDeleteTopics do; past it the client gets REQUEST_TIMED_OUT while the work goes on.

Errors that clients must see are raised as KafkaProtocolError(code, message).

All methods run on the event loop thread.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from broker.cluster.controller.assignment import assign_new_partitions, assign_replicas
from broker.cluster.metadata import INTERNAL_TOPICS, MetadataStore, TopicInfo
from broker.cluster.store.errors import BadVersion, NoSuchTopic, StoreUnavailable, TopicExists
from broker.config import (
    SCHEMA_VALIDATION_KEYS,
    BrokerConfig,
    ConfigError,
    check_remote_storage,
    validate_topic_configs,
)
from broker.log.manager import LogDirError, validate_topic_name
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.uuids import random_uuid

if TYPE_CHECKING:
    from broker.cluster.cache import MetadataCache

log = logging.getLogger(__name__)

AUTO_CREATE_WAIT_S = 5.0


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _store_unavailable_times_out(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """ZooKeeper unreachable (beyond its connection timeout) answers REQUEST_TIMED_OUT, a
    retriable error the client's admin retries, naming the store; never a closed
    connection (Kafka answers UNKNOWN_SERVER_ERROR for its ZooKeeperClientTimeoutException)."""

    @functools.wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await fn(*args, **kwargs)
        except StoreUnavailable as exc:
            raise KafkaProtocolError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None

    return wrapper


class TopicAdmin:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        metadata: MetadataCache,
        check_capacity: Callable[[int], None] = lambda n: None,
    ):
        self.config = config
        self.store = store
        self.metadata = metadata
        self.check_capacity = check_capacity  # LogDirError when n more logs do not fit here

    def _timeout(self, timeout_ms: int | None) -> float:
        if timeout_ms is None or timeout_ms <= 0:
            default_ms: int = self.config["request.timeout.ms"]
            return default_ms / 1000
        return timeout_ms / 1000

    def _brokers(self) -> dict[int, str | None]:
        return {b.broker_id: b.rack for b in self.metadata.brokers().values()}

    def _fits(self, assignment: dict[int, list[int]]) -> None:
        """The partitions this broker would host fit its open-file limit, or nothing is
        created (POLICY_VIOLATION): a topic is created whole or not at all."""
        here = sum(1 for replicas in assignment.values() if self.config.broker_id in replicas)
        try:
            self.check_capacity(here)
        except LogDirError as exc:
            raise KafkaProtocolError(ErrorCode.POLICY_VIOLATION, str(exc)) from None

    def _is_online(self, name: str, partitions: int) -> bool:
        info = self.metadata.topic(name)
        return (
            info is not None
            and len(info.partitions) >= partitions
            and all(s.leader >= 0 for s in info.partitions.values())
        )

    # ------------------------------------------------------------------ create

    def _validate_topic_configs(self, configs: dict[str, str], existing: dict[str, str] | None = None) -> None:
        """INVALID_CONFIG for a bad topic config, for remote storage configs Kafka refuses
        (check_remote_storage; `existing`: the topic's configs before an alteration), and
        for schema validation on a broker without a schema registry (it could check
        nothing: docs/schema-registry.md)."""
        try:
            parsed = validate_topic_configs(configs)
            check_remote_storage(
                self.config.log_config(parsed), existing, self.config.remote_log_storage_system_enabled
            )
        except ConfigError as exc:
            raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if not self.config["schema.registry.listener"]:
            for key in SCHEMA_VALIDATION_KEYS:
                if parsed.get(key):
                    raise KafkaProtocolError(
                        ErrorCode.INVALID_CONFIG,
                        f"{key}: this broker has no schema registry (schema.registry.listener) to validate against",
                    )

    def check_create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignments: dict[int, list[int]] | None = None,
    ) -> dict[int, list[int]]:
        """Validates a CreateTopics entry; returns the replica assignment."""
        problem = validate_topic_name(name)
        if problem:
            raise KafkaProtocolError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if self.metadata.topic(name) is not None:
            raise KafkaProtocolError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        self._validate_topic_configs(configs)
        if assignments:
            if num_partitions not in (-1, len(assignments)) or replication_factor != -1:
                raise KafkaProtocolError(
                    ErrorCode.INVALID_REQUEST, "both replica assignments and partition count/replication factor given"
                )
            known = set(self._brokers())
            for p, replicas in assignments.items():
                if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= known:
                    raise KafkaProtocolError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"invalid replicas {replicas} for partition {p}"
                    )
            if sorted(assignments) != list(range(len(assignments))):
                raise KafkaProtocolError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be 0..n-1")
            return assignments
        if num_partitions == -1:
            num_partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        return assign_replicas(self._brokers(), num_partitions, replication_factor)

    @_store_unavailable_times_out
    async def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        assignments: dict[int, list[int]] | None = None,
        timeout_ms: int | None = None,
        wait: bool = True,
    ) -> TopicInfo | None:
        """Writes the topic to the store; with `wait`, returns it once this broker's cache
        shows every partition with a leader (REQUEST_TIMED_OUT past the timeout)."""
        configs = dict(configs or {})
        assignment = self.check_create_topic(name, num_partitions, replication_factor, configs, assignments)
        self._fits(assignment)
        try:
            await self.store.create_topic(name, random_uuid(), assignment, configs)
        except TopicExists:
            raise KafkaProtocolError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        log.info(
            "created topic %s (%d partitions, replication factor %d)",
            name,
            len(assignment),
            len(next(iter(assignment.values()))),
        )
        if not wait:
            return None
        if not await self.metadata.wait_for(lambda: self._is_online(name, len(assignment)), self._timeout(timeout_ms)):
            raise KafkaProtocolError(
                ErrorCode.REQUEST_TIMED_OUT, f"Topic '{name}' was created, but its partitions have no leader yet."
            )
        return self.metadata.topic(name)

    async def auto_create_topic(self, name: str) -> TopicInfo | None:
        """Metadata auto-creation (auto.create.topics.enable), with the broker defaults.
        None when auto-creation is off or the topic is not ready yet (the client then
        gets LEADER_NOT_AVAILABLE and asks again, as with Kafka)."""
        if not self.config["auto.create.topics.enable"] or validate_topic_name(name):
            return None
        try:
            await self.create_topic(name, wait=False)
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        if await self.metadata.wait_for(lambda: self._is_online(name, 1), AUTO_CREATE_WAIT_S):
            return self.metadata.topic(name)
        return None

    # ------------------------------------------------------------------ delete

    @_store_unavailable_times_out
    async def delete_topic(self, name: str, timeout_ms: int | None = None) -> None:
        if not self.config["delete.topic.enable"]:
            raise KafkaProtocolError(ErrorCode.TOPIC_DELETION_DISABLED)
        if self.metadata.topic(name) is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            await self.store.mark_topic_for_deletion(name)
        except NoSuchTopic:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) from None
        log.info("topic %s marked for deletion", name)
        if not await self.metadata.wait_for(lambda: self.metadata.topic(name) is None, self._timeout(timeout_ms)):
            raise KafkaProtocolError(
                ErrorCode.REQUEST_TIMED_OUT, f"Topic '{name}' is marked for deletion, but not deleted yet."
            )

    # ------------------------------------------------------------------ partitions

    @_store_unavailable_times_out
    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        if self.metadata.topic(name) is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            topic, version = await self.store.get_topic_assignment(name)
        except NoSuchTopic:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) from None
        if topic.adding_replicas or topic.removing_replicas:
            # as Kafka: the topic node's write would race the controller's
            raise KafkaProtocolError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, f"A partition reassignment is in progress for the topic '{name}'."
            )
        topic_id, existing = topic.topic_id, {p: list(r) for p, r in topic.partitions.items()}
        current = len(existing)
        if count <= current:
            raise KafkaProtocolError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, {count} would not be an increase.",
            )
        if assignments:
            if len(assignments) != count - current:
                raise KafkaProtocolError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"{len(assignments)} assignments for {count - current} new partitions",
                )
            new = {current + i: list(r) for i, r in enumerate(assignments)}
            known = set(self._brokers())
            for p, replicas in new.items():
                if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= known:
                    raise KafkaProtocolError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"invalid replicas {replicas} for partition {p}"
                    )
        else:
            new = assign_new_partitions(existing, self._brokers(), count)
        self._fits(new)
        if validate_only:
            return
        full = {**{p: list(r) for p, r in existing.items()}, **new}
        try:
            await self.store.set_topic_assignment(name, topic_id, full, version)
        except BadVersion:
            raise KafkaProtocolError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, f"the assignment of '{name}' changed meanwhile; try again"
            ) from None
        if not await self.metadata.wait_for(lambda: self._is_online(name, count), self._timeout(timeout_ms)):
            raise KafkaProtocolError(ErrorCode.REQUEST_TIMED_OUT, f"The new partitions of '{name}' have no leader yet.")

    # ------------------------------------------------------------------ configs

    @_store_unavailable_times_out
    async def set_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        info = self.metadata.topic(name)
        if info is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self._validate_topic_configs(configs, dict(info.configs))
        if validate_only:
            return
        await self.store.set_topic_configs(name, configs)

        # every broker applies the change notification; this one does not wait for it
        def applied() -> bool:
            info = self.metadata.topic(name)
            return info is None or info.configs == configs

        await self.metadata.wait_for(applied, 5.0)


__all__ = ["INTERNAL_TOPICS", "TopicAdmin"]
