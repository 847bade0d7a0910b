"""The embedded metadata store: one JSON file in the first log dir, for a broker that
runs alone (no ZooKeeper). Every change is written atomically before it is visible.

    <log.dir>/__kbroker_metadata.json
    {"version": 1, "cluster_id": "...", "producer_id_next": 1000,
     "topics": {"clicks": {"id": "<uuid>", "internal": false, "configs": {...},
                           "partitions": {"0": {"replicas": [0], "leader": 0, ...}}}}}
"""
from __future__ import annotations

import json
import os
import threading
import uuid

from broker.cluster.metadata import (BrokerInfo, PartitionState, TopicExistsError, TopicInfo,
                                     UnknownTopicError)
from broker.log.checkpoints import write_atomically

FILE_NAME = "__kbroker_metadata.json"
PRODUCER_ID_BLOCK = 1000


class FileMetadataStore:
    def __init__(self, directory: str, broker: BrokerInfo):
        self.path = os.path.join(directory, FILE_NAME)
        self._broker = broker
        self._lock = threading.Lock()
        self._topics: dict[str, TopicInfo] = {}
        self._pid_next = 0
        self._pid_limit = 0          # ids below this are reserved on disk
        self._load()

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, encoding="utf-8") as f:
            data = json.load(f)
        for name, t in data.get("topics", {}).items():
            parts = {int(p): PartitionState.from_json(int(p), s) for p, s in t["partitions"].items()}
            self._topics[name] = TopicInfo(name, uuid.UUID(t["id"]), parts, dict(t.get("configs", {})),
                                           bool(t.get("internal", False)))
        # ids handed out before a crash are never reused: start past the reserved block
        self._pid_next = self._pid_limit = int(data.get("producer_id_next", 0))

    def _save(self) -> None:
        data = {
            "version": 1,
            "producer_id_next": self._pid_limit,
            "topics": {
                name: {"id": str(t.topic_id), "internal": t.internal, "configs": t.configs,
                       "partitions": {str(p): s.to_json() for p, s in sorted(t.partitions.items())}}
                for name, t in sorted(self._topics.items())
            },
        }
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")

    def set_broker(self, broker: BrokerInfo) -> None:
        """This broker's address (known once the server bound its port)."""
        self._broker = broker

    # -- MetadataStore
    def brokers(self) -> dict[int, BrokerInfo]:
        return {self._broker.broker_id: self._broker}

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    def create_topic(self, name, assignment, configs, internal=False) -> TopicInfo:
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(name)
            parts = {p: PartitionState(p, list(r), r[0], 0, list(r)) for p, r in assignment.items()}
            info = TopicInfo(name, uuid.uuid4(), parts, dict(configs), internal)
            self._topics[name] = info
            try:
                self._save()
            except BaseException:
                del self._topics[name]
                raise
            return info

    def delete_topic(self, name) -> None:
        with self._lock:
            if name not in self._topics:
                raise UnknownTopicError(name)
            info = self._topics.pop(name)
            try:
                self._save()
            except BaseException:
                self._topics[name] = info
                raise

    def add_partitions(self, name, assignment) -> TopicInfo:
        with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(name)
            for p, r in assignment.items():
                info.partitions[p] = PartitionState(p, list(r), r[0], 0, list(r))
            self._save()
            return info

    def set_topic_configs(self, name, configs) -> None:
        with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(name)
            old = info.configs
            info.configs = dict(configs)
            try:
                self._save()
            except BaseException:
                info.configs = old
                raise

    def update_partition_state(self, name, state) -> None:
        with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise UnknownTopicError(name)
            info.partitions[state.partition] = state
            self._save()

    def next_producer_id(self) -> int:
        with self._lock:
            if self._pid_next >= self._pid_limit:
                self._pid_limit = self._pid_next + PRODUCER_ID_BLOCK
                self._save()
            pid = self._pid_next
            self._pid_next += 1
            return pid
