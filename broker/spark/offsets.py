"""Topic partitions of a subscription and offsets of an OffsetSpec, against the broker.

Offsets travel as Spark's Kafka source writes them in its checkpoints:
{"topic": {"0": 23, "1": 42}} — topics sorted, partitions in numeric order, so that two
equal positions always serialise to the same JSON (Spark compares offsets as JSON).
Inside this package a position is a dict {(topic, partition): offset}.

Only committed data is ever planned: "latest" is the high watermark (ListOffsets -1
answers it), never the log end.
"""

from __future__ import annotations

import logging
import re
import time

from broker.client import Cluster
from broker.client.connection import ClientError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.retriable import RETRIABLE
from broker.spark.options import (
    BOOTSTRAP,
    EARLIEST,
    LATEST,
    KBrokerDataLossError,
    KBrokerOptionError,
    OffsetSpec,
    Subscription,
    data_loss_message,
    from_json,
    to_json,
)

__all__ = [
    "KBrokerDataLossError",
    "connect",
    "data_loss_message",
    "from_json",
    "list_offsets",
    "resolve",
    "to_json",
    "topic_partitions",
    "with_retries",
]

log = logging.getLogger("broker.spark")

TopicPartition = tuple  # (topic, partition)


def connect(bootstrap: str, timeout_s: float, client_id: str = "kbroker-spark", option: str = BOOTSTRAP) -> Cluster:
    """A Cluster with one live connection; none reachable is an error naming the option
    (the source and the sink say it alike)."""
    cluster = Cluster(bootstrap, client_id=client_id, timeout=timeout_s)
    try:
        cluster.any_connection()
    except ClientError as exc:
        cluster.close()
        raise KBrokerOptionError(option, f"= {bootstrap!r}: no broker reachable ({exc})") from None
    return cluster


#: the longest wait between two attempts of the driver's offset requests
MAX_RETRY_INTERVAL_S = 1.0


def with_retries(options, fn):
    """fn() again after a network failure (a broker down, refused, paused past the request
    timeout) or a retriable broker error (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE ...
    while a leader is elected): a leader change or a dead broker is a metadata refresh and
    a retry, never a failed query. Retries go on for kafkaConsumer.pollTimeoutMs, and at
    least fetchOffset.numRetries times, fetchOffset.retryIntervalMs apart at first, the
    interval doubling up to 1 s. Spark's Kafka source retries its offset fetches
    fetchOffset.numRetries times around a Kafka consumer that itself waits out leader
    changes; here both are this one loop. Other errors (an option refused, data lost, a
    topic that does not exist) go through at once."""
    deadline = time.monotonic() + options.poll_timeout_ms / 1000
    interval = options.fetch_offset_retry_interval_ms / 1000
    attempt = 0
    while True:
        try:
            return fn()
        except (ClientError, KafkaProtocolError) as exc:
            if isinstance(exc, KafkaProtocolError) and exc.code not in RETRIABLE:
                raise
            attempt += 1
            if attempt > options.fetch_offset_retries and time.monotonic() >= deadline:
                raise
            log.info("kbroker: fetching offsets failed (%s); retrying (attempt %d)", exc, attempt + 1)
            time.sleep(interval)
            interval = min(max(interval * 2, 0.01), MAX_RETRY_INTERVAL_S)


def topic_partitions(cluster: Cluster, sub: Subscription, *, must_exist: bool = True) -> list[TopicPartition]:
    """The subscription's partitions now, sorted. A subscribed or assigned topic that does
    not exist is an error naming the option (must_exist); a pattern may match nothing."""
    if sub.kind == "pattern":
        metas = cluster.refresh(None)
        rx = re.compile(sub.pattern)
        return sorted(
            (name, p)
            for name, meta in metas.items()
            if meta.error_code == 0 and not meta.internal and rx.fullmatch(name)
            for p in meta.partitions
        )
    topics = list(sub.topics) if sub.kind == "subscribe" else sorted(sub.assign)
    metas = cluster.refresh(topics)
    out = []
    for t in topics:
        meta = metas.get(t)
        code = meta.error_code if meta is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if meta is None or code != 0:
            if not must_exist and code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            why = "does not exist" if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else ErrorCode(code).name
            servers = ",".join(f"{h}:{port}" for h, port in cluster.bootstrap)
            raise KBrokerOptionError(sub.option, f"names topic {t!r}, which {why} on {servers}")
        if sub.kind == "subscribe":
            out += [(t, p) for p in meta.partitions]
        else:
            missing = [p for p in sub.assign[t] if p not in meta.partitions]
            if missing and must_exist:
                raise KBrokerOptionError(
                    sub.option,
                    f"names partition(s) {missing} of topic {t!r}, which has {len(meta.partitions)} partition(s)",
                )
            out += [(t, p) for p in sub.assign[t] if p in meta.partitions]
    return sorted(set(out))


def list_offsets(cluster: Cluster, tps, timestamp: int, isolation_level: int = 0) -> dict:
    """{(t, p): offset} for -2 (earliest, the log start offset), -1 (latest, the high
    watermark; the last stable offset with isolation_level 1) or a timestamp (-1 when no
    record is that recent)."""
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    out = {}
    for t, parts in by_topic.items():
        for attempt in range(5):
            try:
                res = cluster.list_offsets(t, parts, timestamp, isolation_level)
                break
            except KafkaProtocolError as exc:
                if exc.code not in RETRIABLE or attempt == 4:
                    raise
                cluster.refresh([t])
        for p, (off, _ts) in res.items():
            out[(t, p)] = off
    return out


def resolve(cluster: Cluster, spec: OffsetSpec, tps, *, starting: bool, strategy: str = "error") -> dict:
    """The OffsetSpec's offsets for these partitions: {(t, p): offset}."""
    tps = list(tps)
    if not tps:
        return {}
    if spec.kind == "earliest":
        return list_offsets(cluster, tps, EARLIEST)
    if spec.kind == "latest":
        return list_offsets(cluster, tps, LATEST)
    if spec.kind == "timestamp":
        wanted = {tp: spec.timestamp for tp in tps}
    else:
        given = {(t, p): v for t, ps in spec.offsets.items() for p, v in ps.items()}
        missing = sorted(set(tps) - set(given))
        unknown = sorted(set(given) - set(tps))
        if missing or unknown:
            parts = []
            if missing:
                parts.append("no entry for " + ", ".join(f"{t}-{p}" for t, p in missing[:10]))
            if unknown:
                parts.append("entries for partitions not subscribed: " + ", ".join(f"{t}-{p}" for t, p in unknown[:10]))
            raise KBrokerOptionError(
                spec.option,
                "must give every partition of the subscription ("
                + "; ".join(parts)
                + "); use -2 for earliest, -1 for latest"
                if spec.kind == "offsets"
                else "must give every partition of the subscription (" + "; ".join(parts) + ")",
            )
        wanted = given
    if spec.kind == "offsets":
        out = {tp: v for tp, v in wanted.items() if v >= 0}
        for code in (EARLIEST, LATEST):
            need = [tp for tp, v in wanted.items() if v == code]
            if need:
                out.update(list_offsets(cluster, need, code))
        return out
    # by timestamp: ListOffsets per distinct timestamp
    out = {}
    by_ts: dict[int, list] = {}
    for tp, ts in wanted.items():
        by_ts.setdefault(ts, []).append(tp)
    latest = None
    for ts, group in by_ts.items():
        for tp, off in list_offsets(cluster, group, ts).items():
            if off < 0:
                # no record at or after the timestamp
                if starting and strategy == "error":
                    raise KBrokerDataLossError(
                        f"kbroker: option '{spec.option}': no offset matched timestamp {ts} in "
                        f"{tp[0]}-{tp[1]} (no record that recent); set "
                        f"startingOffsetsByTimestampStrategy=latest to start at the latest offset instead"
                    )
                if latest is None:
                    latest = list_offsets(cluster, tps, LATEST)
                off = latest[tp]
            out[tp] = off
    return out
