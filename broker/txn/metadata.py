"""One transactional id's state at its coordinator (Kafka's TransactionMetadata).

States (Kafka's TransactionState; the id is what __transaction_state stores):

    Empty (0)              no transaction open; InitProducerId's result
    Ongoing (1)            partitions were added: a transaction is open
    PrepareCommit (2)      EndTxn(commit) written; markers being written
    PrepareAbort (3)       EndTxn(abort), a timeout or a fence written; markers being written
    CompleteCommit (4)     every COMMIT marker written
    CompleteAbort (5)      every ABORT marker written
    Dead (6)               the id expired (transactional.id.expiration.ms): a tombstone
    PrepareEpochFence (7)  a newer producer's InitProducerId fences an open transaction:
                           in memory only, it becomes PrepareAbort at the bumped epoch

A change is two steps, as in Kafka: `prepare_*` checks the transition and returns the
target (a TxnTransit) with `pending` set, so no other change starts meanwhile; the
coordinator writes the target to __transaction_state and, once the ISR has it,
`complete_transition` applies it (`abort_transition` drops it after a failed write).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

MAX_EPOCH = 32767  # Short.MaxValue: an epoch that cannot grow takes a new producer id
NO_PRODUCER_ID = -1
NO_EPOCH = -1


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the state (ListTransactions, DescribeTransactions, the tools)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

S = TxnState

#: target -> the states it may be reached from (Kafka's TransactionState.validPreviousStates)
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # from a finished transaction: transaction.version 2's abort with no partition added
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: states whose transaction is finished: a new one may start
COMPLETED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(Exception):
    """A transition the state machine does not allow (a bug, or a concurrent change)."""


@dataclass
class TxnTransit:
    """The target of a transition, as written to __transaction_state (Kafka's TxnTransitMetadata)."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    last_update_ms: int
    client_version: int = 0


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    last_producer_epoch: int = NO_EPOCH
    timeout_ms: int = 60000
    state: TxnState = S.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    client_version: int = 0  # transaction.version the client uses (2: KIP-890 part 2)
    pending: TxnState | None = None
    # a fence bumped the epoch in memory before its abort was written (Kafka's hasFailedEpochFence)
    failed_epoch_fence: bool = False

    # ------------------------------------------------------------------ reading

    @property
    def pending_in_progress(self) -> bool:
        return self.pending is not None

    def transit(
        self,
        state: TxnState,
        *,
        producer_id: int | None = None,
        epoch: int | None = None,
        last_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: set[tuple[str, int]] | frozenset[tuple[str, int]] | None = None,
        start_ms: int | None = None,
        now_ms: int,
        next_producer_id: int | None = None,
        client_version: int | None = None,
    ) -> TxnTransit:
        """Marks the transition to `state` pending and returns its target (IllegalTransition
        when another is pending or `state` cannot follow the current one)."""
        if self.pending is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.pending.kafka_name} is pending, cannot start {state.kafka_name}"
            )
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name} is not a valid transition"
            )
        self.pending = state
        # a new producer id remembers the one it replaces (a retry of the request that
        # rotated it names the old one)
        rotated = producer_id is not None and producer_id != self.producer_id
        return TxnTransit(
            producer_id=self.producer_id if producer_id is None else producer_id,
            previous_producer_id=self.producer_id if rotated else self.previous_producer_id,
            next_producer_id=self.next_producer_id if next_producer_id is None else next_producer_id,
            producer_epoch=self.producer_epoch if epoch is None else epoch,
            last_producer_epoch=self.last_producer_epoch if last_epoch is None else last_epoch,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(self.partitions if partitions is None else partitions),
            start_ms=self.start_ms if start_ms is None else start_ms,
            last_update_ms=now_ms,
            client_version=self.client_version if client_version is None else client_version,
        )

    # ------------------------------------------------------------------ the transitions (Kafka's prepare*)

    def prepare_increment_epoch(
        self,
        timeout_ms: int,
        now_ms: int,
        new_producer_id: int | None = None,
        client_version: int = 0,
        *,
        bump_from: int | None = None,
        last_epoch: int | None = None,
    ) -> TxnTransit:
        """InitProducerId over a finished transaction: epoch `bump_from` + 1 (default the
        current one + 1), remembering `last_epoch` (default the current one) for KIP-360
        retries; epoch 0 of `new_producer_id` when the epoch is exhausted."""
        if new_producer_id is not None:
            return self.transit(
                S.EMPTY,
                producer_id=new_producer_id,
                epoch=0,
                last_epoch=NO_EPOCH,
                timeout_ms=timeout_ms,
                partitions=set(),
                start_ms=-1,
                now_ms=now_ms,
                client_version=client_version,
            )
        base = self.producer_epoch if bump_from is None else bump_from
        if base + 1 >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: epoch {base} is exhausted")
        return self.transit(
            S.EMPTY,
            epoch=base + 1,
            last_epoch=self.producer_epoch if last_epoch is None else last_epoch,
            timeout_ms=timeout_ms,
            partitions=set(),
            start_ms=-1,
            now_ms=now_ms,
            client_version=client_version,
        )

    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    def prepare_fence_epoch(self, now_ms: int) -> TxnTransit:
        """A newer producer fences the open transaction: the epoch goes up by one (not
        again after a fence whose write failed: that epoch never reached a client)."""
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self.transit(S.PREPARE_EPOCH_FENCE, epoch=epoch, last_epoch=NO_EPOCH, now_ms=now_ms)

    def prepare_add_partitions(
        self, partitions: set[tuple[str, int]], now_ms: int, client_version: int | None = None
    ) -> TxnTransit:
        start = now_ms if self.state in COMPLETED else self.start_ms
        base = set() if self.state in COMPLETED else self.partitions
        return self.transit(
            S.ONGOING, partitions=base | partitions, start_ms=start, now_ms=now_ms, client_version=client_version
        )

    def prepare_abort_or_commit(
        self,
        state: TxnState,
        now_ms: int,
        *,
        epoch: int | None = None,
        last_epoch: int | None = None,
        next_producer_id: int | None = None,
        client_version: int | None = None,
        no_partitions: bool = False,
    ) -> TxnTransit:
        """PrepareCommit / PrepareAbort. transaction.version 2 (client_version >= 2) bumps the
        epoch (the markers carry it; the client continues with it), remembering the one it
        ends as the last epoch; `next_producer_id` is the id taken when that exhausts the
        epoch. `no_partitions`: a version 2 abort of a transaction that added none (its
        start is now)."""
        if client_version is not None and client_version >= 2 and epoch is None:
            if self.producer_epoch >= MAX_EPOCH:
                raise IllegalTransition(f"{self.transactional_id}: epoch {self.producer_epoch} cannot grow")
            epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        return self.transit(
            state,
            epoch=epoch,
            last_epoch=last_epoch,
            now_ms=now_ms,
            next_producer_id=next_producer_id,
            client_version=client_version,
            partitions=set() if no_partitions else None,
            start_ms=now_ms if no_partitions else None,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Every marker is written: CompleteCommit or CompleteAbort, the partitions cleared.
        With transaction.version 2 the next producer id, if one was taken, becomes the id."""
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if self.next_producer_id >= 0:
            # the last epoch stays the one the client saw last (Short.MaxValue - 1), as Kafka's
            return self.transit(
                state,
                producer_id=self.next_producer_id,
                epoch=0,
                next_producer_id=NO_PRODUCER_ID,
                partitions=set(),
                now_ms=now_ms,
            )
        return self.transit(state, partitions=set(), now_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> TxnTransit:
        return self.transit(S.DEAD, partitions=set(), now_ms=now_ms)

    # ------------------------------------------------------------------ applying

    def complete_transition(self, t: TxnTransit) -> None:
        """The target was written (and replicated): it becomes the state."""
        if self.pending is None or self.pending != t.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {t.state.kafka_name} but "
                f"{self.pending.kafka_name if self.pending else 'nothing'} is pending"
            )
        self.previous_producer_id = t.previous_producer_id
        self.producer_id = t.producer_id
        self.next_producer_id = t.next_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.timeout_ms = t.timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.start_ms = t.start_ms
        self.last_update_ms = t.last_update_ms
        self.client_version = t.client_version
        self.pending = None
        self.failed_epoch_fence = False

    def abort_transition(self, t: TxnTransit | None = None) -> None:
        """The write failed: nothing changes (a fence's bumped epoch is remembered, so a
        retry does not bump it twice)."""
        if self.pending == S.PREPARE_EPOCH_FENCE or (t is not None and t.state == S.PREPARE_EPOCH_FENCE):
            self.failed_epoch_fence = True
        self.pending = None

    def apply_fence(self, t: TxnTransit) -> None:
        """PrepareEpochFence is never written: the fenced epoch becomes the current one in
        memory and the abort that follows (PrepareAbort at that epoch) is written."""
        if self.pending != S.PREPARE_EPOCH_FENCE:
            raise IllegalTransition(f"{self.transactional_id}: no fence pending")
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = NO_EPOCH
        self.state = S.PREPARE_EPOCH_FENCE
        self.pending = None

    def load(self, t: TxnTransit) -> None:
        """Replaying __transaction_state: the record is the state (no transition check)."""
        self.producer_id = t.producer_id
        self.previous_producer_id = t.previous_producer_id
        self.next_producer_id = t.next_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.timeout_ms = t.timeout_ms
        self.state = t.state
        self.partitions = set(t.partitions)
        self.start_ms = t.start_ms
        self.last_update_ms = t.last_update_ms
        self.client_version = t.client_version
        self.pending = None
