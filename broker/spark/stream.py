"""Structured Streaming reads: DataSourceStreamReader over the broker's partitions.

Offsets are Spark's Kafka JSON, {"topic": {"0": 23}}: for every partition, the next
offset to read (offsets.to_json keeps them canonically ordered, since Spark compares
offsets as JSON). The checkpoint's offset log is the truth: a restarted query replays
its last planned batch with the very same [start, end) ranges, so output written from
them (to Parquet, to a topic) gets every record exactly once per successful batch.

Per trigger (driver side, one long-lived Python worker):

    latestOffset(start, limit)   the subscription's partitions now (new partitions and,
                                 with subscribePattern, new topics start at earliest),
                                 their high watermarks, cut by the read limit
    partitions(start, end)       one input partition per topic partition and range (cut
                                 like batch reads); data loss is checked here first
    read(partition)              executors: reader.read_range (native Arrow decode)

Admission control: maxOffsetsPerTrigger maps onto Spark's ReadMaxRows (so Spark's
availableNow trigger honours it too) and is split across partitions in proportion to
their lag, never starving a small one (Spark's KafkaMicroBatchStream.rateLimit).
minOffsetsPerTrigger with maxTriggerDelay skips triggers until enough records wait or the
delay passed. availableNow: prepareForTriggerAvailableNow() fixes the target (the high
watermarks then); latestOffset never goes beyond it, so the query ends.

failOnDataLoss: when the range a batch still needs starts below the log start offset
(retention, DeleteRecords), a partition or topic disappeared, or a high watermark went
back: true fails the query with a message saying which offsets are gone; false logs a
warning and goes on from what is there.
"""
from __future__ import annotations

import logging
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from broker.client.connection import ClientError
from broker.protocol.errors import KafkaProtocolError
from broker.spark import offsets as _offsets
from broker.spark.offsets import KBrokerDataLossError, data_loss_message, from_json, to_json
from broker.spark.options import EARLIEST, LATEST, SourceOptions
from broker.spark.reader import KBrokerInputPartition, ReadSettings, check_start_not_lost, plan_partitions, read_range

log = logging.getLogger("broker.spark")


def rate_limit(limit: int, start: dict, new_starts: dict, latest: dict) -> dict:
    """Spark's KafkaMicroBatchStream.rateLimit: `limit` records split over the partitions
    in proportion to their lag; a partition whose share is below one still gets one."""
    sizes = {}
    for tp, end in latest.items():
        begin = start.get(tp, new_starts.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = start[tp] if tp in start else new_starts[tp]     # in sizes: known
        prorate = limit * (sizes[tp] / total)
        n = int(-(-prorate // 1)) if prorate < 1 else int(prorate)
        out[tp] = min(end, begin + n)
    return out


class KBrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.options = options
        self.settings = ReadSettings.of(options)
        self._cluster = None
        self._target: dict | None = None            # availableNow: the high watermarks to stop at
        self._last_trigger_ms = time.time() * 1000

    def __getstate__(self):
        # the reader travels to the executors with the read function: no sockets
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    # ------------------------------------------------------------------ broker access

    def _call(self, fn):
        """fn(cluster), retried after a network failure or a retriable error (see
        offsets.with_retries). The reader's first connection fails fast when no bootstrap
        server answers (a wrong kafka.bootstrap.servers); later ones are retried, through
        any broker the last metadata listed too."""
        def attempt():
            o = self.options
            if self._cluster is None:
                self._cluster = _offsets.connect(o.bootstrap, o.client_timeout_s, o.client_id, o.bootstrap_option)
            try:
                return fn(self._cluster)
            except (ClientError, KafkaProtocolError):
                # fresh connections for the next attempt (the metadata's broker list stays)
                self._cluster.close()
                raise

        return _offsets.with_retries(self.options, attempt)

    def _partitions_now(self, cluster, *, first: bool) -> list:
        return _offsets.topic_partitions(cluster, self.options.subscription, must_exist=first)

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> dict:
        o = self.options

        def initial(cluster):
            tps = self._partitions_now(cluster, first=True)
            return _offsets.resolve(cluster, o.starting, tps, starting=True, strategy=o.starting_by_timestamp_strategy)

        return to_json(self._call(initial))

    def getDefaultReadLimit(self):
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        def latest(cluster):
            return _offsets.list_offsets(cluster, self._partitions_now(cluster, first=False), LATEST,
                                         self.options.isolation_level)

        self._target = self._call(latest)
        log.info("availableNow: reading up to %s", to_json(self._target))

    def reportLatestOffset(self):
        def latest(cluster):
            return _offsets.list_offsets(cluster, self._partitions_now(cluster, first=False), LATEST,
                                         self.options.isolation_level)

        return to_json(self._call(latest))

    def latestOffset(self, start: dict, limit=None) -> dict:
        o = self.options
        begin = from_json(start)

        def plan(cluster):
            tps = self._partitions_now(cluster, first=False)
            latest = _offsets.list_offsets(cluster, tps, LATEST, o.isolation_level)
            new = [tp for tp in latest if tp not in begin]
            new_starts = _offsets.list_offsets(cluster, new, EARLIEST) if new else {}
            return latest, new_starts

        latest, new_starts = self._call(plan)
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items() if tp in self._target}
            new_starts = {tp: off for tp, off in new_starts.items() if tp in latest}
        for tp, off in list(latest.items()):
            was = begin.get(tp)
            if was is not None and off < was:
                detail = f"the high watermark of {tp[0]}-{tp[1]} went back from {was} to {off}"
                if o.fail_on_data_loss:
                    raise KBrokerDataLossError(data_loss_message(detail))
                log.warning("failOnDataLoss=false: %s; going on from %d", detail, off)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(limit.max_rows, begin, new_starts, latest)
        else:
            end = dict(latest)
        # minOffsetsPerTrigger / maxTriggerDelay (not with availableNow, which must finish)
        now_ms = time.time() * 1000
        if o.min_offsets_per_trigger and self._target is None:
            waiting = sum(max(0, off - begin.get(tp, new_starts.get(tp, off))) for tp, off in latest.items())
            if waiting < o.min_offsets_per_trigger and now_ms - self._last_trigger_ms < o.max_trigger_delay_ms:
                return to_json(begin) if begin else to_json(end)
        # partitions that disappeared keep their position (partitions() reports the loss)
        for tp, off in begin.items():
            end.setdefault(tp, off)
        if end != begin:
            self._last_trigger_ms = now_ms
        return to_json(end)

    # ------------------------------------------------------------------ planning and reading

    def partitions(self, start: dict, end: dict):
        o = self.options
        begin, stop = from_json(start), from_json(end)

        def plan(cluster):
            new = [tp for tp in stop if tp not in begin]
            new_starts = _offsets.list_offsets(cluster, new, EARLIEST) if new else {}
            ranges = {}
            for tp, e in stop.items():
                s = begin.get(tp, new_starts.get(tp, e))
                if e > s:
                    ranges[tp] = (s, e)
            if ranges:
                gone = set(ranges) - set(self._partitions_now(cluster, first=False))
                for tp in sorted(gone):
                    detail = (f"{tp[0]}-{tp[1]} does not exist any more (offsets {ranges[tp][0]}.."
                              f"{ranges[tp][1] - 1} were still to be read)")
                    if o.fail_on_data_loss:
                        raise KBrokerDataLossError(data_loss_message(detail))
                    log.warning("failOnDataLoss=false: %s; skipping them", detail)
                    del ranges[tp]
            return check_start_not_lost(cluster, ranges, o.fail_on_data_loss)

        ranges = self._call(plan)
        return plan_partitions(ranges, min_partitions=o.min_partitions, max_records=o.max_records_per_partition)

    def read(self, partition):
        if not isinstance(partition, KBrokerInputPartition):
            return iter(())
        return read_range(self.settings, partition.topic, partition.partition, partition.start, partition.end)

    def commit(self, end: dict) -> None:
        # nothing to do on the broker: the checkpoint holds the positions (as Spark's
        # Kafka source, no consumer group offsets are committed)
        log.debug("committed %s", end)

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
