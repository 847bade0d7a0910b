"""Differential testing against Apache Kafka: the same request sequence goes to an Apache
Kafka broker and to kbroker, each answer is turned into plain data, normalised, and the two
are compared field by field.

Normalised (what must differ between two clusters): node ids (-> "NODE"), the listener
port (-> "PORT"), cluster ids, topic ids (non-zero -> "TOPIC_ID"), member ids (-> "MEMBER-n"
in order of appearance), error messages (-> "MESSAGE" when present: Kafka's wording is not
part of the protocol), fetched record bytes (-> the batches' and records' fields, so CRCs
and byte layout do not count). Requests use, per API, the highest version both brokers and
the codec speak.

Every remaining difference must be in differences.txt, one line per accepted difference:

    scenario | path pattern (* matches anything) | why

A difference not listed fails its scenario; so does a listed one that no longer occurs
(the file only says what is true).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from broker.client import BrokerConnection
from broker.native import iter_batches
from broker.server.handlers import supported_versions

ALLOWLIST = Path(__file__).with_name("differences.txt")
_MEMBER = re.compile(r"^[\w.-]*-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_NODE_FIELDS = {"node_id", "leader_id", "controller_id", "broker_id", "coordinator_id"}
_NODE_LISTS = {"replica_nodes", "isr_nodes", "offline_replicas", "eligible_leader_replicas", "last_known_elr"}


class Peer:
    """One broker under test: a connection speaking the common versions, its node id and
    port (for normalisation), and the member ids it has handed out."""

    def __init__(self, name: str, bootstrap: str, versions: dict[int, int]):
        self.name = name
        host, port = bootstrap.rsplit(":", 1)
        self.bootstrap = bootstrap
        self.port = int(port)
        self.versions = versions
        self.conn = BrokerConnection(host, self.port, timeout=30)
        from broker.protocol.messages.metadata import MetadataRequest

        self.node_id = self.conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False)).brokers[0].node_id
        self.members: dict[str, str] = {}

    def request(self, req, version: int | None = None, timeout: float = 30.0):
        return self.conn.request(req, self.versions[req.API_KEY] if version is None else version, timeout=timeout)

    def send_no_response(self, req) -> None:
        self.conn.send(req, self.versions[req.API_KEY], expect_response=False)

    def close(self) -> None:
        self.conn.close()


def common_versions(kafka_bootstrap: str, kbroker_bootstrap: str) -> dict[int, int]:
    """api key -> the highest version kbroker implements that Kafka and the codec speak too."""
    out = {}
    with BrokerConnection(*_hp(kafka_bootstrap)) as k:
        for api_key, _lo, hi in supported_versions():
            try:
                out[api_key] = min(hi, k.version_for(api_key))
            except Exception:  # an API Kafka no longer has: not compared
                continue
    return out


def _hp(bootstrap: str):
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


# ---------------------------------------------------------------------- plain data


def plain(obj):
    """A generated message (or anything in it) as dicts, lists and scalars."""
    if isinstance(obj, (list, tuple)):
        return [plain(x) for x in obj]
    if isinstance(obj, uuid.UUID):
        return obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    slots = getattr(type(obj), "__slots__", None)
    if slots is not None and not isinstance(obj, (str, int, float, bool)):
        return {s: plain(getattr(obj, s)) for s in slots if s != "unknown_tagged_fields"}
    return obj


def decode_records(data: bytes | None):
    """Fetched record bytes as the fields that matter: per batch its header fields and records."""
    if data is None:
        return None
    out = []
    for b in iter_batches(data, validate=True):
        out.append(
            {
                "base_offset": b.base_offset,
                "last_offset": b.last_offset,
                "record_count": b.record_count,
                "compression": b.compression_name,
                "timestamp_type": b.timestamp_type,
                "producer_id": b.producer_id,
                "producer_epoch": b.producer_epoch,
                "base_sequence": b.base_sequence,
                "is_transactional": b.is_transactional,
                "is_control": b.is_control,
                "max_timestamp": b.max_timestamp,
                "records": [[r.offset, r.timestamp, r.key, r.value, [list(h) for h in r.headers]] for r in b.records()],
            }
        )
    return out


def normalise(value, peer: Peer, key: str = ""):
    if isinstance(value, dict):
        return {k: normalise(v, peer, k) for k, v in value.items()}
    if isinstance(value, list):
        if key in _NODE_LISTS:
            return ["NODE" if v == peer.node_id else v for v in value]
        return [normalise(v, peer, key) for v in value]
    if isinstance(value, uuid.UUID):
        return "TOPIC_ID" if value.int else "ZERO"
    if key in _NODE_FIELDS and value == peer.node_id:
        return "NODE"
    if key == "port" and value == peer.port:
        return "PORT"
    if key == "cluster_id" and value is not None:
        return "CLUSTER"
    if key in ("error_message", "message") and value is not None:
        return "MESSAGE"
    if key == "records":
        return decode_records(value)
    if isinstance(value, str) and _MEMBER.match(value):
        return peer.members.setdefault(value, f"MEMBER-{len(peer.members)}")
    return value


# ---------------------------------------------------------------------- comparing


def diff(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """(path, kafka value, kbroker value) for every leaf that differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += diff(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}" if path else k)
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        if len(a) != len(b):
            out.append((f"{path}.length", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [(path, a, b)]


@dataclass
class Allowed:
    scenario: str
    pattern: str
    why: str
    used: bool = field(default=False)

    def matches(self, path: str) -> bool:
        """`*` matches anything (dots and brackets too); everything else literally."""
        return re.fullmatch(".*".join(re.escape(p) for p in self.pattern.split("*")), path) is not None


def allowlist() -> list[Allowed]:
    out = []
    for n, line in enumerate(ALLOWLIST.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        assert len(parts) == 3 and all(parts), f"{ALLOWLIST.name}:{n}: 'scenario | path glob | why'"
        out.append(Allowed(*parts))
    return out


def compare(
    scenario: str,
    kafka: list[tuple[str, object]],
    kbroker: list[tuple[str, object]],
    kafka_peer: Peer,
    kbroker_peer: Peer,
) -> list[str]:
    """Problems: unlisted differences, and listed ones of this scenario that did not occur."""
    assert [label for label, _ in kafka] == [label for label, _ in kbroker]
    entries = [a for a in allowlist() if a.scenario == scenario]
    problems = []
    for (label, k), (_, ours) in zip(kafka, kbroker):
        for path, kv, ov in diff(normalise(plain(k), kafka_peer), normalise(plain(ours), kbroker_peer), label):
            hit = [a for a in entries if a.matches(path)]
            for a in hit:
                a.used = True
            if not hit:
                problems.append(f"{path}: Kafka {kv!r}, kbroker {ov!r}")
    problems += [f"listed but not seen: {a.pattern} ({a.why})" for a in entries if not a.used]
    return problems
