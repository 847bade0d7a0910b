"""Batch reads: planning offset ranges into Spark input partitions, and reading one range.

Planning (driver, once per query or micro-batch): one input partition per topic
partition and offset range [start, end); a range longer than maxRecordsPerPartition
(default 1,000,000) is cut into equal pieces, and minPartitions cuts the largest ranges
further, as Spark's Kafka source does (KafkaOffsetRangeCalculator).

Reading (executor, one Python worker per task): read_range() fetches the range from the
partition's leader with the project's client, one Fetch in flight while the previous
response is decoded (the next fetch offset comes from the batch headers, before any
record is decoded). Record batches are decoded by broker.native.batches_to_arrow into
Arrow columns in C — no Python object per record — and yielded as Spark's rows
(schema.to_spark_batch). A Fetch never returns data above the high watermark, so only
committed data is read; the range's end was itself a high watermark (or below one).

With kafka.isolation.level=read_committed the ends are last stable offsets, the fetches
ask for isolation level 1, and the batches of aborted transactions the Fetch response
names are left out before decoding (per batch, as Kafka's consumer: a producer's
transactional batches from the aborted transaction's first offset until its ABORT
marker); control batches are never rows.

Data loss while reading (the range starts below the log start offset because retention
or DeleteRecords removed it, or the topic is gone): with failOnDataLoss=true the task
fails with KBrokerDataLossError, saying which offsets are gone; with false it logs a
warning and continues from the log start offset.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceReader, InputPartition

from broker.client import Cluster
from broker.client.connection import BrokerConnection, ClientError
from broker.native import batches_to_arrow, iter_batches
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.retriable import RETRIABLE
from broker.spark import offsets as _offsets
from broker.spark.offsets import KBrokerDataLossError, data_loss_message
from broker.spark.options import EARLIEST, LATEST, KBrokerOptionError, SourceOptions
from broker.spark.schema import to_spark_batch

log = logging.getLogger("broker.spark")

DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
#: between two attempts of a fetch that failed (a leader down, moving, or paused)
RETRY_INTERVAL_S = 0.2


class KBrokerInputPartition(InputPartition):
    """Offsets [start, end) of one topic partition (picklable, sent to an executor)."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KBrokerInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


@dataclass(frozen=True)
class ReadSettings:
    """What a task needs (picklable, no Spark objects)."""

    bootstrap: str
    include_headers: bool
    fail_on_data_loss: bool
    fetch_max_bytes: int
    partition_max_bytes: int
    fetch_max_wait_ms: int
    poll_timeout_ms: int
    client_timeout_s: float
    validate_crc: bool
    client_id: str
    isolation_level: int = 0
    decoders: tuple = ()  # keyFormat/valueFormat: broker.spark.formats

    @classmethod
    def of(cls, o: SourceOptions) -> ReadSettings:
        return cls(
            o.bootstrap,
            o.include_headers,
            o.fail_on_data_loss,
            o.fetch_max_bytes,
            o.partition_max_bytes,
            o.fetch_max_wait_ms,
            o.poll_timeout_ms,
            o.client_timeout_s,
            o.validate_crc,
            o.client_id,
            o.isolation_level,
            o.decoders,
        )


# ---------------------------------------------------------------- planning


def plan_partitions(
    ranges: dict, *, min_partitions: int | None = None, max_records: int | None = None
) -> list[KBrokerInputPartition]:
    """{(topic, partition): (start, end)} -> input partitions, empty ranges dropped."""
    max_records = max_records or DEFAULT_MAX_RECORDS_PER_PARTITION
    pieces: list[tuple[str, int, int, int]] = []
    for (t, p), (start, end) in sorted(ranges.items()):
        if end <= start:
            continue
        size = end - start
        n = -(-size // max_records)
        pieces += _cut(t, p, start, end, n)
    if min_partitions and len(pieces) < min_partitions:
        # cut the ranges in proportion to their size until there are enough pieces
        total = sum(e - s for _, _, s, e in pieces)
        if total > 0:
            out = []
            for t, p, s, e in pieces:
                share = max(1, round((e - s) / total * min_partitions))
                out += _cut(t, p, s, e, min(share, e - s))
            pieces = out
    return [KBrokerInputPartition(t, p, s, e) for t, p, s, e in pieces]


def _cut(t, p, start, end, n):
    size = end - start
    bounds = [start + size * i // n for i in range(n)] + [end]
    return [(t, p, bounds[i], bounds[i + 1]) for i in range(n) if bounds[i + 1] > bounds[i]]


def check_start_not_lost(cluster: Cluster, ranges: dict, fail_on_data_loss: bool) -> dict:
    """Ranges whose start lies below the log start offset: fail, or move the start up."""
    if not ranges:
        return ranges
    earliest = _offsets.list_offsets(cluster, list(ranges), EARLIEST)
    out = {}
    for tp, (start, end) in ranges.items():
        low = earliest.get(tp, start)
        if start < low:
            detail = (
                f"offsets {start}..{min(low, end) - 1} of {tp[0]}-{tp[1]} are gone (the log start offset is now {low})"
            )
            if fail_on_data_loss:
                raise KBrokerDataLossError(data_loss_message(detail))
            log.warning("failOnDataLoss=false: %s; skipping them", detail)
            start = min(low, end)
        out[tp] = (start, end)
    return out


class KBrokerBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options
        self.settings = ReadSettings.of(options)

    def partitions(self):
        return _offsets.with_retries(self.options, self._plan)

    def _plan(self):
        o = self.options
        cluster = _offsets.connect(o.bootstrap, o.client_timeout_s, o.client_id, o.bootstrap_option)
        try:
            tps = _offsets.topic_partitions(cluster, o.subscription)
            start = _offsets.resolve(cluster, o.starting, tps, starting=True, strategy=o.starting_by_timestamp_strategy)
            end = _offsets.resolve(cluster, o.ending, tps, starting=False)
            latest = _offsets.list_offsets(cluster, tps, LATEST, o.isolation_level)
            ranges = {}
            for tp in tps:
                s, e = start[tp], min(end[tp], latest[tp])
                if s > e:
                    option = o.starting.option if start[tp] > latest[tp] else o.ending.option
                    raise KBrokerOptionError(
                        option,
                        f"puts the start of {tp[0]}-{tp[1]} ({s}) after its end "
                        f"({e}; the high watermark is {latest[tp]})",
                    )
                ranges[tp] = (s, e)
            ranges = check_start_not_lost(cluster, ranges, o.fail_on_data_loss)
        finally:
            cluster.close()
        return plan_partitions(ranges, min_partitions=o.min_partitions, max_records=o.max_records_per_partition)

    def read(self, partition):
        if not isinstance(partition, KBrokerInputPartition):
            return iter(())  # Spark's stand-in when there is nothing to read
        return read_range(self.settings, partition.topic, partition.partition, partition.start, partition.end)


# ---------------------------------------------------------------- reading


class _PartitionFetcher:
    """Fetches one partition from its leader, one request in flight (pipelined)."""

    def __init__(self, settings: ReadSettings, topic: str, partition: int):
        self.s = settings
        self.topic = topic
        self.partition = partition
        self.cluster = Cluster(settings.bootstrap, client_id=settings.client_id, timeout=settings.client_timeout_s)
        self.conn: BrokerConnection | None = None
        self.version = 0
        self.inflight_offset: int | None = None

    def close(self) -> None:
        self.cluster.close()

    def _connect(self) -> BrokerConnection:
        self.cluster.refresh([self.topic])
        self.conn = conn = self.cluster.leader_connection(self.topic, self.partition)
        self.version = conn.version_for(FetchRequest.API_KEY)
        return conn

    def send(self, offset: int) -> None:
        conn = self.conn if self.conn is not None else self._connect()
        meta = self.cluster.topics[self.topic]
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=self.s.fetch_max_wait_ms,
            min_bytes=1,
            max_bytes=self.s.fetch_max_bytes,
            isolation_level=self.s.isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=self.topic,
                    topic_id=meta.topic_id,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=self.partition,
                            fetch_offset=offset,
                            partition_max_bytes=self.s.partition_max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
        )
        conn.send(req, self.version)
        self.inflight_offset = offset

    def receive(self):
        """The partition's data of the request in flight (PartitionData)."""
        resp = self.conn.receive(self.s.fetch_max_wait_ms / 1000 + self.s.client_timeout_s)
        self.inflight_offset = None
        if resp.error_code:
            raise KafkaProtocolError(resp.error_code, f"fetch {self.topic}-{self.partition}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == self.partition:
                    return p
        raise ClientError(f"fetch response without {self.topic}-{self.partition}")

    def resend(self, offset: int, deadline: float, what: str) -> None:
        """Reconnects (to the leader now) and fetches at offset, retrying until deadline."""
        while True:
            self.reset()
            try:
                self.send(offset)
                return
            except (ClientError, OSError, KafkaProtocolError) as exc:
                if time.monotonic() > deadline:
                    raise ClientError(f"kbroker: {what}: {exc}") from None
                time.sleep(0.2)

    def reset(self) -> None:
        """Drops the connections (after an error); the next send refreshes the metadata
        and connects to the leader it names (the broker list of the last metadata stays,
        so the cluster is found even when the bootstrap servers are down)."""
        if self.conn is not None:
            self.conn.close()
        self.cluster.close()
        self.conn = None
        self.inflight_offset = None


def _timestamp_types(batches_meta):
    """batches_meta: [(last offset, timestamp type)] -> an int or (last offsets, types) arrays."""
    types = {t for _, t in batches_meta}
    if len(types) <= 1:
        return types.pop() if types else 0
    import numpy as np

    return (
        np.array([o for o, _ in batches_meta], dtype=np.int64),
        np.array([t for _, t in batches_meta], dtype=np.int32),
    )


def read_range(settings: ReadSettings, topic: str, partition: int, start: int, end: int):
    """Yields Spark rows (pyarrow.RecordBatch) of offsets [start, end) of topic-partition."""
    if end <= start:
        return
    f = _PartitionFetcher(settings, topic, partition)
    tp_name = f"{topic}-{partition}"
    deadline = time.monotonic() + settings.poll_timeout_ms / 1000
    pos = start
    try:
        f.resend(pos, deadline, f"reading {tp_name} at offset {pos}")
        while pos < end:
            try:
                data = f.receive()
            except (ClientError, OSError, KafkaProtocolError) as exc:
                # the leader died, was paused past the request timeout, or moved: the
                # metadata is refreshed and the fetch goes to the leader it names
                if isinstance(exc, KafkaProtocolError) and exc.code not in RETRIABLE:
                    raise
                if time.monotonic() > deadline:
                    raise ClientError(
                        f"kbroker: reading {tp_name} at offset {pos} failed for "
                        f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms}: {exc}"
                    ) from None
                time.sleep(RETRY_INTERVAL_S)
                f.resend(pos, deadline, f"reading {tp_name} at offset {pos}")
                continue
            code = data.error_code
            if code == ErrorCode.OFFSET_OUT_OF_RANGE or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                moved = _on_out_of_range(f, settings, topic, partition, pos, end, code, deadline)
                if moved is None:  # not proven lost yet: the leader may be moving
                    time.sleep(RETRY_INTERVAL_S)
                    f.resend(pos, deadline, f"reading {tp_name} at offset {pos}")
                    continue
                pos = moved
                if pos >= end:
                    break
                deadline = time.monotonic() + settings.poll_timeout_ms / 1000
                f.resend(pos, deadline, f"reading {tp_name} at offset {pos}")
                continue
            if code in RETRIABLE:
                if time.monotonic() > deadline:
                    raise KafkaProtocolError(
                        code,
                        f"fetch {tp_name} at offset {pos} (retried for "
                        f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms})",
                    )
                time.sleep(RETRY_INTERVAL_S)
                f.resend(pos, deadline, f"reading {tp_name} at offset {pos}")
                continue
            if code:
                raise KafkaProtocolError(code, f"fetch {tp_name} at offset {pos}")
            records = data.records
            if records is None or len(records) == 0:
                # nothing at pos although pos < end <= an earlier high watermark: the
                # high watermark went back (truncation) or the data is not there yet
                if data.high_watermark <= pos and time.monotonic() > deadline:
                    detail = (
                        f"offsets {pos}..{end - 1} of {tp_name} are not in the log any more "
                        f"(high watermark {data.high_watermark})"
                    )
                    if settings.fail_on_data_loss:
                        raise KBrokerDataLossError(data_loss_message(detail))
                    log.warning("failOnDataLoss=false: %s; skipping them", detail)
                    break
                if time.monotonic() > deadline:
                    raise ClientError(
                        f"kbroker: no data at offset {pos} of {tp_name} within "
                        f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms}"
                    )
                f.send(pos)
                continue
            # the batch headers give the next fetch offset before any record is decoded
            meta = []
            next_pos = pos
            for b in iter_batches(records):
                next_pos = b.next_offset
                if not b.is_control and b.next_offset > pos and b.base_offset < end:
                    meta.append((b.last_offset, b.timestamp_type))
            if next_pos <= pos:
                raise ClientError(
                    f"kbroker: fetch of {tp_name} at offset {pos} returned no complete "
                    f"record batch (a batch larger than kbroker.fetch.max.bytes="
                    f"{settings.fetch_max_bytes}?)"
                )
            if next_pos < end:
                f.send(next_pos)
            if settings.isolation_level and data.aborted_transactions:
                records = _without_aborted(records, data.aborted_transactions)
            rb = batches_to_arrow(records, pos, end, validate=settings.validate_crc)
            pos = next_pos
            deadline = time.monotonic() + settings.poll_timeout_ms / 1000
            if rb.num_rows:
                batch = to_spark_batch(rb, topic, partition, _timestamp_types(meta), settings.include_headers)
                if settings.decoders:
                    from broker.spark.formats import decode_batch

                    batch = decode_batch(batch, settings.decoders, topic, partition)
                yield batch
    finally:
        f.close()


def _without_aborted(records, aborted) -> bytes:
    """The batches of a read_committed Fetch response minus those of aborted transactions
    (Kafka's Fetcher: a producer's transactional batches are dropped from the first offset
    of its aborted transaction until its ABORT marker). Per batch; copies only when
    something is dropped."""
    import heapq

    pending = sorted((a.first_offset, a.producer_id) for a in aborted)
    heapq.heapify(pending)
    aborting: set[int] = set()
    keep = []
    dropped = False
    mv = memoryview(records)
    for b in iter_batches(mv):
        while pending and pending[0][0] <= b.last_offset:
            aborting.add(heapq.heappop(pending)[1])
        if b.is_transactional and b.producer_id in aborting:
            if b.is_control:
                aborting.discard(b.producer_id)  # the ABORT marker ends it
            dropped = True
            continue
        keep.append(mv[b.position : b.position + b.size])
    if not dropped:
        return records
    return b"".join(keep)


def _on_out_of_range(
    f: _PartitionFetcher,
    settings: ReadSettings,
    topic: str,
    partition: int,
    pos: int,
    end: int,
    code: int,
    deadline: float,
) -> int | None:
    """OFFSET_OUT_OF_RANGE (or the partition unknown) at pos: data loss once proven, and
    then where to go on; None while it may still be a broker that is not (or no longer)
    the leader, or a new leader catching up: the caller retries (until `deadline`)."""
    tp_name = f"{topic}-{partition}"
    f.reset()
    try:
        gone = False
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            meta = f.cluster.refresh([topic]).get(topic)
            gone = (
                meta is None
                or meta.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                or (meta.error_code == 0 and partition not in meta.partitions)
            )
            if not gone:  # the metadata has it: a broker that does not know it (yet)
                if time.monotonic() <= deadline:
                    return None
                raise KafkaProtocolError(
                    code,
                    f"fetch {tp_name} at offset {pos} (retried for "
                    f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms})",
                )
        else:
            earliest = _offsets.list_offsets(f.cluster, [(topic, partition)], EARLIEST)[(topic, partition)]
            latest = _offsets.list_offsets(f.cluster, [(topic, partition)], LATEST)[(topic, partition)]
    except (ClientError, KafkaProtocolError) as exc:
        if isinstance(exc, KafkaProtocolError) and exc.code not in RETRIABLE:
            raise
        if time.monotonic() > deadline:
            raise ClientError(
                f"kbroker: reading {tp_name} at offset {pos} failed for "
                f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms}: {exc}"
            ) from None
        return None
    if gone:
        detail = f"{tp_name} does not exist any more (offsets {pos}..{end - 1} were still to be read)"
        new_pos = end
    elif pos < earliest:
        detail = (
            f"offsets {pos}..{min(earliest, end) - 1} of {tp_name} are gone (the log start offset is now {earliest})"
        )
        new_pos = min(earliest, end)
    elif time.monotonic() <= deadline:
        return None  # above the high watermark: a leader that is moving, or truncation
    else:
        detail = f"offset {pos} of {tp_name} is above the high watermark {latest} (the log was truncated)"
        new_pos = end
    if settings.fail_on_data_loss:
        raise KBrokerDataLossError(data_loss_message(detail))
    log.warning("failOnDataLoss=false: %s; skipping them", detail)
    return new_pos
