"""The embedded metadata store: what ZooKeeper holds for a cluster, kept in one JSON file
in the first log dir, for a broker that runs alone (no ZooKeeper, nothing else to start).

It offers the same coroutines as KafkaZkClient (zkclient.py) — the controller, the
topic administration and the broker use either through one interface — with the same
model: a registry of live brokers (this one), a controller election this broker always
wins (each start bumps the controller epoch), topic assignments, partition states with
versions (written only if the version is still the expected one), topic configs with
change notifications, deletion markers and producer id blocks. Watches call back on the
event loop (call_soon), after the change, as ZooKeeper's do.

    <log.dir>/__kbroker_metadata.json
    {"version": 2, "cluster_id": "...", "controller_epoch": 3, "broker_epoch": 3,
     "producer_id_block_end": 999,
     "topics": {"clicks": {"id": "<uuid>", "configs": {...},
                           "partitions": {"0": [0]},
                           "states": {"0": {"leader": 0, "leader_epoch": 2, "isr": [0],
                                            "controller_epoch": 3, "version": 4,
                                            "leader_recovery_state": 0}}}},
     "deleting": [], "broker_configs": {"<default>": {"message.max.bytes": "1000"}},
     "users": {"<user>": {...}},
     "entities": {"clients/<c>": {"producer_byte_rate": "1048576"}, ...}}

Every change is written atomically (temp file + rename) before it is visible; the file
(and its temp file) is mode 0600 whatever the umask: it holds the SCRAM credentials. The
version 1 file of earlier releases (partition states holding the replicas) is read and
rewritten as version 2.

Errors are errors.py's, raised for the same situations as KafkaZkClient raises them
(TopicExists, NoSuchTopic, BadVersion, ControllerMoved), and MetadataFileError when the
file cannot be read; a file that cannot be written raises its OSError.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from broker.cluster.metadata import SessionEvent
from broker.cluster.store import acls as acl_store
from broker.cluster.store.errors import BadVersion, ControllerMoved, MetadataFileError, NoSuchTopic, TopicExists
from broker.cluster.store.znodes import (
    BrokerRegistration,
    ConfigEntityZNode,
    LeaderIsrState,
    TopicAssignment,
    desanitize,
    group_znode_name,
    sanitize,
)
from broker.log.checkpoints import write_atomically
from broker.security.acl import AclBinding, PatternType

FILE_NAME = "__kbroker_metadata.json"
#: the file holds every user's SCRAM salt and keys (enough to test passwords offline) and
#: the ACLs: readable by the broker's user alone, whatever the umask
FILE_MODE = 0o600

log = logging.getLogger(__name__)


class FileMetadataStore:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, FILE_NAME)
        self._cluster_id: str | None = None
        self._controller_epoch = 0
        self._broker_epoch = 0
        self._features: dict[str, int] = {}
        self._features_epoch = -1
        self._pid_block_end = -1
        self._topics: dict[str, dict[str, Any]] = {}
        self._deleting: set[str] = set()
        self._users: dict[str, dict[str, str]] = {}
        self._brokers_configs: dict[str, dict[str, str]] = {}  # '<id>' or '<default>' -> configs
        self._group_configs: dict[str, dict[str, str]] = {}  # group id -> its group configs
        #: quota entities other than users/<name> (those are in _users): clients/<c>,
        #: users/<u>/clients/<c>, users/<default>, by entity path
        self._entities: dict[str, dict[str, str]] = {}
        self._acls: dict[acl_store.Resource, set[AclBinding]] = {}
        self._broker: BrokerRegistration | None = None
        self._controller: int | None = None
        self._watchers: dict[str, list[Callable[..., None]]] = {}
        self._topic_watchers: dict[str, list[Callable[..., None]]] = {}
        self._log_dir_events: dict[str, int] = {}  # in memory: a broker alone, one process
        self._log_dir_seq = 0
        self._load()

    # ------------------------------------------------------------------ file

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                self._tighten(f.fileno())
                data = json.load(f)
            self._cluster_id = data.get("cluster_id")
            self._controller_epoch = int(data.get("controller_epoch", 0))
            self._broker_epoch = int(data.get("broker_epoch", 0))
            if "producer_id_block_end" in data:
                self._pid_block_end = int(data["producer_id_block_end"])
            else:  # version 1: the next id to hand out
                self._pid_block_end = int(data.get("producer_id_next", 0)) - 1
            for name, t in data.get("topics", {}).items():
                if "states" in t:
                    parts = {int(p): [int(r) for r in rs] for p, rs in t["partitions"].items()}
                    states = {int(p): dict(s) for p, s in t["states"].items()}
                else:  # version 1: {"0": {"replicas", "leader", "leader_epoch", "isr", ...}}
                    parts = {int(p): [int(r) for r in s["replicas"]] for p, s in t["partitions"].items()}
                    states = {
                        int(p): {
                            "leader": s["leader"],
                            "leader_epoch": s.get("leader_epoch", 0),
                            "isr": s.get("isr", s["replicas"]),
                            "controller_epoch": s.get("controller_epoch", 0),
                            "version": 0,
                            "leader_recovery_state": 0,
                        }
                        for p, s in t["partitions"].items()
                    }
                self._topics[name] = {
                    "id": t["id"],
                    "configs": dict(t.get("configs", {})),
                    "partitions": parts,
                    "states": states,
                    "version": int(t.get("version", 0)),
                    "adding": _replica_map(t.get("adding_replicas", {})),
                    "removing": _replica_map(t.get("removing_replicas", {})),
                }
            self._deleting = set(data.get("deleting", [])) & set(self._topics)
            self._users = {str(u): {str(k): str(v) for k, v in c.items()} for u, c in data.get("users", {}).items()}
            self._brokers_configs = {
                str(e): {str(k): str(v) for k, v in c.items()} for e, c in data.get("broker_configs", {}).items()
            }
            self._entities = {
                str(p): {str(k): str(v) for k, v in c.items()} for p, c in data.get("entities", {}).items()
            }
            self._group_configs = {
                str(g): {str(k): str(v) for k, v in c.items()} for g, c in data.get("group_configs", {}).items()
            }
            for r in data.get("acls", []):
                rtype = acl_store.type_from_name(r["resource_type"])
                if rtype is not None:
                    resource = (rtype, str(r["name"]), PatternType[r["pattern_type"]])
                    self._acls[resource] = set(acl_store.bindings(resource, r["acls"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MetadataFileError(f"cannot read the metadata file {self.path}: {exc}") from None

    def _tighten(self, fd: int) -> None:
        """A metadata file others may read (written by an earlier release, or chmod'ed) is
        made FILE_MODE at once, before the first save replaces it."""
        mode = os.fstat(fd).st_mode & 0o777
        if mode & ~FILE_MODE:
            try:
                os.fchmod(fd, FILE_MODE)
                log.warning(
                    "%s was mode %04o, readable by others (it holds the SCRAM credentials and ACLs); made it %04o",
                    self.path,
                    mode,
                    FILE_MODE,
                )
            except OSError as exc:
                log.warning(
                    "%s is mode %04o, readable by others (it holds the SCRAM credentials and ACLs), and "
                    "cannot be made %04o: %s",
                    self.path,
                    mode,
                    FILE_MODE,
                    exc.strerror or exc,
                )

    def _save(self) -> None:
        data: dict[str, Any] = {
            "version": 2,
            "cluster_id": self._cluster_id,
            "controller_epoch": self._controller_epoch,
            "broker_epoch": self._broker_epoch,
            "producer_id_block_end": self._pid_block_end,
            "topics": {name: _topic_json(t) for name, t in sorted(self._topics.items())},
            "deleting": sorted(self._deleting),
        }
        if self._brokers_configs:
            data["broker_configs"] = {e: dict(sorted(c.items())) for e, c in sorted(self._brokers_configs.items())}
        if self._group_configs:
            data["group_configs"] = {g: dict(sorted(c.items())) for g, c in sorted(self._group_configs.items())}
        if self._users:
            data["users"] = {u: dict(sorted(c.items())) for u, c in sorted(self._users.items())}
        if self._entities:
            data["entities"] = {p: dict(sorted(c.items())) for p, c in sorted(self._entities.items())}
        if self._acls:
            data["acls"] = [
                {
                    "resource_type": acl_store.type_name(t),
                    "name": n,
                    "pattern_type": p.name,
                    "acls": [acl_store.entry(b) for b in sorted(bs, key=str)],
                }
                for (t, n, p), bs in sorted(self._acls.items())
            ]
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n", mode=FILE_MODE)

    def _save_epochs(self) -> None:
        """The broker and controller epochs a start bumps. A broker alone needs them only
        to grow while it runs: when the disk is full they stay in memory (the next start
        counts from the last saved ones) and the broker still serves what it can."""
        try:
            self._save()
        except OSError as exc:
            log.warning("cannot save %s (%s): the new epochs are kept in memory", self.path, exc)

    def _notify(self, kind: str, *args: Any) -> None:
        loop = asyncio.get_running_loop()
        for cb in list(self._watchers.get(kind, ())):
            loop.call_soon(cb, *args)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        self._watchers.clear()
        self._topic_watchers.clear()

    def add_session_listener(self, callback: Callable[[SessionEvent], None]) -> None:
        """A file has no session to lose."""

    @property
    def connected(self) -> bool:
        """A file is always at hand."""
        return True

    @property
    def request_latency(self) -> None:
        """No round trips to time."""
        return None

    # ------------------------------------------------------------------ cluster id

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        if self._cluster_id is None:
            self._cluster_id = proposed
            self._save()
        return self._cluster_id

    # ------------------------------------------------------------------ brokers

    async def register_broker(
        self,
        registration: BrokerRegistration,
        holder_gone: Callable[[BrokerRegistration], Awaitable[str | None]] | None = None,
    ) -> int:
        """A broker alone: nothing else can hold its id (holder_gone is not needed)."""
        self._broker_epoch += 1
        self._save_epochs()
        self._broker = registration
        self._notify("brokers", frozenset([registration.broker_id]))
        return self._broker_epoch

    async def get_brokers(self) -> dict[int, BrokerRegistration]:
        return {} if self._broker is None else {self._broker.broker_id: self._broker}

    async def get_brokers_and_epochs(self) -> dict[int, tuple[BrokerRegistration, int]]:
        return {} if self._broker is None else {self._broker.broker_id: (self._broker, self._broker_epoch)}

    async def watch_broker_ids(self, callback: Callable[[frozenset[int]], None]) -> frozenset[int]:
        self._watchers.setdefault("brokers", []).append(callback)
        return frozenset(await self.get_brokers())

    # ------------------------------------------------------------------ controller

    async def try_elect_controller(self, broker_id: int) -> tuple[int, int] | None:
        if self._controller is not None and self._controller != broker_id:
            return None
        self._controller_epoch += 1
        self._save_epochs()
        self._controller = broker_id
        self._notify("controller", broker_id)
        return self._controller_epoch, self._controller_epoch

    async def sync(self, path: str = "/") -> None:
        """One process, one copy: always current."""

    async def get_controller_id(self) -> int | None:
        return self._controller

    async def watch_controller(self, callback: Callable[[int | None], None]) -> int | None:
        self._watchers.setdefault("controller", []).append(callback)
        return self._controller

    async def get_controller_epoch(self) -> tuple[int, int] | None:
        return (self._controller_epoch, self._controller_epoch) if self._controller_epoch else None

    # the finalized features live in memory: the controller (this broker) writes them at
    # each start from its own registration, so there is nothing to keep

    async def get_finalized_features(self) -> tuple[dict[str, int], int]:
        return dict(self._features), self._features_epoch

    async def watch_finalized_features(
        self, callback: Callable[[tuple[dict[str, int], int]], None]
    ) -> tuple[dict[str, int], int]:
        self._watchers.setdefault("features", []).append(callback)
        return dict(self._features), self._features_epoch

    async def set_finalized_features(self, levels: Mapping[str, int], controller_epoch_zk_version: int) -> int:
        self._fence(controller_epoch_zk_version)
        self._features = {name: level for name, level in levels.items() if level >= 1}
        self._features_epoch += 1
        self._notify("features", (dict(self._features), self._features_epoch))
        return self._features_epoch

    def _fence(self, controller_epoch_zk_version: int) -> None:
        if controller_epoch_zk_version != self._controller_epoch:
            raise ControllerMoved(
                f"controller epoch {controller_epoch_zk_version} is not the current {self._controller_epoch}"
            )

    # ------------------------------------------------------------------ topics

    async def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, Iterable[int]], configs: Mapping[str, str]
    ) -> None:
        if name in self._topics:
            raise TopicExists(f"topic {name!r} already exists")
        self._topics[name] = {
            "id": str(topic_id),
            "configs": dict(configs),
            "version": 0,
            "partitions": {int(p): [int(r) for r in rs] for p, rs in assignment.items()},
            "states": {},
            "adding": {},
            "removing": {},
        }
        try:
            self._save()
        except BaseException:
            del self._topics[name]
            raise
        self._notify("topics", frozenset(self._topics))

    async def get_topic_names(self) -> frozenset[str]:
        return frozenset(self._topics)

    async def watch_topics(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]:
        self._watchers.setdefault("topics", []).append(callback)
        return frozenset(self._topics)

    async def get_topic(self, name: str) -> tuple[uuid.UUID | None, dict[int, list[int]], int]:
        t = self._topics.get(name)
        if t is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        return uuid.UUID(t["id"]), {p: list(r) for p, r in sorted(t["partitions"].items())}, t["version"]

    async def watch_topic(
        self, name: str, callback: Callable[[Any], None]
    ) -> tuple[uuid.UUID | None, dict[int, list[int]], int] | None:
        self._topic_watchers.setdefault(name, []).append(callback)
        try:
            return await self.get_topic(name)
        except NoSuchTopic:
            return None

    def unwatch_topic(self, name: str) -> None:
        self._topic_watchers.pop(name, None)

    async def set_topic_assignment(
        self, name: str, topic_id: uuid.UUID | None, assignment: Mapping[int, Iterable[int]], expected_version: int
    ) -> int:
        t = self._topics.get(name)
        if t is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        if t["version"] != expected_version:
            raise BadVersion(f"topic {name!r} is at version {t['version']}, not {expected_version}")
        old = (t["partitions"], t["version"])
        t["partitions"] = {int(p): [int(r) for r in rs] for p, rs in assignment.items()}
        t["version"] += 1
        try:
            self._save()
        except BaseException:
            t["partitions"], t["version"] = old
            raise
        loop = asyncio.get_running_loop()
        value = await self.get_topic(name)
        for cb in list(self._topic_watchers.get(name, ())):
            loop.call_soon(cb, value)
        version: int = t["version"]
        return version

    async def get_topic_assignment(self, name: str) -> tuple[TopicAssignment, int]:
        t = self._topics.get(name)
        if t is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        return TopicAssignment(
            uuid.UUID(t["id"]),
            {p: tuple(r) for p, r in sorted(t["partitions"].items())},
            {p: tuple(r) for p, r in sorted(t["adding"].items())},
            {p: tuple(r) for p, r in sorted(t["removing"].items())},
        ), t["version"]

    async def set_topic_reassignment(
        self, name: str, assignment: TopicAssignment, expected_version: int, controller_epoch_zk_version: int
    ) -> int:
        self._fence(controller_epoch_zk_version)
        t = self._topics.get(name)
        if t is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        if t["version"] != expected_version:
            raise BadVersion(f"topic {name!r} is at version {t['version']}, not {expected_version}")
        old = {k: t[k] for k in ("partitions", "adding", "removing", "version")}
        t["partitions"] = {int(p): [int(r) for r in rs] for p, rs in assignment.partitions.items()}
        t["adding"] = {int(p): [int(r) for r in rs] for p, rs in assignment.adding_replicas.items() if rs}
        t["removing"] = {int(p): [int(r) for r in rs] for p, rs in assignment.removing_replicas.items() if rs}
        t["version"] += 1
        try:
            self._save()
        except BaseException:
            t.update(old)
            raise
        loop = asyncio.get_running_loop()
        value = await self.get_topic(name)
        for cb in list(self._topic_watchers.get(name, ())):
            loop.call_soon(cb, value)
        version: int = t["version"]
        return version

    # ------------------------------------------------------------------ partition states

    async def get_partition_states(self, topic: str) -> dict[int, tuple[LeaderIsrState, int]]:
        t = self._topics.get(topic)
        if t is None:
            return {}
        return {p: (_state(s), s["version"]) for p, s in sorted(t["states"].items())}

    async def create_partition_states(
        self, topic: str, states: Mapping[int, LeaderIsrState], controller_epoch_zk_version: int
    ) -> dict[int, int | BadVersion]:
        self._fence(controller_epoch_zk_version)
        t = self._topics.get(topic)
        if t is None:
            raise NoSuchTopic(f"topic {topic!r} does not exist")
        out: dict[int, int | BadVersion] = {}
        for p, s in states.items():
            if p in t["states"]:
                out[p] = BadVersion(f"the state of {topic}-{p} exists")
            else:
                t["states"][p] = _json(s, 0)
                out[p] = 0
        self._save()
        return out

    async def update_partition_states(
        self, updates: Mapping[tuple[str, int], tuple[LeaderIsrState, int]], controller_epoch_zk_version: int
    ) -> dict[tuple[str, int], int | BadVersion | NoSuchTopic]:
        self._fence(controller_epoch_zk_version)
        out: dict[tuple[str, int], int | BadVersion | NoSuchTopic] = {}
        for (topic, p), (s, expected) in updates.items():
            t = self._topics.get(topic)
            current = t["states"].get(p) if t is not None else None
            if t is None or current is None:
                out[(topic, p)] = NoSuchTopic(f"{topic}-{p} has no state")
            elif current["version"] != expected:
                out[(topic, p)] = BadVersion(f"{topic}-{p} is at version {current['version']}, not {expected}")
            else:
                t["states"][p] = _json(s, expected + 1)
                out[(topic, p)] = expected + 1
        self._save()
        return out

    # ------------------------------------------------------------------ configs

    async def get_topic_configs(self, name: str) -> dict[str, str]:
        t = self._topics.get(name)
        return dict(t["configs"]) if t is not None else {}

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        t = self._topics.get(name)
        if t is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        old = t["configs"]
        t["configs"] = dict(configs)
        try:
            self._save()
        except BaseException:
            t["configs"] = old
            raise
        self._notify("configs", [f"topics/{name}"])

    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> None:
        self._watchers.setdefault("configs", []).append(callback)

    def _set_entity(self, table: dict[str, dict[str, str]], key: str, configs: Mapping[str, str], path: str) -> None:
        """An entity's configs (an empty map removes it), saved before they count, put
        back if the save fails, then announced as `path` (Kafka's /config/changes)."""
        old = table.get(key)
        if configs:
            table[key] = dict(configs)
        else:
            table.pop(key, None)
        try:
            self._save()
        except BaseException:
            if old is None:
                table.pop(key, None)
            else:
                table[key] = old
            raise
        self._notify("configs", [path])

    async def get_broker_config(self, entity: str) -> dict[str, str]:
        return dict(self._brokers_configs.get(entity, {}))

    async def set_broker_config(self, entity: str, configs: Mapping[str, str]) -> None:
        self._set_entity(self._brokers_configs, entity, configs, f"brokers/{entity}")

    async def get_group_configs(self) -> dict[str, dict[str, str]]:
        return {g: dict(c) for g, c in self._group_configs.items()}

    async def get_group_config(self, group: str) -> dict[str, str]:
        return dict(self._group_configs.get(group, {}))

    async def set_group_config(self, group: str, configs: Mapping[str, str]) -> None:
        self._set_entity(self._group_configs, group, configs, f"groups/{group_znode_name(group)}")

    # ------------------------------------------------------------------ users

    async def get_user_configs(self) -> dict[str, dict[str, str]]:
        return {u: dict(c) for u, c in self._users.items()}

    async def get_user_config(self, user: str) -> dict[str, str]:
        return dict(self._users.get(user, {}))

    async def set_user_config(self, user: str, configs: Mapping[str, str]) -> None:
        self._set_entity(self._users, user, configs, f"users/{sanitize(user)}")

    # ------------------------------------------------------------------ client quotas

    async def get_client_quota_configs(self) -> dict[str, dict[str, str]]:
        out = {f"users/{sanitize(u)}": dict(c) for u, c in self._users.items()}
        out.update((p, dict(c)) for p, c in self._entities.items())
        return out

    @staticmethod
    def _user_of(path: str) -> str | None:
        """The user a users/<name> path names (kept with its credentials), else None."""
        ConfigEntityZNode.entity_path(path)  # checks the path
        parts = path.split("/")
        return desanitize(parts[1]) if len(parts) == 2 and parts[0] == "users" and parts[1] != "<default>" else None

    async def get_entity_config(self, path: str) -> dict[str, str]:
        user = self._user_of(path)
        return dict(self._users.get(user, {})) if user is not None else dict(self._entities.get(path, {}))

    async def set_entity_config(self, path: str, configs: Mapping[str, str]) -> None:
        user = self._user_of(path)
        table, key = (self._users, user) if user is not None else (self._entities, path)
        self._set_entity(table, key, configs, path)

    # ------------------------------------------------------------------ ACLs

    async def get_acls(self) -> list[AclBinding]:
        return [b for bs in self._acls.values() for b in bs]

    async def get_resource_acls(self, resource: acl_store.Resource) -> list[AclBinding]:
        return list(self._acls.get(resource, ()))

    async def update_acls(
        self, changes: Mapping[acl_store.Resource, Callable[[set[AclBinding]], set[AclBinding]]]
    ) -> dict[acl_store.Resource, set[AclBinding]]:
        """Every change at once: one write of the file."""
        old = dict(self._acls)
        out = {}
        for resource, change in changes.items():
            new = change(set(self._acls.get(resource, ())))
            if new:
                self._acls[resource] = new
            else:
                self._acls.pop(resource, None)
            out[resource] = new
        changed = [r for r in out if old.get(r, set()) != out[r]]
        if changed:
            try:
                self._save()
            except BaseException:
                self._acls = old
                raise
            self._notify("acls", changed)
        return out

    async def watch_acl_changes(self, callback: Callable[[list[acl_store.Resource]], None]) -> None:
        self._watchers.setdefault("acls", []).append(callback)

    # ------------------------------------------------------------------ log dir events
    # A broker alone tells its own controller through the same calls as in a cluster;
    # the events live in memory only (its controller reads everything again at a start)

    async def create_log_dir_event_notification(self, broker_id: int) -> None:
        name = f"log_dir_event_{self._log_dir_seq:010d}"
        self._log_dir_seq += 1
        self._log_dir_events[name] = broker_id
        self._notify("log_dir_events", sorted(self._log_dir_events))

    async def get_log_dir_events(self) -> dict[str, int | None]:
        return dict(sorted(self._log_dir_events.items()))

    async def delete_log_dir_events(self, names: Iterable[str], controller_epoch_zk_version: int) -> None:
        self._fence(controller_epoch_zk_version)
        for n in names:
            self._log_dir_events.pop(n, None)

    async def watch_log_dir_events(self, callback: Callable[[list[str]], None]) -> None:
        self._watchers.setdefault("log_dir_events", []).append(callback)

    # ------------------------------------------------------------------ deletion

    async def mark_topic_for_deletion(self, name: str) -> None:
        if name not in self._topics:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        if name not in self._deleting:
            self._deleting.add(name)
            self._save()
            self._notify("deletions", frozenset(self._deleting))

    async def get_topics_marked_for_deletion(self) -> frozenset[str]:
        return frozenset(self._deleting)

    async def watch_topic_deletions(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]:
        self._watchers.setdefault("deletions", []).append(callback)
        return frozenset(self._deleting)

    async def delete_topic_znodes(self, name: str, controller_epoch_zk_version: int) -> None:
        self._fence(controller_epoch_zk_version)
        if self._topics.pop(name, None) is None and name not in self._deleting:
            return
        self._deleting.discard(name)
        self._save()
        self._notify("topics", frozenset(self._topics))
        self._notify("deletions", frozenset(self._deleting))

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_id_block(self, broker_id: int, size: int = 1000) -> tuple[int, int]:
        start = self._pid_block_end + 1
        self._pid_block_end = start + size - 1
        self._save()
        return start, self._pid_block_end


def _json(s: LeaderIsrState, version: int) -> dict[str, Any]:
    return {
        "leader": s.leader,
        "leader_epoch": s.leader_epoch,
        "isr": list(s.isr),
        "controller_epoch": s.controller_epoch,
        "version": version,
        "leader_recovery_state": s.leader_recovery_state,
    }


def _state(d: dict[str, Any]) -> LeaderIsrState:
    return LeaderIsrState(
        int(d["leader"]),
        int(d["leader_epoch"]),
        tuple(int(r) for r in d["isr"]),
        int(d.get("controller_epoch", 0)),
        int(d.get("leader_recovery_state", 0)),
    )


def _replica_map(d: dict[str, Any]) -> dict[int, list[int]]:
    return {int(p): [int(r) for r in rs] for p, rs in d.items()}


def _topic_json(t: dict[str, Any]) -> dict[str, Any]:
    out = {
        "id": t["id"],
        "configs": t["configs"],
        "version": t["version"],
        "partitions": {str(p): r for p, r in sorted(t["partitions"].items())},
        "states": {str(p): s for p, s in sorted(t["states"].items())},
    }
    # a reassignment in progress (KIP-455), as the topic znode's adding/removing_replicas
    if t.get("adding"):
        out["adding_replicas"] = {str(p): r for p, r in sorted(t["adding"].items())}
    if t.get("removing"):
        out["removing_replicas"] = {str(p): r for p, r in sorted(t["removing"].items())}
    return out
