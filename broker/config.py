"""Broker and topic configuration: server.properties-compatible, typed, with Kafka's defaults.

- `parse_properties(text)` reads the Java .properties format Kafka uses (`key=value`,
  `key: value`, `#`/`!` comments, backslash line continuations and escapes).
- `BrokerConfig.from_sources(file, overrides)` validates every key: unknown keys and bad
  values raise one `ConfigError` naming every one of them. Keys of Kafka 3.x/4.x brokers
  that mean nothing here (thread counts, KRaft, TLS settings of listeners kbroker does not
  have ...) are accepted, listed in `ignored` and each explained by one line of
  `warnings`, so a real Kafka server.properties starts; a value kbroker cannot honour as
  meant (an authorizer, encrypted inter-broker traffic ...) is refused instead.
- `LogConfig` is the effective per-topic view: the broker's log.* defaults overlaid with
  the topic's own overrides (retention.ms, segment.bytes, cleanup.policy ...), as Kafka's
  LogConfig does. Topic-level names and their broker-level synonyms are in TOPIC_KEYS; the
  deprecated topic keys Kafka 3.x still accepts (DEPRECATED_TOPIC_KEYS) are taken with a
  logged warning and no effect.

Values are stored as Python types (int, bool, str, float, list[str]); None means unset
(for keys like log.retention.ms whose fallback is another key).
"""

from __future__ import annotations

import difflib
import enum
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.metrics.webconfig import WebConfig

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """Configuration keys that are unknown or have bad values. `key` names the first,
    `keys` all of them; the message is one line."""

    def __init__(self, key: str, message: str, keys: list[str] | None = None):
        super().__init__(f"{key}: {message}" if keys is None else message)
        self.key = key
        self.keys = keys or [key]


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigs ConfigType codes."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs ConfigSource codes (DescribeConfigsResponse.ConfigSource; clients
    map them with their own enums, so the numbers are the protocol, not ours to choose)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns an error message or None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: Any) -> Any:
        """Converts a raw (usually string) value to this key's type; ConfigError if bad."""
        value = _convert(self, raw)
        if value is not None:
            if self.choices is not None:
                items = value if isinstance(value, list) else [value]
                for item in items:
                    if item not in self.choices:
                        raise ConfigError(
                            self.name, f"invalid value {raw!r} (expected one of: {', '.join(self.choices)})"
                        )
            if self.check is not None:
                problem = self.check(value)
                if problem:
                    raise ConfigError(self.name, f"invalid value {raw!r}: {problem}")
        return value


def _convert(key: ConfigKey, raw: Any) -> Any:
    if raw is None:
        return None
    t = key.type
    if isinstance(raw, str):
        text = raw.strip()
    else:
        text = raw
    try:
        if t is ConfigType.BOOLEAN:
            if isinstance(text, bool):
                return text
            if str(text).lower() in ("true", "false"):
                return str(text).lower() == "true"
            raise ValueError
        if t in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            if isinstance(text, bool):
                raise ValueError
            if isinstance(text, str) and not _INTEGER.fullmatch(text):
                raise ValueError  # as Java's parseLong: no "1_000", no "١٢"
            value = int(text)
            limit = {ConfigType.INT: INT_MAX, ConfigType.SHORT: 2**15 - 1, ConfigType.LONG: LONG_MAX}[t]
            if not -limit - 1 <= value <= limit:
                raise ConfigError(key.name, f"value {raw!r} out of range for a {t.name.lower()}")
            return value
        if t is ConfigType.DOUBLE:
            return float(text)
        if t is ConfigType.LIST:
            if isinstance(text, (list, tuple)):
                return [str(x).strip() for x in text if str(x).strip()]
            return [x.strip() for x in str(text).split(",") if x.strip()]
        return str(text)
    except ConfigError:
        raise
    except (TypeError, ValueError):
        raise ConfigError(key.name, f"invalid value {raw!r} (expected {t.name.lower()})") from None


_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_mode(text: str) -> int:
    """An octal permission mode ("0700", "700", "0o750"); ValueError when it is none."""
    digits = text.strip().lower().removeprefix("0o")
    if not re.fullmatch(r"[0-7]{3,4}", digits):
        raise ValueError(f"{text!r} is not an octal mode such as 0700")
    return int(digits, 8)


def _dir_mode(v: str) -> str | None:
    try:
        mode = parse_mode(v)
    except ValueError as exc:
        return str(exc)
    if mode > 0o777:
        return "no setuid, setgid or sticky bits"
    if mode & 0o700 != 0o700:
        return "the broker's own user needs rwx (0700 at least)"
    return None


def _at_least(n: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def _assignors(v: list[str]) -> str | None:
    from broker.group.assignors import ASSIGNORS

    if not v:
        return "names no assignor"
    unknown = [n for n in v if n not in ASSIGNORS]
    return f"unknown assignor(s) {', '.join(unknown)} (kbroker has {', '.join(ASSIGNORS)})" if unknown else None


def _between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def _listeners(v: list[str]) -> str | None:
    for item in v:
        if not re.fullmatch(r"(?:[A-Za-z_][A-Za-z0-9_]*://)?\[?[A-Za-z0-9_.:-]*\]?:\d{1,5}", item):
            return f"{item!r} is not [PROTOCOL://]HOST:PORT"
    return None


#: Kafka's SASL mechanisms (GSSAPI accepted as a name, refused where a listener would use it)
SASL_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: Kafka's security protocols
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: those kbroker serves
IMPLEMENTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Listener:
    """One listener of `listeners` (or `advertised.listeners`): its name (upper case, as
    Kafka's ListenerName), address and security protocol."""

    name: str
    host: str
    port: int
    security_protocol: str


_KAFKA_AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)


def _authorizer(v: str) -> str | None:
    if v and v not in _KAFKA_AUTHORIZERS:
        return (
            f"kbroker enforces ACLs with its own authorizer, taken for Kafka's ({', '.join(_KAFKA_AUTHORIZERS)}); "
            "it loads no other class, and ACLs would not be enforced as meant"
        )
    return None


def _ip_overrides(v: str) -> str | None:
    try:
        parse_ip_overrides(v)
    except ValueError as exc:
        return str(exc)
    return None


def parse_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: 'host:N,host:N' -> {host: N} (hosts as written,
    names or addresses; ValueError for a malformed entry)."""
    out = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not _INTEGER.fullmatch(count.strip()) or int(count) < 0:
            raise ValueError(f"{item!r} is not HOST:COUNT")
        out[host] = int(count)
    return out


def _host_port(v: str) -> str | None:
    if not re.fullmatch(r"\[?[A-Za-z0-9_.:-]*\]?:\d{1,5}", v) or not 0 <= int(v.rpartition(":")[2]) <= 65535:
        return f"{v!r} is not HOST:PORT"
    return None


def _registry_listener(v: str) -> str | None:
    scheme, sep, rest = v.partition("://")
    if sep and scheme.lower() not in ("http", "https"):
        return f"{v!r}: the scheme is http or https"
    return _host_port(rest if sep else v)


def _api_name(v: str) -> str | None:
    from broker.protocol.api import ApiKey

    names = {"".join(w.capitalize() for w in k.name.split("_")).lower(): k for k in ApiKey}
    if v.lower() not in names and not (v.isdigit() and int(v) in {int(k) for k in ApiKey}):
        return "not a Kafka API name (e.g. Produce, Fetch, Metadata, OffsetCommit) or key number"
    return None


def _protocol_map(v: list[str]) -> str | None:
    for item in v:
        name, sep, protocol = item.partition(":")
        if not sep or not name:
            return f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL"
        if protocol.upper() not in SECURITY_PROTOCOLS:
            return f"{item!r}: unknown security protocol {protocol!r} (one of {', '.join(SECURITY_PROTOCOLS)})"
    return None


_K = ConfigKey
_B, _S, _I, _L, _D, _LS, _SH, _P = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.SHORT,
    ConfigType.PASSWORD,
)

DAY_MS = 24 * 3600 * 1000

#: Every broker-level key kbroker understands, with Kafka's defaults.
BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _K("broker.id", _I, 0, "The id of this broker.", _at_least(0)),
        _K("broker.rack", _S, None, "The rack of this broker (replica assignment spreads replicas over racks)."),
        _K(
            "listeners",
            _LS,
            ["PLAINTEXT://127.0.0.1:9092"],
            "Addresses to listen on, as [PROTOCOL://]HOST:PORT.",
            _listeners,
        ),
        _K("advertised.listeners", _LS, None, "Addresses given to clients (default: listeners).", _listeners),
        _K(
            "listener.security.protocol.map",
            _LS,
            [f"{p}:{p}" for p in SECURITY_PROTOCOLS],
            "Listener name -> security protocol, as NAME:PROTOCOL.",
            _protocol_map,
        ),
        _K(
            "inter.broker.listener.name",
            _S,
            None,
            "The listener brokers use to reach each other (default: the one named security.inter.broker.protocol).",
        ),
        _K(
            "security.inter.broker.protocol",
            _S,
            "PLAINTEXT",
            "The security protocol between brokers, when inter.broker.listener.name is not set.",
            lambda v: None if v.upper() in SECURITY_PROTOCOLS else f"one of {', '.join(SECURITY_PROTOCOLS)}",
        ),
        _K("log.dirs", _LS, None, "Directories holding the partition logs (default: log.dir)."),
        _K("log.dir", _S, "./data", "The log directory when log.dirs is not set."),
        _K(
            "log.dirs.mode",
            _S,
            "0700",
            "Mode (octal, at least 0700) of the log dirs the broker creates. `broker serve` runs with the umask it "
            "implies, so every dir the broker creates gets it and every file it without the execute bits: 0700 "
            "makes partition dirs 0700 and segments 0600; 0750 opens both to the group. The metadata file (SCRAM "
            "credentials, ACLs) is 0600 whatever this says.",
            _dir_mode,
        ),
        _K("num.partitions", _I, 1, "Default partition count of new topics.", _at_least(1)),
        _K("default.replication.factor", _I, 1, "Default replication factor of new topics.", _at_least(1)),
        _K("auto.create.topics.enable", _B, True, "Create a topic when a client asks metadata for it."),
        _K("delete.topic.enable", _B, True, "Allow DeleteTopics."),
        _K("message.max.bytes", _I, 1048588, "Largest record batch accepted (topic: max.message.bytes).", _at_least(0)),
        _K("socket.request.max.bytes", _I, 104857600, "Largest request frame accepted.", _at_least(1)),
        _K(
            "socket.send.buffer.bytes",
            _I,
            102400,
            "SO_SNDBUF of the connections a listener accepts; -1: the kernel's (autotuned). Kafka's default: "
            "a Fetch's sendfile(2) then costs less CPU per byte (docs/deploy.md, Socket buffers).",
            _at_least(-1),
        ),
        _K(
            "socket.receive.buffer.bytes",
            _I,
            -1,
            "SO_RCVBUF of the listeners' sockets; -1 (kbroker's default, Kafka's is 102400): the kernel's "
            "(autotuned): produce costs less CPU per byte than with 102400 (docs/deploy.md, Socket buffers).",
            _at_least(-1),
        ),
        _K("log.segment.bytes", _I, 1073741824, "Segment file size before a roll.", _at_least(14)),
        _K("log.roll.ms", _L, None, "Segment age before a roll (overrides log.roll.hours).", _at_least(1)),
        _K("log.roll.hours", _I, 168, "Segment age in hours before a roll.", _at_least(1)),
        _K("log.retention.ms", _L, None, "Retention time (overrides minutes and hours); -1: forever."),
        _K("log.retention.minutes", _I, None, "Retention time in minutes (overrides hours)."),
        _K("log.retention.hours", _I, 168, "Retention time in hours."),
        _K("log.retention.bytes", _L, -1, "Retention size per partition; -1: unlimited."),
        _K(
            "log.local.retention.ms",
            _L,
            -2,
            "Default local.retention.ms: how long a topic with remote storage keeps segments on the "
            "broker's disk; -2: as long as retention.ms.",
            _at_least(-2),
        ),
        _K(
            "log.local.retention.bytes",
            _L,
            -2,
            "Default local.retention.bytes: how much of a partition with remote storage stays on the "
            "broker's disk; -2: as much as retention.bytes.",
            _at_least(-2),
        ),
        _K("log.retention.check.interval.ms", _L, 300000, "How often retention runs.", _at_least(1)),
        _K("log.flush.interval.messages", _L, LONG_MAX, "Records appended before an fsync.", _at_least(1)),
        _K("log.flush.interval.ms", _L, None, "Time a record may wait for an fsync (default: never by time)."),
        _K("log.flush.scheduler.interval.ms", _L, LONG_MAX, "How often the time-based flush check runs."),
        _K("log.index.interval.bytes", _I, 4096, "Bytes between offset index entries.", _at_least(0)),
        _K("log.index.size.max.bytes", _I, 10485760, "Maximum size of an index file.", _at_least(4)),
        _K(
            "log.segment.allocate.ahead.bytes",
            _I,
            1048576,
            "kbroker: blocks of the active segment's .log allocated ahead of its appends (fallocate, the file's "
            "size unchanged: a write into them costs less CPU); freed at roll; 0: none (docs/native.md).",
            _at_least(0),
        ),
        _K(
            "log.cleanup.policy",
            _LS,
            ["delete"],
            "Default cleanup policy: delete and/or compact.",
            None,
            ("delete", "compact"),
        ),
        _K("log.cleaner.enable", _B, True, "Run the log cleaner for compacted topics."),
        _K("log.cleaner.delete.retention.ms", _L, DAY_MS, "How long tombstones survive compaction.", _at_least(0)),
        _K("log.cleaner.min.compaction.lag.ms", _L, 0, "Minimum age of a record before compaction.", _at_least(0)),
        _K("log.cleaner.max.compaction.lag.ms", _L, LONG_MAX, "Maximum time a record stays uncompacted.", _at_least(1)),
        _K("log.cleaner.min.cleanable.ratio", _D, 0.5, "Dirty ratio that triggers compaction.", _between(0, 1)),
        _K("log.cleaner.backoff.ms", _L, 15000, "Pause of the cleaner when there is nothing to clean.", _at_least(0)),
        _K("log.segment.delete.delay.ms", _L, 60000, "Delay before a deleted segment's files go.", _at_least(0)),
        _K(
            "log.message.timestamp.type",
            _S,
            "CreateTime",
            "CreateTime or LogAppendTime.",
            None,
            ("CreateTime", "LogAppendTime"),
        ),
        _K(
            "compression.type",
            _S,
            "producer",
            "Topic compression: producer keeps what producers send.",
            None,
            ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        ),
        _K("min.insync.replicas", _I, 1, "Replicas that must acknowledge acks=all.", _at_least(1)),
        _K("unclean.leader.election.enable", _B, False, "Allow out-of-sync replicas to become leader."),
        _K("replica.lag.time.max.ms", _L, 30000, "Time a follower may lag before leaving the ISR.", _at_least(1)),
        _K("num.replica.fetchers", _I, 1, "Fetcher connections per leader a follower uses.", _at_least(1)),
        _K("replica.fetch.wait.max.ms", _I, 500, "Longest a follower's fetch waits at its leader.", _at_least(0)),
        _K("replica.fetch.min.bytes", _I, 1, "Bytes a follower's fetch waits for.", _at_least(1)),
        _K("replica.fetch.max.bytes", _I, 1048576, "Bytes per partition a follower fetches at once.", _at_least(0)),
        _K("replica.fetch.response.max.bytes", _I, 10485760, "Bytes a follower's fetch answer may hold.", _at_least(0)),
        _K("replica.fetch.backoff.ms", _I, 1000, "A follower's pause after a fetch error.", _at_least(0)),
        _K("controlled.shutdown.enable", _B, True, "Move leadership away before stopping (SIGTERM)."),
        _K("controlled.shutdown.max.retries", _I, 3, "Attempts of a controlled shutdown.", _at_least(1)),
        _K(
            "controlled.shutdown.retry.backoff.ms",
            _L,
            5000,
            "Pause between controlled shutdown attempts.",
            _at_least(0),
        ),
        _K("auto.leader.rebalance.enable", _B, True, "Move leadership back to preferred replicas."),
        _K(
            "leader.imbalance.check.interval.seconds",
            _L,
            300,
            "How often the controller checks leader balance.",
            _at_least(1),
        ),
        _K(
            "leader.imbalance.per.broker.percentage",
            _I,
            10,
            "Imbalance per broker that triggers a rebalance.",
            _at_least(0),
        ),
        _K(
            "producer.id.expiration.ms",
            _I,
            86400000,
            "Idempotent producers idle this long are forgotten by each partition.",
            _at_least(1),
        ),
        _K("offsets.topic.num.partitions", _I, 50, "Partitions of __consumer_offsets.", _at_least(1)),
        _K(
            "offsets.topic.replication.factor",
            _SH,
            3,
            "Replication factor of __consumer_offsets (fewer while fewer brokers are alive).",
            _at_least(1),
        ),
        _K("offsets.topic.segment.bytes", _I, 104857600, "Segment size of __consumer_offsets.", _at_least(1)),
        _K("transaction.state.log.num.partitions", _I, 50, "Partitions of __transaction_state.", _at_least(1)),
        _K(
            "transaction.state.log.replication.factor",
            _SH,
            3,
            "Replication factor of __transaction_state (fewer while fewer brokers are alive).",
            _at_least(1),
        ),
        _K("transaction.state.log.min.isr", _I, 2, "min.insync.replicas of __transaction_state.", _at_least(1)),
        _K("transaction.state.log.segment.bytes", _I, 104857600, "Segment size of __transaction_state.", _at_least(1)),
        _K(
            "share.coordinator.state.topic.num.partitions",
            _I,
            50,
            "Partitions of __share_group_state (KIP-932's share-partition state).",
            _at_least(1),
        ),
        _K(
            "share.coordinator.state.topic.replication.factor",
            _SH,
            3,
            "Replication factor of __share_group_state (fewer while fewer brokers are alive).",
            _at_least(1),
        ),
        _K(
            "share.coordinator.state.topic.min.isr", _SH, 2, "min.insync.replicas of __share_group_state.", _at_least(1)
        ),
        _K(
            "share.coordinator.state.topic.segment.bytes",
            _I,
            104857600,
            "Segment size of __share_group_state.",
            _at_least(1),
        ),
        _K(
            "share.coordinator.snapshot.update.records.per.snapshot",
            _I,
            500,
            "Update records the share coordinator writes for a share-partition between two snapshots of it.",
            _at_least(0),
        ),
        _K(
            "share.coordinator.state.topic.prune.interval.ms",
            _I,
            300000,
            "How often the share coordinator deletes the records of __share_group_state no load needs any more.",
            _at_least(1),
        ),
        _K(
            "share.coordinator.write.timeout.ms",
            _I,
            5000,
            "How long the share coordinator waits for the ISR of __share_group_state to have a write.",
            _at_least(1),
        ),
        _K(
            "transaction.max.timeout.ms",
            _I,
            900000,
            "Largest transaction timeout a producer may ask for.",
            _at_least(1),
        ),
        _K(
            "transactional.id.expiration.ms",
            _I,
            604800000,
            "A transactional id unused this long (and no transaction open) is forgotten.",
            _at_least(1),
        ),
        _K(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            _I,
            10000,
            "How often open transactions past their timeout are aborted.",
            _at_least(1),
        ),
        _K(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            _I,
            3600000,
            "How often expired transactional ids are removed.",
            _at_least(1),
        ),
        _K(
            "transaction.partition.verification.enable",
            _B,
            True,
            "A partition refuses a transactional producer's first batch unless its coordinator added the "
            "partition (KIP-890 part 1).",
        ),
        _K(
            "transaction.version",
            _SH,
            2,
            "The transaction protocol offered to clients (Kafka's finalized feature transaction.version): 2 is "
            "KIP-890 part 2 (partitions added by the produce path, an epoch bump per transaction); 0 or 1 "
            "keeps the protocol of transaction.version 1.",
            _between(0, 2),
        ),
        _K(
            "offsets.retention.minutes", _I, 10080, "Committed offsets of empty groups expire after this.", _at_least(1)
        ),
        _K("offsets.retention.check.interval.ms", _L, 600000, "How often offset expiry runs.", _at_least(1)),
        _K("offset.metadata.max.bytes", _I, 4096, "Largest metadata string of a committed offset.", _at_least(0)),
        _K(
            "group.initial.rebalance.delay.ms",
            _I,
            3000,
            "Wait for more members before the first rebalance.",
            _at_least(0),
        ),
        _K("group.min.session.timeout.ms", _I, 6000, "Smallest session timeout a member may ask for.", _at_least(0)),
        _K("group.max.session.timeout.ms", _I, 1800000, "Largest session timeout a member may ask for.", _at_least(0)),
        _K("group.max.size", _I, INT_MAX, "Largest number of members in a group.", _at_least(1)),
        _K(
            "group.consumer.assignors",
            _LS,
            ["uniform", "range"],
            "KIP-848 groups' server-side assignors, the default first (uniform, range).",
            _assignors,
        ),
        _K(
            "group.consumer.session.timeout.ms",
            _I,
            45000,
            "A KIP-848 group member heard from nothing for this long is removed.",
            _at_least(1),
        ),
        _K(
            "group.consumer.heartbeat.interval.ms",
            _I,
            5000,
            "How often KIP-848 group members are told to heartbeat.",
            _at_least(1),
        ),
        # the bounds of a group's own values (group configs, broker/group/group_configs.py)
        # and of the defaults above, as Kafka 4.4's GroupCoordinatorConfig and ShareGroupConfig
        _K(
            "group.consumer.min.session.timeout.ms",
            _I,
            45000,
            "Smallest consumer.session.timeout.ms a KIP-848 group may be given.",
            _at_least(1),
        ),
        _K(
            "group.consumer.max.session.timeout.ms",
            _I,
            60000,
            "Largest consumer.session.timeout.ms a KIP-848 group may be given.",
            _at_least(1),
        ),
        _K(
            "group.consumer.min.heartbeat.interval.ms",
            _I,
            5000,
            "Smallest consumer.heartbeat.interval.ms a KIP-848 group may be given.",
            _at_least(1),
        ),
        _K(
            "group.consumer.max.heartbeat.interval.ms",
            _I,
            15000,
            "Largest consumer.heartbeat.interval.ms a KIP-848 group may be given.",
            _at_least(1),
        ),
        # share groups (KIP-932): share sessions (broker/share/session.py)
        _K(
            "group.share.max.share.sessions",
            _I,
            2000,
            "Most share sessions (one per share consumer fetching from this broker) open at once.",
            _at_least(1),
        ),
        _K(
            "group.share.enable",
            _B,
            True,
            "Serve KIP-932 share groups (false: their APIs answer UNSUPPORTED_VERSION).",
        ),
        _K(
            "group.share.session.timeout.ms",
            _I,
            45000,
            "A share group member heard from nothing for this long is removed.",
            _at_least(1),
        ),
        _K(
            "group.share.min.session.timeout.ms",
            _I,
            45000,
            "Smallest share.session.timeout.ms a share group may be given.",
            _at_least(1),
        ),
        _K(
            "group.share.max.session.timeout.ms",
            _I,
            60000,
            "Largest share.session.timeout.ms a share group may be given.",
            _at_least(1),
        ),
        _K(
            "group.share.heartbeat.interval.ms",
            _I,
            5000,
            "How often share group members are told to heartbeat.",
            _at_least(1),
        ),
        _K("group.share.max.size", _I, 200, "Largest number of members in a share group.", _at_least(1)),
        _K(
            "group.share.min.heartbeat.interval.ms",
            _I,
            5000,
            "Smallest share.heartbeat.interval.ms a share group may be given.",
            _at_least(1),
        ),
        _K(
            "group.share.max.heartbeat.interval.ms",
            _I,
            15000,
            "Largest share.heartbeat.interval.ms a share group may be given.",
            _at_least(1),
        ),
        _K(
            "group.share.record.lock.duration.ms",
            _I,
            30000,
            "How long a share group consumer holds the records it acquired before they are available again.",
            _between(1000, 3600000),
        ),
        _K(
            "group.share.min.record.lock.duration.ms",
            _I,
            15000,
            "Smallest share.record.lock.duration.ms a share group may be given.",
            _between(1000, 30000),
        ),
        _K(
            "group.share.max.record.lock.duration.ms",
            _I,
            60000,
            "Largest share.record.lock.duration.ms a share group may be given.",
            _between(30000, 3600000),
        ),
        _K(
            "group.share.delivery.count.limit",
            _I,
            5,
            "Delivery attempts of a record to a share group before it is archived.",
            _between(2, 10),
        ),
        _K(
            "group.share.min.delivery.count.limit",
            _I,
            2,
            "Smallest share.delivery.count.limit a share group may be given.",
            _between(2, 5),
        ),
        _K(
            "group.share.max.delivery.count.limit",
            _I,
            10,
            "Largest share.delivery.count.limit a share group may be given.",
            _between(5, 25),
        ),
        _K(
            "group.share.partition.max.record.locks",
            _I,
            2000,
            "Records of a share-partition that may be acquired (in flight) at once.",
            _between(100, 10000),
        ),
        _K(
            "group.share.min.partition.max.record.locks",
            _I,
            100,
            "Smallest share.partition.max.record.locks a share group may be given.",
            _between(100, 2000),
        ),
        _K(
            "group.share.max.partition.max.record.locks",
            _I,
            4000,
            "Largest share.partition.max.record.locks a share group may be given.",
            _between(2000, 10000),
        ),
        _K(
            "remote.log.storage.system.enable",
            _B,
            False,
            "Tiered storage (KIP-405) on this broker: topics with remote.storage.enable copy their rolled "
            "segments to the remote storage manager (docs/tiered-storage.md). A broker alone only, so far.",
        ),
        _K(
            "remote.log.storage.manager.class.name",
            _S,
            None,
            "The remote storage manager: filesystem (or Kafka's "
            "org.apache.kafka.server.log.remote.storage.LocalTieredStorage), configured with rsm.config.dir; "
            "s3 is reserved.",
        ),
        _K(
            "remote.log.manager.task.interval.ms",
            _L,
            30000,
            "How often the leader copies rolled segments and applies total retention to remote segments.",
            _at_least(1),
        ),
        _K(
            "remote.log.index.file.cache.total.size.bytes",
            _L,
            1073741824,
            "The local disk the remote reads' chunk cache may use (under the first log dir).",
            _at_least(1),
        ),
        _K(
            "zookeeper.connect",
            _S,
            None,
            "ZooKeeper connection string (host:port[,host:port]/chroot); unset: a broker alone, embedded store.",
        ),
        _K("zookeeper.session.timeout.ms", _I, 18000, "ZooKeeper session timeout.", _at_least(1)),
        _K(
            "zookeeper.connection.timeout.ms",
            _I,
            None,
            "How long to try to reach ZooKeeper (default: zookeeper.session.timeout.ms).",
            _at_least(1),
        ),
        _K("request.timeout.ms", _I, 30000, "Longest a request may wait inside the broker.", _at_least(1)),
        _K(
            "num.recovery.threads.per.data.dir",
            _I,
            1,
            "Threads per log dir that load (and after a crash recover) the logs at startup.",
            _at_least(1),
        ),
        _K(
            "max.connections",
            _I,
            INT_MAX,
            "Most client connections open at once; beyond it new ones wait in the listen backlog.",
            _at_least(0),
        ),
        _K(
            "max.connections.per.ip",
            _I,
            INT_MAX,
            "Most connections open at once from one address; beyond it new ones are closed at once.",
            _at_least(0),
        ),
        _K(
            "max.connections.per.ip.overrides",
            _S,
            "",
            "Per-address exceptions to max.connections.per.ip, as HOST:COUNT[,HOST:COUNT] (names or addresses).",
            _ip_overrides,
        ),
        _K(
            "connections.max.idle.ms",
            _L,
            600000,
            "A connection idle this long (no complete request, nothing in progress) is closed; negative: never.",
        ),
        _K(
            "connections.max.unauthenticated.ms",
            _L,
            10000,
            "A connection of a TLS or SASL listener that has not completed its TLS handshake and SASL "
            "authentication this long after it was accepted is closed.",
            _at_least(1),
        ),
        _K(
            "max.connections.unauthenticated",
            _I,
            -1,
            "Most connections still authenticating (TLS handshake, SASL) at once; a new one beyond it closes "
            "the oldest. -1: half the process's limit of open files.",
            _at_least(-1),
        ),
        _K(
            "queued.max.request.bytes",
            _L,
            -1,
            "Bytes of received requests not yet handled, over all connections, beyond which no connection "
            "starts reading another request (a request's bytes count from when its size is read); 0 or "
            "negative: no bound.",
        ),
        _K(
            "queued.max.request.bytes.per.connection",
            _L,
            4 * 1024 * 1024,
            "Bytes of requests one connection may have received behind a request still in flight (a long "
            "poll, acks=all) before the broker stops reading it until that request is answered; 0: nothing "
            "is read while a request is in flight, as Kafka's broker does.",
            _at_least(0),
        ),
        _K(
            "fetch.wait.max.ms",
            _I,
            30000,
            "Longest a Fetch waits for its min_bytes: a client asking for a longer max_wait_ms is answered after this.",
            _at_least(0),
        ),
        _K("node.id", _I, None, "KRaft's name for broker.id, taken as broker.id as Kafka does.", _at_least(0)),
        # client quotas (KIP-13, KIP-124): the rates are measured over this many windows
        _K("quota.window.num", _I, 11, "Samples kept of each client quota's rate (Kafka's default 11).", _at_least(1)),
        _K("quota.window.size.seconds", _I, 1, "Length of one quota sample in seconds.", _at_least(1)),
        # replication throttles (KIP-73): leader.replication.throttled.rate and its follower's
        _K(
            "replication.quota.window.num",
            _I,
            11,
            "Samples kept of each replication throttle's rate (Kafka's default 11).",
            _at_least(1),
        ),
        _K(
            "replication.quota.window.size.seconds",
            _I,
            1,
            "Length of one replication throttle sample in seconds.",
            _at_least(1),
        ),
        # TLS (Kafka's keys; per listener with the listener.name.<name>. prefix)
        _K(
            "ssl.keystore.type",
            _S,
            "JKS",
            "PEM or PKCS12 (Java's JKS cannot be read: convert it).",
            None,
            ("JKS", "PEM", "PKCS12"),
        ),
        _K("ssl.keystore.location", _S, None, "The key store file: PEM (certificate chain and private key) or PKCS12."),
        _K("ssl.keystore.password", _P, None, "The PKCS12 key store's password."),
        _K("ssl.key.password", _P, None, "The password of the private key (an encrypted PEM key)."),
        _K("ssl.keystore.certificate.chain", _P, None, "The certificate chain in PEM, inline (ssl.keystore.type=PEM)."),
        _K("ssl.keystore.key", _P, None, "The private key in PEM, inline (ssl.keystore.type=PEM)."),
        _K("ssl.truststore.type", _S, "JKS", "PEM or PKCS12.", None, ("JKS", "PEM", "PKCS12")),
        _K("ssl.truststore.location", _S, None, "The trusted certificates: a PEM file or a PKCS12 store."),
        _K("ssl.truststore.password", _P, None, "The PKCS12 trust store's password."),
        _K("ssl.truststore.certificates", _P, None, "Trusted certificates in PEM, inline (ssl.truststore.type=PEM)."),
        _K(
            "ssl.client.auth",
            _S,
            "none",
            "Client certificates: required, requested or none.",
            None,
            ("required", "requested", "none"),
        ),
        _K(
            "ssl.enabled.protocols",
            _LS,
            ["TLSv1.2", "TLSv1.3"],
            "TLS versions accepted.",
            None,
            ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"),
        ),
        _K(
            "ssl.protocol",
            _S,
            "TLSv1.3",
            "The highest TLS version (Java's SSLContext protocol).",
            None,
            ("TLS", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"),
        ),
        _K("ssl.cipher.suites", _LS, [], "Cipher suites, IANA names (as Java's) or OpenSSL's; default: OpenSSL's."),
        _K(
            "ssl.endpoint.identification.algorithm",
            _S,
            "https",
            "https: a broker checks the host name in the certificate of the broker it connects to; empty: not.",
        ),
        _K(
            "ssl.principal.mapping.rules",
            _S,
            "DEFAULT",
            "Client certificate subject -> principal name, as Kafka's RULE:pattern/replacement/[LU],...,DEFAULT.",
        ),
        # SASL (per listener with listener.name.<name>.; JAAS per mechanism: <mechanism>.sasl.jaas.config)
        _K(
            "sasl.enabled.mechanisms",
            _LS,
            ["GSSAPI"],
            "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, "
            "SCRAM-SHA-512, OAUTHBEARER (GSSAPI, Kafka's default, is not "
            "implemented).",
            None,
            SASL_MECHANISMS,
        ),
        _K(
            "sasl.mechanism.inter.broker.protocol",
            _S,
            "GSSAPI",
            "The mechanism brokers authenticate to each other with.",
            None,
            SASL_MECHANISMS,
        ),
        _K(
            "sasl.server.max.receive.size",
            _I,
            524288,
            "Largest SASL token accepted before authentication.",
            _at_least(1),
        ),
        _K(
            "connections.max.reauth.ms",
            _L,
            0,
            "Longest a SASL session lasts before the client must re-authenticate "
            "(KIP-368); 0: for ever (an OAUTHBEARER token's expiry still ends it).",
            _at_least(0),
        ),
        _K(
            "connection.failed.authentication.delay.ms",
            _I,
            100,
            "Delay of the answer to a failed authentication, before the connection closes.",
            _at_least(0),
        ),
        _K(
            "sasl.oauthbearer.jwks.endpoint.url",
            _S,
            None,
            "OAUTHBEARER: the JWKS of the keys that sign tokens, as a file: URL (KIP-768).",
        ),
        _K(
            "sasl.oauthbearer.jwks.endpoint.refresh.ms",
            _L,
            3600000,
            "How often the JWKS file is read again.",
            _at_least(1),
        ),
        _K("sasl.oauthbearer.expected.audience", _LS, [], "OAUTHBEARER: a token's aud must name one of these."),
        _K("sasl.oauthbearer.expected.issuer", _S, None, "OAUTHBEARER: a token's iss must be this."),
        _K("sasl.oauthbearer.scope.claim.name", _S, "scope", "OAUTHBEARER: the claim holding the token's scopes."),
        _K("sasl.oauthbearer.sub.claim.name", _S, "sub", "OAUTHBEARER: the claim naming the principal."),
        _K(
            "sasl.oauthbearer.clock.skew.seconds",
            _I,
            30,
            "OAUTHBEARER: clock skew allowed on exp, nbf, iat.",
            _at_least(0),
        ),
        # ACLs
        _K(
            "authorizer.class.name",
            _S,
            "",
            "The ACL authorizer: Kafka's class names (AclAuthorizer, "
            "StandardAuthorizer) select kbroker's; empty: no authorization.",
            _authorizer,
        ),
        _K("super.users", _S, "", "Principals allowed everything, separated by ';' (User:admin;User:broker)."),
        _K("allow.everyone.if.no.acl.found", _B, False, "Allow a request on a resource that no ACL names."),
        _K(
            "metrics.listener",
            _S,
            None,
            "HOST:PORT of the HTTP listener serving /metrics (Prometheus), the status page (/) and /status.json; "
            "unset: no metrics kept, nothing served (docs/observability.md).",
            _host_port,
        ),
        _K(
            "metrics.listener.web.config.file",
            _S,
            None,
            "A web configuration file as Prometheus' exporters take (YAML: tls_server_config, basic_auth_users with "
            "bcrypt hashes, http_server_config.headers): the metrics listener then speaks TLS and asks every request "
            "for basic authentication (docs/observability.md). Read at start.",
        ),
        _K(
            "schema.registry.listener",
            _S,
            None,
            "[http://|https://]HOST:PORT of the schema registry (Confluent's REST API v1, schemas kept in "
            "schema.registry.topic; docs/schema-registry.md); unset: no registry. https takes its key store from "
            "listener.name.schema_registry.ssl.* (over ssl.*).",
            _registry_listener,
        ),
        _K(
            "schema.registry.advertised.listener",
            _S,
            None,
            "[http://|https://]HOST:PORT the other brokers forward registry writes to (the writer is the leader of "
            "schema.registry.topic); default: schema.registry.listener, a wildcard host replaced by this broker's "
            "advertised host.",
            _registry_listener,
        ),
        _K(
            "schema.registry.topic",
            _S,
            "_schemas",
            "The compacted topic the registry keeps its schemas in (Confluent's "
            "kafkastore.topic), created on the first write.",
        ),
        _K(
            "schema.registry.topic.replication.factor",
            _SH,
            3,
            "Replication factor of schema.registry.topic when the registry creates it (fewer while fewer brokers are "
            "alive).",
            _at_least(1),
        ),
        _K(
            "schema.registry.authentication.method",
            _S,
            "NONE",
            "NONE, or BASIC: every registry request needs HTTP basic credentials of one of the broker's SCRAM users "
            "(principal User:<name>, authorized by the broker's ACL authorizer).",
            None,
            ("NONE", "BASIC"),
        ),
        _K(
            "schema.registry.max.request.bytes",
            _I,
            16 * 1024 * 1024,
            "Largest registry request body taken (larger: 413).",
            _at_least(1024),
        ),
        _K(
            "schema.registry.request.timeout.ms",
            _I,
            30000,
            "How long a registry write waits for the writer, its append and its view.",
            _at_least(1),
        ),
        _K(
            "log.format",
            _S,
            "text",
            "The broker's own log lines on stderr and in log.file: text, or json (one JSON object a line).",
            None,
            ("text", "json"),
        ),
        _K(
            "log.file",
            _S,
            None,
            "Also write the broker's log to this file, rotated by size (log.file.max.bytes, log.file.backup.count).",
        ),
        _K(
            "log.file.max.bytes",
            _L,
            104857600,
            "Size at which log.file and log.state.change.file are rotated; 0: never.",
            _at_least(0),
        ),
        _K("log.file.backup.count", _I, 10, "Rotated files kept of log.file and log.state.change.file.", _at_least(0)),
        _K(
            "log.state.change.file",
            _S,
            None,
            "Kafka's state-change.log: every leadership and ISR change with the "
            "controller epoch, in this file (unset: in the broker's log).",
        ),
        _K(
            "log.request.api",
            _S,
            None,
            "Log every request of this API (e.g. Produce, Metadata) and its answer at "
            "DEBUG, on logger broker.request (Kafka's kafka.request.logger).",
            _api_name,
        ),
        _K(
            "controller.listener.names",
            _LS,
            None,
            "KRaft controller listeners; kbroker has no KRaft controller and binds none of them (said at start).",
        ),
    ]
}

_NO_KRAFT = "kbroker has no KRaft mode: it runs alone, or joins the ZooKeeper cluster of zookeeper.connect"

#: why some of Kafka's tiered storage keys have no effect (docs/tiered-storage.md)
TIERED_STORAGE_NOT_SERVED = (
    "kbroker's tiered storage has no thread pools, quotas or plugin class paths to set (issue 39)"
)
#: the remote storage manager's settings (Kafka's remote.log.storage.manager.impl.prefix)
RSM_PREFIX = "rsm.config."

#: Keys of Kafka 3.x/4.x brokers (KafkaConfig) that kbroker accepts and does not act on, by
#: reason: each one a configuration sets is named in one warning line with its reason.
_NO_EFFECT: dict[str, str] = {
    "a follower's fetch connection leaves its receive buffer to the kernel's autotuning (the leader's "
    "socket.send.buffer.bytes bounds what is in flight)": """
        replica.socket.receive.buffer.bytes""",
    "kbroker runs one event loop (no thread pools or request queues to size)": """
        num.network.threads num.io.threads background.threads
        num.replica.alter.log.dirs.threads log.cleaner.threads group.coordinator.threads
        queued.max.requests""",
    "kbroker's purgatory drops a wait when it completes (there is nothing to purge)": """
        fetch.purgatory.purge.interval.requests producer.purgatory.purge.interval.requests
        delete.records.purgatory.purge.interval.requests""",
    "kbroker's log cleaner sizes its own buffers (an offset map of 4M keys, 16 MiB reads) and does not "
    "throttle its reads and writes": """
        log.cleaner.dedupe.buffer.size log.cleaner.io.buffer.size log.cleaner.io.buffer.load.factor
        log.cleaner.io.max.bytes.per.second""",
    "kbroker loads __consumer_offsets in reads of its own size": """
        offsets.load.buffer.size""",
    "kbroker's listeners take a backlog of 1024 connections": """
        socket.listen.backlog.size""",
    _NO_KRAFT: """
        process.roles controller.quorum.voters controller.quorum.bootstrap.servers
        controller.quorum.append.linger.ms controller.quorum.election.backoff.max.ms
        controller.quorum.election.timeout.ms controller.quorum.fetch.timeout.ms
        controller.quorum.request.timeout.ms controller.quorum.retry.backoff.ms
        metadata.log.dir metadata.log.max.record.bytes.between.snapshots metadata.log.max.snapshot.interval.ms
        metadata.log.segment.bytes metadata.log.segment.min.bytes metadata.log.segment.ms
        metadata.max.idle.interval.ms metadata.max.retention.bytes metadata.max.retention.ms
        broker.heartbeat.interval.ms broker.session.timeout.ms initial.broker.registration.timeout.ms
        server.max.startup.time.ms sasl.mechanism.controller.protocol
        controller.performance.always.log.threshold.ms controller.performance.sample.period.ms
        eligible.leader.replicas.enable unstable.feature.versions.enable
        zookeeper.metadata.migration.enable zookeeper.metadata.migration.min.batch.size""",
    "kbroker has no such security plumbing (Java security providers and callback classes, Kerberos, "
    "delegation tokens)": """
        sasl.jaas.config sasl.client.callback.handler.class sasl.server.callback.handler.class
        sasl.login.class sasl.login.callback.handler.class
        sasl.login.connect.timeout.ms sasl.login.read.timeout.ms sasl.login.refresh.buffer.seconds
        sasl.login.refresh.min.period.seconds sasl.login.refresh.window.factor sasl.login.refresh.window.jitter
        sasl.login.retry.backoff.max.ms sasl.login.retry.backoff.ms sasl.kerberos.kinit.cmd
        sasl.kerberos.min.time.before.relogin sasl.kerberos.principal.to.local.rules sasl.kerberos.service.name
        sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
        sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
        sasl.oauthbearer.jwks.endpoint.retry.backoff.ms sasl.oauthbearer.token.endpoint.url
        ssl.allow.dn.changes ssl.allow.san.changes ssl.engine.factory.class ssl.keymanager.algorithm
        ssl.provider ssl.secure.random.implementation
        ssl.trustmanager.algorithm principal.builder.class security.providers
        delegation.token.master.key delegation.token.secret.key delegation.token.max.lifetime.ms
        delegation.token.expiry.time.ms delegation.token.expiry.check.interval.ms
        password.encoder.secret password.encoder.old.secret password.encoder.keyfactory.algorithm
        password.encoder.cipher.algorithm password.encoder.key.length password.encoder.iterations
        zookeeper.set.acl zookeeper.clientCnxnSocket zookeeper.ssl.client.enable zookeeper.ssl.cipher.suites
        zookeeper.ssl.crl.enable zookeeper.ssl.enabled.protocols zookeeper.ssl.endpoint.identification.algorithm
        zookeeper.ssl.keystore.location zookeeper.ssl.keystore.password zookeeper.ssl.keystore.type
        zookeeper.ssl.ocsp.enable zookeeper.ssl.protocol zookeeper.ssl.truststore.location
        zookeeper.ssl.truststore.password zookeeper.ssl.truststore.type""",
    "kbroker loads __transaction_state in one pass and verifies transactional produces at once": """
        transaction.state.log.load.buffer.size
        add.partitions.to.txn.retry.backoff.max.ms add.partitions.to.txn.retry.backoff.ms""",
    "kbroker's KIP-848 groups have no size limit and no online migration (an empty classic group becomes a "
    "consumer group and back, as with Kafka's group.consumer.migration.policy=disabled); share groups have no "
    "group count limit, pluggable persister or share-fetch purgatory settings": """
        group.coordinator.new.enable group.coordinator.rebalance.protocols group.coordinator.append.linger.ms
        group.consumer.max.size group.consumer.migration.policy
        group.share.max.groups group.share.persister.class.name
        share.coordinator.append.linger.ms
        share.coordinator.load.buffer.size share.coordinator.state.topic.compression.codec
        share.coordinator.threads share.fetch.max.fetch.records
        share.fetch.purgatory.purge.interval.requests""",
    TIERED_STORAGE_NOT_SERVED: """
        remote.fetch.max.wait.ms remote.list.offsets.request.timeout.ms
        remote.log.manager.copier.thread.pool.size
        remote.log.manager.copy.max.bytes.per.second remote.log.manager.copy.quota.window.num
        remote.log.manager.copy.quota.window.size.seconds remote.log.manager.expiration.thread.pool.size
        remote.log.manager.fetch.max.bytes.per.second remote.log.manager.fetch.quota.window.num
        remote.log.manager.fetch.quota.window.size.seconds
        remote.log.manager.task.retry.backoff.max.ms remote.log.manager.task.retry.backoff.ms
        remote.log.manager.task.retry.jitter remote.log.manager.thread.pool.size
        remote.log.metadata.custom.metadata.max.bytes remote.log.metadata.manager.class.name
        remote.log.metadata.manager.class.path remote.log.metadata.manager.impl.prefix
        remote.log.metadata.manager.listener.name remote.log.reader.max.pending.tasks remote.log.reader.threads
        remote.log.storage.manager.class.path remote.log.storage.manager.impl.prefix""",
    "kbroker enforces no log dir move, controller or connection quotas (client quotas: docs/quotas.md)": """
        alter.log.dirs.replication.quota.window.num
        alter.log.dirs.replication.quota.window.size.seconds controller.quota.window.num
        controller.quota.window.size.seconds client.quota.callback.class max.connection.creation.rate""",
    "kbroker has no metrics reporters": """
        metric.reporters metrics.num.samples metrics.recording.level metrics.sample.window.ms
        kafka.metrics.polling.interval.secs kafka.metrics.reporters auto.include.jmx.reporter
        telemetry.max.bytes""",
    "kbroker loads no Java plugins": """
        alter.config.policy.class.name create.topic.policy.class.name replica.selector.class""",
    "kbroker serves its listeners with the latest record format (no separate control plane)": """
        control.plane.listener.name early.start.listeners
        inter.broker.protocol.version log.message.format.version log.message.downconversion.enable""",
    "kbroker does not implement it": """
        broker.id.generation.enable reserved.broker.max.id log.preallocate log.roll.jitter.hours log.roll.jitter.ms
        log.flush.offset.checkpoint.interval.ms log.flush.start.offset.checkpoint.interval.ms
        log.initial.task.delay.ms log.dir.failure.timeout.ms log.message.timestamp.difference.max.ms
        log.message.timestamp.before.max.ms log.message.timestamp.after.max.ms
        compression.gzip.level compression.lz4.level compression.zstd.level fetch.max.bytes
        max.incremental.fetch.session.cache.slots max.request.partition.size.limit
        offsets.commit.required.acks offsets.commit.timeout.ms offsets.topic.compression.codec
        producer.id.expiration.check.interval.ms replica.high.watermark.checkpoint.interval.ms
        replica.socket.timeout.ms controller.socket.timeout.ms socket.connection.setup.timeout.ms
        socket.connection.setup.timeout.max.ms unclean.leader.election.interval.ms unstable.api.versions.enable
        zookeeper.max.in.flight.requests""",
}

#: Kafka broker key -> why it has no effect in kbroker.
IGNORED_KAFKA_KEYS: dict[str, str] = {key: reason for reason, keys in _NO_EFFECT.items() for key in keys.split()}

#: keys DescribeConfigs leaves out, as Kafka does: the authorizer's (Kafka's broker configuration
#: does not define them) and those Kafka 4.4 defines as internal
NOT_DESCRIBED = frozenset(
    {"super.users", "allow.everyone.if.no.acl.found", "share.coordinator.state.topic.prune.interval.ms"}
)

LISTENER_PREFIX = "listener.name."
#: Keys a listener may set for itself (listener.name.<name>.<key>, Kafka's prefix)
LISTENER_KEYS = frozenset(k for k in BROKER_KEYS if k.startswith(("ssl.", "sasl.", "connections.max.reauth.ms")))
#: per mechanism, per listener: listener.name.<name>.<mechanism>.<key> (JAAS, Kafka's callback classes)
MECHANISM_KEYS = ("sasl.jaas.config", "sasl.server.callback.handler.class", "connections.max.reauth.ms")

#: Key prefixes of settings handed to parts kbroker does not have (per-listener security
#: settings, Confluent Server's own keys), accepted with a warning as above.
IGNORED_KAFKA_PREFIXES: dict[str, str] = {
    "listener.name.": "kbroker has no use for this per-listener setting",
    "confluent.": "a Confluent Server setting",
}


def _flag_off(raw: str) -> bool:
    return raw.lower() != "true"


#: Ignored keys whose value would promise what kbroker does not do (encryption, ACLs, a
#: controller): accepted when the value asks nothing kbroker lacks, refused otherwise,
#: never silently weaker than configured. key -> (value acceptable?, why refused, as a
#: format of {value})
REFUSED_VALUES: dict[str, tuple[Callable[[str], bool], str]] = {
    "zookeeper.ssl.client.enable": (
        _flag_off,
        "{value}: kbroker's ZooKeeper client has no TLS; ZooKeeper traffic would be plaintext",
    ),
    "zookeeper.set.acl": (_flag_off, "{value}: kbroker sets no ZooKeeper ACLs; its znodes would be writable by anyone"),
    "process.roles": (
        lambda v: "broker" in [x.strip().lower() for x in v.split(",")],
        "{value} names no broker role: this is a KRaft controller's configuration, and kbroker has no KRaft controller",
    ),
}


@dataclass(frozen=True)
class TopicKey:
    """A topic-level key: its type, the broker key whose value is its default, and how
    the broker value converts (e.g. log.roll.hours -> segment.ms)."""

    name: str
    type: ConfigType
    doc: str
    broker_key: str | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], str | None] | None = None
    #: why a deprecated key is accepted without effect (the warning it logs), else None
    deprecated: str | None = None

    def key(self) -> ConfigKey:
        return ConfigKey(self.name, self.type, self.default, self.doc, self.check, self.choices)


_MESSAGE_FORMAT_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)*(-IV[0-9]+)?")


def _message_format_version(v: str) -> str | None:
    """A Kafka version string as message.format.version took ('0.10.0', '2.8', '3.0-IV1')."""
    return None if _MESSAGE_FORMAT_VERSION.fullmatch(v.strip()) else f"{v!r} is not a Kafka version (e.g. 2.8, 3.0-IV1)"


_THROTTLED_REPLICA = re.compile(r"([0-9]+):([0-9]+)")


def check_throttled_replicas(items: Iterable[str]) -> str | None:
    """A throttled-replicas list (leader/follower.replication.throttled.replicas, split on
    commas) as Kafka's ThrottledReplicaListValidator takes it: every item
    `partition:broker` or empty, or the items making `*`; its message otherwise."""
    stripped = [x.strip() for x in items]
    if "".join(stripped) == "*" or all(not x or _THROTTLED_REPLICA.fullmatch(x) for x in stripped):
        return None
    return (
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


#: Confluent's subject name strategies (io.confluent.kafka.serializers.subject), the
#: topic keys confluent.key/value.subject.name.strategy take by class name or last part
SUBJECT_NAME_STRATEGIES = tuple(
    f"io.confluent.kafka.serializers.subject.{name}"
    for name in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
)


def subject_name_strategy(value: str) -> str | None:
    """The short name (TopicNameStrategy ...) of a subject name strategy given by its
    class name or its short name; None when it is none of Confluent's three."""
    for full in SUBJECT_NAME_STRATEGIES:
        short = full.rpartition(".")[2]
        if value in (full, short):
            return short
    return None


def check_subject_name_strategy(value: str) -> str | None:
    if subject_name_strategy(value) is not None:
        return None
    return "not a subject name strategy (expected one of: " + ", ".join(SUBJECT_NAME_STRATEGIES) + ", or its last part)"


#: the topic keys that ask for schema validation on produce (the broker needs its registry)
SCHEMA_VALIDATION_KEYS = ("confluent.key.schema.validation", "confluent.value.schema.validation")


_T = TopicKey
#: Every topic-level key (CreateTopics configs, AlterConfigs on a TOPIC resource).
TOPIC_KEYS: dict[str, TopicKey] = {
    k.name: k
    for k in [
        _T("cleanup.policy", _LS, "delete and/or compact.", "log.cleanup.policy", choices=("delete", "compact")),
        _T("retention.ms", _L, "Retention time; -1: forever.", "log.retention.ms", check=_at_least(-1)),
        _T("retention.bytes", _L, "Retention size per partition; -1: unlimited.", "log.retention.bytes"),
        _T("segment.bytes", _I, "Segment size before a roll.", "log.segment.bytes", check=_at_least(14)),
        _T("segment.ms", _L, "Segment age before a roll.", "log.roll.ms", check=_at_least(1)),
        _T("segment.index.bytes", _I, "Maximum index file size.", "log.index.size.max.bytes", check=_at_least(4)),
        _T(
            "index.interval.bytes",
            _I,
            "Bytes between offset index entries.",
            "log.index.interval.bytes",
            check=_at_least(0),
        ),
        _T("max.message.bytes", _I, "Largest record batch accepted.", "message.max.bytes", check=_at_least(0)),
        _T(
            "flush.messages", _L, "Records appended before an fsync.", "log.flush.interval.messages", check=_at_least(1)
        ),
        _T("flush.ms", _L, "Time a record may wait for an fsync.", "log.flush.interval.ms", check=_at_least(0)),
        _T(
            "min.insync.replicas",
            _I,
            "Replicas that must acknowledge acks=all.",
            "min.insync.replicas",
            check=_at_least(1),
        ),
        _T("unclean.leader.election.enable", _B, "Allow out-of-sync leaders.", "unclean.leader.election.enable"),
        _T(
            "message.timestamp.type",
            _S,
            "CreateTime or LogAppendTime.",
            "log.message.timestamp.type",
            choices=("CreateTime", "LogAppendTime"),
        ),
        _T(
            "compression.type",
            _S,
            "producer, uncompressed, gzip, snappy, lz4 or zstd.",
            "compression.type",
            choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        ),
        _T(
            "delete.retention.ms",
            _L,
            "How long tombstones survive compaction.",
            "log.cleaner.delete.retention.ms",
            check=_at_least(0),
        ),
        _T(
            "min.compaction.lag.ms",
            _L,
            "Minimum age before compaction.",
            "log.cleaner.min.compaction.lag.ms",
            check=_at_least(0),
        ),
        _T(
            "max.compaction.lag.ms",
            _L,
            "Maximum time uncompacted.",
            "log.cleaner.max.compaction.lag.ms",
            check=_at_least(1),
        ),
        _T(
            "min.cleanable.dirty.ratio",
            _D,
            "Dirty ratio that triggers compaction.",
            "log.cleaner.min.cleanable.ratio",
            check=_between(0, 1),
        ),
        _T(
            "file.delete.delay.ms",
            _L,
            "Delay before a deleted segment's files go.",
            "log.segment.delete.delay.ms",
            check=_at_least(0),
        ),
        _T(
            "leader.replication.throttled.replicas",
            _LS,
            "Replicas (partition:broker,... or *) whose leader "
            "throttles what it sends to out-of-sync followers to leader.replication.throttled.rate.",
            default=[],
            check=check_throttled_replicas,
        ),
        _T(
            "confluent.key.schema.validation",
            _B,
            "Refuse records whose key is not framed with a schema id the registry holds under "
            "the key's subject (docs/schema-registry.md).",
            default=False,
        ),
        _T(
            "confluent.value.schema.validation",
            _B,
            "Refuse records whose value is not framed with a schema id the registry holds under "
            "the value's subject (docs/schema-registry.md).",
            default=False,
        ),
        _T(
            "confluent.key.subject.name.strategy",
            _S,
            "The key's subject: TopicNameStrategy (<topic>-key), RecordNameStrategy or "
            "TopicRecordNameStrategy, Confluent's class name or its last part.",
            default=SUBJECT_NAME_STRATEGIES[0],
            check=check_subject_name_strategy,
        ),
        _T(
            "confluent.value.subject.name.strategy",
            _S,
            "The value's subject: TopicNameStrategy (<topic>-value), RecordNameStrategy or "
            "TopicRecordNameStrategy, Confluent's class name or its last part.",
            default=SUBJECT_NAME_STRATEGIES[0],
            check=check_subject_name_strategy,
        ),
        _T(
            "remote.storage.enable",
            _B,
            "Copy the topic's rolled segments to remote storage (KIP-405); needs "
            "remote.log.storage.system.enable on the brokers.",
            default=False,
        ),
        _T(
            "local.retention.ms",
            _L,
            "With remote storage: how long segments stay on the broker's disk once copied; "
            "-2: retention.ms. Not above retention.ms.",
            "log.local.retention.ms",
            check=_at_least(-2),
        ),
        _T(
            "local.retention.bytes",
            _L,
            "With remote storage: how much of a partition stays on the broker's disk once copied; "
            "-2: retention.bytes. Not above retention.bytes.",
            "log.local.retention.bytes",
            check=_at_least(-2),
        ),
        _T(
            "remote.log.copy.disable",
            _B,
            "With remote storage: copy no more segments (the remote ones stay readable; KIP-950).",
            default=False,
        ),
        _T(
            "remote.log.delete.on.disable",
            _B,
            "Delete the remote segments when remote.storage.enable turns false (KIP-950).",
            default=False,
        ),
        _T(
            "follower.replication.throttled.replicas",
            _LS,
            "Replicas (partition:broker,... or *) a follower "
            "fetches at most follower.replication.throttled.rate for while out of sync.",
            default=[],
            check=check_throttled_replicas,
        ),
    ]
}

#: Deprecated topic keys Kafka 3.x still accepts (TopicConfig's @Deprecated ones and the one
#: Kafka 4.x keeps as a no-op): taken by CreateTopics and AlterConfigs and stored, without
#: effect, each use logging a warning (librdkafka's test 0092 sets message.format.version).
#: Not in TOPIC_KEYS: DescribeConfigs lists them as Kafka 4.x does, not at all; CreateTopics,
#: AlterConfigs and IncrementalAlterConfigs take them.
DEPRECATED_TOPIC_KEYS: dict[str, TopicKey] = {
    k.name: k
    for k in [
        _T(
            "message.format.version",
            _S,
            "[DEPRECATED] Message format version; always 3.0 (v2 batches) here.",
            default="3.0-IV1",
            check=_message_format_version,
            deprecated="deprecated since Kafka 3.0 (removed in 4.0): every log is written in message format v2 "
            "(as 3.0-IV1), whatever the value",
        ),
        _T(
            "message.downconversion.enable",
            _B,
            "[DEPRECATED] Down-conversion for old consumers; none here.",
            default=True,
            deprecated="deprecated (a no-op since Kafka 4.0): kbroker never down-converts; fetch versions older "
            "than message format v2 are not offered",
        ),
        _T(
            "message.timestamp.difference.max.ms",
            _L,
            "[DEPRECATED] Maximum CreateTime skew; not enforced here.",
            default=2**63 - 1,
            check=_at_least(0),
            deprecated="deprecated since Kafka 3.6 (removed in 4.0, replaced by message.timestamp.before.max.ms "
            "and .after.max.ms): kbroker does not reject records by timestamp",
        ),
    ]
}


#: Broker keys a topic key's default is derived from, in Kafka's order of precedence
#: (the synonyms DescribeConfigs lists), where there is more than one.
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}


#: Broker keys that exist only as dynamic configs (Kafka's DynamicConfig.Broker, not
#: KafkaConfig): set per broker or at the cluster default, described once set.
DYNAMIC_ONLY_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _K(
            "leader.replication.throttled.rate",
            _L,
            LONG_MAX,
            "Bytes/s a leader sends to out-of-sync followers of "
            "the replicas topics list in leader.replication.throttled.replicas.",
            _at_least(0),
        ),
        _K(
            "follower.replication.throttled.rate",
            _L,
            LONG_MAX,
            "Bytes/s a follower fetches for the replicas topics "
            "list in follower.replication.throttled.replicas while out of sync.",
            _at_least(0),
        ),
        _K(
            "replica.alter.log.dirs.io.max.bytes.per.second",
            _L,
            LONG_MAX,
            "Bytes/s of moves between log dirs (stored and described; kbroker moves no replica between log dirs).",
            _at_least(0),
        ),
    ]
}

#: The entity name of the cluster-wide default in /config/brokers (Kafka's ConfigEntityName.Default)
DEFAULT_ENTITY = "<default>"

#: Broker keys kbroker changes at runtime (Kafka 3.x's DynamicBrokerConfig.AllDynamicConfigs,
#: those kbroker has): per broker or as the cluster default, in /config/brokers.
DYNAMIC_KEYS = frozenset(
    {
        # the defaults of topic configs (Kafka's DynamicLogConfig): topics without an override follow
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.cleanup.policy",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.segment.delete.delay.ms",
        "log.message.timestamp.type",
        "compression.type",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "message.max.bytes",
        # the log cleaner (LogCleaner.ReconfigurableConfigs)
        "log.cleaner.backoff.ms",
        # the connection limits (SocketServer / DynamicListenerConfig)
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        # the producer state (DynamicProducerStateManagerConfig)
        "producer.id.expiration.ms",
        # thread pools: read at start-up only (recovery), as in Kafka
        "num.recovery.threads.per.data.dir",
        # replication throttles (DynamicConfig.Broker)
        *DYNAMIC_ONLY_KEYS,
    }
)

#: Keys Kafka changes at runtime that kbroker accepts without effect (IGNORED_KAFKA_KEYS):
#: stored and described, each change logging that it has no effect.
DYNAMIC_IGNORED_KEYS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "num.io.threads",
        "num.network.threads",
        "background.threads",
        "num.replica.alter.log.dirs.threads",
        "log.preallocate",
        "log.message.timestamp.difference.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.message.downconversion.enable",
        "metric.reporters",
        "max.connection.creation.rate",
    }
)

#: Settings of one listener changed at runtime, only per broker and with the listener
#: prefix (listener.name.<listener>.<key>), as Kafka's SslConfigs.RECONFIGURABLE_CONFIGS.
DYNAMIC_LISTENER_KEYS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)

#: Kafka's cluster-level listener configs: they may be set at the cluster default
_CLUSTER_LEVEL_LISTENER_KEYS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})


def _scala_set(names: Iterable[str]) -> str:
    """Names as Kafka's messages print a Scala Set."""
    return f"Set({', '.join(names)})"


def broker_key_chain(name: str) -> tuple[str, ...]:
    """Kafka's brokerConfigSynonyms: the keys sharing one setting, in precedence order
    (log.retention.ms/minutes/hours ...); a listener-prefixed key and its base key."""
    for chain in BROKER_SYNONYMS.values():
        if name in chain:
            return chain
    if name.startswith(LISTENER_PREFIX):
        suffix = name[len(LISTENER_PREFIX) :].partition(".")[2]
        if suffix:
            return (name, suffix)
    return (name,)


def validate_dynamic(
    configs: Mapping[str, Any], per_broker: bool, listeners: Iterable[str] | None = None
) -> dict[str, Any]:
    """The dynamic broker configs of one entity (a broker, or the cluster default with
    `per_broker` false), checked as Kafka's DynamicBrokerConfig.validateConfigs: keys that
    cannot change at runtime, security keys without a listener prefix, bad values, then
    per-broker keys at the cluster default, each refused with Kafka's message
    (ConfigError). `listeners`: this broker's listener names (a prefixed key must name one).
    Returns the parsed values."""
    unknown = sorted(k for k in configs if not _is_kafka_broker_key(k))
    if unknown:
        raise ConfigError(unknown[0], f"Unknown configs: {_scala_set(unknown)}", unknown)
    non_dynamic = sorted(k for k in configs if not _dynamic_key(k) and k not in DYNAMIC_LISTENER_KEYS)
    if non_dynamic:
        raise ConfigError(
            non_dynamic[0], f"Cannot update these configs dynamically: {_scala_set(non_dynamic)}", non_dynamic
        )
    unprefixed = sorted(k for k in configs if k in DYNAMIC_LISTENER_KEYS)
    if unprefixed:
        raise ConfigError(
            unprefixed[0],
            "These security configs can be dynamically updated only per-listener "
            f"using the listener prefix: {_scala_set(unprefixed)}",
            unprefixed,
        )
    out: dict[str, Any] = {}
    for name, raw in configs.items():
        if name in DYNAMIC_IGNORED_KEYS:
            out[name] = "" if raw is None else str(raw).strip()
            continue
        base = name[len(LISTENER_PREFIX) :].partition(".")[2] if name.startswith(LISTENER_PREFIX) else name
        key = BROKER_KEYS.get(base) or DYNAMIC_ONLY_KEYS[base]
        try:
            out[name] = key.parse(raw)
        except ConfigError as exc:
            raise ConfigError(
                name, f"Invalid value {raw} for configuration {name}: {str(exc).removeprefix(base + ': ')}", [name]
            ) from None
    if not per_broker:
        per_broker_only = sorted(k for k in configs if k.startswith(LISTENER_PREFIX))
        if per_broker_only:
            raise ConfigError(
                per_broker_only[0],
                "Cannot update these configs at default cluster level, broker id "
                f"must be specified: {_scala_set(per_broker_only)}",
                per_broker_only,
            )
    names = {n.upper() for n in listeners} if listeners is not None else None
    for name in out:
        if name.startswith(LISTENER_PREFIX):
            base = name[len(LISTENER_PREFIX) :].partition(".")[2]
            listener = name[len(LISTENER_PREFIX) :].partition(".")[0].upper()
            if names is not None and listener not in names:
                raise ConfigError(
                    name, f"Invalid value for configuration {name}: no listener {listener} on this broker", [name]
                )
            if BROKER_KEYS[base].type == ConfigType.PASSWORD:
                raise ConfigError(
                    name,
                    f"Invalid value for configuration {name}: kbroker does not store "
                    "passwords in ZooKeeper (Kafka encrypts them with password.encoder.secret, "
                    "which kbroker does not implement); use a key store without a password "
                    "(ssl.keystore.type=PEM, an unencrypted key)",
                    [name],
                )
    if out.get("max.connections.per.ip") == 0 and not out.get("max.connections.per.ip.overrides"):
        raise ConfigError(
            "max.connections.per.ip",
            "Invalid value 0 for configuration max.connections.per.ip: "
            "0 refuses every address; name the allowed ones in "
            "max.connections.per.ip.overrides",
            ["max.connections.per.ip"],
        )
    return out


def _is_kafka_broker_key(name: str) -> bool:
    if name in BROKER_KEYS or name in IGNORED_KAFKA_KEYS or name in DYNAMIC_ONLY_KEYS:
        return True
    if name.startswith(LISTENER_PREFIX):
        listener, _, suffix = name[len(LISTENER_PREFIX) :].partition(".")
        return bool(listener) and (
            suffix in BROKER_KEYS or suffix in MECHANISM_KEYS or suffix.partition(".")[2] in MECHANISM_KEYS
        )
    return False


def _dynamic_key(name: str) -> bool:
    if name in DYNAMIC_KEYS or name in DYNAMIC_IGNORED_KEYS:
        return True
    if name.startswith(LISTENER_PREFIX):
        return name[len(LISTENER_PREFIX) :].partition(".")[2] in DYNAMIC_LISTENER_KEYS
    return False


def is_dynamic(name: str) -> bool:
    """Whether a broker key may change at runtime (DescribeConfigs: read_only false)."""
    return _dynamic_key(name)


def parse_dynamic_lenient(configs: Mapping[str, str], per_broker: bool, what: str) -> dict[str, Any]:
    """Dynamic configs read from the store: each valid entry parsed, an invalid one (written
    by another version, or by hand) left out with a warning, as Kafka's removeInvalidConfigs."""
    out: dict[str, Any] = {}
    for name, raw in configs.items():
        try:
            out.update(validate_dynamic({name: raw}, per_broker))
        except ConfigError as exc:
            log.warning("dynamic broker config %s of %s ignored: %s", name, what, exc)
    return out


def parse_properties(text: str) -> dict[str, str]:
    """Parses Java .properties text (the format of Kafka's server.properties)."""
    out: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not logical and (not line or line[0] in "#!"):
            continue
        # a line ending in an odd number of backslashes continues on the next one
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry = "".join(logical)
        logical = []
        m = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]?\s*(.*)$", entry)
        if not m:
            continue
        out[_unescape(m.group(1))] = _unescape(_rstrip_unescaped(m.group(2)))
    if logical:
        entry = "".join(logical)
        m = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]?\s*(.*)$", entry)
        if m:
            out[_unescape(m.group(1))] = _unescape(_rstrip_unescaped(m.group(2)))
    return out


def _rstrip_unescaped(s: str) -> str:
    """Drops trailing whitespace, except a whitespace character escaped by a backslash
    ('a\\ ' keeps its space, as in Java)."""
    t = s.rstrip()
    if len(t) < len(s) and (len(t) - len(t.rstrip("\\"))) % 2 == 1:
        t = s[: len(t) + 1]
    return t


def _unescape(s: str) -> str:
    def repl(m: re.Match[str]) -> str:
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, s)


#: a group default with its lower and upper bound (Kafka 4.4's group coordinator configs)
GROUP_BOUNDED_KEYS = (
    (
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    ),
    (
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    ),
    ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    (
        "group.share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
    ),
    (
        "group.share.record.lock.duration.ms",
        "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms",
    ),
    (
        "group.share.delivery.count.limit",
        "group.share.min.delivery.count.limit",
        "group.share.max.delivery.count.limit",
    ),
    (
        "group.share.partition.max.record.locks",
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks",
    ),
)


class BrokerConfig:
    """The validated broker configuration. Read values with `config["log.segment.bytes"]`
    or the typed properties below; `ignored` lists accepted Kafka keys without effect and
    `warnings` says, one line each, what the configuration asks that kbroker does not do."""

    def __init__(self, values: Mapping[str, Any] | None = None, sources: Mapping[str, ConfigSource] | None = None):
        self._values: dict[str, Any] = {}
        self._sources: dict[str, ConfigSource] = {}
        self.ignored: list[str] = []
        self.warnings: list[str] = []
        self._endpoints: list[Listener] = []
        self._advertised: list[Listener] = []
        self._inter_broker_listener = "PLAINTEXT"
        self._listener_values: dict[str, dict[str, Any]] = {}  # LISTENER NAME -> key -> value
        #: the remote storage manager's settings (rsm.config.<key>), by <key>
        self.rsm_config: dict[str, str] = {}
        #: the metrics listener's TLS and basic authentication (metrics.listener.web.config.file)
        self.metrics_web: WebConfig | None = None
        for name, key in BROKER_KEYS.items():
            self._values[name] = key.default
            self._sources[name] = ConfigSource.DEFAULT_CONFIG
        errors: list[ConfigError] = []
        unknown: list[ConfigError] = []
        for name, raw in (values or {}).items():
            try:
                self.set(name, raw, (sources or {}).get(name, ConfigSource.STATIC_BROKER_CONFIG))
            except ConfigError as exc:
                (errors if name in BROKER_KEYS or name in IGNORED_KAFKA_KEYS else unknown).append(exc)
        if unknown:
            errors.append(_unknown_keys_error([e.key for e in unknown]))
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ConfigError(errors[0].key, "; ".join(map(str, errors)), [k for e in errors for k in e.keys])
        self._check_relations()
        # the static layer (server.properties and defaults), under the dynamic ones
        self._static = (dict(self._values), dict(self._sources), {k: dict(v) for k, v in self._listener_values.items()})
        #: the dynamic layers (/config/brokers/<default> and /config/brokers/<id>), parsed
        self.dynamic_default: dict[str, Any] = {}
        self.dynamic_broker: dict[str, Any] = {}

    def apply_dynamic(self, default: Mapping[str, Any], per_broker: Mapping[str, Any]) -> set[str]:
        """Puts the dynamic layers over the static one, with Kafka's precedence
        (DYNAMIC_BROKER_CONFIG > DYNAMIC_DEFAULT_BROKER_CONFIG > STATIC_BROKER_CONFIG >
        DEFAULT_CONFIG): a key set in a higher layer hides its synonyms in the lower ones
        (a dynamic log.retention.hours hides a static log.retention.ms), as Kafka's
        overrideProps. Values are validate_dynamic's. Returns the names whose effective
        value changed (listener keys by their prefixed name)."""
        values, sources, listener_values = self._static
        values, sources = dict(values), dict(sources)
        listener_values = {k: dict(v) for k, v in listener_values.items()}
        for layer, source in (
            (default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
        ):
            for name, value in layer.items():
                if name.startswith(LISTENER_PREFIX):
                    listener, _, suffix = name[len(LISTENER_PREFIX) :].partition(".")
                    listener_values.setdefault(listener.upper(), {})[suffix] = value
                    continue
                if name not in BROKER_KEYS:
                    continue  # DYNAMIC_ONLY_KEYS, DYNAMIC_IGNORED_KEYS: in their layer only
                for synonym in broker_key_chain(name):
                    values[synonym] = BROKER_KEYS[synonym].default
                    sources[synonym] = ConfigSource.DEFAULT_CONFIG
                values[name] = value
                sources[name] = source
        changed = {k for k, v in values.items() if v != self._values.get(k)}
        for listener in set(listener_values) | set(self._listener_values):
            new, old = listener_values.get(listener, {}), self._listener_values.get(listener, {})
            changed |= {
                f"{LISTENER_PREFIX}{listener.lower()}.{k}" for k in set(new) | set(old) if new.get(k) != old.get(k)
            }
        self._values, self._sources, self._listener_values = values, sources, listener_values
        self.dynamic_default, self.dynamic_broker = dict(default), dict(per_broker)
        return changed

    def layer(self, source: ConfigSource) -> Mapping[str, Any]:
        """The values one layer sets (DescribeConfigs' synonyms): the broker's dynamic
        configs, the cluster default's, server.properties', Kafka's defaults."""
        if source == ConfigSource.DYNAMIC_BROKER_CONFIG:
            return self.dynamic_broker
        if source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG:
            return self.dynamic_default
        values, sources, _ = self._static
        if source == ConfigSource.STATIC_BROKER_CONFIG:
            return {k: v for k, v in values.items() if sources[k] == ConfigSource.STATIC_BROKER_CONFIG}
        return {k: key.default for k, key in BROKER_KEYS.items() if key.default is not None}

    def set(self, name: str, raw: Any, source: ConfigSource = ConfigSource.STATIC_BROKER_CONFIG) -> None:
        if name.startswith(LISTENER_PREFIX):
            listener, _, suffix = name[len(LISTENER_PREFIX) :].partition(".")
            if listener and suffix in LISTENER_KEYS:
                self._listener_values.setdefault(listener.upper(), {})[suffix] = BROKER_KEYS[suffix].parse(raw)
                return
            mechanism, _, mkey = suffix.partition(".")
            if listener and mechanism.upper() in SASL_MECHANISMS and mkey in MECHANISM_KEYS:
                value = (
                    _convert(BROKER_KEYS["connections.max.reauth.ms"], raw)
                    if mkey.startswith("connections")
                    else str(raw).strip()
                )
                self._listener_values.setdefault(listener.upper(), {})[f"{mechanism.upper()}.{mkey}"] = value
                return
        if name.startswith(RSM_PREFIX) and len(name) > len(RSM_PREFIX):
            self.rsm_config[name[len(RSM_PREFIX) :]] = "" if raw is None else str(raw).strip()
            return
        reason = IGNORED_KAFKA_KEYS.get(name) or next(
            (why for prefix, why in IGNORED_KAFKA_PREFIXES.items() if name.startswith(prefix)), None
        )
        if reason is not None:
            refused = REFUSED_VALUES.get(name)
            text = "" if raw is None else str(raw).strip()
            if refused is not None and not refused[0](text):
                raise ConfigError(name, refused[1].format(value=text))
            self.ignored.append(name)
            self.warnings.append(f"config key {name} has no effect: {reason}")
            return
        key = BROKER_KEYS.get(name)
        if key is None:
            raise ConfigError(name, "unknown configuration key")
        self._values[name] = key.parse(raw)
        self._sources[name] = source

    def _check_relations(self) -> None:
        if self["group.min.session.timeout.ms"] > self["group.max.session.timeout.ms"]:
            raise ConfigError("group.min.session.timeout.ms", "must not exceed group.max.session.timeout.ms")
        self._check_group_bounds()
        self._check_remote_storage()
        self._check_node_id()
        self._endpoints = self._check_listeners("listeners")
        self._advertised = self._endpoints
        if self["advertised.listeners"]:
            self._advertised = self._check_listeners("advertised.listeners")
            bound = {x.name for x in self._endpoints}
            for x in self._advertised:
                if x.name not in bound:
                    raise ConfigError(
                        "advertised.listeners",
                        f"{x.name} is not a listener of listeners (advertised "
                        "listener names must be among the bound ones)",
                    )
        self._check_inter_broker_listener()
        if not self.log_dirs:
            raise ConfigError("log.dirs", "no log directory configured")
        if self["max.connections.per.ip"] == 0 and not self["max.connections.per.ip.overrides"]:
            raise ConfigError(
                "max.connections.per.ip",
                "0 refuses every address; name the allowed ones in max.connections.per.ip.overrides",
            )
        self._check_metrics_web()

    def _check_metrics_web(self) -> None:
        """metrics.listener.web.config.file: read and checked now, so that a file that
        cannot be honoured stops `broker serve` as any bad value does (one line, exit 2)."""
        path = self["metrics.listener.web.config.file"]
        if not path:
            return
        if not self["metrics.listener"]:
            raise ConfigError(
                "metrics.listener.web.config.file",
                "set without metrics.listener: there is no listener for it to protect",
            )
        from broker.metrics.webconfig import WebConfigError, load_web_config

        try:
            self.metrics_web = load_web_config(path)
        except WebConfigError as exc:
            raise ConfigError("metrics.listener.web.config.file", str(exc)) from None
        self.warnings.extend(self.metrics_web.warnings)

    def _check_group_bounds(self) -> None:
        """Kafka 4.4's checks of the KIP-848 and share group defaults against their bounds
        (GroupCoordinatorConfig, ShareGroupConfig): a broker Kafka would refuse to start
        with does not start either."""
        for value, lo, hi in GROUP_BOUNDED_KEYS:
            if self[hi] < self[lo]:
                raise ConfigError(hi, f"must be greater than or equal to {lo}")
            if self[value] < self[lo]:
                raise ConfigError(value, f"must be greater than or equal to {lo}")
            if self[value] > self[hi]:
                raise ConfigError(value, f"must be less than or equal to {hi}")
        for heartbeat, session in (
            ("group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms"),
            ("group.share.heartbeat.interval.ms", "group.share.session.timeout.ms"),
        ):
            if self[heartbeat] >= self[session]:
                raise ConfigError(heartbeat, f"must be less than {session}")

    def _check_node_id(self) -> None:
        """node.id is KRaft's broker.id: one taken for the other, as Kafka does."""
        node_id = self["node.id"]
        if node_id is None:
            return
        if self.source("broker.id") == ConfigSource.DEFAULT_CONFIG:
            self._values["broker.id"] = node_id
            self._sources["broker.id"] = self.source("node.id")
        elif node_id != self.broker_id:
            raise ConfigError(
                "node.id",
                f"{node_id} differs from broker.id {self.broker_id} (the same setting "
                "in Kafka; set one, or both alike)",
            )
        self.warnings.append(f"config key node.id={node_id} is taken as broker.id; {_NO_KRAFT}")

    @classmethod
    def from_sources(cls, config_file: str | None = None, overrides: Mapping[str, Any] | None = None) -> BrokerConfig:
        """File values (server.properties), then command-line overrides on top."""
        values: dict[str, Any] = {}
        sources: dict[str, ConfigSource] = {}
        if config_file is not None:
            try:
                with open(config_file, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise ConfigError("--config", f"cannot read {config_file}: {exc.strerror}") from None
            for k, v in parse_properties(text).items():
                values[k] = v
                sources[k] = ConfigSource.STATIC_BROKER_CONFIG
        for k, v in (overrides or {}).items():
            values[k] = v
            sources[k] = ConfigSource.STATIC_BROKER_CONFIG
        return cls(values, sources)

    def _controller_listener(self, item: str) -> bool:
        names = {n.upper() for n in self["controller.listener.names"] or ()}
        return "://" in item and item.split("://", 1)[0].upper() in names

    def _served(self, key: str) -> list[str]:
        """The listeners of `key` kbroker serves: all but KRaft controller listeners."""
        return [item for item in self[key] if not self._controller_listener(item)]

    def _protocols(self) -> dict[str, str]:
        return {
            name.upper(): protocol.upper()
            for name, _, protocol in (item.partition(":") for item in self["listener.security.protocol.map"])
        }

    def _check_listeners(self, key: str) -> list[Listener]:
        """Kafka's rules: every listener's name has a security protocol
        (listener.security.protocol.map), names and ports differ, and kbroker implements
        the protocol (never plaintext on a port meant to be encrypted). KRaft controller
        listeners (controller.listener.names) are left out, and said so."""
        protocols = self._protocols()
        out: list[Listener] = []
        for item in self[key]:
            host, port = parse_listener(item, key)
            if self._controller_listener(item):
                if key == "listeners":
                    self.warnings.append(
                        f"listener {item} is a KRaft controller listener (controller.listener.names) "
                        f"and is not bound; {_NO_KRAFT}"
                    )
                continue
            name = item.split("://", 1)[0].upper() if "://" in item else "PLAINTEXT"
            if name == "CONTROLLER":
                raise ConfigError(
                    key,
                    f"{item}: kbroker has no KRaft controller; a controller listener would not be bound (remove it)",
                )
            protocol = protocols.get(name)
            if protocol is None:
                raise ConfigError(
                    key, f"{item}: no security protocol for listener {name} (listener.security.protocol.map)"
                )
            if protocol not in IMPLEMENTED_PROTOCOLS:
                raise ConfigError(
                    key,
                    f"{item}: security protocol {protocol} is not implemented (kbroker "
                    f"serves {', '.join(IMPLEMENTED_PROTOCOLS)}); refusing to serve plaintext there",
                )
            if any(x.name == name for x in out):
                raise ConfigError(key, f"{item}: each listener must have a different name ({name} twice)")
            if key == "listeners" and port != 0 and any(x.port == port for x in out):
                raise ConfigError(key, f"{item}: each listener must have a different port ({port} twice)")
            if protocol.startswith("SASL_") and key == "listeners":
                self._check_sasl_listener(name)
            if (
                protocol in ("SSL", "SASL_SSL")
                and key == "listeners"
                and self.listener_value(name, "ssl.keystore.location") is None
                and self.listener_value(name, "ssl.keystore.certificate.chain") is None
            ):
                raise ConfigError(
                    "ssl.keystore.location",
                    f"listener {name} ({protocol}) needs a key store "
                    "(ssl.keystore.location, or ssl.keystore.certificate.chain and ssl.keystore.key; "
                    f"per listener with listener.name.{name.lower()}.)",
                )
            out.append(Listener(name, host, port, protocol))
        if not out:
            raise ConfigError(
                key,
                "every listener is a KRaft controller listener (controller.listener.names); "
                "kbroker needs one to serve clients on",
            )
        return out

    def _check_sasl_listener(self, name: str) -> None:
        mechanisms = self.listener_value(name, "sasl.enabled.mechanisms")
        if not mechanisms:
            raise ConfigError("sasl.enabled.mechanisms", f"listener {name} is a SASL listener with no mechanism")
        if "GSSAPI" in mechanisms:
            key = (
                "sasl.enabled.mechanisms"
                if name.upper() not in self._listener_values
                or "sasl.enabled.mechanisms" not in self._listener_values[name.upper()]
                else f"listener.name.{name.lower()}.sasl.enabled.mechanisms"
            )
            raise ConfigError(
                key,
                f"GSSAPI (Kerberos, Kafka's default) is not implemented; listener {name} needs "
                "sasl.enabled.mechanisms among PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER",
            )

    def _check_inter_broker_listener(self) -> None:
        """inter.broker.listener.name, or else the listener named as
        security.inter.broker.protocol (or the first with that protocol): one of the
        advertised listeners, as Kafka requires."""
        advertised = self.advertised_endpoints
        name = self["inter.broker.listener.name"]
        if name is not None:
            name = name.strip().upper()
            found = next((x for x in advertised if x.name == name), None)
            if found is None:
                raise ConfigError(
                    "inter.broker.listener.name",
                    f"{name} is not a listener of advertised.listeners ({', '.join(x.name for x in advertised)})",
                )
            # Kafka refuses both keys at once; both saying the same thing is taken
            protocol = self["security.inter.broker.protocol"].upper()
            if (
                self.source("security.inter.broker.protocol") != ConfigSource.DEFAULT_CONFIG
                and protocol != found.security_protocol
            ):
                raise ConfigError(
                    "inter.broker.listener.name",
                    f"only one of inter.broker.listener.name and "
                    f"security.inter.broker.protocol may be set ({name} is {found.security_protocol}, "
                    f"not {protocol})",
                )
        else:
            protocol = self["security.inter.broker.protocol"].upper()
            found = next((x for x in advertised if x.name == protocol), None) or next(
                (x for x in advertised if x.security_protocol == protocol), None
            )
            if (
                found is None
                and not self["zookeeper.connect"]
                and self.source("security.inter.broker.protocol") == ConfigSource.DEFAULT_CONFIG
            ):
                found = advertised[0]  # a broker alone talks to no other broker
            if found is None:
                raise ConfigError(
                    "security.inter.broker.protocol",
                    f"{protocol}: no listener of advertised.listeners has it (set inter.broker.listener.name)",
                )
            name = found.name
        self._inter_broker_listener = name
        ib = next(x for x in advertised if x.name == name)
        if ib.security_protocol.startswith("SASL_") and self["zookeeper.connect"]:
            mechanism = self["sasl.mechanism.inter.broker.protocol"]
            if mechanism not in self.listener_value(name, "sasl.enabled.mechanisms"):
                raise ConfigError(
                    "sasl.mechanism.inter.broker.protocol",
                    f"{mechanism} is not enabled on the inter-broker listener {name} (sasl.enabled.mechanisms)",
                )

    @property
    def endpoints(self) -> list[Listener]:
        """The listeners to bind, with their names and security protocols."""
        return self._endpoints

    @property
    def advertised_endpoints(self) -> list[Listener]:
        """What clients and other brokers are told (default: the listeners)."""
        return self._advertised

    @property
    def inter_broker_listener(self) -> str:
        """The name of the listener brokers use to reach each other."""
        return self._inter_broker_listener

    def listener(self, name: str) -> Listener:
        return next(x for x in self._endpoints if x.name == name)

    def listener_value(self, listener_name: str, key: str) -> Any:
        """A per-listener setting: listener.name.<name>.<key> when set, else <key>."""
        values = self._listener_values.get(listener_name.upper())
        if values is not None and key in values:
            return values[key]
        return self[key]

    def mechanism_value(self, listener_name: str, mechanism: str, key: str) -> Any:
        """listener.name.<name>.<mechanism>.<key> (the JAAS config of a mechanism ...), None
        when not set."""
        return self._listener_values.get(listener_name.upper(), {}).get(f"{mechanism.upper()}.{key}")

    def listener_has(self, listener_name: str, key: str) -> bool:
        """Whether <key> is set for the listener (with its prefix, or without)."""
        values = self._listener_values.get(listener_name.upper(), {})
        return key in values or self.source(key) != ConfigSource.DEFAULT_CONFIG

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def source(self, name: str) -> ConfigSource:
        return self._sources.get(name, ConfigSource.DEFAULT_CONFIG)

    def items(self) -> Iterable[tuple[str, Any]]:
        return self._values.items()

    # -- derived values, with Kafka's precedence rules
    @property
    def broker_id(self) -> int:
        return self["broker.id"]

    @property
    def log_dirs(self) -> list[str]:
        dirs = self["log.dirs"] or [self["log.dir"]]
        return [os.path.abspath(d) for d in dirs]

    @property
    def log_dirs_mode(self) -> int:
        """log.dirs.mode as a number."""
        return parse_mode(self["log.dirs.mode"])

    @property
    def listeners(self) -> list[tuple[str, int]]:
        return [(x.host, x.port) for x in self._endpoints]

    @property
    def advertised_listeners(self) -> list[tuple[str, int]]:
        return [(x.host, x.port) for x in self._advertised]

    @property
    def retention_ms(self) -> int:
        if self["log.retention.ms"] is not None:
            ms = self["log.retention.ms"]
        elif self["log.retention.minutes"] is not None:
            ms = self["log.retention.minutes"] * 60000
        else:
            ms = self["log.retention.hours"] * 3600000
        return -1 if ms < 0 else ms  # Kafka: any negative value means unlimited

    @property
    def roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return self["log.roll.ms"]
        return self["log.roll.hours"] * 3600000

    @property
    def flush_ms(self) -> int:
        # Kafka: log.flush.interval.ms, else log.flush.scheduler.interval.ms
        v = self["log.flush.interval.ms"]
        return self["log.flush.scheduler.interval.ms"] if v is None else v

    def topic_default(self, name: str) -> Any:
        """The broker-derived default of a topic-level key."""
        if name == "retention.ms":
            return self.retention_ms
        if name == "segment.ms":
            return self.roll_ms
        if name == "flush.ms":
            return self.flush_ms
        key = TOPIC_KEYS[name]
        return self[key.broker_key] if key.broker_key else key.default

    @property
    def remote_log_storage_system_enabled(self) -> bool:
        """remote.log.storage.system.enable: without it a topic asking for remote storage
        is refused, as Kafka refuses it on a broker without tiered storage."""
        return bool(self._values.get("remote.log.storage.system.enable", False))

    def _check_remote_storage(self) -> None:
        """Tiered storage's settings, checked before anything starts: the storage
        manager named and configured (broker/tier/storage.py says which exist), and a
        broker alone (followers do not fetch from remote storage yet)."""
        if not self["remote.log.storage.system.enable"]:
            return
        from broker.tier.storage import check_manager

        check_manager(self["remote.log.storage.manager.class.name"], self.rsm_config)
        if self["zookeeper.connect"]:
            raise ConfigError(
                "remote.log.storage.system.enable",
                "kbroker's tiered storage runs on a broker alone so far (no zookeeper.connect): "
                "followers cannot yet fetch what the leader keeps in remote storage only",
            )

    def log_config(self, overrides: Mapping[str, Any] | None = None) -> LogConfig:
        return LogConfig(self, overrides or {})


def _unknown_keys_error(names: list[str]) -> ConfigError:
    """One error naming every unknown key, with the nearest known key where one is close
    (a typo such as log.retention.hour)."""
    known = [*BROKER_KEYS, *IGNORED_KAFKA_KEYS]
    described = []
    for name in names:
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        described.append(f"{name} (did you mean {near[0]}?)" if near else name)
    if len(names) == 1:
        return ConfigError(names[0], f"unknown configuration key{described[0][len(names[0]) :]}")
    return ConfigError(names[0], f"unknown configuration keys: {', '.join(described)}", names)


def parse_listener(text: str, key: str = "listeners") -> tuple[str, int]:
    """'PLAINTEXT://host:port' or 'host:port' -> (host, port). An empty host means all
    interfaces, as in Kafka. Errors name `key`."""
    rest = text.split("://", 1)[1] if "://" in text else text
    host, sep, port = rest.rpartition(":")
    if not sep:
        raise ConfigError(key, f"{text!r} is not [PROTOCOL://]HOST:PORT")
    host = host.strip("[]")
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(key, f"{text!r}: port {port!r} is not a number") from None
    if not 0 <= p <= 65535:
        raise ConfigError(key, f"{text!r}: port {p} out of range")
    return host, p


def validate_topic_configs(configs: Mapping[str, Any], warn: bool = True) -> dict[str, Any]:
    """Parses topic-level overrides; ConfigError for unknown keys or bad values. A
    deprecated key (DEPRECATED_TOPIC_KEYS) is accepted and, with `warn`, logs a warning
    saying it has no effect (Kafka 3.x logs one too)."""
    out: dict[str, Any] = {}
    for name, raw in configs.items():
        key = TOPIC_KEYS.get(name) or DEPRECATED_TOPIC_KEYS.get(name)
        if key is None:
            raise ConfigError(name, "unknown topic configuration key")
        out[name] = key.key().parse(raw)
        if key.deprecated and warn:
            log.warning("topic configuration %s=%s accepted but has no effect: %s", name, raw, key.deprecated)
    return out


def _invalid_value(name: str, value: Any, message: str) -> ConfigError:
    """Kafka's ConfigException(name, value, message) text."""
    return ConfigError(name, f"Invalid value {value} for configuration {name}: {message}", [name])


def check_remote_storage(
    config: LogConfig, existing: Mapping[str, Any] | None = None, system_enabled: bool = False
) -> None:
    """Kafka's checks of a topic's remote storage configs (LogConfig.validateTopicLogConfigValues,
    KRaft mode), on the effective `config` (its overrides over the broker's defaults), with
    `existing` the topic's overrides before the change (None: a new topic). ConfigError with
    Kafka's message; every one is INVALID_CONFIG on the wire. A topic without remote storage
    that never had it is not looked at beyond its types."""
    if config["remote.storage.enable"]:
        if not system_enabled:
            raise ConfigError(
                "remote.storage.enable",
                "Tiered Storage functionality is disabled in the broker. "
                "Topic cannot be configured with remote log storage.",
                ["remote.storage.enable"],
            )
        if config.compact:
            raise ConfigError(
                "cleanup.policy",
                "Remote log storage is unsupported for the compacted topics",
                ["cleanup.policy"],
            )
        for local, total, unlimited in (
            ("local.retention.bytes", "retention.bytes", -1),
            ("local.retention.ms", "retention.ms", -1),
        ):
            total_value, local_value = config[total], config[local]
            if total_value != unlimited and local_value != -2:
                if local_value == -1:
                    raise _invalid_value(
                        local, local_value, f"Value must not be -1 as {total} value is set as {total_value}."
                    )
                if local_value > total_value:
                    raise _invalid_value(
                        local, local_value, f"Value must not be more than {total} property value: {total_value}"
                    )
        if config["remote.log.copy.disable"]:
            for local, total in (("local.retention.bytes", "retention.bytes"), ("local.retention.ms", "retention.ms")):
                if config[local] != -2 and config[local] != config[total]:
                    raise ConfigError(
                        local,
                        f"When `remote.log.copy.disable` is set to true, the `{local}` and `{total}` must be set "
                        "to the identical value because there will be no more logs copied to the remote storage.",
                        [local],
                    )
        return
    was_enabled = str((existing or {}).get("remote.storage.enable", "false")).lower() == "true"
    if was_enabled and not config["remote.log.delete.on.disable"]:
        raise ConfigError(
            "remote.storage.enable",
            "It is invalid to disable remote storage without deleting remote data. If you want to keep the "
            "remote data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. "
            "If you want to disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`.",
            ["remote.storage.enable"],
        )


class LogConfig:
    """Effective settings of one topic's logs: topic overrides over broker defaults."""

    __slots__ = ("broker", "overrides", "_cache", "schema_check")

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, Any]):
        self.broker = broker
        self.overrides = dict(overrides)
        self._cache: dict[str, Any] = {}
        #: the topic's check of schema ids on produce (broker/registry/validation.py
        #: TopicSchemaCheck, set by the MetadataCache), None when it validates nothing
        self.schema_check: Any = None

    def __getitem__(self, name: str) -> Any:
        try:
            return self._cache[name]
        except KeyError:
            pass
        value = self.overrides[name] if name in self.overrides else self.broker.topic_default(name)
        self._cache[name] = value
        return value

    def source(self, name: str) -> ConfigSource:
        if name in self.overrides:
            return ConfigSource.DYNAMIC_TOPIC_CONFIG
        key = TOPIC_KEYS[name]
        # the broker value may come from a synonym (log.retention.hours for retention.ms),
        # static or dynamic
        for broker_key in BROKER_SYNONYMS.get(name, (key.broker_key,) if key.broker_key else ()):
            if self.broker.source(broker_key) != ConfigSource.DEFAULT_CONFIG:
                return self.broker.source(broker_key)
        return ConfigSource.DEFAULT_CONFIG

    # typed shortcuts for the log's hot decisions
    @property
    def segment_bytes(self) -> int:
        return self["segment.bytes"]

    @property
    def segment_ms(self) -> int:
        return self["segment.ms"]

    @property
    def retention_ms(self) -> int:
        return self["retention.ms"]

    @property
    def retention_bytes(self) -> int:
        return self["retention.bytes"]

    @property
    def index_interval_bytes(self) -> int:
        return self["index.interval.bytes"]

    @property
    def max_index_size(self) -> int:
        return self["segment.index.bytes"]

    @property
    def max_message_bytes(self) -> int:
        return self["max.message.bytes"]

    @property
    def producer_id_expiration_ms(self) -> int:
        return self.broker["producer.id.expiration.ms"]

    @property
    def flush_messages(self) -> int:
        return self["flush.messages"]

    @property
    def flush_ms(self) -> int:
        return self["flush.ms"]

    @property
    def compact(self) -> bool:
        return "compact" in self["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return "delete" in self["cleanup.policy"]

    @property
    def log_append_time(self) -> bool:
        return self["message.timestamp.type"] == "LogAppendTime"

    @property
    def min_insync_replicas(self) -> int:
        return self["min.insync.replicas"]

    @property
    def remote_storage(self) -> bool:
        """Does the topic keep its rolled segments in remote storage (remote.storage.enable)?"""
        return bool(self["remote.storage.enable"])

    @property
    def local_retention_ms(self) -> int:
        """local.retention.ms, -2 resolved to retention.ms (Kafka's LogConfig.localRetentionMs)."""
        v = self["local.retention.ms"]
        return self.retention_ms if v == -2 else v

    @property
    def local_retention_bytes(self) -> int:
        """local.retention.bytes, -2 resolved to retention.bytes."""
        v = self["local.retention.bytes"]
        return self.retention_bytes if v == -2 else v

    @property
    def schema_validation(self) -> bool:
        """Does the topic validate keys or values against the schema registry?"""
        return bool(self["confluent.key.schema.validation"] or self["confluent.value.schema.validation"])
