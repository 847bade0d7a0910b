"""ReplicaManager: the partitions this broker hosts (Kafka's ReplicaManager).

It owns the partition map and applies what the controller decides:

    LeaderAndIsr     become leader or follower of each partition listed (creating its
                     log on first sight); a follower's fetcher is (re)started, truncating
                     first, whenever its leader or leader epoch changes
    StopReplica      stop following (and delete the log when the topic is deleted)

Requests stamped with a controller epoch older than the newest seen are refused
(STALE_CONTROLLER_EPOCH), as are partition states older than the local one. As leader
each partition sends its ISR changes to the controller (AlterPartition, batched per loop
turn); a timer shrinks the ISR of partitions whose followers lag.

Request handlers look partitions up here:

    partition(topic, p)                 the local replica or UNKNOWN_TOPIC_OR_PARTITION /
                                        NOT_LEADER_OR_FOLLOWER (known topic, not hosted here)
    leader_partition(topic, p, epoch)   the same, and it must lead at that leader epoch

`append_records` is the one way anything appends as leader (Kafka's appendRecords):
client produces (the produce handler, origin CLIENT), the group and transaction
coordinators' writes to __consumer_offsets and __transaction_state
(server/partition_writer.py, origin COORDINATOR) and transaction markers (the
WriteTxnMarkers handler, origin MARKER: control batches, nothing else). It appends
synchronously and answers what can be answered at once; acks=-1 and the topic's flush
policy wait in the purgatory the ReplicaManager owns (`purgatory`, delayed_produce.py).
Followers append through their fetchers (Partition.append_as_follower), never through
here.

`fetch_records` is the one way a fetch reads as leader (Kafka's fetchMessages and
readFromLog): consumers' and followers' fetches (the fetch handler, which keeps the ACLs,
the client's quota and the encoding). It reads synchronously and answers at once when it
can; a long poll waits in the same purgatory (delayed_fetch.py), woken by appends (a
follower's), moves of the high watermark (a consumer's) and changes of leadership.

A failed log dir (the LogManager took it offline: an I/O error) takes its partitions
offline here (Kafka's handleLogDirFailure): they leave the partition map, their fetchers
stop, what waits on them wakes, and until a restart every request for them is answered
KAFKA_STORAGE_ERROR — LeaderAndIsr too, which is how the controller learns these
replicas are offline and moves their leadership (`on_log_dir_failure` tells it,
through a /log_dir_event_notification znode in ZooKeeper).

Listeners registered with `on_leadership_change` learn which partitions this broker
started or stopped leading (the group coordinator loads and unloads its
__consumer_offsets partitions this way).

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import logging
import uuid
from collections.abc import Callable, Container, Hashable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from broker.cluster.cache import MetadataCache
from broker.cluster.metadata import INTERNAL_TOPICS, BrokerInfo, PartitionState
from broker.cluster.replica.append_errors import APPEND_ERRORS, append_error
from broker.cluster.replica.delayed_fetch import (
    DelayedFetch,
    FetchParams,
    FetchPartition,
    FetchResult,
    LogReads,
    PartitionRead,
    PendingRemote,
    RemoteFetch,
    RemoteReads,
    satisfied,
)
from broker.cluster.replica.delayed_produce import AcksPending, AppendResult, DelayedProduce, PartitionResult
from broker.cluster.replica.fetcher import FetcherConfig, ReplicaFetcherManager
from broker.cluster.replica.partition import Partition
from broker.cluster.replica.purgatory import HIGH_WATERMARK, LOG_END, Purgatory
from broker.cluster.replica.throttle import ReplicationQuotas
from broker.log import LogManager, OffsetOutOfRange, TopicPartition
from broker.log.log import OffsetInRemoteStorage
from broker.log.manager import LogDirError
from broker.metrics.stats import TopicStats
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.alter_partition import AlterPartitionRequest

if TYPE_CHECKING:
    from broker.cluster.controller_client import ControllerClient

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")  # Kafka's state-change log

LeadershipListener = Callable[[list[TopicPartition], list[TopicPartition]], None]
EPOCH_DURING_DELETE = -2
ALTER_PARTITION_VERSION = 2
Records = bytes | bytearray | memoryview


class AppendOrigin(enum.Enum):
    """Who appends as leader (Kafka's AppendOrigin). Kafka's REPLICATION is the follower
    path (Partition.append_as_follower), which does not go through append_records."""

    CLIENT = "client"  # a Produce request: never into an internal topic
    COORDINATOR = "coordinator"  # the group and transaction coordinators' own records
    MARKER = "marker"  # transaction markers (WriteTxnMarkers): control batches only


_CLIENT = AppendOrigin.CLIENT  # an enum's attribute costs ~0.1 us to read: once per append here
_MARKER = AppendOrigin.MARKER


def _never() -> bool:
    return False


def _read_error(r: PartitionRead, code: int) -> None:
    r.error = code
    r.high_watermark = r.last_stable_offset = r.log_start_offset = -1
    r.diverging = None


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        metadata: MetadataCache,
        fetcher_config: FetcherConfig | None = None,
        replica_lag_ms: int = 30000,
        quotas: ReplicationQuotas | None = None,
        measure: bool = False,
    ):
        self.broker_id = broker_id
        self.logs = logs
        self.metadata = metadata
        # every partition reports its moves here; waiting appends and fetches sleep here
        self.purgatory = Purgatory()
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = -1
        self.broker_epoch = -1
        self.replica_lag_ms = replica_lag_ms
        #: the replication throttles (Kafka's QuotaManagers.leader / .follower): the fetch
        #: handler holds followers' fetches to the leader's, the fetchers to the follower's
        self.quotas = quotas or ReplicationQuotas(broker_id)
        self.fetchers = ReplicaFetcherManager(
            fetcher_config or FetcherConfig(broker_id), self.partitions.get, self.quotas.follower
        )
        self.controller: ControllerClient | None = None  # once the broker has one
        #: tiered storage's reads (broker/server/tier.py), None without it: a consumer's
        #: offset held in remote storage only is read there (followers: OFFSET_OUT_OF_RANGE)
        self.remote_reads: RemoteReads | None = None
        #: called with each partition whose log is deleted here (topic deletion)
        self.deleted_listeners: list[Callable[[TopicPartition, uuid.UUID | None], None]] = []
        self._leadership_listeners: list[LeadershipListener] = []
        self._isr_batch: dict[TopicPartition, tuple[Partition, list[int]]] = {}
        self._isr_timer: asyncio.Task[None] | None = None
        #: per-topic bytes and records in and out, and the bytes sent to followers (Kafka's
        #: BrokerTopicStats), counted when `measure` (metrics.listener); None: not counted
        self.topic_stats: TopicStats | None = TopicStats() if measure else None
        #: Kafka's IsrShrinksPerSec / IsrExpandsPerSec: ISR changes of partitions led here
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: partitions whose log is in an offline dir (Kafka's HostedPartition.Offline) -> the dir
        self.offline: dict[TopicPartition, str] = {}
        #: partitions that stopped being led when the ZooKeeper session expired -> (the
        #: broker epoch then, the leader epoch then): resign_leadership
        self.resigned: dict[TopicPartition, tuple[int, int]] = {}
        #: called (on the loop) after a log dir went offline: the broker tells the controller
        self.on_log_dir_failure: Callable[[str], None] | None = None
        if logs is not None:  # (unit tests of the append path have none)
            logs.on_dir_offline(self.handle_log_dir_failure)

    def on_leadership_change(self, fn: LeadershipListener) -> None:
        """fn(became_leader, became_follower) after every change of local leadership."""
        self._leadership_listeners.append(fn)

    def start(self) -> None:
        self._isr_timer = asyncio.get_running_loop().create_task(self._shrink_loop())

    async def shutdown(self) -> None:
        if self._isr_timer is not None:
            self._isr_timer.cancel()
            try:
                await self._isr_timer
            except (asyncio.CancelledError, Exception):
                pass
        await self.fetchers.shutdown()

    # ------------------------------------------------------------------ lookups

    def get(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def partition(self, topic: str, index: int) -> Partition:
        """The local partition or KafkaProtocolError(UNKNOWN_TOPIC_OR_PARTITION /
        NOT_LEADER_OR_FOLLOWER)."""
        part = self.partitions.get(TopicPartition(topic, index))
        if part is None:
            if self.offline and TopicPartition(topic, index) in self.offline:
                raise KafkaProtocolError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"the log of {topic}-{index} is in an offline log dir"
                )
            if self.metadata.partition_state(topic, index) is None:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        part = self.partition(topic, index)
        part.check_leader(current_leader_epoch)
        return part

    def is_leader(self, tp: TopicPartition) -> bool:
        part = self.partitions.get(tp)
        return part is not None and part.is_leader

    def leader_count(self) -> int:
        return sum(1 for p in self.partitions.values() if p.is_leader)

    # ------------------------------------------------------------------ appends as leader

    def append_records(
        self,
        entries: Iterable[tuple[TopicPartition, Records]],
        acks: int,
        timeout_ms: int,
        origin: AppendOrigin,
        transaction_version: int = 0,
    ) -> AppendResult:
        """Appends each entry's record batches as leader of its partition, now, in order
        (Kafka's appendRecords and appendToLocalLog); one PartitionResult per entry.

        Per partition: a CLIENT append to an internal topic is INVALID_TOPIC_EXCEPTION;
        an unknown partition UNKNOWN_TOPIC_OR_PARTITION, one not led here
        NOT_LEADER_OR_FOLLOWER; acks=-1 while the ISR is below min.insync.replicas
        NOT_ENOUGH_REPLICAS (nothing appended); what the log refuses is mapped by
        broker/cluster/replica/append_errors.py (INVALID_RECORD, MESSAGE_TOO_LARGE, KAFKA_STORAGE_ERROR,
        OUT_OF_ORDER_SEQUENCE_NUMBER ...); a retried idempotent batch is answered with the
        offsets of its first write. Any other exception is a bug and propagates.

        What waits (delayed_produce.py): with acks 1 and -1, the group commit the flush
        policy asks for; with acks=-1, the high watermark reaching the batch. The result
        is `pending` then; otherwise it is final on return, and this path creates no
        coroutine and no task (the produce hot path). `acks` must be 0, 1 or -1 (the
        caller answers INVALID_REQUIRED_ACKS). `transaction_version`: of MARKER appends
        (Log.append_as_leader)."""
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1, not {acks}")
        return AppendResult(*self._append(entries, acks, timeout_ms, origin, transaction_version))

    def append_now(
        self, entries: Sequence[tuple[TopicPartition, Records]], acks: int, timeout_ms: int = 0
    ) -> list[PartitionResult] | None:
        """A client's append (origin CLIENT, acks 1 or -1) answered at once: appended as
        append_records appends it, one PartitionResult per entry, final. None, with nothing
        appended, when append_records would make any partition wait or refuse it before its
        append: an internal topic, a partition not led here, one that does not answer at
        once (Partition.answers_at_once: a flush policy, acks=-1 with followers to wait
        for). The direct path of Produce (server/handlers/produce.py) appends so."""
        partitions = self.partitions
        for tp, _ in entries:
            part = partitions.get(tp)
            if part is None or not part.answers_at_once(acks) or tp.topic in INTERNAL_TOPICS:
                return None
        results, delayed = self._append(entries, acks, timeout_ms, _CLIENT, flush_policies=False)
        if delayed is not None:  # answers_at_once rules it out: a bug
            raise RuntimeError(f"an append of {[str(tp) for tp, _ in entries]} answered at once must wait")
        return results

    def _append(
        self,
        entries: Iterable[tuple[TopicPartition, Records]],
        acks: int,
        timeout_ms: int,
        origin: AppendOrigin,
        transaction_version: int = 0,
        flush_policies: bool = True,
    ) -> tuple[list[PartitionResult], DelayedProduce | None]:
        """append_records' appends: the results, and what waits (None: nothing).
        `flush_policies` False: the caller knows that no partition has one (append_now)."""
        internal_allowed = origin is not _CLIENT
        results: list[PartitionResult] = []
        delayed: DelayedProduce | None = None
        for tp, records in entries:
            try:
                if tp.topic in INTERNAL_TOPICS and not internal_allowed:
                    raise KafkaProtocolError(
                        ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {tp.topic}"
                    )
                part = self.partitions.get(tp)
                if part is None:
                    part = self.partition(tp.topic, tp.partition)  # raises: unknown, or not hosted
                # NOT_LEADER_OR_FOLLOWER if not leading
                info = part.append_as_leader(records, acks, origin is _MARKER, origin is _CLIENT, transaction_version)
            except APPEND_ERRORS as exc:
                results.append(PartitionResult(*append_error(exc), record_errors=getattr(exc, "record_errors", None)))
                continue
            res = PartitionResult(
                0, None, info.base_offset, info.last_offset, info.log_append_time, info.log_start_offset
            )
            results.append(res)
            if self.topic_stats is not None and not internal_allowed and not info.duplicate:
                self.topic_stats.appended(tp.topic, info.record_count, info.size)
            if acks == 0:
                continue
            if flush_policies and part.needs_flush():
                if delayed is None:
                    delayed = DelayedProduce(self.purgatory, self.partitions.get, timeout_ms)
                delayed.flushes.append((res, part))
            if acks == -1:
                required = info.last_offset + 1
                done, error = part.check_enough_replicas_reach_offset(required, part.leader_epoch)
                if not done:
                    if delayed is None:
                        delayed = DelayedProduce(self.purgatory, self.partitions.get, timeout_ms)
                    delayed.acks_pending.append(AcksPending(res, part, required, part.leader_epoch))
                elif error:
                    res.error = error
        return results, delayed

    # ------------------------------------------------------------------ LeaderAndIsr

    def check_controller_epoch(self, controller_epoch: int) -> bool:
        """False for a request from an older controller; records a newer epoch."""
        if controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring a request of controller epoch %d: the newest seen is %d",
                controller_epoch,
                self.controller_epoch,
            )
            return False
        self.controller_epoch = controller_epoch
        return True

    def become_leader_or_follower(
        self,
        states: Iterable[tuple[str, uuid.UUID, PartitionState]],
        live_leaders: dict[int, BrokerInfo],
        new: Container[TopicPartition] | None = None,
        broker_epoch: int = -1,
    ) -> dict[TopicPartition, int]:
        """Applies LeaderAndIsr partition states (the caller checked the controller
        epoch); returns each partition's error code. `new`: the partitions the request
        marks is_new (None: any). While a log dir is offline, the log of a partition
        that is not new and not found is not created: it may be in the offline dir
        (KAFKA_STORAGE_ERROR, as Kafka's Partition.createLogIfNotExists), and an empty
        log must not pass for it. `broker_epoch`: the request's (-1: not carried), which
        decides whether a partition resigned at a session expiry may be led again."""
        errors: dict[TopicPartition, int] = {}
        became_leader: list[TopicPartition] = []
        became_follower: list[TopicPartition] = []
        followed: set[int] = set()  # live leaders this request names for our follower partitions
        states = list(states)
        # the logs of a topic's new partitions are created all or none (a topic is never
        # left half on disk: open-file limit, disk full)
        new_logs: dict[tuple[str, uuid.UUID], list[TopicPartition]] = {}
        for topic, topic_id, state in states:
            tp = TopicPartition(topic, state.partition)
            if tp in self.offline and self.broker_id in state.replicas:
                # its log is in an offline dir: never created again elsewhere (Kafka answers so,
                # and the controller takes the answer for "this replica is offline")
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if self.broker_id in state.replicas and tp not in self.partitions and self.logs.get(tp) is None:
                if self.logs.offline_dirs and new is not None and tp not in new:
                    log.error(
                        "%s: no log found and a log dir is offline (%s): not created",
                        tp,
                        ", ".join(self.logs.offline_dirs),
                    )
                    errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
                new_logs.setdefault((topic, topic_id), []).append(tp)
        for (topic, topic_id), tps in new_logs.items():
            try:
                for lg in self.logs.create_logs(tps, topic_id):
                    lg.update_config(self.metadata.log_config(topic))
            except (LogDirError, ValueError) as exc:
                log.error("cannot create the logs of %s: %s", topic, exc)
                errors.update((tp, ErrorCode.KAFKA_STORAGE_ERROR) for tp in tps)
        for topic, topic_id, state in states:
            tp = TopicPartition(topic, state.partition)
            if tp in errors:
                continue
            if self.broker_id not in state.replicas:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            part = self.partitions.get(tp)
            if part is not None:
                cur = part.state
                if state.leader_epoch < cur.leader_epoch:
                    errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
                    continue
                resigned = self.resigned.get(tp)
                if resigned is not None and not self._may_lead_again(resigned, state, broker_epoch):
                    # sent by a controller that has not seen this broker register again:
                    # the leadership it names is the one the expiry ended
                    errors[tp] = ErrorCode.NONE
                    continue
                if (
                    resigned is None
                    and state.leader_epoch == cur.leader_epoch
                    and state.partition_epoch <= cur.partition_epoch
                ):
                    # nothing newer than what this replica has (a full resend after a
                    # failover): a follower that was not fetching starts now if it can
                    errors[tp] = ErrorCode.NONE
                    leader = live_leaders.get(state.leader)
                    if not part.is_leader and leader is not None:
                        followed.add(state.leader)
                        if self.fetchers.leader_of(tp) != state.leader:
                            self.fetchers.add(tp, leader, state.leader_epoch)
                    continue
            try:
                was_leader = part is not None and part.is_leader
                if part is None:
                    lg = self.logs.get_or_create(tp, topic_id)
                    lg.update_config(self.metadata.log_config(topic))
                    part = self.partitions[tp] = Partition(
                        tp, lg, state, self.broker_id, self.purgatory, self._submit_isr_change
                    )
                    changed = True
                    part.maybe_increment_high_watermark()
                else:
                    changed = part.update_state(state)
                self.resigned.pop(tp, None)
            except OSError as exc:
                log.error("%s: cannot open the log: %s", tp, exc)
                errors[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            errors[tp] = ErrorCode.NONE
            if changed:
                state_change_log.info(
                    "[Broker id=%d] partition %s-%d: %s at leader epoch %d (leader %d), ISR %s, controller epoch %d",
                    self.broker_id,
                    topic,
                    state.partition,
                    "leader" if part.is_leader else "follower",
                    state.leader_epoch,
                    state.leader,
                    list(state.isr),
                    state.controller_epoch,
                )
            if part.is_leader:
                self.fetchers.remove([tp])
                if not was_leader:
                    became_leader.append(tp)
                    log.info("%s: leader at epoch %d, ISR %s", tp, state.leader_epoch, state.isr)
            else:
                if was_leader:
                    became_follower.append(tp)
                leader = live_leaders.get(state.leader)
                if leader is None:
                    self.fetchers.remove([tp])
                    log.info("%s: follower of %d, which is not alive: not fetching", tp, state.leader)
                else:
                    followed.add(state.leader)
                    if changed or self.fetchers.leader_of(tp) != state.leader:
                        self.fetchers.add(tp, leader, state.leader_epoch)
                        log.info("%s: follower of %d at epoch %d", tp, state.leader, state.leader_epoch)
        # a fetch connection to a leader named here that has been waiting past its long
        # poll is stalled (packets dropped by a network cut now healed): reset it, not
        # wait for TCP to give up
        self.fetchers.reset_stalled(followed)
        self._tell(became_leader, became_follower)
        return errors

    def _may_lead_again(self, resigned: tuple[int, int], state: PartitionState, broker_epoch: int) -> bool:
        """Whether a LeaderAndIsr state may be applied to a partition resigned at a session
        expiry: any naming another leader, or a newer leader epoch (a controller wrote
        it to ZooKeeper after the expiry); one naming this broker at the epoch it gave up
        only from a controller that knows this broker's new registration."""
        then_broker_epoch, then_leader_epoch = resigned
        if state.leader != self.broker_id or state.leader_epoch > then_leader_epoch:
            return True
        known = broker_epoch if broker_epoch >= 0 else self.broker_epoch
        return known > then_broker_epoch

    def resign_leadership(self, why: str) -> list[TopicPartition]:
        """Every partition led here stops being led (Partition.resign) because of `why`
        (the ZooKeeper session expired: the controller took this broker for dead and has
        moved, or will move, its leaderships; a paused broker resuming must not answer
        reads and epoch queries from a log the new leader has outgrown). Kafka's ZooKeeper
        brokers keep leading until a controller says otherwise. Each is led again when a
        LeaderAndIsr names this broker at a newer epoch, or from a controller that has
        seen its new registration (its full LeaderAndIsr to a bounced broker)."""
        resigned = [tp for tp, part in self.partitions.items() if part.resign()]
        if not resigned:
            return []
        for tp in resigned:
            self.resigned[tp] = (self.broker_epoch, self.partitions[tp].leader_epoch)
            self._isr_batch.pop(tp, None)
        log.warning(
            "broker %d: %s: stopped leading %d partitions until a controller names their leaders",
            self.broker_id,
            why,
            len(resigned),
        )
        self._tell([], resigned)
        return resigned

    def stop_replicas(self, tps: Iterable[tuple[TopicPartition, int, bool]]) -> dict[TopicPartition, int]:
        """StopReplica: [(partition, leader epoch, delete)] -> error codes."""
        errors: dict[TopicPartition, int] = {}
        stopped_leading = []
        for tp, leader_epoch, delete in tps:
            part = self.partitions.get(tp)
            if part is not None and leader_epoch not in (-1, EPOCH_DURING_DELETE) and leader_epoch < part.leader_epoch:
                errors[tp] = ErrorCode.FENCED_LEADER_EPOCH
                continue
            self.fetchers.remove([tp])
            if delete:
                self.offline.pop(tp, None)
                self.resigned.pop(tp, None)
                part = self.partitions.pop(tp, None)
                if part is not None and part.is_leader:
                    stopped_leading.append(tp)
                lg = self.logs.logs.get(tp)
                topic_id = lg.topic_id if lg is not None else None
                self.logs.delete(tp)
                for fn in self.deleted_listeners:
                    try:
                        fn(tp, topic_id)
                    except Exception:
                        log.exception("deleted-partition listener %r failed", fn)
            self.purgatory.partition_changed(tp)
            errors[tp] = ErrorCode.NONE
        self._tell([], stopped_leading)
        return errors

    def handle_log_dir_failure(self, log_dir: str, tps: list[TopicPartition]) -> None:
        """The LogManager took `log_dir` offline (its logs are closed): its partitions stop
        being led or followed here, and the controller is told."""
        stopped_leading = []
        for tp in tps:
            self.offline[tp] = log_dir
            part = self.partitions.pop(tp, None)
            if part is not None and part.is_leader:
                stopped_leading.append(tp)
        self.fetchers.remove(tps)
        for tp in tps:
            self.purgatory.partition_changed(tp)
        log.error(
            "broker %d: %d partitions are offline with log dir %s (%d led here)",
            self.broker_id,
            len(tps),
            log_dir,
            len(stopped_leading),
        )
        self._tell([], stopped_leading)
        if self.on_log_dir_failure is not None:
            try:
                self.on_log_dir_failure(log_dir)
            except Exception:
                log.exception("telling the controller that %s failed", log_dir)

    def _tell(self, became_leader: list[TopicPartition], became_follower: list[TopicPartition]) -> None:
        if not (became_leader or became_follower):
            return
        for fn in self._leadership_listeners:
            try:
                fn(became_leader, became_follower)
            except Exception:
                log.exception("leadership listener %r failed", fn)

    # ------------------------------------------------------------------ reads as leader

    def fetch_records(
        self, params: FetchParams, partitions: Sequence[FetchPartition], gone: Callable[[], bool] = _never
    ) -> FetchResult:
        """Reads `partitions` for a consumer or a follower (Kafka's fetchMessages): now, in
        order (read_from_log), and answers with that read when it can
        (delayed_fetch.py); otherwise the result is `pending`: a DelayedFetch waits in the
        purgatory and `await result.wait()` gives the answer. `gone()`: has the fetch's
        client gone (it then waits no more)? The fetch's ACLs, its client's quota and the
        answer's encoding are the caller's (the fetch handler)."""
        read = self.read_from_log(params, partitions)
        if read.remote and self.remote_reads is not None:
            return FetchResult(None, RemoteFetch(read, self.remote_reads), self._fetch_completed)
        if params.max_wait_ms <= 0 or satisfied(read, params.min_bytes, params.deadline, gone):
            self._fetch_completed(read)
            return FetchResult(read)
        read.release()
        delayed = DelayedFetch(
            self.purgatory,
            partial(self.read_from_log, params, partitions),
            params.min_bytes,
            params.deadline,
            read.watches,
            gone,
        )
        return FetchResult(None, delayed, self._fetch_completed)

    def _fetch_completed(self, read: LogReads) -> None:
        """A follower's answer: the bytes it carries of throttled partitions, in sync or
        not, count against the leader throttle (Kafka's sizeOfThrottledPartitions)."""
        if read.throttled_bytes >= 0 and read.bytes:
            self.quotas.leader.record(read.throttled_bytes)

    def read_from_log(self, params: FetchParams, partitions: Sequence[FetchPartition]) -> LogReads:
        """One read of each partition, in order (Kafka's readFromLog and
        Partition.fetchRecords): below the high watermark for a consumer (the last stable
        offset for read_committed, with the aborted transactions the records overlap),
        below the log end for a follower.

        Limits (KIP-74): each partition's max_bytes, the fetch's max_bytes over all,
        except that the first batch of the first partition with data is read whole. A
        partition not led here (or not at the fetch's leader epoch) answers with its
        error; an offset outside the log OFFSET_OUT_OF_RANGE; a read the disk refuses
        KAFKA_STORAGE_ERROR (its log dir is taken offline). When the open-file limit
        allows no more open segments (EMFILE), the partitions left get no records this
        time, as when max_bytes is reached.

        A follower (params.replica_id) must be a replica of the partition
        (Partition.check_follower); a last fetched epoch that diverges from this leader's
        epochs is answered with where that epoch ends, no records and no update; and only
        a read that succeeded counts as its position (record_follower_fetch). The leader
        replication throttle (throttle.py): a throttled partition the follower is not in
        sync for gets no records while the leader quota is exceeded, and otherwise at
        most one window's worth of it over such partitions."""
        follower = params.replica_id >= 0
        replica_id = params.replica_id
        committed = params.read_committed
        kind = LOG_END if follower else HIGH_WATERMARK
        remaining = params.max_bytes
        total = 0
        first = True
        errors = False
        starved = False  # out of open segments: the remaining partitions get no records
        reads: list[PartitionRead] = []
        remote: list[PendingRemote] = []
        watches: list[tuple[Hashable, int]] = []
        # the leader replication throttle (Kafka's shouldLeaderThrottle), looked at only for
        # a follower's fetch of a throttled partition it is out of sync for, at most once
        leader_quota = self.quotas.leader
        counts_throttled = follower and bool(leader_quota.topics)
        throttled_bytes = 0 if counts_throttled else -1
        quota = leader_quota if counts_throttled and leader_quota.bound is not None else None
        exceeded: bool | None = None
        throttled_left = 0
        for fp in partitions:
            r = PartitionRead()
            reads.append(r)
            name: str | None = fp.topic
            if fp.topic_id is not None:
                name = self.metadata.topic_name(fp.topic_id)
                if name is None:
                    r.error = ErrorCode.UNKNOWN_TOPIC_ID
                    errors = True
                    continue
            assert name is not None
            sl = None
            try:
                part = self.leader_partition(name, fp.partition, fp.current_leader_epoch)
                lg = part.log
                watches.append((part.tp, kind))
                lso = lg.last_stable_offset
                if follower:
                    part.check_follower(replica_id, fp.current_leader_epoch)
                    limit = lg.log_end_offset
                elif committed:
                    limit = lso
                else:
                    limit = lg.high_watermark
                r.high_watermark = lg.high_watermark
                r.last_stable_offset = lso
                r.log_start_offset = lg.log_start_offset
                if follower and fp.last_fetched_epoch >= 0:
                    diverging = part.diverging_epoch(fp.fetch_offset, fp.last_fetched_epoch)
                    if diverging is not None:
                        # no records, no follower update: it truncates first (answered at once)
                        r.diverging = diverging
                        errors = True
                        continue
                if starved:
                    continue
                max_bytes = min(fp.max_bytes, remaining)
                held = capped = False
                if quota is not None and quota.is_throttled(name, fp.partition) and replica_id not in part.maximal_isr:
                    if exceeded is None:
                        exceeded = quota.exceeded()
                        throttled_left = quota.window_bytes()
                    # exceeded: no records (the fetch still counts as the follower's position)
                    held = exceeded or throttled_left <= 0
                    capped = True
                    max_bytes = min(max_bytes, throttled_left)
                if held or (max_bytes <= 0 and not first):
                    # out of room: no records this time, but a follower's position is known
                    if follower and not lg.log_start_offset <= fp.fetch_offset <= lg.log_end_offset:
                        raise OffsetOutOfRange(f"{part.tp}: offset {fp.fetch_offset} outside the log")
                else:
                    try:
                        sl = lg.read(fp.fetch_offset, max(max_bytes, 0), limit, min_one_batch=first)
                    except OffsetInRemoteStorage:
                        if follower or self.remote_reads is None:
                            raise
                        # read in worker threads before the answer (RemoteFetch)
                        remote.append((r, part.tp, fp.fetch_offset, max(max_bytes, 0), limit, first, committed))
                        first = False
                        continue
                    except OSError as exc:
                        if exc.errno not in (errno.EMFILE, errno.ENFILE):
                            # a read error: the dir's failure (Kafka's LogDirFailureChannel
                            # from a fetch) takes it offline; this partition answers so
                            lg.dir_health.failed(exc, f"reading {part.tp}")
                            raise KafkaProtocolError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
                        starved = True
                        continue
                if follower:
                    # only now: an offset the read refused proves nothing (Kafka's fetchRecords)
                    self.record_follower_fetch(part, replica_id, fp.fetch_offset)
                if sl is not None:
                    r.records = sl
                    if committed and not follower:
                        found = lg.collect_aborted(fp.fetch_offset, limit)
                        if found:
                            r.aborted = found
                    total += sl.length
                    remaining -= sl.length
                    first = False
                    if capped:
                        throttled_left -= sl.length
                    if counts_throttled and leader_quota.is_throttled(name, fp.partition):
                        throttled_bytes += sl.length
            except (KafkaProtocolError, OffsetOutOfRange) as exc:
                if sl is not None:
                    sl.close()  # read, but not answered: the follower's update failed
                _read_error(r, ErrorCode.OFFSET_OUT_OF_RANGE if isinstance(exc, OffsetOutOfRange) else exc.code)
                errors = True
        out = LogReads(reads, total, errors, watches, throttled_bytes)
        out.remote = remote
        return out

    # ------------------------------------------------------------------ follower fetches (leader side)

    def record_follower_fetch(self, part: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower's Fetch whose read succeeded (read_from_log checked the replica with
        Partition.check_follower and the offset before reading); NOT_LEADER_OR_FOLLOWER if
        it still proves nothing (not a replica, an offset outside the log)."""
        if not part.update_follower(replica_id, fetch_offset):
            raise KafkaProtocolError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {replica_id} fetching {fetch_offset}: not a follower's position of {part.tp}",
            )

    # ------------------------------------------------------------------ ISR changes

    def _submit_isr_change(self, part: Partition, new_isr: list[int]) -> None:
        first = not self._isr_batch
        self._isr_batch[part.tp] = (part, new_isr)
        if first:
            asyncio.get_running_loop().call_soon(self._send_isr_changes)

    def _send_isr_changes(self) -> None:
        batch, self._isr_batch = self._isr_batch, {}
        if not batch:
            return
        asyncio.get_running_loop().create_task(self._alter_partition(batch))

    async def _alter_partition(self, batch: dict[TopicPartition, tuple[Partition, list[int]]]) -> None:
        R = AlterPartitionRequest
        topics: dict[str, list[Any]] = {}
        ids = {}
        for tp, (part, isr) in batch.items():
            ids[tp.topic] = part.log.topic_id
            # new_isr up to v2, new_isr_with_epochs from v3: both filled, any version goes
            topics.setdefault(tp.topic, []).append(
                R.PartitionData(
                    partition_index=tp.partition,
                    leader_epoch=part.state.leader_epoch,
                    new_isr=list(isr),
                    new_isr_with_epochs=[R.BrokerState(broker_id=r, broker_epoch=-1) for r in isr],
                    leader_recovery_state=0,
                    partition_epoch=part.state.partition_epoch,
                )
            )
        req = R(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            topics=[R.TopicData(topic_name=t, topic_id=ids[t], partitions=ps) for t, ps in topics.items()],
        )
        try:
            if self.controller is None:
                raise RuntimeError("no controller client")
            resp = await self.controller.request(req, timeout=self.replica_lag_ms / 1000)
        except Exception as exc:
            log.warning(
                "cannot record ISR changes of %s: %s; they stay pending (the controller may have "
                "written them) and are asked again",
                sorted(str(tp) for tp in batch),
                exc,
            )
            for tp, (part, isr) in batch.items():
                part.isr_change_completed(isr, ErrorCode.REQUEST_TIMED_OUT)
            return
        answered = set()
        for t in resp.topics:
            name = t.topic_name or self.metadata.topic_name(t.topic_id) or ""
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                entry = batch.get(tp)
                if entry is None:
                    continue
                answered.add(tp)
                part, isr = entry
                err = resp.error_code or p.error_code
                before = len(part.isr)
                part.isr_change_completed(isr, err, p.leader_epoch, list(p.isr), p.partition_epoch)
                if len(part.isr) < before:
                    self.isr_shrinks += 1
                elif len(part.isr) > before:
                    self.isr_expands += 1
        for tp, (part, isr) in batch.items():
            if tp not in answered:
                part.isr_change_completed(isr, resp.error_code or ErrorCode.UNKNOWN_SERVER_ERROR)

    async def _shrink_loop(self) -> None:
        interval = max(self.replica_lag_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            for part in list(self.partitions.values()):
                if part.is_leader and len(part.state.replicas) > 1:
                    try:
                        part.maybe_shrink_isr(self.replica_lag_ms)
                    except Exception:
                        log.exception("%s: ISR check failed", part.tp)
