"""Kafka's znodes: every path and JSON payload of the cluster metadata in ZooKeeper.

Pure functions and value types, no I/O. One class per znode, named as in Kafka's
`kafka.zk.ZkData` (core/src/main/scala/kafka/zk/ZkData.scala, 3.x), so a reader of
either finds the other. Payloads carry Kafka's fields and versions as compact JSON in
the key order of Kafka's own payloads, so a kbroker cluster's ZooKeeper tree reads like
a Kafka one (and Kafka's tools can read it):

    /cluster/id                                    {"version":"1","id":"<cluster id>"}
    /controller                        ephemeral   {"version":2,"brokerid":1,"timestamp":"<ms>",
                                                    "kraftControllerEpoch":-1}    (v1: no kraft...)
    /controller_epoch                              "7"   (a decimal string, not JSON)
    /brokers/ids/<id>                  ephemeral   {"features":{},"listener_security_protocol_map":{..},
                                                    "endpoints":["PLAINTEXT://h:9092"],"jmx_port":-1,
                                                    "port":9092,"host":"h","version":5,"timestamp":"<ms>"}
    /brokers/topics/<t>                            {"removing_replicas":{},"partitions":{"0":[1,2]},
                                                    "topic_id":"<base64>","adding_replicas":{},"version":3}
    /brokers/topics/<t>/partitions/<p>/state       {"controller_epoch":1,"leader":1,"version":1,
                                                    "leader_epoch":0,"isr":[1,2]}
    /brokers/seqid                                 (no data: its zk version is the sequence)
    /config/topics/<t>                             {"version":1,"config":{"retention.ms":"1000"}}
    /config/brokers/<id> and /config/brokers/<default>   dynamic broker configs, same JSON
    /config/changes/config_change_<10 digits>      {"version":2,"entity_path":"topics/<t>"}
    /admin/delete_topics/<t>                       (no data: the marker is the node)
    /admin/preferred_replica_election              {"version":1,"partitions":[{"topic":"t","partition":0}]}
    /admin/reassign_partitions                     {"version":1,"partitions":[{"topic":"t","partition":0,
                                                                               "replicas":[1,2]}]}
    /isr_change_notification/isr_change_<10 digits>  {"version":1,"partitions":[...as above]}
    /latest_producer_id_block                      {"version":1,"broker":1,"block_start":"0",
                                                    "block_end":"999"}
    /feature                                       {"features":{"transaction.version":
                                                    {"max_version_level":2}},"version":2,"status":1}

Invariants:
- Every decoder either returns a value or raises `ZNodeDataError` naming the path and
  what is wrong (never KeyError, TypeError, UnicodeDecodeError...). Integers are checked
  for JSON type (a bool or float is not an int) and range (int32 ids and epochs, int64
  producer ids); decimal strings are ASCII digits only.
- Decoders accept every version Kafka ever wrote for a znode and ignore fields they do
  not know (Kafka reads newer versions the same way); encoders write the newest version.
- Paths are absolute inside the chroot: the chroot itself (`host:port/kb`) is split off
  by `parse_connect_string` and applied by the ZooKeeper client, never here.

A `partition state`'s zk version is Kafka's partition epoch: the controller and the
leaders write it only with conditional updates (see zkclient.py).
"""

from __future__ import annotations

import json
import re
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from broker.log.checkpoints import TopicPartition
from broker.uuids import parse_uuid, uuid_text

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Kafka's SecurityProtocol names, and the listener map a v2/v3 registration implies
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}

# LeaderRecoveryState (KIP-704): written only when not RECOVERED
LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1

NO_LEADER = -1


class ZNodeDataError(ValueError):
    """A znode holds data that cannot be decoded. str() names the path and the problem."""

    def __init__(self, path: str, problem: str, data: bytes | None = None):
        self.path = path
        self.problem = problem
        shown = "" if data is None else f" (data: {_preview(data)})"
        super().__init__(f"invalid data in znode {path}: {problem}{shown}")


def _preview(data: bytes, limit: int = 120) -> str:
    text = repr(bytes(data[:limit]))
    return text + ("..." if len(data) > limit else "")


# ---------------------------------------------------------------- JSON helpers


def _dumps(value: Any) -> bytes:
    """Compact JSON as Kafka's Jackson writes it (no spaces, UTF-8)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _parse(path: str, data: bytes | None) -> Any:
    if not data:
        raise ZNodeDataError(path, "no data")
    try:
        return json.loads(bytes(data).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ZNodeDataError(path, f"not JSON ({e})", data) from None


_DECIMAL = re.compile(r"-?[0-9]+")


class _Obj:
    """Typed access to one JSON object of a znode; every failure is a ZNodeDataError."""

    __slots__ = ("path", "data", "obj", "where")

    def __init__(self, path: str, data: bytes | None, obj: Any, where: str = ""):
        self.path, self.data, self.where = path, data, where
        if not isinstance(obj, dict):
            self.fail(f"expected a JSON object{self._at()}, got {type(obj).__name__}")
        self.obj = obj

    @classmethod
    def parse(cls, path: str, data: bytes | None) -> _Obj:
        return cls(path, data, _parse(path, data))

    def _at(self, key: str | None = None) -> str:
        name = f"{self.where}.{key}" if self.where and key else (key or self.where)
        return f" at {name!r}" if name else ""

    def fail(self, problem: str) -> NoReturn:
        raise ZNodeDataError(self.path, problem, self.data)

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def get(self, key: str) -> Any:
        if key not in self.obj:
            self.fail(f"{key!r} is missing{self._at()}")
        return self.obj[key]

    def decimal(self, key: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
        """A number Kafka writes as a decimal string ("timestamp", "block_start")."""
        v = self.str(key)
        if not _DECIMAL.fullmatch(v) or len(v) > 20:
            self.fail(f"{key!r}{self._at()} is not a decimal number: {v!r}")
        return _check_int(self, int(v), key, lo, hi)

    def int_list(self, key: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> tuple[int, ...]:
        v = self.get(key)
        if not isinstance(v, list):
            self.fail(f"{key!r}{self._at()} is not a list: {v!r}")
        return tuple(_check_int(self, x, key, lo, hi) for x in v)

    def child(self, key: str) -> _Obj:
        return _Obj(self.path, self.data, self.get(key), f"{self.where}.{key}" if self.where else key)

    def objects(self, key: str) -> list[_Obj]:
        v = self.get(key)
        if not isinstance(v, list):
            self.fail(f"{key!r}{self._at()} is not a list: {v!r}")
        return [_Obj(self.path, self.data, x, f"{key}[{i}]") for i, x in enumerate(v)]

    # last: these names would shadow the builtins in the annotations of the methods below them

    def int(self, key: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int:
        return _check_int(self, self.get(key), key, lo, hi)

    def str(self, key: str) -> str:
        v = self.get(key)
        if not isinstance(v, str):
            self.fail(f"{key!r}{self._at()} is not a string: {v!r}")
        return v


def _check_int(o: _Obj, v: Any, key: str, lo: int, hi: int) -> int:
    if type(v) is not int:
        o.fail(f"{key!r}{o._at()} is not an integer: {v!r}")
    if not lo <= v <= hi:
        o.fail(f"{key!r}{o._at()} is out of range [{lo}, {hi}]: {v}")
    return v


def _partition_key(o: _Obj, key: Any) -> int:
    if not isinstance(key, str) or not _DECIMAL.fullmatch(key) or len(key) > 10 or key.startswith("-"):
        o.fail(f"partition {key!r}{o._at()} is not a partition number")
    p = int(key)
    if p > INT32_MAX:
        o.fail(f"partition {key!r}{o._at()} is out of range")
    return p


def _check_name(kind: str, name: str) -> str:
    """A topic (or other entity) name used as one path segment."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"{kind} {name!r} cannot be a znode name")
    return name


def _topic_partitions(o: _Obj, key: str) -> frozenset[TopicPartition]:
    out = set()
    for item in o.objects(key):
        out.add(TopicPartition(item.str("topic"), item.int("partition", 0)))
    return frozenset(out)


def _encode_topic_partitions(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(partitions)]


# ---------------------------------------------------------------- connect string


def parse_connect_string(connect: str) -> tuple[str, str | None]:
    """'h1:2181,h2:2181/kb' -> ('h1:2181,h2:2181', '/kb'); no chroot -> (hosts, None).

    Raises ValueError with a one-line message for a malformed string (the chroot rules
    are ZooKeeper's: absolute, no empty, '.' or '..' segments, no trailing '/')."""
    text = connect.strip() if isinstance(connect, str) else ""
    hosts, slash, chroot = text.partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r}: no host:port")
    for hp in hosts.split(","):
        host, sep, port = hp.strip().rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"zookeeper.connect {connect!r}: {hp!r} is not host:port")
    if not slash or chroot == "":
        return hosts, None
    chroot = "/" + chroot
    if chroot.endswith("/") or any(seg in ("", ".", "..") for seg in chroot[1:].split("/")):
        raise ValueError(f"zookeeper.connect {connect!r}: chroot {chroot!r} is not a valid znode path")
    return hosts, chroot


# ---------------------------------------------------------------- value types


@dataclass(frozen=True)
class EndPoint:
    """One advertised listener, as Kafka's EndPoint: 'PLAINTEXT://host:9092'."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    """/brokers/ids/<id>. `timestamp` is the registration time in ms; `features` maps a
    feature name to its supported (min_version, max_version). The top-level host/port
    of the JSON are derived: the first PLAINTEXT endpoint, as Kafka writes them."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    timestamp: int = 0
    version: int = 5

    def endpoint(self, listener_name: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener_name == listener_name), None)


@dataclass(frozen=True)
class ControllerRegistration:
    """/controller: who won the election, and when (ms)."""

    broker_id: int
    timestamp: int = 0
    kraft_controller_epoch: int = -1


@dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<t>: partition -> replicas (the first is the preferred leader),
    plus the replicas being added/removed by a reassignment (KIP-455)."""

    topic_id: uuid.UUID | None
    partitions: Mapping[int, tuple[int, ...]]
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class LeaderIsrState:
    """/brokers/topics/<t>/partitions/<p>/state: Kafka's LeaderIsrAndControllerEpoch.
    Its znode's zk version (the partition epoch) travels beside it, not in it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED


@dataclass(frozen=True)
class ProducerIdBlock:
    """/latest_producer_id_block: ids block_start..block_end (inclusive) belong to broker."""

    broker_id: int
    block_start: int
    block_end: int

    @property
    def size(self) -> int:
        return self.block_end - self.block_start + 1


# ---------------------------------------------------------------- topic ids


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return uuid_text(topic_id)


def decode_topic_id(text: str) -> uuid.UUID:
    """Inverse of encode_topic_id; ValueError for anything that is not 16 bytes of base64."""
    return parse_uuid(text, "base64 topic id")


# ---------------------------------------------------------------- znodes


class ClusterIdZNode:
    PATH = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _dumps({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes | None) -> str:
        return _Obj.parse(ClusterIdZNode.PATH, data).str("id")


class ControllerZNode:
    PATH = "/controller"

    @staticmethod
    def encode(reg: ControllerRegistration) -> bytes:
        return _dumps(
            {
                "version": 2,
                "brokerid": reg.broker_id,
                "timestamp": str(reg.timestamp),
                "kraftControllerEpoch": reg.kraft_controller_epoch,
            }
        )

    @staticmethod
    def decode(data: bytes | None) -> ControllerRegistration:
        """v1 ({"version":1,"brokerid":N,"timestamp":"..."}) and v2."""
        o = _Obj.parse(ControllerZNode.PATH, data)
        timestamp = o.decimal("timestamp") if o.has("timestamp") else 0
        kraft = o.int("kraftControllerEpoch") if o.has("kraftControllerEpoch") else -1
        return ControllerRegistration(o.int("brokerid"), timestamp, kraft)


class ControllerEpochZNode:
    """Not JSON: the epoch as a decimal string. Its zk version fences the controller's
    writes (the CheckOp of every partition state update)."""

    PATH = "/controller_epoch"
    INITIAL_EPOCH = 0  # Kafka's KafkaController.InitialControllerEpoch
    INITIAL_EPOCH_ZK_VERSION = 0

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode("ascii")

    @staticmethod
    def decode(data: bytes | None) -> int:
        path = ControllerEpochZNode.PATH
        if not data:
            raise ZNodeDataError(path, "no data")
        text = bytes(data).decode("ascii", "replace")
        if not _DECIMAL.fullmatch(text) or len(text) > 11 or not INT32_MIN <= int(text) <= INT32_MAX:
            raise ZNodeDataError(path, "not a decimal int32", data)
        return int(text)


class FeatureZNode:
    """/feature: the cluster's finalized feature levels (KIP-584), written by the
    controller; its zk version is the features' epoch (what ApiVersions answers as
    finalized_features_epoch). Version 1 carried min_version_level too; version 2 only
    max_version_level. A level below 1 is not finalized and is not written. Status 0
    (disabled: Kafka below IBP 2.7) finalizes nothing."""

    PATH = "/feature"
    STATUS_DISABLED, STATUS_ENABLED = 0, 1

    @staticmethod
    def encode(levels: Mapping[str, int]) -> bytes:
        features = {name: {"max_version_level": level} for name, level in sorted(levels.items()) if level >= 1}
        return _dumps({"features": features, "version": 2, "status": FeatureZNode.STATUS_ENABLED})

    @staticmethod
    def decode(data: bytes | None) -> dict[str, int]:
        """name -> finalized level; {} when disabled."""
        o = _Obj.parse(FeatureZNode.PATH, data)
        version = o.int("version")
        if version not in (1, 2):
            o.fail(f"unsupported version {version}")
        status = o.int("status")
        if status not in (FeatureZNode.STATUS_DISABLED, FeatureZNode.STATUS_ENABLED):
            o.fail(f"unknown status {status}")
        features = o.child("features")
        levels = {}
        for name in features.obj:
            f = features.child(name)
            level = f.int("max_version_level", 1, 32767)
            if version == 1 and not 1 <= f.int("min_version_level", 1, 32767) <= level:
                f.fail("min_version_level above max_version_level")
            levels[name] = level
        return levels if status == FeatureZNode.STATUS_ENABLED else {}


class BrokerIdsZNode:
    PATH = "/brokers/ids"


_ENDPOINT = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:([0-9]+)")


class BrokerIdZNode:
    """/brokers/ids/<id>, ephemeral. Versions: 1 host/port only; 2 + endpoints; 3 + rack;
    4 + listener_security_protocol_map; 5 + features. The broker epoch is the czxid."""

    @staticmethod
    def path(broker_id: int) -> str:
        return f"{BrokerIdsZNode.PATH}/{broker_id}"

    @staticmethod
    def encode(reg: BrokerRegistration) -> bytes:
        plaintext = next((e for e in reg.endpoints if e.security_protocol == "PLAINTEXT"), None)
        d: dict[str, Any] = {}
        if reg.version >= 5:
            d["features"] = {
                name: {"min_version": lo, "max_version": hi} for name, (lo, hi) in sorted(reg.features.items())
            }
        if reg.version >= 4:
            d["listener_security_protocol_map"] = {e.listener_name: e.security_protocol for e in reg.endpoints}
        d["endpoints"] = [e.connection_string for e in reg.endpoints]
        if reg.rack is not None and reg.version >= 3:
            d["rack"] = reg.rack
        d["jmx_port"] = reg.jmx_port
        d["port"] = plaintext.port if plaintext else -1
        d["host"] = plaintext.host if plaintext else None
        d["version"] = reg.version
        d["timestamp"] = str(reg.timestamp)
        return _dumps(d)

    @staticmethod
    def decode(broker_id: int, data: bytes | None) -> BrokerRegistration:
        o = _Obj.parse(BrokerIdZNode.path(broker_id), data)
        version = o.int("version", 1)
        jmx_port = o.int("jmx_port")
        endpoints: tuple[EndPoint, ...]
        if version == 1:
            endpoints = (EndPoint("PLAINTEXT", o.str("host"), o.int("port", 0, 65535)),)
        else:
            endpoints = BrokerIdZNode._endpoints(o)
        rack = o.str("rack") if o.has("rack") else None
        features = {}
        if o.has("features"):
            fo = o.child("features")
            for name in fo.obj:
                r = fo.child(name)
                features[name] = (r.int("min_version", -32768, 32767), r.int("max_version", -32768, 32767))
        timestamp = o.decimal("timestamp") if o.has("timestamp") else 0
        return BrokerRegistration(broker_id, endpoints, rack, jmx_port, features, timestamp, version)

    @staticmethod
    def _endpoints(o: _Obj) -> tuple[EndPoint, ...]:
        protocols = DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP
        if o.has("listener_security_protocol_map"):
            m = o.child("listener_security_protocol_map")
            protocols = {name: m.str(name) for name in m.obj}
        out = []
        raw = o.get("endpoints")
        if not isinstance(raw, list):
            o.fail(f"'endpoints' is not a list: {raw!r}")
        for text in raw:
            match = _ENDPOINT.fullmatch(text) if isinstance(text, str) else None
            if match is None or int(match[3]) > 65535:
                o.fail(f"endpoint {text!r} is not LISTENER://host:port")
            name, host, port = match[1], match[2], int(match[3])
            protocol = protocols.get(name)
            if protocol is None:
                o.fail(f"listener {name!r} is not in the listener security protocol map")
            if protocol not in SECURITY_PROTOCOLS:
                o.fail(f"listener {name!r} has an unknown security protocol {protocol!r}")
            out.append(EndPoint(name, host, port, protocol))
        return tuple(out)


class BrokerSequenceIdZNode:
    PATH = "/brokers/seqid"


class TopicsZNode:
    PATH = "/brokers/topics"


class TopicZNode:
    """/brokers/topics/<t>. v1 partitions only; v2 + adding/removing_replicas; v3 +
    topic_id (Kafka's base64 Uuid). Kafka reads a node without data as no partitions."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicsZNode.PATH}/{_check_name('topic', topic)}"

    @staticmethod
    def encode(assignment: TopicAssignment) -> bytes:
        def lists(m: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(m.items())}

        d: dict[str, Any] = {
            "removing_replicas": lists(assignment.removing_replicas),
            "partitions": lists(assignment.partitions),
        }
        if assignment.topic_id is not None:
            d["topic_id"] = encode_topic_id(assignment.topic_id)
        d["adding_replicas"] = lists(assignment.adding_replicas)
        d["version"] = 3
        return _dumps(d)

    @staticmethod
    def decode(topic: str, data: bytes | None) -> TopicAssignment:
        if not data:
            return TopicAssignment(None, {})
        o = _Obj.parse(TopicZNode.path(topic), data)
        topic_id = None
        if o.has("topic_id"):
            try:
                topic_id = decode_topic_id(o.str("topic_id"))
            except ValueError as e:
                o.fail(f"'topic_id': {e}")

        def replicas(key: str) -> dict[int, tuple[int, ...]]:
            if not o.has(key):
                return {}
            m = o.child(key)
            return {_partition_key(m, p): m.int_list(p, 0) for p in m.obj}

        return TopicAssignment(
            topic_id, replicas("partitions"), replicas("adding_replicas"), replicas("removing_replicas")
        )


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicZNode.path(topic)}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicPartitionsZNode.path(topic)}/{partition}"


class TopicPartitionStateZNode:
    """leader_recovery_state is written only when not RECOVERED, as Kafka does."""

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicPartitionZNode.path(topic, partition)}/state"

    @staticmethod
    def encode(state: LeaderIsrState) -> bytes:
        d: dict[str, Any] = {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
        if state.leader_recovery_state != LEADER_RECOVERY_RECOVERED:
            d["leader_recovery_state"] = state.leader_recovery_state
        return _dumps(d)

    @staticmethod
    def decode(topic: str, partition: int, data: bytes | None) -> LeaderIsrState:
        o = _Obj.parse(TopicPartitionStateZNode.path(topic, partition), data)
        recovery = LEADER_RECOVERY_RECOVERED
        if o.has("leader_recovery_state"):
            recovery = o.int("leader_recovery_state", LEADER_RECOVERY_RECOVERED, LEADER_RECOVERY_RECOVERING)
        return LeaderIsrState(
            o.int("leader", NO_LEADER),
            o.int("leader_epoch", 0),
            o.int_list("isr", 0),
            o.int("controller_epoch", 0),
            recovery,
        )


class ConfigEntityTypeZNode:
    TOPIC = "topics"
    USER = "users"
    BROKER = "brokers"
    #: the entity name of the cluster-wide default (Kafka's ConfigEntityName.Default)
    DEFAULT = "<default>"
    CLIENT = "clients"
    #: group configs (Kafka 4.x keeps them in its KRaft metadata as GROUP resources; kbroker's
    #: cluster keeps them beside the topics' and brokers', /config/groups/<sanitized group id>)
    GROUP = "groups"
    ALL = ("topics", "clients", "users", "brokers", "ips", "groups")

    @staticmethod
    def path(entity_type: str) -> str:
        return f"/config/{entity_type}"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user (or client id) as a znode name — URL-encoded
    in UTF-8 as Java's URLEncoder, with a space as %20 and '*' as %2A."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def group_znode_name(group: str) -> str:
    """A group id as one znode name: sanitized as a user is, "." and ".." spelt out."""
    name = sanitize(group)
    return name.replace(".", "%2E") if name in (".", "..") else name


class ConfigEntityZNode:
    """/config/<type>/<name>: {"version":1,"config":{key: string value}}. Kafka reads a
    node without data, or without "config", as no overrides."""

    @staticmethod
    def path(entity_type: str, name: str) -> str:
        return f"{ConfigEntityTypeZNode.path(entity_type)}/{_check_name(entity_type, name)}"

    @staticmethod
    def entity_path(path: str) -> str:
        """/config/<path> for a quota entity path: users/<u>, clients/<c> or
        users/<u>/clients/<c> (each name one segment)."""
        parts = path.split("/")
        if not (
            (len(parts) == 2 and parts[0] in ("users", "clients"))
            or (len(parts) == 4 and parts[0] == "users" and parts[2] == "clients")
        ):
            raise ValueError(f"{path!r} is not a user or client entity path")
        for name in parts[1::2]:
            _check_name(parts[0], name)
        return f"/config/{path}"

    @staticmethod
    def decode_path(path: str, data: bytes | None) -> dict[str, str]:
        if not data:
            return {}
        o = _Obj.parse(f"/config/{path}", data)
        if not o.has("config"):
            return {}
        c = o.child("config")
        return {k: c.str(k) for k in c.obj}

    @staticmethod
    def encode(configs: Mapping[str, str]) -> bytes:
        return _dumps({"version": 1, "config": {k: str(v) for k, v in configs.items()}})

    @staticmethod
    def decode(entity_type: str, name: str, data: bytes | None) -> dict[str, str]:
        if not data:
            return {}
        o = _Obj.parse(ConfigEntityZNode.path(entity_type, name), data)
        if not o.has("config"):
            return {}
        c = o.child("config")
        return {k: c.str(k) for k in c.obj}


class ConfigEntityChangeNotificationZNode:
    PATH = "/config/changes"


class ConfigEntityChangeNotificationSequenceZNode:
    """A persistent sequential node per config change; brokers watch the parent. v2:
    {"version":2,"entity_path":"topics/<t>"}; v1 (read only): entity_type + entity_name."""

    PREFIX = "config_change_"
    CREATE_PATH = f"{ConfigEntityChangeNotificationZNode.PATH}/{PREFIX}"

    @staticmethod
    def encode(entity_path: str) -> bytes:
        return _dumps({"version": 2, "entity_path": entity_path})

    @staticmethod
    def decode(path: str, data: bytes | None) -> str:
        """The entity path ('topics/<t>') the notification is about."""
        o = _Obj.parse(path, data)
        version = o.int("version")
        if version == 1:
            return f"{o.str('entity_type')}/{o.str('entity_name')}"
        if version == 2:
            return o.str("entity_path")
        o.fail(f"unsupported version {version}")


class IsrChangeNotificationZNode:
    PATH = "/isr_change_notification"


class IsrChangeNotificationSequenceZNode:
    PREFIX = "isr_change_"
    CREATE_PATH = f"{IsrChangeNotificationZNode.PATH}/{PREFIX}"

    @staticmethod
    def encode(partitions: Iterable[TopicPartition]) -> bytes:
        return _dumps({"version": 1, "partitions": _encode_topic_partitions(partitions)})

    @staticmethod
    def decode(path: str, data: bytes | None) -> frozenset[TopicPartition]:
        return _topic_partitions(_Obj.parse(path, data), "partitions")


class LogDirEventNotificationZNode:
    PATH = "/log_dir_event_notification"


class LogDirEventNotificationSequenceZNode:
    """A persistent sequential node a broker creates when one of its log dirs fails
    (Kafka's LogDirEventNotificationSequenceZNode): {"version":1,"broker":<id>,"event":1}.
    The controller watches the parent, deletes the nodes it handled, and asks the broker
    (LeaderAndIsr) which of its replicas are offline."""

    PREFIX = "log_dir_event_"
    CREATE_PATH = f"{LogDirEventNotificationZNode.PATH}/{PREFIX}"
    LOG_DIR_FAILURE = 1

    @staticmethod
    def encode(broker_id: int) -> bytes:
        return _dumps(
            {"version": 1, "broker": broker_id, "event": LogDirEventNotificationSequenceZNode.LOG_DIR_FAILURE}
        )

    @staticmethod
    def decode(path: str, data: bytes | None) -> int:
        """The id of the broker whose log dir failed."""
        o = _Obj.parse(path, data)
        version = o.int("version")
        if version != 1:
            o.fail(f"unsupported version {version}")
        return o.int("broker")


class AdminZNode:
    PATH = "/admin"


class DeleteTopicsZNode:
    PATH = "/admin/delete_topics"


class DeleteTopicsTopicZNode:
    """No data: the node's existence marks the topic for deletion."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{DeleteTopicsZNode.PATH}/{_check_name('topic', topic)}"


class ReassignPartitionsZNode:
    """The pre-KIP-455 way to ask for a reassignment (Kafka still honours it in 3.x)."""

    PATH = "/admin/reassign_partitions"

    @staticmethod
    def encode(reassignment: Mapping[TopicPartition, Iterable[int]]) -> bytes:
        return _dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)}
                    for tp, r in sorted(reassignment.items())
                ],
            }
        )

    @staticmethod
    def decode(data: bytes | None) -> dict[TopicPartition, tuple[int, ...]]:
        o = _Obj.parse(ReassignPartitionsZNode.PATH, data)
        return {
            TopicPartition(p.str("topic"), p.int("partition", 0)): p.int_list("replicas", 0)
            for p in o.objects("partitions")
        }


class PreferredReplicaElectionZNode:
    PATH = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: Iterable[TopicPartition]) -> bytes:
        return _dumps({"version": 1, "partitions": _encode_topic_partitions(partitions)})

    @staticmethod
    def decode(data: bytes | None) -> frozenset[TopicPartition]:
        return _topic_partitions(_Obj.parse(PreferredReplicaElectionZNode.PATH, data), "partitions")


class ProducerIdBlockZNode:
    """Created without data at startup; the first allocation starts at 0."""

    PATH = "/latest_producer_id_block"

    @staticmethod
    def encode(block: ProducerIdBlock) -> bytes:
        return _dumps(
            {
                "version": 1,
                "broker": block.broker_id,
                "block_start": str(block.block_start),
                "block_end": str(block.block_end),
            }
        )

    @staticmethod
    def decode(data: bytes | None) -> ProducerIdBlock:
        o = _Obj.parse(ProducerIdBlockZNode.PATH, data)
        start, end = o.decimal("block_start", 0), o.decimal("block_end", 0)
        if end < start:
            o.fail(f"block_end {end} is before block_start {start}")
        return ProducerIdBlock(o.int("broker"), start, end)


# ---------------------------------------------------------------- ACLs (Kafka's AclAuthorizer in ZooKeeper)


class AclZNodes:
    """/kafka-acl/<Type>/<name> (LITERAL) and /kafka-acl-extended/prefixed/<Type>/<name>
    (PREFIXED): {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
    "operation":"Read","host":"*"}]}. A change to a resource's ACLs is announced by a
    sequential node: /kafka-acl-changes/acl_changes_N holding "TOPIC:<name>" (LITERAL), and
    /kafka-acl-extended-changes/acl_changes_N holding {"version":1,"resourceType":"TOPIC",
    "name":"<name>","patternType":"PREFIXED"}."""

    LITERAL = "/kafka-acl"
    PREFIXED = "/kafka-acl-extended/prefixed"
    LITERAL_CHANGES = "/kafka-acl-changes"
    EXTENDED_CHANGES = "/kafka-acl-extended-changes"
    CHANGE_PREFIX = "acl_changes_"

    @staticmethod
    def root(pattern: str) -> str:
        return AclZNodes.LITERAL if pattern == "LITERAL" else AclZNodes.PREFIXED

    @staticmethod
    def path(pattern: str, type_name: str, name: str) -> str:
        return f"{AclZNodes.root(pattern)}/{type_name}/{_check_name('resource', name)}"

    @staticmethod
    def encode(entries: Iterable[Mapping[str, str]]) -> bytes:
        return _dumps(
            {
                "version": 1,
                "acls": [
                    {
                        "principal": e["principal"],
                        "permissionType": e["permissionType"],
                        "operation": e["operation"],
                        "host": e["host"],
                    }
                    for e in entries
                ],
            }
        )

    @staticmethod
    def decode(path: str, data: bytes | None) -> list[dict[str, str]]:
        if not data:
            return []
        o = _Obj.parse(path, data)
        return [{k: e.str(k) for k in ("principal", "permissionType", "operation", "host")} for e in o.objects("acls")]

    @staticmethod
    def change_path(pattern: str) -> str:
        root = AclZNodes.LITERAL_CHANGES if pattern == "LITERAL" else AclZNodes.EXTENDED_CHANGES
        return f"{root}/{AclZNodes.CHANGE_PREFIX}"

    @staticmethod
    def encode_change(pattern: str, type_enum_name: str, name: str) -> bytes:
        if pattern == "LITERAL":
            return f"{type_enum_name}:{name}".encode()
        return _dumps({"version": 1, "resourceType": type_enum_name, "name": name, "patternType": pattern})

    @staticmethod
    def decode_change(path: str, data: bytes | None, literal: bool) -> tuple[str, str, str]:
        """(pattern type, resource type enum name, name) of a change node."""
        if literal:
            text = bytes(data or b"").decode("utf-8", "replace")
            kind, sep, name = text.partition(":")
            if not sep:
                raise ZNodeDataError(path, "expected ResourceType:ResourceName", data)
            return "LITERAL", kind.upper(), name
        o = _Obj.parse(path, data)
        return o.str("patternType").upper(), o.str("resourceType").upper(), o.str("name")


# Persistent paths every broker makes sure exist at startup (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    BrokerIdsZNode.PATH,
    TopicsZNode.PATH,
    ConfigEntityChangeNotificationZNode.PATH,
    DeleteTopicsZNode.PATH,
    BrokerSequenceIdZNode.PATH,
    IsrChangeNotificationZNode.PATH,
    LogDirEventNotificationZNode.PATH,
    ProducerIdBlockZNode.PATH,
    AclZNodes.LITERAL_CHANGES,
    AclZNodes.EXTENDED_CHANGES,
) + tuple(ConfigEntityTypeZNode.path(t) for t in ConfigEntityTypeZNode.ALL)


def sequence_number(name: str, prefix: str) -> int:
    """'config_change_0000000042' -> 42 (the suffix ZooKeeper appends to a sequential
    node). ValueError for any other name."""
    digits = name[len(prefix) :] if name.startswith(prefix) else ""
    if not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{name!r} is not a {prefix}<sequence> node")
    return int(digits)
