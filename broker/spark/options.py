"""The source and sink options, parsed and checked once, with the names (and defaults) of
Spark's own Kafka connector. Kafka client settings take the prefix `kbroker.` or, as in
Spark's connector, `kafka.` (kafka.bootstrap.servers = kbroker.bootstrap.servers).

Spark hands options over lower-cased (a case-insensitive map), so every lookup here is
by the lower-cased name while messages use the documented spelling (a client setting is
named with the prefix it was given). A bad option raises KBrokerOptionError: one line that
names the option, says what was wrong and what is expected. Every option is checked:

    Spark's options of the side (source or sink)    parsed; the other side's refused
    client settings the side honours                parsed (CONSUMER_HONOURED, PRODUCER_HONOURED)
    client settings that cannot apply               refused with the reason (REFUSED; ssl.*,
                                                    sasl.*, a security.protocol but PLAINTEXT)
    Kafka settings without meaning here             accepted, as Spark's connector would pass
                                                    them on, with one warning naming them
    anything else (a typo)                          refused, with the nearest known name;
                                                    except on the sink: Spark's writers hand
                                                    it their own options (queryName, path,
                                                    checkpointLocation ...), which pass, and
                                                    so does any other key that is not near a
                                                    sink option (as Spark's Kafka sink passes
                                                    over what it does not know)

Offsets specifications, as Spark's Kafka source takes them:

    startingOffsets / endingOffsets   "earliest" | "latest" | {"topic":{"0":23,"1":-2}}
                                      (-2 = earliest, -1 = latest)
    startingTimestamp / endingTimestamp            one timestamp (ms) for every partition
    startingOffsetsByTimestamp / endingOffsetsByTimestamp   {"topic":{"0":1700000000000}}

Precedence (Spark's): timestamp > offsets by timestamp > offsets.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

from broker.addresses import parse_bootstrap

if TYPE_CHECKING:
    from broker.spark.formats import ColumnFormat

log = logging.getLogger("broker.spark")

# Kafka's producer defaults, as the project's client has them (broker.client.sender; a
# unit test keeps the two the same). This module imports nothing of the client, nor
# pyarrow: Spark imports it in every Python worker that looks the source up or asks it
# for its schema, at each query's start (tests/spark/test_units.py keeps it light).
DELIVERY_TIMEOUT_MS = 120_000
RETRIES_MAX = 2**31 - 1
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 1000
BUFFER_MEMORY = 32 << 20

EARLIEST, LATEST = -2, -1
PREFIX = "kbroker."
KAFKA_PREFIX = "kafka."
BOOTSTRAP = "kbroker.bootstrap.servers"


class KBrokerOptionError(ValueError):
    """A bad data source option; the message names it."""

    def __init__(self, option: str, problem: str):
        self.option = option
        super().__init__(f"kbroker: option '{option}' {problem}")


class KBrokerDataLossError(RuntimeError):
    """Offsets a query still needed are gone (retention, DeleteRecords, a deleted topic)."""


def data_loss_message(detail: str) -> str:
    # Spark's Kafka source words it so; users search for it
    return (
        f"kbroker: {detail}. Some data may have been lost because they are not available in the "
        f"broker any more; either the data was aged out by the broker or the topic may have been "
        f"deleted before all the data in the topic was processed. If you want your query to "
        f"continue (skipping the lost data) in such cases, set the source option "
        f"'failOnDataLoss' to 'false'."
    )


#: how Spark's catalogs hand a table's OPTIONS to its provider: each option under this
#: prefix (TableCatalog.OPTION_PREFIX), beside the table's properties (provider, owner,
#: location, comment, TBLPROPERTIES ...) and, from some code paths, the options again
#: without the prefix
CATALOG_OPTION_PREFIX = "option."


def table_options(options) -> tuple[dict, bool]:
    """(the data source options, whether they are a catalog table's). A catalog table's
    options are its `option.*` entries with the prefix removed; its other properties are
    the catalog's and the table's own, not options of this source."""
    given = dict(options or {})
    if not any(str(k).lower().startswith(CATALOG_OPTION_PREFIX) for k in given):
        return given, False
    n = len(CATALOG_OPTION_PREFIX)
    return {str(k)[n:]: v for k, v in given.items() if str(k).lower().startswith(CATALOG_OPTION_PREFIX)}, True


#: the field metadata a catalog table's schema carries its options in
TABLE_OPTIONS_KEY = "kbroker.table.options"


def with_table_options(schema, options):
    """A catalog table's schema (what schema() answers when Spark creates the table),
    each field carrying the table's options in its metadata. Spark hands a Python data
    source's reader and writer of a catalog table the table's schema but not its options
    (PySpark's PythonTable keeps no properties): the schema, which the catalog stores,
    brings them. Other schemas are returned as they are."""
    given, table = table_options(options)
    if not table:
        return schema
    from pyspark.sql.types import StructField, StructType

    stored = json.dumps({CATALOG_OPTION_PREFIX + k: v for k, v in sorted(given.items())})
    return StructType(
        [
            StructField(f.name, f.dataType, f.nullable, {**(f.metadata or {}), TABLE_OPTIONS_KEY: stored})
            for f in schema.fields
        ]
    )


def options_for(options, schema) -> dict:
    """The options a reader or writer works with. When `schema` is a catalog table's
    (see with_table_options) and the options do not name the bootstrap servers (a read
    or write of the table, `spark.table(...)`, `INSERT INTO`, with at most options of
    its own), the table's options, those given adding to them; otherwise the options
    given (a `format("kbroker")` read or write of rows that come from a table)."""
    given = dict(options or {})
    found = {
        f.metadata[TABLE_OPTIONS_KEY]
        for f in getattr(schema, "fields", None) or ()
        if f.metadata and TABLE_OPTIONS_KEY in f.metadata
    }
    if not found:
        return given
    if len(found) > 1:
        raise KBrokerOptionError(
            "kafka.bootstrap.servers",
            "is not given and the columns carry the options of "
            "more than one kbroker table; name the servers and the topic in the options",
        )
    stored = found.pop()
    own, table = table_options(given)
    if any(str(k).lower() in (BOOTSTRAP, "kafka.bootstrap.servers") for k in own):
        return given
    merged = dict(json.loads(stored))
    merged.update({CATALOG_OPTION_PREFIX + str(k): v for k, v in own.items()})
    return merged


class _Options(dict):
    """Options by lower-cased name, `kafka.X` folded into `kbroker.X`; `spelling` maps
    each to the name as given, `spell(name)` is the name to put in a message (a client
    setting with the prefix it was given, else the documented spelling passed in).
    `table`: the options of a catalog table (CREATE TABLE ... USING kbroker OPTIONS
    (...)), which serve reads and writes alike."""

    def __init__(self, options):
        super().__init__()
        self.spelling: dict[str, str] = {}
        options, self.table = table_options(options)
        for k, v in options.items():
            given, value = str(k), ("" if v is None else str(v))
            key = given.lower()
            if key.startswith(KAFKA_PREFIX):
                key = PREFIX + key[len(KAFKA_PREFIX) :]
                if key in self and self[key] != value:
                    raise KBrokerOptionError(
                        given, f"= {value!r} conflicts with '{self.spell(key)}' = {self[key]!r}: give one of them"
                    )
            elif key.startswith(PREFIX) and key in self and self[key] != value:
                raise KBrokerOptionError(
                    given, f"= {value!r} conflicts with '{self.spell(key)}' = {self[key]!r}: give one of them"
                )
            self[key] = value
            self.spelling.setdefault(key, given)

    def spell(self, name: str) -> str:
        return self.spelling.get(name, name) if name.startswith(PREFIX) else name


# ---------------------------------------------------------------- offset specifications


def to_json(position: dict) -> dict:
    """{(t, p): off} -> {"t": {"p": off}}, canonically ordered (Spark compares offsets as
    JSON: two equal positions must serialise alike)."""
    out: dict[str, dict[str, int]] = {}
    for t, p in sorted(position):
        out.setdefault(t, {})[str(p)] = int(position[(t, p)])
    return out


def from_json(data: dict) -> dict:
    """Spark's Kafka offsets JSON -> {(t, p): off}."""
    return {(t, int(p)): int(off) for t, ps in (data or {}).items() for p, off in ps.items()}


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop reading.

    kind "earliest" | "latest": every partition; "offsets": {topic: {partition: offset}}
    (offset -2 earliest, -1 latest); "timestamps": {topic: {partition: ms}};
    "timestamp": one ms value for every partition.
    """

    kind: str
    option: str
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)  # "offsets", "timestamps"
    timestamp: int = -1  # "timestamp"


def _parse_partition_json(option: str, text: str, what: str) -> dict[str, dict[int, int]]:
    example = '{"topic":{"0":23,"1":-2}}' if what == "offset" else '{"topic":{"0":1700000000000}}'
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise KBrokerOptionError(
            option,
            f'is not valid JSON ({exc}); expected "earliest", "latest" or {example}'
            if what == "offset"
            else f"is not valid JSON ({exc}); expected {example}",
        ) from None
    if not isinstance(data, dict) or not data:
        raise KBrokerOptionError(option, f"must be a JSON object of topics like {example}, not {text!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise KBrokerOptionError(option, f"topic {topic!r} must map partition numbers to {what}s like {example}")
        tp: dict[int, int] = {}
        for p, v in parts.items():
            try:
                pn = int(p)
            except (TypeError, ValueError):
                raise KBrokerOptionError(option, f"partition {p!r} of topic {topic!r} is not a number") from None
            if pn < 0:
                raise KBrokerOptionError(option, f"partition {p!r} of topic {topic!r} is negative")
            if isinstance(v, bool) or not isinstance(v, int):
                raise KBrokerOptionError(option, f"the {what} of {topic}-{p} must be an integer, not {v!r}")
            if what == "offset" and v < EARLIEST:
                raise KBrokerOptionError(
                    option, f"the offset of {topic}-{p} is {v}: offsets are >= 0, or -2 (earliest) / -1 (latest)"
                )
            if what == "timestamp" and v < 0:
                raise KBrokerOptionError(option, f"the timestamp of {topic}-{p} is negative")
            tp[pn] = v
        out[topic] = tp
    return out


def _parse_offsets(opts: dict, prefix: str, default: str, streaming: bool | None) -> OffsetSpec:
    """prefix: "starting" or "ending"; streaming None: not known yet (no batch-only rule)."""
    ts_opt, by_ts_opt, off_opt = f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp", f"{prefix}Offsets"
    if ts_opt.lower() in opts:
        text = opts[ts_opt.lower()].strip()
        try:
            value = int(text)
        except ValueError:
            raise KBrokerOptionError(ts_opt, f"must be a timestamp in milliseconds, not {text!r}") from None
        if value < 0:
            raise KBrokerOptionError(ts_opt, f"must not be negative ({value})")
        return OffsetSpec("timestamp", ts_opt, timestamp=value)
    if by_ts_opt.lower() in opts:
        return OffsetSpec(
            "timestamps", by_ts_opt, offsets=_parse_partition_json(by_ts_opt, opts[by_ts_opt.lower()], "timestamp")
        )
    text = opts.get(off_opt.lower(), default).strip()
    low = text.lower()
    if low in ("earliest", "latest"):
        spec = OffsetSpec(low, off_opt)
    elif text.startswith("{"):
        spec = OffsetSpec("offsets", off_opt, offsets=_parse_partition_json(off_opt, text, "offset"))
    else:
        raise KBrokerOptionError(
            off_opt, f'must be "earliest", "latest" or JSON like {{"topic":{{"0":23,"1":-2}}}}, not {text!r}'
        )
    # Spark's rules: a batch query cannot start at latest nor end at earliest
    if streaming is False and prefix == "starting":
        if spec.kind == "latest" or (
            spec.offsets and any(v == LATEST for ps in spec.offsets.values() for v in ps.values())
        ):
            raise KBrokerOptionError(off_opt, "cannot be latest (-1) for a batch query")
    if prefix == "ending":
        if spec.kind == "earliest" or (
            spec.offsets and any(v == EARLIEST for ps in spec.offsets.values() for v in ps.values())
        ):
            raise KBrokerOptionError(off_opt, "cannot be earliest (-2): a query ends at latest or at offsets")
    return spec


# ---------------------------------------------------------------- helpers


def _bool(opts: _Options, name: str, default: bool) -> bool:
    text = opts.get(name.lower())
    if text is None or text == "":
        return default
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise KBrokerOptionError(opts.spell(name), f"must be true or false, not {text!r}")


@overload
def _int(opts: _Options, name: str, default: int, minimum: int = 0) -> int: ...
@overload
def _int(opts: _Options, name: str, default: None, minimum: int = 0) -> int | None: ...


def _int(opts: _Options, name: str, default: int | None, minimum: int = 0) -> int | None:
    text = opts.get(name.lower())
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise KBrokerOptionError(opts.spell(name), f"must be an integer, not {text!r}") from None
    if value < minimum:
        raise KBrokerOptionError(opts.spell(name), f"must be >= {minimum}, not {value}")
    return value


@overload
def _str(opts: _Options, name: str, default: str) -> str: ...
@overload
def _str(opts: _Options, name: str, default: None) -> str | None: ...


def _str(opts: _Options, name: str, default: str | None) -> str | None:
    text = opts.get(name.lower(), "").strip()
    return text or default


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.I)


def _duration_ms(opts: dict, name: str, default_ms: int) -> int:
    text = opts.get(name.lower())
    if text is None or text.strip() == "":
        return default_ms
    m = _DURATION.match(text)
    if not m:
        raise KBrokerOptionError(name, f"must be a duration like 15m, 30s or 500ms, not {text!r}")
    n, unit = int(m.group(1)), (m.group(2) or "ms").lower()
    return n * {"ms": 1, "s": 1000, "m": 60000, "min": 60000, "h": 3600000, "d": 86400000}[unit]


def _group_id(opts: _Options, name: str) -> str | None:
    if name.lower() not in opts:
        return None
    text = opts[name.lower()].strip()
    if not text:
        raise KBrokerOptionError(name, "names no group (expected a consumer group id)")
    if len(text) > 255 or any(ord(c) < 32 for c in text):
        raise KBrokerOptionError(name, f"is not a valid group id: {text!r}")
    return text


def bootstrap_servers(opts: _Options) -> str:
    text = opts.get(BOOTSTRAP, "").strip()
    if not text:
        raise KBrokerOptionError(
            BOOTSTRAP,
            "must be specified: host:port[,host:port...] (or kafka.bootstrap.servers, as in Spark's Kafka connector)",
        )
    try:
        parse_bootstrap(text)
    except ValueError as exc:
        raise KBrokerOptionError(opts.spell(BOOTSTRAP), f"is not valid: {exc}") from None
    return text


# ---------------------------------------------------------------- which options exist


#: Spark's Kafka source options (and this source's own), as documented.
SOURCE_OPTIONS = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "includeHeaders",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "groupIdPrefix",
    "commitOffsetsToGroup",
    # registry-framed keys and values as typed columns (broker/spark/formats.py)
    "valueFormat",
    "keyFormat",
    "schema.registry.url",
    "schema.registry.basic.auth.user.info",
    "valueSubject",
    "keySubject",
    "valueSchemaVersion",
    "keySchemaVersion",
    "valueAvroSchema",
    "keyAvroSchema",
    "valueProtobufMessage",
    "keyProtobufMessage",
    "mode",
)
#: the sink's own
SINK_OPTIONS = (
    "topic",
    "deliveryGuarantee",
    # registry-framed keys and values (broker/spark/avro_sink.py, schema_sink.py)
    "valueFormat",
    "keyFormat",
    "schema.registry.url",
    "schema.registry.basic.auth.user.info",
    "valueSubject",
    "keySubject",
    "valueAvroSchema",
    "keyAvroSchema",
    "valueProtobufSchema",
    "keyProtobufSchema",
    "valueProtobufMessage",
    "keyProtobufMessage",
    "valueJsonSchema",
    "keyJsonSchema",
    "auto.register.schemas",
    "use.latest.version",
    "value.subject.name.strategy",
    "key.subject.name.strategy",
)
#: what Spark's DataFrameWriter / DataStreamWriter hand a Python sink beside the user's
#: options (seen with Spark 4.3: checkpointLocation, queryName(), save(path) / start(path)):
#: they pass, as Spark's Kafka sink lets them pass
SPARK_WRITER_OPTIONS = ("checkpointLocation", "queryName", "path")
#: Spark options accepted without effect: the source joins no consumer group
SOURCE_NO_EFFECT = ("groupIdPrefix",)

#: Kafka client settings (after the prefix) the source and the sink read
CONSUMER_HONOURED = frozenset(
    """
bootstrap.servers fetch.max.bytes max.partition.fetch.bytes fetch.max.wait.ms request.timeout.ms check.crcs
client.id isolation.level security.protocol""".split()
)
PRODUCER_HONOURED = frozenset(
    """
bootstrap.servers acks compression.type batch.size max.in.flight.requests.per.connection retries
delivery.timeout.ms retry.backoff.ms retry.backoff.max.ms buffer.memory max.block.ms request.timeout.ms
client.id security.protocol""".split()
)

#: Kafka client settings that mean nothing for kbroker's clients (no consumer group, no
#: linger, no client metrics ...): accepted with a warning
_COMMON_NO_EFFECT = """
client.dns.lookup metadata.max.age.ms send.buffer.bytes receive.buffer.bytes client.rack reconnect.backoff.ms
reconnect.backoff.max.ms enable.metrics.push metrics.sample.window.ms
metrics.num.samples metrics.recording.level metric.reporters auto.include.jmx.reporter
socket.connection.setup.timeout.ms socket.connection.setup.timeout.max.ms connections.max.idle.ms
metadata.recovery.strategy default.api.timeout.ms"""
CONSUMER_NO_EFFECT = frozenset(
    (
        _COMMON_NO_EFFECT
        + """
group.id group.instance.id group.protocol group.remote.assignor max.poll.records auto.commit.interval.ms
partition.assignment.strategy fetch.min.bytes exclude.internal.topics internal.leave.group.on.close
allow.auto.create.topics max.poll.interval.ms rebalance.timeout.ms session.timeout.ms
heartbeat.interval.ms retry.backoff.ms retry.backoff.max.ms"""
    ).split()
)
PRODUCER_NO_EFFECT = frozenset(
    (
        _COMMON_NO_EFFECT
        + """
linger.ms max.request.size compression.gzip.level
compression.lz4.level compression.zstd.level enable.idempotence transaction.timeout.ms
partitioner.adaptive.partitioning.enable partitioner.availability.timeout.ms partitioner.ignore.keys
metadata.max.idle.ms"""
    ).split()
)

#: Kafka client settings refused, with the reason (as Spark's connector refuses most of them)
REFUSED = {
    "auto.offset.reset": "is not used: say where to start with startingOffsets (as Spark's Kafka source)",
    "enable.auto.commit": "is not used: the source commits no offsets, a query's positions are in its "
    "checkpoint (as Spark's Kafka source)",
    "key.deserializer": "is not used: keys are binary columns; cast them in the query",
    "value.deserializer": "is not used: values are binary columns; cast them in the query",
    "key.serializer": "is not used: the key column is written as it is (string or binary)",
    "value.serializer": "is not used: the value column is written as it is (string or binary)",
    "interceptor.classes": "is not supported: kbroker's client has no interceptors",
    "partitioner.class": "is not supported: rows go by the partition column or Kafka's default partitioner",
    "transactional.id": "is not used: ask for transactions with deliveryGuarantee",
}


def _check_known(opts: _Options, side: str) -> tuple[str, ...]:
    """Refuses what the side does not know; returns the options accepted without effect."""
    own, other = (SOURCE_OPTIONS, SINK_OPTIONS) if side == "source" else (SINK_OPTIONS, SOURCE_OPTIONS)
    honoured, no_effect = (
        (CONSUMER_HONOURED, CONSUMER_NO_EFFECT) if side == "source" else (PRODUCER_HONOURED, PRODUCER_NO_EFFECT)
    )
    # a catalog table's options serve both sides: the other side's pass here
    other_settings = (
        ((PRODUCER_HONOURED | PRODUCER_NO_EFFECT) if side == "source" else (CONSUMER_HONOURED | CONSUMER_NO_EFFECT))
        if opts.table
        else frozenset()
    )
    by_lower = {name.lower(): name for name in own}
    spark_writer = {name.lower(): name for name in SPARK_WRITER_OPTIONS}
    ignored: list[str] = []
    passed: list[str] = []  # sink: other options, none of ours (Spark's, a library's)
    for key in sorted(opts):
        given = opts.spelling[key]
        if key.startswith(PREFIX):
            setting = key[len(PREFIX) :]
            prefix = given[: len(given) - len(setting)]
            if setting in REFUSED:
                raise KBrokerOptionError(given, REFUSED[setting])
            if setting.startswith("ssl."):
                raise KBrokerOptionError(given, "is not supported: kbroker has no TLS (PLAINTEXT only)")
            if setting.startswith("sasl."):
                raise KBrokerOptionError(given, "is not supported: kbroker has no SASL (PLAINTEXT only)")
            if setting in no_effect:
                ignored.append(given)
            elif setting not in honoured and setting not in other_settings:
                known = sorted(honoured | no_effect)
                near = difflib.get_close_matches(setting, known, n=1, cutoff=0.8)
                hint = f" (did you mean '{prefix}{near[0]}'?)" if near else ""
                role = "consumer" if side == "source" else "producer"
                raise KBrokerOptionError(given, f"is not a Kafka {role} setting the kbroker {side} knows{hint}")
            continue
        name = by_lower.get(key)
        if name is None and side == "sink" and key in spark_writer:
            continue
        if name is None:
            if key in {o.lower() for o in other}:
                if opts.table:
                    continue
                raise KBrokerOptionError(
                    given,
                    "is a sink option: a read names its topics with subscribe, subscribePattern or assign"
                    if side == "source"
                    else "is a source option: the sink writes to the 'topic' option or column",
                )
            candidates = by_lower if side == "source" else {**by_lower, **spark_writer}
            near = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.75)
            hint = f" (did you mean '{candidates[near[0]]}'?)" if near else ""
            if side == "sink" and not near:
                # Spark's writers hand a sink more than its own options (Spark's Kafka sink
                # ignores what it does not know): only a misspelt option is refused
                passed.append(given)
                continue
            raise KBrokerOptionError(given, f"is not an option of the kbroker {side}{hint}")
        if side == "source" and name in SOURCE_NO_EFFECT:
            ignored.append(name)
    protocol = opts.get(PREFIX + "security.protocol", "PLAINTEXT").strip().upper()
    if protocol != "PLAINTEXT":
        raise KBrokerOptionError(
            opts.spell(PREFIX + "security.protocol"),
            f"= {protocol} is not supported: kbroker serves PLAINTEXT only (no TLS or SASL)",
        )
    without_effect = tuple(sorted(ignored))
    if without_effect and without_effect not in _warned:
        _warned.add(without_effect)
        log.warning(
            "kbroker: option(s) %s have no effect on the kbroker %s (accepted as Spark's Kafka connector accepts them)",
            ", ".join(f"'{o}'" for o in without_effect),
            side,
        )
    others = tuple(sorted(passed))
    if others and others not in _warned:
        _warned.add(others)
        log.info(
            "kbroker: option(s) %s are not the kbroker sink's; passed over (as Spark's Kafka sink "
            "passes over what it does not know)",
            ", ".join(f"'{o}'" for o in others),
        )
    return without_effect


_warned: set[tuple[str, ...]] = set()


# ---------------------------------------------------------------- the source


@dataclass(frozen=True)
class Subscription:
    """subscribe (topics), subscribePattern (regex) or assign ({topic: [partitions]})."""

    kind: str
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # pattern
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)  # assign

    @property
    def option(self) -> str:
        return {"subscribe": "subscribe", "pattern": "subscribePattern", "assign": "assign"}[self.kind]


def _subscription(opts: _Options) -> Subscription:
    given = [name for name in ("assign", "subscribe", "subscribePattern") if name.lower() in opts]
    if not given and opts.table and opts.get("topic", "").strip():
        # a catalog table naming its topic once: read from the topic it writes to
        return Subscription("subscribe", topics=(opts["topic"].strip(),))
    if len(given) != 1:
        if not given:
            raise KBrokerOptionError(
                "subscribe", "(or 'subscribePattern' or 'assign') must be specified: which topics to read"
            )
        raise KBrokerOptionError(
            given[1],
            f"cannot be combined with '{given[0]}': give exactly one of 'assign', 'subscribe', 'subscribePattern'",
        )
    name = given[0]
    text = opts[name.lower()].strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise KBrokerOptionError(name, "names no topic (expected a comma-separated list of topics)")
        return Subscription("subscribe", topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise KBrokerOptionError(name, f"is not a valid regular expression: {exc}") from None
        if not text:
            raise KBrokerOptionError(name, "is empty")
        return Subscription("pattern", pattern=text)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise KBrokerOptionError(name, f'is not valid JSON ({exc}); expected {{"topic":[0,1]}}') from None
    if (
        not isinstance(data, dict)
        or not data
        or not all(
            isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps)
            for ps in data.values()
        )
    ):
        raise KBrokerOptionError(name, f'must be JSON like {{"topic":[0,1]}}, not {text!r}')
    return Subscription("assign", assign={t: tuple(sorted(set(ps))) for t, ps in data.items()})


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    streaming: bool | None
    bootstrap_option: str = BOOTSTRAP
    fail_on_data_loss: bool = True
    include_headers: bool = False
    starting_by_timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    fetch_max_bytes: int = 16 << 20
    partition_max_bytes: int = 16 << 20
    fetch_max_wait_ms: int = 500
    client_timeout_s: float = 30.0
    validate_crc: bool = True
    client_id: str = "kbroker-spark"
    isolation_level: int = 0  # 1: kafka.isolation.level=read_committed
    no_effect: tuple[str, ...] = ()
    commit_group: str | None = None  # commitOffsetsToGroup: the group that sees the query's positions
    key_format: ColumnFormat | None = None  # keyFormat=avro: how the key column is decoded
    value_format: ColumnFormat | None = None
    #: ((ColumnFormat, the reader schema the driver settled, as JSON), ...): set by the
    #: source's reader()/streamReader() from the schema's metadata (formats.py)
    decoders: tuple = ()

    @classmethod
    def parse(cls, options, *, streaming: bool | None) -> SourceOptions:
        """streaming None: at load(), before Spark says which (the rules of one mode wait)."""
        opts = _Options(options)
        no_effect = _check_known(opts, "source")
        bootstrap = bootstrap_servers(opts)
        subscription = _subscription(opts)
        starting = _parse_offsets(opts, "starting", "latest" if streaming else "earliest", streaming)
        ending = None
        if streaming:
            for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
                if name.lower() in opts:
                    raise KBrokerOptionError(name, "is for batch queries only: a streaming query has no end")
        else:
            ending = _parse_offsets(opts, "ending", "latest", streaming)
        if streaming is False:
            for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "commitOffsetsToGroup"):
                if name.lower() in opts:
                    raise KBrokerOptionError(name, "is for streaming queries only")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise KBrokerOptionError("startingOffsetsByTimestampStrategy", f"must be error or latest, not {strategy!r}")
        isolation = opts.get(PREFIX + "isolation.level", "read_uncommitted").strip().lower()
        if isolation not in ("read_uncommitted", "read_committed"):
            raise KBrokerOptionError(
                opts.spell(PREFIX + "isolation.level"), f"must be read_committed or read_uncommitted, not {isolation!r}"
            )
        max_per_trigger = _int(opts, "maxOffsetsPerTrigger", None, 1)
        min_per_trigger = _int(opts, "minOffsetsPerTrigger", None, 1)
        if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise KBrokerOptionError(
                "minOffsetsPerTrigger", f"({min_per_trigger}) must not exceed maxOffsetsPerTrigger ({max_per_trigger})"
            )
        fetch_max = _int(opts, "kbroker.fetch.max.bytes", 16 << 20, 1024)
        timeout_ms = _int(opts, "kbroker.request.timeout.ms", 30000, 100)
        return cls(
            bootstrap=bootstrap,
            subscription=subscription,
            starting=starting,
            ending=ending,
            streaming=streaming,
            bootstrap_option=opts.spell(BOOTSTRAP),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", False),
            starting_by_timestamp_strategy=strategy,
            max_offsets_per_trigger=max_per_trigger,
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60 * 1000),
            min_partitions=_int(opts, "minPartitions", None, 1),
            max_records_per_partition=_int(opts, "maxRecordsPerPartition", None, 1),
            poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 120000, 1),
            fetch_offset_retries=_int(opts, "fetchOffset.numRetries", 3, 0),
            fetch_offset_retry_interval_ms=_int(opts, "fetchOffset.retryIntervalMs", 10, 0),
            fetch_max_bytes=fetch_max,
            # Kafka's default is 1 MiB; one partition per Fetch here, so the whole fetch.max.bytes
            partition_max_bytes=_int(opts, "kbroker.max.partition.fetch.bytes", fetch_max, 1024),
            fetch_max_wait_ms=_int(opts, "kbroker.fetch.max.wait.ms", 500, 0),
            client_timeout_s=timeout_ms / 1000,
            validate_crc=_bool(opts, "kbroker.check.crcs", True),
            client_id=_str(opts, "kbroker.client.id", "kbroker-spark"),
            isolation_level=1 if isolation == "read_committed" else 0,
            no_effect=no_effect,
            commit_group=_group_id(opts, "commitOffsetsToGroup"),
            key_format=_column_format(opts, "key", subscription, timeout_ms / 1000),
            value_format=_column_format(opts, "value", subscription, timeout_ms / 1000),
        )


FORMATS = ("raw", "avro", "protobuf", "json-schema")


def _column_format(opts: _Options, column: str, subscription: Subscription, timeout_s: float) -> ColumnFormat | None:
    """keyFormat / valueFormat and the options that go with them (formats.py)."""
    name = f"{column}Format"
    fmt = opts.get(name.lower(), "raw").strip().lower() or "raw"
    own = [f"{column}Subject", f"{column}SchemaVersion", f"{column}AvroSchema", f"{column}ProtobufMessage"]
    if fmt not in FORMATS:
        raise KBrokerOptionError(name, f"must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "raw":
        for o in own:
            if o.lower() in opts:
                raise KBrokerOptionError(o, f"needs {name}=avro (the {column} column is read raw, as binary)")
        if column == "value" and "mode" in opts and opts.get("keyformat", "raw").strip().lower() == "raw":
            raise KBrokerOptionError("mode", "applies to decoded columns: give valueFormat or keyFormat")
        return None
    if fmt != "avro" and f"{column}avroschema" in opts:
        raise KBrokerOptionError(f"{column}AvroSchema", f"is for {name}=avro, not {fmt}")
    if fmt != "protobuf" and f"{column}protobufmessage" in opts:
        raise KBrokerOptionError(f"{column}ProtobufMessage", f"is for {name}=protobuf, not {fmt}")
    url = opts.get("schema.registry.url", "").strip()
    if not url:
        raise KBrokerOptionError(
            "schema.registry.url", f"must be given with {name}={fmt}: the registry that has the writers' schemas"
        )
    if not re.match(r"^https?://[^/\s]+", url):
        raise KBrokerOptionError("schema.registry.url", f"must be an http:// or https:// URL, not {url!r}")
    explicit = opts.get(f"{column}avroschema".lower())
    if explicit is not None:
        try:
            json.loads(explicit)
        except ValueError as exc:
            if not explicit.strip().replace(".", "").replace("_", "").isalnum():
                raise KBrokerOptionError(f"{column}AvroSchema", f"is not JSON ({exc}): give an Avro schema") from None
    subject = opts.get(f"{column}subject".lower(), "").strip() or None
    if subject is None and explicit is None:
        if subscription.kind == "subscribe" and len(subscription.topics) == 1:
            subject = f"{subscription.topics[0]}-{column}"  # Confluent's TopicNameStrategy
        else:
            raise KBrokerOptionError(
                f"{column}Subject",
                f"(or '{column}AvroSchema') must be given: the reader schema has no default subject "
                f"unless subscribe names one topic (<topic>-{column})",
            )
    version = opts.get(f"{column}schemaversion".lower(), "latest").strip().lower() or "latest"
    if version != "latest":
        try:
            n = int(version)
        except ValueError:
            n = 0
        if n < 1:
            raise KBrokerOptionError(
                f"{column}SchemaVersion", f"must be latest or a version number >= 1, not {version!r}"
            )
        version = str(n)
        if explicit is not None:
            raise KBrokerOptionError(f"{column}SchemaVersion", f"cannot be combined with {column}AvroSchema")
    mode = opts.get("mode", "FAILFAST").strip().upper()
    if mode not in ("FAILFAST", "PERMISSIVE"):
        raise KBrokerOptionError("mode", f"must be FAILFAST or PERMISSIVE (as Spark's from_avro), not {mode!r}")
    from broker.spark.formats import ColumnFormat

    return ColumnFormat(
        column=column,
        fmt=fmt,
        registry_url=url,
        user_info=opts.get("schema.registry.basic.auth.user.info") or None,
        subject=subject,
        version=version,
        explicit_schema=explicit,
        permissive=mode == "PERMISSIVE",
        timeout_s=timeout_s,
        message=opts.get(f"{column}protobufmessage", "").strip() or None,
    )


# ---------------------------------------------------------------- the sink

DELIVERY_AT_LEAST_ONCE = "at-least-once"
DELIVERY_EXACTLY_ONCE = "exactly-once"


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    bootstrap_option: str = BOOTSTRAP
    acks: int = -1
    compression: str | None = None
    batch_bytes: int = 1 << 20
    max_in_flight: int = 5
    retries: int = RETRIES_MAX
    timeout_ms: int = 30000
    delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS
    retry_backoff_ms: int = RETRY_BACKOFF_MS
    retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS
    buffer_memory: int = BUFFER_MEMORY
    max_block_ms: int = 60000
    delivery: str = DELIVERY_AT_LEAST_ONCE
    client_id: str = "kbroker-spark-writer"
    no_effect: tuple = ()
    table: bool = False  # the options of a catalog table (INSERT INTO, writeTo)
    formats: tuple = ()  # SinkFormat of the key and/or value column (valueFormat=avro ...)

    @classmethod
    def parse(cls, options) -> SinkOptions:
        opts = _Options(options)
        no_effect = _check_known(opts, "sink")
        bootstrap = bootstrap_servers(opts)
        topic = opts.get("topic", "").strip() or None
        if topic is None and opts.table:
            # a catalog table reading one topic writes to it
            subscribed = [t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()]
            if len(subscribed) == 1:
                topic = subscribed[0]
        acks_text = opts.get(PREFIX + "acks", "all").strip().lower()
        acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(acks_text)
        if acks is None:
            raise KBrokerOptionError(opts.spell(PREFIX + "acks"), f"must be all, -1, 1 or 0, not {acks_text!r}")
        compression = opts.get(PREFIX + "compression.type", "none").strip().lower()
        if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise KBrokerOptionError(
                opts.spell(PREFIX + "compression.type"), f"must be none, gzip, snappy, lz4 or zstd, not {compression!r}"
            )
        timeout_ms = _int(opts, "kbroker.request.timeout.ms", 30000, 100)
        delivery_timeout_ms = _int(opts, "kbroker.delivery.timeout.ms", DELIVERY_TIMEOUT_MS, 1)
        if delivery_timeout_ms < timeout_ms:
            # Kafka's producer refuses the same (delivery.timeout.ms >= linger.ms + request.timeout.ms)
            raise KBrokerOptionError(
                opts.spell(PREFIX + "delivery.timeout.ms"),
                f"({delivery_timeout_ms}) must be at least request.timeout.ms ({timeout_ms})",
            )
        backoff_ms = _int(opts, "kbroker.retry.backoff.ms", RETRY_BACKOFF_MS, 0)
        delivery = opts.get("deliveryguarantee", DELIVERY_AT_LEAST_ONCE).strip().lower()
        if delivery not in (DELIVERY_AT_LEAST_ONCE, DELIVERY_EXACTLY_ONCE):
            raise KBrokerOptionError(
                "deliveryGuarantee", f"must be {DELIVERY_AT_LEAST_ONCE} or {DELIVERY_EXACTLY_ONCE}, not {delivery!r}"
            )
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            bootstrap_option=opts.spell(BOOTSTRAP),
            acks=acks,
            compression=None if compression == "none" else compression,
            # batch.size: the producer's batch.size, bytes of one record batch
            batch_bytes=_int(opts, "kbroker.batch.size", 1 << 20, 1024),
            max_in_flight=_int(opts, "kbroker.max.in.flight.requests.per.connection", 5, 1),
            retries=_int(opts, "kbroker.retries", RETRIES_MAX, 0),
            timeout_ms=timeout_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_ms=backoff_ms,
            retry_backoff_max_ms=_int(opts, "kbroker.retry.backoff.max.ms", max(backoff_ms, RETRY_BACKOFF_MAX_MS), 0),
            buffer_memory=_int(opts, "kbroker.buffer.memory", BUFFER_MEMORY, 1024),
            max_block_ms=_int(opts, "kbroker.max.block.ms", 60000, 0),
            delivery=delivery,
            client_id=_str(opts, "kbroker.client.id", "kbroker-spark-writer"),
            no_effect=no_effect,
            table=opts.table,
            formats=tuple(f for f in (_sink_format(opts, "key"), _sink_format(opts, "value")) if f is not None),
        )


#: the sink's own schema option per format
SINK_SCHEMA_OPTION = {"avro": "AvroSchema", "protobuf": "ProtobufSchema", "json-schema": "JsonSchema"}
#: Confluent's subject name strategies (the serializers' key/value.subject.name.strategy)
STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")


def _sink_format(opts: _Options, column: str):
    """The sink's keyFormat / valueFormat and the options that go with them."""
    name = f"{column}Format"
    fmt = opts.get(name.lower(), "raw").strip().lower() or "raw"
    if fmt not in FORMATS:
        raise KBrokerOptionError(name, f"must be one of {', '.join(FORMATS)}, not {fmt!r}")
    schema_options = {f: f"{column}{o}" for f, o in SINK_SCHEMA_OPTION.items()}
    own = (f"{column}Subject", *schema_options.values(), f"{column}ProtobufMessage", f"{column}.subject.name.strategy")
    if fmt == "raw":
        for o in own:
            if o.lower() in opts:
                raise KBrokerOptionError(
                    o, f"needs {name}=avro, protobuf or json-schema (the {column} column is written as it is)"
                )
        return None
    for f, o in schema_options.items():
        if f != fmt and o.lower() in opts:
            raise KBrokerOptionError(o, f"is for {name}={f}, not {fmt}")
    if fmt != "protobuf" and f"{column}protobufmessage" in opts:
        raise KBrokerOptionError(f"{column}ProtobufMessage", f"is for {name}=protobuf, not {fmt}")
    url = opts.get("schema.registry.url", "").strip()
    if not url:
        raise KBrokerOptionError("schema.registry.url", f"must be given with {name}={fmt}: the registry of the schemas")
    if not re.match(r"^https?://[^/\s]+", url):
        raise KBrokerOptionError("schema.registry.url", f"must be an http:// or https:// URL, not {url!r}")
    explicit = opts.get(schema_options[fmt].lower())
    if explicit is not None and fmt != "protobuf":
        try:
            json.loads(explicit)
        except ValueError as exc:
            kind = "an Avro schema" if fmt == "avro" else "a JSON Schema"
            raise KBrokerOptionError(schema_options[fmt], f"is not JSON ({exc}): give {kind}") from None
    if explicit is not None and not explicit.strip():
        raise KBrokerOptionError(schema_options[fmt], "is empty: give a schema")
    strategy = opts.get(f"{column}.subject.name.strategy", "TopicNameStrategy").strip()
    short = strategy.rsplit(".", 1)[-1]
    if short not in STRATEGIES or (short != strategy and strategy != f"io.confluent.kafka.serializers.subject.{short}"):
        raise KBrokerOptionError(
            f"{column}.subject.name.strategy",
            f"must be one of {', '.join(STRATEGIES)} (or Confluent's class name of one), not {strategy!r}",
        )
    subject = opts.get(f"{column}subject", "").strip() or None
    if subject is not None and f"{column}.subject.name.strategy" in opts:
        raise KBrokerOptionError(
            f"{column}Subject", f"names the subject: it cannot be combined with {column}.subject.name.strategy"
        )
    use_latest = _bool(opts, "use.latest.version", False)
    if f"{column}protobufmessage" in opts and explicit is None and not use_latest:
        raise KBrokerOptionError(
            f"{column}ProtobufMessage",
            f"names a message of {column}ProtobufSchema or of the latest version (use.latest.version=true); "
            "the derived schema has one message",
        )
    if use_latest and explicit is not None:
        raise KBrokerOptionError(
            "use.latest.version", f"takes the subject's latest schema: it cannot be combined with {schema_options[fmt]}"
        )
    from broker.spark.formats import SinkFormat

    return SinkFormat(
        column=column,
        registry_url=url,
        user_info=opts.get("schema.registry.basic.auth.user.info") or None,
        subject=subject,
        explicit_schema=explicit,
        auto_register=_bool(opts, "auto.register.schemas", True),
        fmt=fmt,
        message=opts.get(f"{column}protobufmessage", "").strip() or None,
        use_latest=use_latest,
        strategy=short,
    )
