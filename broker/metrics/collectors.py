"""The broker's Prometheus metrics: Kafka's broker metrics under Prometheus names.

One custom collector reads, at scrape time, what the broker's components offer: the
counters they keep (stats.py: the server's requests, the ReplicaManager's topics, the
LogManager's fsyncs, the ZooKeeper client's round trips), the server's connections per
listener, the purgatory's waiting requests, and their state (partitions, ISR, logs,
controller, groups, ZooKeeper): nothing is computed between scrapes, and nothing private
is read. docs/observability.md lists every metric with the Kafka metric it stands for.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from broker.cluster.replica.purgatory import HIGH_WATERMARK, LOG_END
from broker.cluster.store.znodes import desanitize
from broker.group.group import GroupState
from broker.metrics.stats import TIME_PARTS, Histogram, RequestStats, TopicStats, api_name
from broker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.server.broker import Broker


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class LoopMonitor:
    """The event loop's idle time: the time its selector waits (Kafka's
    RequestHandlerAvgIdlePercent counterpart: one loop instead of a pool of request
    handler threads). Wraps the selector's select() of asyncio's loop; uvloop has no
    selector to wrap, and there the figures are not exported."""

    def __init__(self) -> None:
        self.idle = 0.0
        self.available = False
        self._last = (time.monotonic(), 0.0)

    def install(self, loop: Any) -> None:
        selector = getattr(loop, "_selector", None)
        if selector is None or not hasattr(selector, "select"):
            return
        inner = selector.select
        clock = time.monotonic

        def select(timeout: float | None = None) -> Any:
            started = clock()
            try:
                return inner(timeout)
            finally:
                self.idle += clock() - started

        selector.select = select
        self.available = True
        self._last = (clock(), self.idle)

    def idle_ratio(self) -> float:
        """The idle fraction since the previous call (a scrape)."""
        now = time.monotonic()
        then, idle_then = self._last
        self._last = (now, self.idle)
        if now <= then:
            return 1.0
        return max(0.0, min(1.0, (self.idle - idle_then) / (now - then)))


def _histogram(name: str, doc: str, labels: list[str], items: list[tuple[list[str], Histogram]]) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, h in items:
        buckets = h.cumulative()
        family.add_metric(values, buckets, h.sum)
    return family


class BrokerCollector:
    """Every metric of one broker (see the module docstring)."""

    def __init__(self, broker: Broker, loop: LoopMonitor):
        self.broker = broker
        self.loop = loop

    @property
    def requests(self) -> RequestStats:
        """The server's request counts (empty if it keeps none: metrics.listener unset)."""
        return self.broker.server.request_stats or RequestStats()

    @property
    def topics(self) -> TopicStats:
        """The ReplicaManager's per-topic counts (empty if it keeps none)."""
        return self.broker.replicas.topic_stats or TopicStats()

    def describe(self) -> list[Metric]:
        return []  # no describe-time collection (the registry would call collect())

    def collect(self) -> Iterator[Metric]:
        yield from self._traffic()
        yield from self._requests()
        yield from self._replicas()
        yield from self._logs()
        yield from self._controller()
        yield from self._network()
        yield from self._zookeeper()
        yield from self._groups()
        yield from self._quotas()
        yield from self._tiered()

    # ------------------------------------------------------------------ traffic

    def _traffic(self) -> Iterator[Metric]:
        t = self.topics
        for name, doc, values in (
            (
                "kafka_server_messages_in",
                "Records appended by clients, per topic (Kafka's MessagesInPerSec)",
                t.messages_in,
            ),
            ("kafka_server_bytes_in", "Bytes appended by clients, per topic (Kafka's BytesInPerSec)", t.bytes_in),
            ("kafka_server_bytes_out", "Bytes sent to consumers, per topic (Kafka's BytesOutPerSec)", t.bytes_out),
        ):
            c = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, n in sorted(values.items()):
                c.add_metric([topic], n)
            yield c
        yield CounterMetricFamily(
            "kafka_server_replication_bytes_in",
            "Bytes of the leaders' batches appended here as follower (Kafka's ReplicationBytesInPerSec)",
            value=self.broker.replicas.fetchers.replication_bytes_in,
        )
        yield CounterMetricFamily(
            "kafka_server_replication_bytes_out",
            "Bytes sent to followers' fetches (Kafka's ReplicationBytesOutPerSec)",
            value=t.replication_bytes_out,
        )
        yield from self._replication_throttles()

    def _replication_throttles(self) -> Iterator[Metric]:
        """The replication throttles (Kafka's LeaderReplication / FollowerReplication
        byte-rate): the rate of the throttled partitions' bytes, its bound, the bytes."""
        quotas = self.broker.replicas.quotas
        rate = GaugeMetricFamily(
            "kafka_server_replication_throttle_byte_rate",
            "Bytes/s of the throttled "
            "partitions' replication (Kafka's LeaderReplication / FollowerReplication "
            "byte-rate)",
            labels=["type"],
        )
        limit = GaugeMetricFamily(
            "kafka_server_replication_throttle_limit",
            "The rate that byte rate is held to (leader/follower.replication.throttled.rate; absent: none)",
            labels=["type"],
        )
        total = CounterMetricFamily(
            "kafka_server_replication_throttled_bytes",
            "Bytes of the throttled partitions' replication",
            labels=["type"],
        )
        for quota in (quotas.leader, quotas.follower):
            rate.add_metric([quota.name], quota.rate())
            if quota.bound is not None:
                limit.add_metric([quota.name], quota.bound)
            total.add_metric([quota.name], quota.throttled_bytes)
        yield rate
        yield limit
        yield total

    def _quotas(self) -> Iterator[Metric]:
        """Client quotas' sensors, per quota type (Kafka's sensor groups Produce, Fetch,
        Request) and metric tags (user, client-id): the rate now, the quota, and the
        throttle time answered (Kafka's throttle-time avg/max come from its rate)."""
        quotas = self.broker.quotas
        labels = ["type", "user", "client_id"]
        rate = GaugeMetricFamily(
            "kafka_server_quota_rate",
            "Each client quota's measured rate: bytes/s (Produce, "
            "Fetch) or percent of one thread (Request) (Kafka's byte-rate, request-time)",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "kafka_server_quota_limit", "The quota that rate is held to (absent: none)", labels=labels
        )
        throttle = CounterMetricFamily(
            "kafka_server_quota_throttle_time_seconds",
            "Throttle time answered to the clients of each quota (Kafka's throttle-time)",
            labels=labels,
        )
        throttled = CounterMetricFamily(
            "kafka_server_quota_throttled_responses", "Answers throttled by each quota", labels=labels
        )
        now_ms = time.monotonic() * 1000
        for kind, manager in (("Produce", quotas.produce), ("Fetch", quotas.fetch), ("Request", quotas.request)):
            for (user, client), sensor in sorted(manager.sensors.items()):
                values = [kind, desanitize(user), desanitize(client)]
                rate.add_metric(values, sensor.rate.measure(now_ms))
                if sensor.quota is not None:
                    limit.add_metric(values, sensor.quota)
                throttle.add_metric(values, sensor.throttle_ms_total / 1000)
                throttled.add_metric(values, sensor.throttled)
        yield rate
        yield limit
        yield throttle
        yield throttled

    def _requests(self) -> Iterator[Metric]:
        requests = self.requests
        apis = sorted((api_name(k), s) for k, s in requests.apis.items())
        c = CounterMetricFamily(
            "kafka_network_requests", "Requests handled, per API (Kafka's RequestsPerSec)", labels=["request"]
        )
        for name, s in apis:
            c.add_metric([name], s.requests)
        yield c
        for part, (suffix, kafka) in enumerate(TIME_PARTS):
            yield _histogram(
                f"kafka_network_{suffix}_seconds",
                f"Kafka's {kafka}, per API",
                ["request"],
                [([name], s.histogram(part)) for name, s in apis],
            )
        e = CounterMetricFamily(
            "kafka_network_errors",
            "Error codes in responses, per API and code, NONE left out (Kafka's ErrorsPerSec)",
            labels=["request", "error"],
        )
        for key, codes in sorted(requests.errors.items()):
            for code, n in sorted(codes.items()):
                e.add_metric([api_name(key), _error_name(code)], n)
        yield e

    # ------------------------------------------------------------------ replicas, logs

    def _replicas(self) -> Iterator[Metric]:
        replicas = self.broker.replicas
        under = under_min = at_min = leaders = 0
        for part in replicas.partitions.values():
            if not part.is_leader:
                continue
            leaders += 1
            isr = len(part.state.isr)
            if isr < len(part.state.replicas):
                under += 1
            min_isr = part.log.config.min_insync_replicas
            if isr < min_isr:
                under_min += 1
            elif isr == min_isr:
                at_min += 1
        yield GaugeMetricFamily(
            "kafka_server_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replicas (Kafka's UnderReplicatedPartitions)",
            value=under,
        )
        yield GaugeMetricFamily(
            "kafka_server_under_min_isr_partition_count",
            "Partitions led here whose ISR is below min.insync.replicas (Kafka's UnderMinIsrPartitionCount)",
            value=under_min,
        )
        yield GaugeMetricFamily(
            "kafka_server_at_min_isr_partition_count",
            "Partitions led here whose ISR is exactly min.insync.replicas (Kafka's AtMinIsrPartitionCount)",
            value=at_min,
        )
        yield GaugeMetricFamily("kafka_server_leader_count", "Partitions led here (Kafka's LeaderCount)", value=leaders)
        yield GaugeMetricFamily(
            "kafka_server_partition_count",
            "Partitions hosted here (Kafka's PartitionCount)",
            value=len(replicas.partitions),
        )
        yield CounterMetricFamily(
            "kafka_server_isr_shrinks",
            "ISR shrinks of partitions led here (Kafka's IsrShrinksPerSec)",
            value=replicas.isr_shrinks,
        )
        yield CounterMetricFamily(
            "kafka_server_isr_expands",
            "ISR expansions of partitions led here (Kafka's IsrExpandsPerSec)",
            value=replicas.isr_expands,
        )
        watching = replicas.purgatory.watching()
        p = GaugeMetricFamily(
            "kafka_server_purgatory_size",
            "Requests waiting in the purgatory (Kafka's PurgatorySize): acks=all produces and "
            "consumer fetches wait for the high watermark, follower fetches for the log end",
            labels=["watch"],
        )
        p.add_metric(["high_watermark"], watching[HIGH_WATERMARK])
        p.add_metric(["log_end"], watching[LOG_END])
        yield p

    def _logs(self) -> Iterator[Metric]:
        families = {
            "size": GaugeMetricFamily(
                "kafka_log_size_bytes",
                "Bytes of a partition's log on disk (Kafka's Size)",
                labels=["topic", "partition"],
            ),
            "segments": GaugeMetricFamily(
                "kafka_log_segments",
                "Segments of a partition's log (Kafka's NumLogSegments)",
                labels=["topic", "partition"],
            ),
            "start": GaugeMetricFamily(
                "kafka_log_start_offset",
                "A partition's log start offset (Kafka's LogStartOffset)",
                labels=["topic", "partition"],
            ),
            "end": GaugeMetricFamily(
                "kafka_log_end_offset",
                "A partition's log end offset (Kafka's LogEndOffset)",
                labels=["topic", "partition"],
            ),
        }
        for tp, part in sorted(self.broker.replicas.partitions.items()):
            lg = part.log
            labels = [tp.topic, str(tp.partition)]
            families["size"].add_metric(labels, lg.size)
            families["segments"].add_metric(labels, len(lg.segments))
            families["start"].add_metric(labels, lg.log_start_offset)
            families["end"].add_metric(labels, lg.log_end_offset)
        yield from families.values()
        logs = self.broker.logs
        yield GaugeMetricFamily(
            "kafka_log_offline_log_directory_count",
            "Log dirs of this broker taken offline by an I/O error (Kafka's LogManager OfflineLogDirectoryCount)",
            value=len(logs.offline_dirs),
        )
        yield _histogram(
            "kafka_log_flush_time_seconds",
            "Time of each group commit's fsync (Kafka's LogFlushRateAndTimeMs)",
            [],
            [([], logs.flush_times)],
        )

    # ------------------------------------------------------------------ tiered storage

    def _tiered(self) -> Iterator[Metric]:
        """Kafka's RemoteStorageMetrics that kbroker keeps (docs/tiered-storage.md), with
        a broker that tiers (remote.log.storage.system.enable)."""
        tier = self.broker.tier
        if tier is None:
            return
        copier, reader = tier.rlm.stats, tier.reader.stats
        for name, doc, value in (
            (
                "kafka_server_remote_copy_bytes_total",
                "Bytes of segments copied (RemoteCopyBytesPerSec)",
                copier["copied_bytes"],
            ),
            ("kafka_server_remote_copy_segments_total", "Segments copied (RemoteCopyRequestsPerSec)", copier["copied"]),
            (
                "kafka_server_remote_fetch_bytes_total",
                "Bytes read from remote storage for fetches, chunk cache misses (RemoteFetchBytesPerSec)",
                reader["fetched_bytes"],
            ),
            (
                "kafka_server_remote_storage_errors_total",
                "Failed copies and deletes (FailedRemoteCopyRequestsPerSec, FailedRemoteDeleteRequestsPerSec)",
                copier["errors"],
            ),
            (
                "kafka_server_remote_fetch_errors_total",
                "Failed remote reads: store errors, damaged objects (FailedRemoteFetchRequestsPerSec)",
                reader["errors"],
            ),
            ("kafka_server_remote_deleted_segments_total", "Remote segments deleted by retention", copier["deleted"]),
            (
                "kafka_server_remote_orphans_deleted_total",
                "Unfinished copies whose objects were deleted",
                copier["orphans"],
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        yield GaugeMetricFamily(
            "kafka_server_remote_chunk_cache_bytes",
            "Bytes of the remote reads' chunk cache on disk",
            value=reader_bytes(tier),
        )
        lag_bytes = GaugeMetricFamily(
            "kafka_server_remote_copy_lag_bytes",
            "Bytes of rolled segments not yet copied (RemoteCopyLagBytes)",
            labels=["topic", "partition"],
        )
        lag_segments = GaugeMetricFamily(
            "kafka_server_remote_copy_lag_segments",
            "Rolled segments not yet copied (RemoteCopyLagSegments)",
            labels=["topic", "partition"],
        )
        remote_size = GaugeMetricFamily(
            "kafka_server_remote_log_size_bytes",
            "Bytes of a partition's segments in remote storage (RemoteLogSizeBytes)",
            labels=["topic", "partition"],
        )
        for tp, part in sorted(self.broker.replicas.partitions.items()):
            lg = part.log
            if not lg.remote_log_enabled or not part.is_leader:
                continue
            labels = [tp.topic, str(tp.partition)]
            waiting = [s for s in lg.segments[:-1] if s.base_offset > lg.highest_copied_offset]
            lag_bytes.add_metric(labels, sum(s.size for s in waiting))
            lag_segments.add_metric(labels, len(waiting))
            tip = tier.tip(tp)
            remote_size.add_metric(labels, sum(s.segment_size for s in tier.rlm.cache.copied(tip)) if tip else 0)
        yield lag_bytes
        yield lag_segments
        yield remote_size

    # ------------------------------------------------------------------ controller

    def _controller(self) -> Iterator[Metric]:
        controller = self.broker.controller
        active = controller is not None and controller.active
        yield GaugeMetricFamily(
            "kafka_controller_active_controller_count",
            "1 on the active controller, 0 elsewhere (Kafka's ActiveControllerCount)",
            value=1 if active else 0,
        )
        offline = 0
        if active and controller is not None and controller.ctx is not None:
            ctx = controller.ctx
            offline = sum(1 for s in ctx.states.values() if s.leader < 0 or s.leader not in ctx.brokers)
        yield GaugeMetricFamily(
            "kafka_controller_offline_partitions_count",
            "Partitions without a live leader, on the active controller (Kafka's OfflinePartitionsCount)",
            value=offline,
        )
        yield GaugeMetricFamily(
            "kafka_controller_epoch",
            "The controller epoch this broker knows",
            value=self.broker.metadata.controller_epoch,
        )
        yield CounterMetricFamily(
            "kafka_controller_leader_elections",
            "Leaderships this broker's controller gave (Kafka's LeaderElectionRateAndTimeMs count)",
            value=0 if controller is None else controller.leader_elections,
        )
        yield CounterMetricFamily(
            "kafka_controller_unclean_leader_elections",
            "Leaders elected outside the ISR (Kafka's UncleanLeaderElectionsPerSec)",
            value=0 if controller is None else controller.unclean_leader_elections,
        )

    # ------------------------------------------------------------------ network, loop, ZooKeeper

    def _network(self) -> Iterator[Metric]:
        c = GaugeMetricFamily(
            "kafka_server_connections",
            "Open client connections per listener (Kafka's connection-count)",
            labels=["listener"],
        )
        for listener, n in self.broker.server.connection_counts().items():
            c.add_metric([listener], n)
        yield c
        if self.loop.available:
            yield GaugeMetricFamily(
                "kafka_server_request_handler_avg_idle_ratio",
                "Idle fraction of the event loop since the previous scrape "
                "(Kafka's RequestHandlerAvgIdlePercent, 0..1)",
                value=self.loop.idle_ratio(),
            )
            yield CounterMetricFamily(
                "kbroker_event_loop_idle_seconds",
                "Time the event loop waited for I/O (rate() of it: the idle ratio)",
                value=self.loop.idle,
            )

    def _zookeeper(self) -> Iterator[Metric]:
        if not self.broker.in_cluster:
            return
        store = self.broker.store
        yield GaugeMetricFamily(
            "kafka_server_zookeeper_session_connected",
            "1 while the ZooKeeper session is connected (Kafka's SessionState)",
            value=1 if store.connected else 0,
        )
        yield _histogram(
            "kafka_server_zookeeper_request_latency_seconds",
            "ZooKeeper request round trips (Kafka's ZooKeeperRequestLatencyMs)",
            [],
            [([], store.request_latency or Histogram())],
        )

    # ------------------------------------------------------------------ groups

    def _groups(self) -> Iterator[Metric]:
        coordinator = self.broker.coordinator
        states = {s.value: 0 for s in GroupState if s is not GroupState.DEAD}
        lag = GaugeMetricFamily(
            "kafka_consumer_group_lag",
            "High watermark minus committed offset, per group and partition (groups coordinated here)",
            labels=["group", "topic", "partition"],
        )
        members = GaugeMetricFamily(
            "kafka_coordinator_group_members", "Members of each group coordinated here", labels=["group"]
        )
        for g in coordinator.list_groups():
            states[g.state.value] = states.get(g.state.value, 0) + 1
            members.add_metric([g.group_id], len(g.members))
            for (topic, partition), lag_value in group_lag(self.broker, g).items():
                lag.add_metric([g.group_id, topic, str(partition)], lag_value)
        s = GaugeMetricFamily(
            "kafka_coordinator_groups",
            "Groups coordinated here, per state (Kafka's NumGroups<State>)",
            labels=["state"],
        )
        for name, n in states.items():
            s.add_metric([name], n)
        yield s
        yield members
        yield lag
        yield CounterMetricFamily(
            "kafka_coordinator_rebalances",
            "Completed rebalances of groups coordinated here (Kafka's group rebalance count)",
            value=coordinator.rebalances,
        )


def group_lag(broker: Broker, group: Any) -> dict[tuple[str, int], int]:
    """(topic, partition) -> high watermark minus committed offset, for each committed
    partition hosted on this broker (a partition hosted elsewhere has no high watermark
    here and is left out)."""
    out = {}
    partitions = broker.replicas.partitions
    for (topic, partition), om in group.offsets.items():
        part = partitions.get(_tp(topic, partition))
        if part is None:
            continue
        out[(topic, partition)] = max(part.log.high_watermark - om.offset, 0)
    return out


def reader_bytes(tier: Any) -> int:
    return int(tier.reader.cached_bytes)


def _tp(topic: str, partition: int) -> Any:
    from broker.log import TopicPartition

    return TopicPartition(topic, partition)
