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
import threading
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from broker.spark.options import (
    EARLIEST,
    LATEST,
    KBrokerDataLossError,
    SourceOptions,
    data_loss_message,
    from_json,
    to_json,
)

# The client (broker.client, broker.protocol, the native core) is imported where it is
# used, not here: Spark imports this module, and creates a stream reader, in a Python
# worker of its own that only pickles the reader for the executors, once per start.

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
        begin = start[tp] if tp in start else new_starts[tp]  # in sizes: known
        prorate = limit * (sizes[tp] / total)
        n = int(-(-prorate // 1)) if prorate < 1 else int(prorate)
        out[tp] = min(end, begin + n)
    return out


class GroupCommitter:
    """commitOffsetsToGroup: a query's positions committed to a consumer group, so that
    Kafka's lag tools (`broker groups describe`, kafka-consumer-groups, the brokers'
    group-lag metrics, the status page) see the job. Never read back: the checkpoint
    holds the query's positions.

    A position is committed as a group without members commits (generation -1, no member
    id: what Kafka's consumer does with assign()), from a thread of its own, so a
    trigger never waits on it: the newest position wins, one that failed (a coordinator
    down) is tried again a second later, and a group that has members (a consumer group
    of that name in use) is said in a warning, once. The position is committed again
    after REFRESH_S without a change, so an idle query's offsets do not expire
    (offsets.retention.minutes)."""

    RETRY_S = 1.0
    REFRESH_S = 300.0

    def __init__(self, options: SourceOptions, group: str):
        self.options = options
        self.group = group
        self._cond = threading.Condition()
        self._pending: dict | None = None
        self._committed: dict | None = None
        self._committed_at = 0.0
        self._closing = False
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        self.commits = 0  # successful commits (tests read it)

    def submit(self, position: dict) -> None:
        """{(topic, partition): next offset to read}; returns at once."""
        if not position:
            return
        with self._cond:
            if position == self._committed and time.monotonic() - self._committed_at < self.REFRESH_S:
                return
            self._pending = dict(position)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kbroker-group-commit", daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self, timeout_s: float = 5.0) -> None:
        """Commits what is pending (for up to timeout_s), then stops the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        from broker.client import Cluster
        from broker.client.connection import ClientError
        from broker.client.group import GroupConsumer
        from broker.protocol.errors import KafkaProtocolError

        o = self.options
        cluster = Cluster(o.bootstrap, client_id=o.client_id, timeout=o.client_timeout_s)
        group = GroupConsumer(cluster, self.group, [], client_id=o.client_id)
        try:
            while True:
                with self._cond:
                    while self._pending is None and not self._closing:
                        self._cond.wait()
                    if self._pending is None:
                        return
                    position = self._pending
                try:
                    group.commit(position)
                except (ClientError, KafkaProtocolError) as exc:
                    self._failed(exc)
                    with self._cond:
                        if self._closing:
                            return
                        self._cond.wait(self.RETRY_S)
                    continue
                with self._cond:
                    self.commits += 1
                    self._committed, self._committed_at = position, time.monotonic()
                    if self._pending is position:
                        self._pending = None
        finally:
            group.close()
            cluster.close()

    def _failed(self, exc: Exception) -> None:
        from broker.protocol.errors import ErrorCode, KafkaProtocolError

        why = str(exc)
        if isinstance(exc, KafkaProtocolError) and exc.code in (
            ErrorCode.UNKNOWN_MEMBER_ID,
            ErrorCode.ILLEGAL_GENERATION,
            ErrorCode.REBALANCE_IN_PROGRESS,
        ):
            why = (
                f"group {self.group!r} has members (a consumer group of that name is in use): choose a group "
                f"of its own for commitOffsetsToGroup ({exc})"
            )
        if why not in self._warned:
            self._warned.add(why)
            log.warning(
                "kbroker: commitOffsetsToGroup: committing to group %r failed: %s; trying again", self.group, why
            )
        else:
            log.info("kbroker: commitOffsetsToGroup %r: %s", self.group, why)


class KBrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.options = options
        self._cluster = None
        self._target: dict | None = None  # availableNow: the high watermarks to stop at
        self._last_trigger_ms = time.time() * 1000
        self._initial: dict | None = None  # initialOffset(), resolved once
        self._latest: dict | None = None  # what the last latestOffset() found (reportLatestOffset)
        self._group = GroupCommitter(options, options.commit_group) if options.commit_group else None

    def __getstate__(self):
        # the reader travels to the executors with the read function: no sockets, threads
        state = dict(self.__dict__)
        state["_cluster"] = None
        state["_group"] = None
        return state

    # ------------------------------------------------------------------ broker access

    def _call(self, fn):
        """fn(cluster), retried after a network failure or a retriable error (see
        offsets.with_retries). The reader's first connection fails fast when no bootstrap
        server answers (a wrong kafka.bootstrap.servers); later ones are retried, through
        any broker the last metadata listed too."""
        from broker.client.connection import ClientError
        from broker.protocol.errors import KafkaProtocolError
        from broker.spark import offsets as _offsets

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
        from broker.spark import offsets as _offsets

        return _offsets.topic_partitions(cluster, self.options.subscription, must_exist=first)

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> dict:
        """Resolved once: Spark asks again when it plans the first batch, and "latest" must
        be the same position both times."""
        from broker.spark import offsets as _offsets

        o = self.options

        def initial(cluster):
            tps = self._partitions_now(cluster, first=True)
            return _offsets.resolve(cluster, o.starting, tps, starting=True, strategy=o.starting_by_timestamp_strategy)

        if self._initial is None:
            self._initial = to_json(self._call(initial))
        return self._initial

    def getDefaultReadLimit(self):
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        from broker.spark import offsets as _offsets

        def latest(cluster):
            return _offsets.list_offsets(
                cluster, self._partitions_now(cluster, first=False), LATEST, self.options.isolation_level
            )

        self._target = self._call(latest)
        log.info("availableNow: reading up to %s", to_json(self._target))

    def reportLatestOffset(self):
        """The progress's latestOffset: the latest offsets the last latestOffset() found
        (Spark asks right after it), before any read limit cut them; what Spark's Kafka
        source reports too. Its metrics (offsets behind latest) cannot be reported
        through PySpark's Data Source API: broker.spark.progress.lag computes them from
        a progress."""
        if self._latest is None:
            from broker.spark import offsets as _offsets

            def latest(cluster):
                return _offsets.list_offsets(
                    cluster, self._partitions_now(cluster, first=False), LATEST, self.options.isolation_level
                )

            self._latest = self._call(latest)
        return to_json(self._latest)

    def latestOffset(self, start: dict, limit=None) -> dict:
        from broker.spark import offsets as _offsets

        o = self.options
        begin = from_json(start)
        if self._group is not None:
            # Spark asks for the next batch's end only once the batch before it has
            # completed: `start` is what the query has processed
            self._group.submit(begin)

        def plan(cluster):
            tps = self._partitions_now(cluster, first=False)
            latest = _offsets.list_offsets(cluster, tps, LATEST, o.isolation_level)
            new = [tp for tp in latest if tp not in begin]
            new_starts = _offsets.list_offsets(cluster, new, EARLIEST) if new else {}
            return latest, new_starts

        latest, new_starts = self._call(plan)
        self._latest = dict(latest)
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
        from broker.spark import offsets as _offsets, reader

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
                    detail = (
                        f"{tp[0]}-{tp[1]} does not exist any more (offsets {ranges[tp][0]}.."
                        f"{ranges[tp][1] - 1} were still to be read)"
                    )
                    if o.fail_on_data_loss:
                        raise KBrokerDataLossError(data_loss_message(detail))
                    log.warning("failOnDataLoss=false: %s; skipping them", detail)
                    del ranges[tp]
            return reader.check_start_not_lost(cluster, ranges, o.fail_on_data_loss)

        ranges = self._call(plan)
        return reader.plan_partitions(ranges, min_partitions=o.min_partitions, max_records=o.max_records_per_partition)

    def read(self, partition):
        from broker.spark import reader

        if not isinstance(partition, reader.KBrokerInputPartition):
            return iter(())
        return reader.read_range(
            reader.ReadSettings.of(self.options), partition.topic, partition.partition, partition.start, partition.end
        )

    def commit(self, end: dict) -> None:
        # the checkpoint holds the positions (as Spark's Kafka source); with
        # commitOffsetsToGroup the group gets them too (latestOffset() has usually
        # submitted the same position already)
        if self._group is not None:
            self._group.submit(from_json(end))

    def stop(self) -> None:
        if self._group is not None:
            self._group.close()
            self._group = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
