"""Cluster metadata: brokers, topics, partition assignments and states, topic configs.

The store is behind one small interface (MetadataStore) with two implementations:
the embedded file store (one broker, no other service) and ZooKeeper (Kafka's znode
layout). Everything else reads the in-memory `ClusterMetadata` snapshot the store keeps
current, and changes it only through the store.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionState:
    """Kafka's /brokers/topics/<t>/partitions/<p>/state."""

    partition: int
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    controller_epoch: int = 0

    def to_json(self) -> dict:
        return {"replicas": self.replicas, "leader": self.leader, "leader_epoch": self.leader_epoch,
                "isr": self.isr, "controller_epoch": self.controller_epoch}

    @classmethod
    def from_json(cls, partition: int, d: dict) -> "PartitionState":
        return cls(partition, list(d["replicas"]), int(d["leader"]), int(d.get("leader_epoch", 0)),
                   list(d.get("isr", d["replicas"])), int(d.get("controller_epoch", 0)))


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


class MetadataStore(Protocol):
    """What the broker needs from cluster metadata (the embedded store or ZooKeeper)."""

    def brokers(self) -> dict[int, BrokerInfo]: ...
    def topics(self) -> dict[str, TopicInfo]: ...
    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                     internal: bool = False) -> TopicInfo: ...
    def delete_topic(self, name: str) -> None: ...
    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicInfo: ...
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def update_partition_state(self, name: str, state: PartitionState) -> None: ...
    def next_producer_id(self) -> int: ...


class TopicExistsError(ValueError):
    pass


class UnknownTopicError(KeyError):
    pass
