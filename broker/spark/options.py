"""The source and sink options, parsed and checked once, with the names (and defaults) of
Spark's own Kafka connector; only the client prefix differs: `kbroker.` instead of `kafka.`
(kbroker.bootstrap.servers, kbroker.fetch.max.bytes, ...).

Spark hands options over lower-cased (a case-insensitive map), so every lookup here is
by the lower-cased name while messages use the documented spelling. A bad option raises
KBrokerOptionError: one line that names the option, says what was wrong and what is
expected.

Offsets specifications, as Spark's Kafka source takes them:

    startingOffsets / endingOffsets   "earliest" | "latest" | {"topic":{"0":23,"1":-2}}
                                      (-2 = earliest, -1 = latest)
    startingTimestamp / endingTimestamp            one timestamp (ms) for every partition
    startingOffsetsByTimestamp / endingOffsetsByTimestamp   {"topic":{"0":1700000000000}}

Precedence (Spark's): timestamp > offsets by timestamp > offsets.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from broker.client.connection import parse_bootstrap

EARLIEST, LATEST = -2, -1
PREFIX = "kbroker."
BOOTSTRAP = "kbroker.bootstrap.servers"


class KBrokerOptionError(ValueError):
    """A bad data source option; the message names it."""

    def __init__(self, option: str, problem: str):
        self.option = option
        super().__init__(f"kbroker: option '{option}' {problem}")


def _lower(options) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options or {}).items()}


# ---------------------------------------------------------------- offset specifications


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop reading.

    kind "earliest" | "latest": every partition; "offsets": {topic: {partition: offset}}
    (offset -2 earliest, -1 latest); "timestamps": {topic: {partition: ms}};
    "timestamp": one ms value for every partition.
    """
    kind: str
    option: str
    offsets: dict | None = None
    timestamp: int | None = None


def _parse_partition_json(option: str, text: str, what: str) -> dict[str, dict[int, int]]:
    example = '{"topic":{"0":23,"1":-2}}' if what == "offset" else '{"topic":{"0":1700000000000}}'
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise KBrokerOptionError(option, f"is not valid JSON ({exc}); expected \"earliest\", \"latest\" or "
                                         f"{example}" if what == "offset" else
                                 f"is not valid JSON ({exc}); expected {example}") from None
    if not isinstance(data, dict) or not data:
        raise KBrokerOptionError(option, f"must be a JSON object of topics like {example}, not {text!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise KBrokerOptionError(option, f"topic {topic!r} must map partition numbers to {what}s "
                                             f"like {example}")
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
                raise KBrokerOptionError(option, f"the offset of {topic}-{p} is {v}: offsets are >= 0, "
                                                 f"or -2 (earliest) / -1 (latest)")
            if what == "timestamp" and v < 0:
                raise KBrokerOptionError(option, f"the timestamp of {topic}-{p} is negative")
            tp[pn] = v
        out[topic] = tp
    return out


def _parse_offsets(opts: dict, prefix: str, default: str, streaming: bool) -> OffsetSpec:
    """prefix: "starting" or "ending"."""
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
        return OffsetSpec("timestamps", by_ts_opt,
                          offsets=_parse_partition_json(by_ts_opt, opts[by_ts_opt.lower()], "timestamp"))
    text = opts.get(off_opt.lower(), default).strip()
    low = text.lower()
    if low in ("earliest", "latest"):
        spec = OffsetSpec(low, off_opt)
    elif text.startswith("{"):
        spec = OffsetSpec("offsets", off_opt, offsets=_parse_partition_json(off_opt, text, "offset"))
    else:
        raise KBrokerOptionError(off_opt, f"must be \"earliest\", \"latest\" or JSON like "
                                          f"{{\"topic\":{{\"0\":23,\"1\":-2}}}}, not {text!r}")
    # Spark's rules: a batch query cannot start at latest nor end at earliest
    if not streaming and prefix == "starting":
        if spec.kind == "latest" or (spec.offsets and any(v == LATEST for ps in spec.offsets.values()
                                                          for v in ps.values())):
            raise KBrokerOptionError(off_opt, "cannot be latest (-1) for a batch query")
    if prefix == "ending":
        if spec.kind == "earliest" or (spec.offsets and any(v == EARLIEST for ps in spec.offsets.values()
                                                            for v in ps.values())):
            raise KBrokerOptionError(off_opt, "cannot be earliest (-2): a query ends at latest or at offsets")
    return spec


# ---------------------------------------------------------------- helpers


def _bool(opts: dict, name: str, default: bool) -> bool:
    text = opts.get(name.lower())
    if text is None or text == "":
        return default
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise KBrokerOptionError(name, f"must be true or false, not {text!r}")


def _int(opts: dict, name: str, default: int | None, minimum: int = 0) -> int | None:
    text = opts.get(name.lower())
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise KBrokerOptionError(name, f"must be an integer, not {text!r}") from None
    if value < minimum:
        raise KBrokerOptionError(name, f"must be >= {minimum}, not {value}")
    return value


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


def bootstrap_servers(opts: dict) -> str:
    text = opts.get(BOOTSTRAP, "").strip()
    if not text:
        hint = (" (this source's name for kafka.bootstrap.servers)" if "kafka.bootstrap.servers" in opts
                else "")
        raise KBrokerOptionError(BOOTSTRAP, f"must be specified: host:port[,host:port...]{hint}")
    try:
        parse_bootstrap(text)
    except ValueError as exc:
        raise KBrokerOptionError(BOOTSTRAP, f"is not valid: {exc}") from None
    return text


def client_settings(opts: dict) -> dict[str, str]:
    """Every kbroker.* option but the bootstrap servers, prefix stripped."""
    return {k[len(PREFIX):]: v for k, v in opts.items() if k.startswith(PREFIX) and k != BOOTSTRAP}


# ---------------------------------------------------------------- the source


@dataclass(frozen=True)
class Subscription:
    """subscribe (topics), subscribePattern (regex) or assign ({topic: [partitions]})."""
    kind: str
    topics: tuple = ()
    pattern: str | None = None
    assign: dict | None = None

    @property
    def option(self) -> str:
        return {"subscribe": "subscribe", "pattern": "subscribePattern", "assign": "assign"}[self.kind]


def _subscription(opts: dict) -> Subscription:
    given = [name for name in ("assign", "subscribe", "subscribePattern") if name.lower() in opts]
    if len(given) != 1:
        if not given:
            raise KBrokerOptionError("subscribe", "(or 'subscribePattern' or 'assign') must be specified: "
                                                  "which topics to read")
        raise KBrokerOptionError(given[1], f"cannot be combined with '{given[0]}': give exactly one of "
                                           f"'assign', 'subscribe', 'subscribePattern'")
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
        raise KBrokerOptionError(name, f"is not valid JSON ({exc}); expected {{\"topic\":[0,1]}}") from None
    if (not isinstance(data, dict) or not data
            or not all(isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                    for p in ps) for ps in data.values())):
        raise KBrokerOptionError(name, f"must be JSON like {{\"topic\":[0,1]}}, not {text!r}")
    return Subscription("assign", assign={t: tuple(sorted(set(ps))) for t, ps in data.items()})


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    streaming: bool
    fail_on_data_loss: bool = True
    include_headers: bool = False
    starting_by_timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120000
    fetch_max_bytes: int = 16 << 20
    client_timeout_s: float = 30.0
    validate_crc: bool = True
    client: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, options, *, streaming: bool) -> "SourceOptions":
        opts = _lower(options)
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
            for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
                if name.lower() in opts:
                    raise KBrokerOptionError(name, "is for streaming queries only")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise KBrokerOptionError("startingOffsetsByTimestampStrategy", f"must be error or latest, not {strategy!r}")
        max_per_trigger = _int(opts, "maxOffsetsPerTrigger", None, 1)
        min_per_trigger = _int(opts, "minOffsetsPerTrigger", None, 1)
        if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
            raise KBrokerOptionError("minOffsetsPerTrigger", f"({min_per_trigger}) must not exceed "
                                                             f"maxOffsetsPerTrigger ({max_per_trigger})")
        client = client_settings(opts)
        fetch_max = _int(opts, "kbroker.fetch.max.bytes", 16 << 20, 1024)
        timeout_ms = _int(opts, "kbroker.request.timeout.ms", 30000, 100)
        return cls(
            bootstrap=bootstrap,
            subscription=subscription,
            starting=starting,
            ending=ending,
            streaming=streaming,
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", False),
            starting_by_timestamp_strategy=strategy,
            max_offsets_per_trigger=max_per_trigger,
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60 * 1000),
            min_partitions=_int(opts, "minPartitions", None, 1),
            max_records_per_partition=_int(opts, "maxRecordsPerPartition", None, 1),
            poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 120000, 1),
            fetch_max_bytes=fetch_max,
            client_timeout_s=timeout_ms / 1000,
            validate_crc=_bool(opts, "kbroker.check.crcs", True),
            client=client,
        )


# ---------------------------------------------------------------- the sink

DELIVERY_AT_LEAST_ONCE = "at-least-once"
DELIVERY_EXACTLY_ONCE = "exactly-once"


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    acks: int = -1
    compression: str | None = None
    batch_bytes: int = 1 << 20
    max_in_flight: int = 5
    retries: int = 5
    timeout_ms: int = 30000
    delivery: str = DELIVERY_AT_LEAST_ONCE
    client: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, options) -> "SinkOptions":
        opts = _lower(options)
        bootstrap = bootstrap_servers(opts)
        topic = opts.get("topic", "").strip() or None
        client = client_settings(opts)
        acks_text = client.get("acks", "all").strip().lower()
        acks = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(acks_text)
        if acks is None:
            raise KBrokerOptionError("kbroker.acks", f"must be all, -1, 1 or 0, not {acks_text!r}")
        compression = client.get("compression.type", "none").strip().lower()
        if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise KBrokerOptionError("kbroker.compression.type",
                                     f"must be none, gzip, snappy, lz4 or zstd, not {compression!r}")
        delivery = opts.get("deliveryguarantee", DELIVERY_AT_LEAST_ONCE).strip().lower()
        if delivery not in (DELIVERY_AT_LEAST_ONCE, DELIVERY_EXACTLY_ONCE):
            raise KBrokerOptionError("deliveryGuarantee", f"must be {DELIVERY_AT_LEAST_ONCE} or "
                                                          f"{DELIVERY_EXACTLY_ONCE}, not {delivery!r}")
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            acks=acks,
            compression=None if compression == "none" else compression,
            # kbroker.batch.size: the producer's batch.size, bytes of one record batch
            batch_bytes=_int(opts, "kbroker.batch.size", 1 << 20, 1024),
            max_in_flight=_int(opts, "kbroker.max.in.flight.requests.per.connection", 5, 1),
            retries=_int(opts, "kbroker.retries", 5, 0),
            timeout_ms=_int(opts, "kbroker.request.timeout.ms", 30000, 100),
            delivery=delivery,
            client=client,
        )
