"""A partition as this broker sees it: its log plus leadership, ISR and high watermark
(Kafka's Partition).

As leader it tracks each follower's log end offset (the offset of its last fetch) and
when it last caught up, and from those:

- the high watermark: the smallest log end offset of the maximal ISR (the committed
  ISR plus a replica whose addition is being recorded: KIP-497's "maximal ISR", so an
  ISR change never lets the high watermark get ahead of what the new ISR holds);
- ISR expansion: a follower outside the ISR whose log end offset reached the high
  watermark and the start of this leader's epoch is added;
- ISR shrink: a follower that has not caught up with the log end for
  replica.lag.time.max.ms is removed (the replica manager's timer asks).

A follower's fetch counts only once its read succeeded (Kafka's fetchRecords): it must
come from a replica of the partition (`check_follower`), an offset outside the log is
OFFSET_OUT_OF_RANGE and moves nothing, and a fetch whose last fetched epoch disagrees with
this leader's epoch cache is answered with where that epoch ends here (`diverging_epoch`,
KIP-320) instead of records.

The leader decides, the controller records: an ISR change is an AlterPartition request
(through `isr_changes`, one in flight per partition); the ISR changes here only when the
controller answers with the new state. Until then the change is pending and counts in
the maximal ISR. An answer that proves nothing was written (INELIGIBLE_REPLICA,
OPERATION_NOT_ATTEMPTED) drops it; any other failure (a timeout, a lost connection,
INVALID_UPDATE_VERSION, a fenced epoch...) may hide a write the controller did make, so
the change stays pending and is sent again after a backoff, until the controller answers
it or a LeaderAndIsr with a newer leader or partition epoch replaces it (Kafka's
handleAlterPartitionError keeps the pending state the same way).

A follower appends the leader's batches as they are and takes the leader's high
watermark (bounded by its own log end); it serves no consumer.

Every move of the log end or of the high watermark is reported to the listener (the
ReplicaManager's purgatory, where waiting fetches and appends sleep).

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from broker.cluster.metadata import PartitionState
from broker.config import LONG_MAX
from broker.log import Log, LogAppendInfo, OffsetOutOfRange, TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger(__name__)


class PartitionListener(Protocol):
    """Told when a partition moves (the ReplicaManager's purgatory implements it)."""

    def high_watermark_moved(self, tp: TopicPartition) -> None: ...
    def log_end_moved(self, tp: TopicPartition) -> None: ...
    def partition_changed(self, tp: TopicPartition) -> None: ...


class _NoListener:
    def high_watermark_moved(self, tp: TopicPartition) -> None:
        pass

    def log_end_moved(self, tp: TopicPartition) -> None:
        pass

    def partition_changed(self, tp: TopicPartition) -> None:
        pass


NO_LISTENER: PartitionListener = _NoListener()
ISR_RETRY_BACKOFF_S = 1.0

#: the controller's answers that prove the change was not written, by no controller
#: (Kafka's handleAlterPartitionError): only these drop a pending ISR change
ISR_CHANGE_NOT_APPLIED = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})

#: isr_changes(partition, new ISR): sends an AlterPartition; the answer comes back
#: through Partition.isr_change_completed.
IsrChanger = Callable[["Partition", list[int]], None]


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    log_end_offset: int = -1
    last_caught_up: float = 0.0  # monotonic time it last had everything
    last_fetch_leader_leo: int = -1  # the leader's log end at its previous fetch
    last_fetch_time: float = 0.0


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        log: Log,
        state: PartitionState,
        broker_id: int,
        listener: PartitionListener = NO_LISTENER,
        isr_changes: IsrChanger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self.listener = listener
        self.isr_changes = isr_changes
        self.clock = clock
        self.state = state
        self.followers: dict[int, FollowerState] = {}
        self.pending_isr: list[int] | None = None  # an AlterPartition in flight
        self._isr_retry_at = 0.0  # after a refusal, not before this
        self._isr_resend_at: float | None = None  # a pending change is asked again then
        self.leader_epoch_start_offset = -1
        if self.is_leader:
            self._become_leader()

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def isr(self) -> list[int]:
        return self.state.isr

    @property
    def maximal_isr(self) -> list[int]:
        """The committed ISR plus a replica being added (Kafka's maximalIsr)."""
        if self.pending_isr is None:
            return self.state.isr
        return sorted(set(self.state.isr) | set(self.pending_isr))

    @property
    def follower_leo(self) -> dict[int, int]:
        return {r: f.log_end_offset for r, f in self.followers.items()}

    def _become_leader(self) -> None:
        """Kafka's makeLeader: the epoch starts at the log end; every follower's position
        is unknown, those in the ISR count as caught up now (not shrunk at once)."""
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.log.assign_leader_epoch(self.state.leader_epoch, self.log.log_end_offset)
        now = self.clock()
        self.followers = {
            r: FollowerState(last_caught_up=now if r in self.state.isr else 0.0)
            for r in self.state.replicas
            if r != self.broker_id
        }
        self.pending_isr = None
        self._isr_resend_at = None

    def update_state(self, state: PartitionState) -> bool:
        """A new state from the controller (LeaderAndIsr). Returns whether this broker's
        role or the leader epoch changed (a follower then truncates and fetches anew)."""
        old = self.state
        self.state = state
        changed = state.leader != old.leader or state.leader_epoch != old.leader_epoch
        self._isr_retry_at = 0.0
        if self.is_leader and changed:
            self._become_leader()
        elif self.is_leader:
            if state.partition_epoch > old.partition_epoch:
                self.pending_isr = None  # the controller's newer state settles what was asked
                self._isr_resend_at = None
            for r in state.replicas:
                if r != self.broker_id and r not in self.followers:
                    self.followers[r] = FollowerState()
            for r in [r for r in self.followers if r not in state.replicas]:
                del self.followers[r]  # a replica a reassignment removed
        elif changed:
            self.followers = {}
            self.pending_isr = None
            self._isr_resend_at = None
        if self.is_leader:
            self.maybe_increment_high_watermark()
        else:
            self.log.update_high_watermark(min(self.log.high_watermark, self.log.log_end_offset))
        self.listener.partition_changed(self.tp)
        return changed

    def resign(self) -> bool:
        """Stops leading without a controller's word: leader -1 at the same epoch, as a
        follower of no one (the broker's ZooKeeper session expired, so a controller has
        moved or will move this leadership). Waiting appends and fetches are woken, to be
        answered NOT_LEADER_OR_FOLLOWER; a pending ISR change is dropped. Whether it led."""
        if not self.is_leader:
            return False
        self.state = replace(self.state, leader=-1)
        self.followers = {}
        self.pending_isr = None
        self._isr_resend_at = None
        self.listener.partition_changed(self.tp)
        return True

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raises NOT_LEADER_OR_FOLLOWER / FENCED / UNKNOWN leader epoch as Kafka does."""
        if not self.is_leader:
            raise KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.state.leader_epoch:
                raise KafkaProtocolError(ErrorCode.FENCED_LEADER_EPOCH)
            if current_leader_epoch > self.state.leader_epoch:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # ------------------------------------------------------------------ leader: appends

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        required_acks: int,
        control: bool = False,
        client: bool = True,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Validates, assigns offsets and appends; advances the high watermark when the
        ISR allows. acks=-1 below min.insync.replicas -> NOT_ENOUGH_REPLICAS. `control`:
        transaction markers (of `transaction_version`); `client`: a client's batches
        (Log.append_as_leader)."""
        self.check_leader()
        if required_acks == -1 and len(self.state.isr) < self.log.config.min_insync_replicas:
            raise KafkaProtocolError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {self.state.isr} is insufficient to satisfy "
                f"the min.isr requirement of {self.log.config.min_insync_replicas} for "
                f"partition {self.tp}",
            )
        info = self.log.append_as_leader(records, self.state.leader_epoch, control, client, transaction_version)
        if not info.duplicate:
            self.listener.log_end_moved(self.tp)
            self.maybe_increment_high_watermark()
        return info

    def answers_at_once(self, acks: int) -> bool:
        """Would a client's append here with `acks` (1 or -1) be answered the moment it is
        appended (by ReplicaManager.append_records), with nothing to wait for and nothing
        refused before the append? Only as leader, without a flush policy (flush.messages,
        flush.ms: the answer would wait for an fsync), and for acks=-1 with a maximal ISR of
        this broker alone that satisfies min.insync.replicas and a high watermark at the
        log end, which then covers the batch (or the retried batch) once appended. Asked
        of every partition of a Produce before anything is appended (append_now)."""
        if not self.is_leader:
            return False
        config = self.log.config
        if config.flush_messages != LONG_MAX or config.flush_ms != LONG_MAX:
            return False
        if acks != -1:
            return True
        isr = self.maximal_isr
        lg = self.log
        return (
            len(isr) == 1
            and isr[0] == self.broker_id
            and len(self.state.isr) >= config.min_insync_replicas
            and lg.high_watermark == lg.log_end_offset
        )

    def holds(self, leader_epoch: int, end_offset: int) -> bool:
        """Does the log still hold what this broker appended as leader in `leader_epoch`
        below `end_offset`? Always while it has led since; after following another leader
        (and maybe truncating), only if that epoch still reaches end_offset in the epoch
        cache (a truncation below it drops or shortens the epoch's entry)."""
        entries = self.log.leader_epochs.entries
        for i, (epoch, _start) in enumerate(entries):
            if epoch == leader_epoch:
                end = entries[i + 1][1] if i + 1 < len(entries) else self.log.log_end_offset
                return end >= end_offset
        return False

    def enough_replicas(self) -> bool:
        """After an acks=all wait: is the ISR still at least min.insync.replicas? The
        maximal ISR, as Kafka's checkEnoughReplicasReachOffset: the high watermark was
        computed over it, so each of its members has the records."""
        return len(self.maximal_isr) >= self.log.config.min_insync_replicas

    def check_enough_replicas_reach_offset(self, required_offset: int, leader_epoch: int) -> tuple[bool, int]:
        """Is an acks=all append that this broker made as leader in `leader_epoch`, ending
        below `required_offset` (its last offset + 1), done waiting, and with which error
        (Kafka's checkEnoughReplicasReachOffset)?

            (False, NONE)         the high watermark is still below it: keep waiting
            (True, NONE)          the high watermark covers it, over a maximal ISR of at
                                  least min.insync.replicas: every member has it
            (True, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                                  the high watermark covers it, but the maximal ISR shrank
                                  below min.insync.replicas meanwhile
            (True, NOT_LEADER_OR_FOLLOWER)
                                  this broker no longer leads; or it leads again after
                                  following another leader (A -> B -> A) and its log no
                                  longer holds the batch (truncated as a follower: the
                                  offsets may now hold other records, which the high
                                  watermark passing must not acknowledge)

        A new leader epoch alone keeps it waiting: the controller bumps the epoch at every
        ISR shrink, and the batch is still here and will commit. The producer told
        NOT_LEADER_OR_FOLLOWER finds the new leader and retries (an idempotent one
        without duplicating) instead of waiting out its timeout here."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if leader_epoch != self.state.leader_epoch and not self.holds(leader_epoch, required_offset):
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if not self.enough_replicas():
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    # ------------------------------------------------------------------ leader: the flush policy

    def needs_flush(self) -> bool:
        """Does the topic's flush policy (flush.messages, flush.ms) want an fsync before
        an append is answered? (Kafka flushes inline; here the answer waits for flush().)"""
        return self.log.needs_flush()

    def flush(self) -> asyncio.Future[None] | None:
        """The group commit: fsyncs, in a worker thread, everything appended so far (a
        call while one runs joins the next). The future completes once it is durable, or
        raises LogStorageError when an fsync failed; None outside an event loop."""
        return self.log.schedule_flush()

    def maybe_increment_high_watermark(self) -> None:
        if not self.is_leader:
            return
        hw = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.broker_id:
                f = self.followers.get(replica)
                hw = min(hw, f.log_end_offset if f is not None and f.log_end_offset >= 0 else 0)
        if hw > self.log.high_watermark and self.log.update_high_watermark(hw):
            self.listener.high_watermark_moved(self.tp)

    # ------------------------------------------------------------------ leader: followers

    def check_follower(self, replica_id: int, current_leader_epoch: int = -1) -> None:
        """A fetch as follower `replica_id` must come from a replica of this partition other
        than this broker (Kafka's followerReplicaOrThrow): UNKNOWN_LEADER_EPOCH when the
        fetch names a leader epoch (the follower retries), else NOT_LEADER_OR_FOLLOWER."""
        if replica_id == self.broker_id or replica_id not in self.state.replicas:
            code = ErrorCode.UNKNOWN_LEADER_EPOCH if current_leader_epoch >= 0 else ErrorCode.NOT_LEADER_OR_FOLLOWER
            raise KafkaProtocolError(code, f"broker {replica_id} is not a replica of {self.tp}")

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """A follower's fetch (v12+) names the epoch of its last record: (epoch, end offset)
        of this leader's log when the follower's log cannot be a prefix of it (that epoch
        ends here before the fetch offset, or this leader has no such epoch), None when it
        can (or no epoch was named). Raises OffsetOutOfRange when the epoch is unknown here
        or the offset is below the log start. As Kafka's Partition.readRecords."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.leader_epochs.end_offset_for(last_fetched_epoch, self.log.log_end_offset)
        if epoch < 0 or end < 0:
            raise OffsetOutOfRange(f"{self.tp}: no end offset for the last fetched epoch {last_fetched_epoch}")
        if fetch_offset < self.log.log_start_offset:
            raise OffsetOutOfRange(
                f"{self.tp}: offset {fetch_offset} is below the log start {self.log.log_start_offset}"
            )
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def update_follower(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetched from `fetch_offset` and the read succeeded: everything below is
        on its log (Kafka's updateFollowerFetchState). False, and nothing changes, for a
        broker that is not a replica or an offset outside this log (it proves nothing)."""
        if replica_id == self.broker_id or replica_id not in self.state.replicas:
            return False
        leo = self.log.log_end_offset
        if not self.log.log_start_offset <= fetch_offset <= leo:
            return False
        f = self.followers.get(replica_id)
        if f is None:
            f = self.followers[replica_id] = FollowerState()
        now = self.clock()
        if fetch_offset >= leo:
            f.last_caught_up = max(f.last_caught_up, now)
        elif fetch_offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up = max(f.last_caught_up, f.last_fetch_time)
        f.last_fetch_leader_leo = leo
        f.last_fetch_time = now
        f.log_end_offset = fetch_offset
        if self.is_leader:
            self._maybe_resend_isr_change()
            self._maybe_expand_isr(replica_id, f)
            self.maybe_increment_high_watermark()
        return True

    def _maybe_expand_isr(self, replica_id: int, f: FollowerState) -> None:
        if (
            replica_id in self.state.isr
            or self.pending_isr is not None
            or self.isr_changes is None
            or self.clock() < self._isr_retry_at
            or f.log_end_offset < self.log.high_watermark
            or f.log_end_offset < self.leader_epoch_start_offset
        ):
            return
        self._request_isr(self.isr_changes, sorted(set(self.state.isr) | {replica_id}), f"{replica_id} caught up")

    def maybe_shrink_isr(self, lag_ms: int) -> None:
        """Drops followers that have not caught up for lag_ms (the replica manager's timer)."""
        now = self.clock()
        if self.is_leader:
            self._maybe_resend_isr_change()
        if not self.is_leader or self.pending_isr is not None or self.isr_changes is None or now < self._isr_retry_at:
            return
        leo = self.log.log_end_offset
        out = []
        for r in self.state.isr:
            if r == self.broker_id:
                continue
            f = self.followers.get(r)
            caught_up = f is not None and f.log_end_offset >= leo
            if not caught_up and (f is None or (now - f.last_caught_up) * 1000 > lag_ms):
                out.append(r)
        if out:
            self._request_isr(
                self.isr_changes, [r for r in self.state.isr if r not in out], f"{out} did not catch up for {lag_ms} ms"
            )

    def _request_isr(self, isr_changes: IsrChanger, new_isr: list[int], why: str) -> None:
        log.info("%s: ISR %s -> %s (%s)", self.tp, self.state.isr, new_isr, why)
        self.pending_isr = new_isr
        isr_changes(self, new_isr)
        self.maybe_increment_high_watermark()

    def _maybe_resend_isr_change(self) -> None:
        """Sends again a pending change whose answer proved nothing, once the backoff is over."""
        if (
            self.pending_isr is not None
            and self._isr_resend_at is not None
            and self.clock() >= self._isr_resend_at
            and self.isr_changes is not None
        ):
            self._isr_resend_at = None
            log.info("%s: asking again for ISR %s", self.tp, self.pending_isr)
            self.isr_changes(self, self.pending_isr)

    def isr_change_completed(
        self,
        asked: list[int],
        error: int,
        leader_epoch: int = -1,
        isr: list[int] | None = None,
        partition_epoch: int = -1,
    ) -> None:
        """The controller's answer to an AlterPartition this partition sent (Kafka's
        handleAlterPartitionUpdate / handleAlterPartitionError)."""
        if self.pending_isr is not asked:
            return  # a newer state replaced what was asked
        if not error and (
            leader_epoch != self.state.leader_epoch or partition_epoch < self.state.partition_epoch or isr is None
        ):
            # an answer about another state than ours: ours is stale and a LeaderAndIsr is
            # on its way; until it comes nothing is known of what the controller holds
            error = (
                ErrorCode.FENCED_LEADER_EPOCH
                if leader_epoch > self.state.leader_epoch
                else ErrorCode.INVALID_UPDATE_VERSION
            )
        self._isr_resend_at = None
        if not error:
            assert isr is not None
            self.pending_isr = None
            self.state = PartitionState(
                self.state.partition,
                self.state.replicas,
                self.state.leader,
                self.state.leader_epoch,
                list(isr),
                self.state.controller_epoch,
                partition_epoch,
                self.state.leader_recovery_state,
            )
        elif error in ISR_CHANGE_NOT_APPLIED:
            log.warning("%s: the controller refused ISR %s: %s", self.tp, asked, ErrorCode(error).name)
            self.pending_isr = None
            self._isr_retry_at = self.clock() + ISR_RETRY_BACKOFF_S
        else:
            # the controller may have written it: keep counting the maximal ISR, ask again
            log.warning(
                "%s: no answer for ISR %s (%s); it stays pending, asking again in %.1f s",
                self.tp,
                asked,
                _name(error),
                ISR_RETRY_BACKOFF_S,
            )
            self._isr_resend_at = self.clock() + ISR_RETRY_BACKOFF_S
        self.maybe_increment_high_watermark()
        self.listener.partition_changed(self.tp)

    # ------------------------------------------------------------------ follower

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> int:
        end = self.log.append_as_follower(records)
        self.listener.log_end_moved(self.tp)
        return end

    def update_follower_high_watermark(self, leader_hw: int) -> None:
        hw = min(leader_hw, self.log.log_end_offset)
        if hw > self.log.high_watermark and self.log.update_high_watermark(hw):
            self.listener.high_watermark_moved(self.tp)

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.log_end_offset:
            log.info("%s: truncating from %d to %d", self.tp, self.log.log_end_offset, offset)
            self.log.truncate_to(offset)
            self.listener.partition_changed(self.tp)
        else:
            # nothing to cut, but an epoch this replica started as leader without appending
            # anything may end the cache; the leader never had it, so the next fetch's last
            # fetched epoch would diverge (Kafka's UnifiedLog.truncateTo drops it likewise)
            self.log.leader_epochs.truncate_from_end(self.log.log_end_offset)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
