"""The transaction coordinator (Kafka's TransactionCoordinator, TransactionStateManager and
the driving half of TransactionMarkerChannelManager): KIP-98 transactions, KIP-360 epoch
bumps, KIP-447 and KIP-890.

Where a transactional id lives: partition `abs(String.hashCode(id)) % 50` of
__transaction_state (records.py), a compacted internal topic with
transaction.state.log.replication.factor replicas (fewer while fewer brokers are alive,
as the offsets topic) and min.insync.replicas transaction.state.log.min.isr. The broker
leading that partition is the id's coordinator; its coordinator epoch is the partition's
leader epoch. When it becomes leader it loads the partition (replays the records: the
last one per id is its state) and finishes what was in flight: PrepareCommit and
PrepareAbort have their markers written again and complete; Ongoing ones abort when they
time out. When it stops leading it forgets them (their requests get NOT_COORDINATOR).
Placement, loading and unloading with the leadership, the appends and the timers are the
coordinator runtime's (broker/coordinator/), which the group coordinator shares; a
TxnShard replays one partition.

Every change of an id's state (metadata.py's transitions) is first appended to the
partition with acks=-1 and applied once the ISR has it. EndTxn is answered once
PrepareCommit / PrepareAbort is written; the markers (WriteTxnMarkers to each partition's
leader, through the `MarkerSender` the server gives) are written afterwards, retried
until every partition has its marker, then CompleteCommit / CompleteAbort is written.

The marker phase (PrepareCommit / PrepareAbort in memory: Kafka keeps a pending
CompleteCommit / CompleteAbort then) is "busy", as is any transition being written
(`_ending`). A request of the id's producer that finds it busy waits (at most
CONCURRENT_WAIT_S) for the transaction to complete before it is served — answering
CONCURRENT_TRANSACTIONS at once would bound a producer to a few commits per second by
its retry backoff (librdkafka's 100 ms) — and past the wait it is answered
CONCURRENT_TRANSACTIONS, which every client retries, before its epoch is checked
(KAFKA-18464): markers slower than the wait must not turn the request of a producer that
is only early into a fatal answer. While busy, InitProducerId is answered
CONCURRENT_TRANSACTIONS whatever producer it names; the others name a producer id that
is the id's, or the next one an exhausted epoch's end answered (or, EndTxn v5, the
previous one, its rotation retried), else INVALID_PRODUCER_ID_MAPPING, and then:

    EndTxn v5 (transaction.version 2)    CONCURRENT_TRANSACTIONS
    EndTxn v0-4, AddPartitionsToTxn,     PRODUCER_FENCED for another epoch of the id's
    AddOffsetsToTxn, the implicit add    producer id, else CONCURRENT_TRANSACTIONS
    of Produce v12 and TxnOffsetCommit
    v5, the produce path's verify_only

(the produce path answers CONCURRENT_TRANSACTIONS to the producer as the retriable
NOT_ENOUGH_REPLICAS, TxnOffsetCommit as COORDINATOR_LOAD_IN_PROGRESS). In
PrepareEpochFence (a fence whose abort is not written yet) the fenced producer is
answered PRODUCER_FENCED.

Timers: every transaction.abort.timed.out.transaction.cleanup.interval.ms the open
transactions past their timeout are aborted with a bumped epoch (the producer is fenced,
as Kafka's abortTimedOutTransactions); every
transaction.remove.expired.transaction.cleanup.interval.ms ids idle for
transactional.id.expiration.ms with no open transaction are removed (a tombstone).

Everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.coordinator import ClusterView, CoordinatorRuntime, LoadSummary, PartitionWriter
from broker.coordinator.placement import partition_for
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode
from broker.timeouts import wait_for
from broker.txn import records as R
from broker.txn.metadata import (
    COMPLETED,
    MAX_EPOCH,
    NO_EPOCH,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
WRITE_TIMEOUT_MS = 5000
MARKER_RETRY_S = 0.1
CONCURRENT_WAIT_S = 1.0
_BUSY = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE})
#: a transaction whose markers are being written (Kafka: a pending CompleteCommit / CompleteAbort)
_MARKING = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})

S = TxnState

# how Kafka's TransactionStateManager answers a failed append to __transaction_state
_WRITE_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}

# marker answers after which that partition is done (Kafka's TransactionMarkerRequestCompletionHandler):
# written; a partition that cannot hold markers; or one whose producer already has a newer
# epoch there (INVALID_PRODUCER_EPOCH: a fence's marker was written, nothing is left to end)
_MARKER_DONE = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_PRODUCER_EPOCH,
    }
)
# answers that mean another coordinator has taken over: stop sending
_MARKER_FENCED = frozenset({ErrorCode.TRANSACTION_COORDINATOR_FENCED})


@dataclass(frozen=True)
class Marker:
    """One WriteTxnMarkers entry."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]
    #: the transaction's transaction.version (WriteTxnMarkers v2, KIP-1228): 2 makes the
    #: partition leader take the marker only at an epoch above the producer's (the
    #: coordinator bumped it at the end), so a late retry cannot end the next transaction
    transaction_version: int = 0


class MarkerSender(Protocol):
    """Writes markers at a broker (the local one without a socket): {partition: error code};
    a partition missing from the answer, or an exception, means try again."""

    async def send(self, broker_id: int, markers: list[Marker]) -> dict[tuple[int, str, int], int]: ...

    async def verify(
        self, broker_id: int, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn verify_only at the broker coordinating txn_id."""
        ...

    async def add(
        self, broker_id: int, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn v5 (not verify_only) at the broker coordinating txn_id: a
        partition's leader adds it for a transaction.version 2 producer."""
        ...


class ProducerIds(Protocol):
    async def generate(self) -> int: ...


def now_ms() -> int:
    return int(time.time() * 1000)


def _ending(md: TransactionMetadata) -> bool:
    """A transition is being written, or the transaction's markers are (Kafka's
    pendingTransitionInProgress, which holds a pending CompleteX through the marker
    phase): a request of the producer is told to retry, whatever its epoch."""
    return md.pending_in_progress or md.state in _MARKING


def _next_producer(md: TransactionMetadata, pid: int) -> bool:
    """pid is the producer id an exhausted epoch's end answered (transaction.version 2),
    not yet the id's: its producer went on before the markers were written."""
    return md.next_producer_id >= 0 and pid == md.next_producer_id


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class TxnShard:
    """One partition of __transaction_state as the coordinator runtime loads it (a
    CoordinatorShard): the last record of each transactional id is its state. Once
    loaded, the ids join the coordinator's and what was in flight is finished
    (PrepareCommit / PrepareAbort have their markers written again); unloaded, the
    partition's ids leave them."""

    def __init__(self, coordinator: TransactionCoordinator, partition: int, epoch: int) -> None:
        self.coordinator = coordinator
        self.partition = partition
        #: the coordinator epoch: the partition's leader epoch when it was loaded
        self.epoch = epoch
        self._found: dict[str, TxnTransit | None] = {}

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes, value: bytes | None) -> None:
        txn_id = R.decode_key(key)
        self._found[txn_id] = None if value is None else R.decode_value(value)

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """__transaction_state holds no transactions: no markers."""

    def on_loaded(self, summary: LoadSummary) -> None:
        c = self.coordinator
        found, self._found = self._found, {}
        for txn_id, t in found.items():
            if t is None or t.state == S.DEAD:
                continue
            md = TransactionMetadata(txn_id, t.producer_id)
            md.load(t)
            c.txns[txn_id] = md
        n = 0
        for txn_id, md in list(c.txns.items()):
            if c.partition_for(txn_id) != self.partition:
                continue
            n += 1
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info(
                    "%s: completing its %s after loading %s-%d", txn_id, md.state.kafka_name, TXN_TOPIC, self.partition
                )
                c.runtime.spawn(c._complete(txn_id, md, self.epoch))
        if found:
            log.info(
                "loaded %d transactional ids from %s-%d (coordinator epoch %d) in %.3f s",
                n,
                TXN_TOPIC,
                self.partition,
                self.epoch,
                summary.seconds,
            )

    def on_unloaded(self) -> None:
        c = self.coordinator
        for txn_id in [t for t in c.txns if c.partition_for(t) == self.partition]:
            del c.txns[txn_id]


class TransactionCoordinator:
    def __init__(
        self,
        config: Any,
        writer: PartitionWriter,
        metadata: ClusterView,
        producer_ids: ProducerIds,
        markers: MarkerSender,
        create_topic: Callable[[int, int, dict[str, str]], Awaitable[object]],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.markers = markers
        self.create_topic = create_topic
        self.clock = clock
        self.max_timeout_ms: int = config["transaction.max.timeout.ms"]
        self.txns: dict[str, TransactionMetadata] = {}
        self._settled: dict[str, list[asyncio.Future[None]]] = {}  # waiting for an id's transition
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            TXN_TOPIC,
            config["transaction.state.log.num.partitions"],
            writer,
            metadata,
            lambda partition, epoch: TxnShard(self, partition, epoch),
        )

    @property
    def writer(self) -> PartitionWriter:
        return self.runtime.writer

    @property
    def num_partitions(self) -> int:
        return self.runtime.num_partitions

    @property
    def _closed(self) -> bool:
        return self.runtime.closed

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        if self.runtime.refresh_partitions():
            self.runtime.load_all()
        self.runtime.every(
            self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            self.abort_timed_out,
            "aborting timed-out transactions",
        )
        self.runtime.every(
            self.config["transaction.remove.expired.transaction.cleanup.interval.ms"],
            self.remove_expired,
            "removing expired transactional ids",
        )

    async def shutdown(self) -> None:
        await self.runtime.close()

    # ------------------------------------------------------------------ placement

    def has_topic(self) -> bool:
        return self.runtime.has_topic()

    async def ensure_topic(self) -> None:
        """Creates __transaction_state on first use (FindCoordinator), as Kafka does."""
        cfg = self.config
        await self.runtime.ensure_topic(
            self.create_topic,
            cfg["transaction.state.log.num.partitions"],
            cfg["transaction.state.log.replication.factor"],
            "transaction.state.log.replication.factor",
            lambda rf: {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "min.insync.replicas": str(min(cfg["transaction.state.log.min.isr"], rf)),
                "segment.bytes": str(cfg["transaction.state.log.segment.bytes"]),
                "unclean.leader.election.enable": "false",
            },
        )

    def partition_for(self, transactional_id: str) -> int:
        return self.runtime.partition_for(transactional_id)

    def coordinator_node(self, transactional_id: str) -> int:
        return self.runtime.coordinator_node(transactional_id)

    def check_coordinator(self, transactional_id: str) -> int:
        """0, or the error a request for this id gets here."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        return self.runtime.check(transactional_id)

    # ------------------------------------------------------------------ loading

    def leadership_changed(self, became_leader: list[TopicPartition], became_follower: list[TopicPartition]) -> None:
        """The replica manager's leadership listener (the runtime loads and unloads)."""
        self.runtime.leadership_changed(became_leader, became_follower)

    def load_all(self) -> None:
        self.runtime.load_all()

    def _epoch_of(self, txn_id: str) -> int | None:
        """The coordinator epoch of the id's partition while it is loaded here."""
        return self.runtime.epoch(self.partition_for(txn_id))

    # ------------------------------------------------------------------ writing the state

    async def _write(self, txn_id: str, md: TransactionMetadata, t: TxnTransit, epoch: int) -> int:
        """Appends the transition's record (acks=-1), waits for the ISR, then applies it.
        Any error aborts the transition and is answered as Kafka's coordinator answers it."""
        try:
            return await self._write_record(txn_id, md, t, epoch)
        finally:
            self._notify(txn_id)

    def _notify(self, txn_id: str) -> None:
        for fut in self._settled.pop(txn_id, ()):
            if not fut.done():
                fut.set_result(None)

    async def _settle(self, txn_id: str, md: TransactionMetadata) -> None:
        """Waits (at most CONCURRENT_WAIT_S) while md has a transition in flight or is
        finishing a transaction (its markers, then Complete*)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONCURRENT_WAIT_S
        while (md.pending_in_progress or md.state in _BUSY) and self.txns.get(txn_id) is md and not self._closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            fut: asyncio.Future[None] = loop.create_future()
            self._settled.setdefault(txn_id, []).append(fut)
            try:
                await wait_for(fut, remaining)
            except asyncio.TimeoutError:
                return

    async def _write_record(self, txn_id: str, md: TransactionMetadata, t: TxnTransit, epoch: int) -> int:
        p = self.partition_for(txn_id)
        tp = TopicPartition(TXN_TOPIC, p)
        record = (R.encode_key(txn_id), None if t.state == S.DEAD else R.encode_value(t))
        try:
            write = self.runtime.append(p, [record], t.last_update_ms, WRITE_TIMEOUT_MS)
            code = write.error or await write.wait()
        except asyncio.CancelledError:
            md.abort_transition(t)
            raise
        if code:
            md.abort_transition(t)
            mapped = _WRITE_ERRORS.get(code, code)
            log.info(
                "%s: writing %s to %s failed: %s (answered %s)",
                txn_id,
                t.state.kafka_name,
                tp,
                _name(code),
                _name(mapped),
            )
            return mapped
        if self.runtime.epoch(p) != epoch or self.txns.get(txn_id) is not md:
            # the partition moved (or reloaded) meanwhile: the new coordinator has the record
            md.abort_transition(t)
            return ErrorCode.NOT_COORDINATOR
        md.complete_transition(t)
        if t.state == S.DEAD:
            self.txns.pop(txn_id, None)
        return 0

    # ------------------------------------------------------------------ InitProducerId

    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1, client_version: int = 0
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch) (Kafka's handleInitProducerId)."""
        err = self.check_coordinator(txn_id)
        if err:
            return err, -1, -1
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        epoch = self._epoch_of(txn_id)
        assert epoch is not None
        md = self.txns.get(txn_id)
        if md is None:
            try:
                pid = await self.producer_ids.generate()
            except Exception as exc:
                log.warning("%s: no producer id: %s", txn_id, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            if self._epoch_of(txn_id) != epoch:
                return ErrorCode.NOT_COORDINATOR, -1, -1
            md = self.txns.get(txn_id)
            if md is None:
                md = self.txns[txn_id] = TransactionMetadata(
                    txn_id, pid, timeout_ms=timeout_ms, last_update_ms=self.clock()
                )
        if md.pending_in_progress or md.state in _BUSY:
            await self._settle(txn_id, md)
            if self.txns.get(txn_id) is not md or self._epoch_of(txn_id) != epoch:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        # busy before the producer named is checked, as Kafka's: during the marker phase
        # of an exhausted epoch's end the producer names the next id, not yet the id's
        if md.pending_in_progress or md.state in _BUSY:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if expected_pid >= 0 and not self._valid_expected(md, expected_pid, expected_epoch):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if md.state == S.ONGOING:
            # fence the open transaction: abort it at a bumped epoch; the client retries
            # (CONCURRENT_TRANSACTIONS) and then gets the epoch after it
            self.runtime.spawn(self._fence_and_abort(txn_id, md, epoch))
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if md.state == S.DEAD:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        now = self.clock()
        # KIP-360: a producer that names its id and epoch (recovering from an error) is
        # bumped from its epoch; a retry of a bump whose answer was lost gets the same
        # epoch again; anyone else's epoch is fenced
        bump_from, last = md.producer_epoch, md.producer_epoch
        if expected_pid >= 0 and md.producer_epoch != NO_EPOCH and expected_epoch != md.producer_epoch:
            if md.last_producer_epoch != NO_EPOCH and expected_epoch == md.last_producer_epoch:
                bump_from, last = md.producer_epoch - 1, md.last_producer_epoch
            else:
                return ErrorCode.PRODUCER_FENCED, -1, -1
        new_pid = None
        if bump_from + 1 >= MAX_EPOCH:
            try:
                new_pid = await self.producer_ids.generate()
            except Exception:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            if md.pending_in_progress or self._epoch_of(txn_id) != epoch:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        try:
            t = md.prepare_increment_epoch(
                timeout_ms, now, new_pid, client_version, bump_from=bump_from, last_epoch=last
            )
        except IllegalTransition as exc:
            log.warning("%s", exc)
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        code = await self._write(txn_id, md, t, epoch)
        if code:
            return code, -1, -1
        return 0, md.producer_id, md.producer_epoch

    @staticmethod
    def _valid_expected(md: TransactionMetadata, pid: int, epoch: int) -> bool:
        """KIP-360 (Kafka's isValidProducerId): a named producer id is the current one, or
        the id was just created, or it is the previous id whose epoch ran out (a retry of
        the bump that rotated it)."""
        return (
            md.producer_epoch == NO_EPOCH
            or pid == md.producer_id
            or (pid == md.previous_producer_id and epoch >= MAX_EPOCH - 1)
        )

    async def _fence_and_abort(self, txn_id: str, md: TransactionMetadata, coord_epoch: int) -> None:
        """Fences the producer of an open transaction (its epoch goes up by one, in
        memory: PrepareEpochFence) and aborts the transaction at the bumped epoch. A
        fence whose abort could not be written stays PrepareEpochFence and is tried
        again by the timeout timer, without a second bump."""
        if md.pending_in_progress:
            return
        if md.state == S.ONGOING:
            md.apply_fence(md.prepare_fence_epoch(self.clock()))
        if md.state == S.PREPARE_EPOCH_FENCE:
            await self._end(txn_id, md, md.producer_id, md.producer_epoch, False, coord_epoch, from_client=False)

    # ------------------------------------------------------------------ AddPartitionsToTxn

    def _check_producer(self, md: TransactionMetadata | None, pid: int, epoch: int) -> int:
        if md is None or md.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return 0

    async def add_partitions(
        self,
        txn_id: str,
        pid: int,
        epoch: int,
        partitions: Iterable[tuple[str, int]],
        client_version: int | None = None,
    ) -> int:
        """Kafka's handleAddPartitionsToTransaction: one error for all the partitions.
        `client_version` 2: added for a transaction.version 2 producer (by its partition's
        leader, Produce v12, or its group coordinator, TxnOffsetCommit v5)."""
        err = self.check_coordinator(txn_id)
        if err:
            return err
        coord_epoch = self._epoch_of(txn_id)
        assert coord_epoch is not None
        md = self.txns.get(txn_id)
        if md is not None and _next_producer(md, pid):
            # transaction.version 2 answered EndTxn with the next producer id (the epoch ran
            # out): its producer may go on before the transaction completes
            await self._settle(txn_id, md)
            if self.txns.get(txn_id) is not md or self._epoch_of(txn_id) != coord_epoch or _next_producer(md, pid):
                return ErrorCode.CONCURRENT_TRANSACTIONS
        err = self._check_producer(md, pid, epoch)
        if err:
            return err
        assert md is not None
        if md.pending_in_progress or md.state in _BUSY:
            await self._settle(txn_id, md)
            if self.txns.get(txn_id) is not md or self._epoch_of(txn_id) != coord_epoch:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            err = self._check_producer(md, pid, epoch)
            if err:
                return err
        if md.pending_in_progress or md.state in _BUSY:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        wanted = set(partitions)
        if md.state == S.ONGOING and wanted <= md.partitions:
            return 0
        if md.state == S.DEAD:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        try:
            t = md.prepare_add_partitions(wanted, self.clock(), client_version)
        except IllegalTransition:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return await self._write(txn_id, md, t, coord_epoch)

    async def add_or_verify(
        self, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]], add: bool
    ) -> dict[tuple[str, int], int]:
        """The produce path's check (KIP-890): `add` (transaction.version 2, Produce v12):
        add the partitions to the open transaction (AddPartitionsToTxn v5 to the
        coordinator when it is another broker); else verify them (`verify`)."""
        if not add:
            return await self.verify(txn_id, pid, epoch, partitions)
        if self.check_coordinator(txn_id) == ErrorCode.NOT_COORDINATOR:
            node = self.coordinator_node(txn_id)
            if node >= 0:
                return await self.markers.add(node, txn_id, pid, epoch, partitions)
        code = await self.add_partitions(txn_id, pid, epoch, partitions, client_version=2)
        return {tp: code for tp in partitions}

    def verify_partitions(
        self, txn_id: str, pid: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn verify_only (KIP-890 part 1): is each partition in the open
        transaction of this producer? INVALID_TXN_STATE (TRANSACTION_ABORTABLE for the
        client) where it is not."""
        parts = list(partitions)
        err = self.check_coordinator(txn_id)
        md = self.txns.get(txn_id)
        if not err and md is not None and _next_producer(md, pid):
            err = ErrorCode.CONCURRENT_TRANSACTIONS  # the producer an exhausted epoch's end answered
        if not err:
            err = self._check_producer(md, pid, epoch)
        if err:
            return {tp: err for tp in parts}
        assert md is not None
        if (md.pending is not None and md.pending != S.ONGOING) or md.state in _MARKING:
            # the transaction is ending: the producer retries (Kafka's verification answers so)
            return {tp: ErrorCode.CONCURRENT_TRANSACTIONS for tp in parts}
        # an Ongoing -> Ongoing transition in flight (more partitions being added) changes
        # nothing of the partitions already in
        ok = md.state == S.ONGOING
        return {tp: 0 if ok and tp in md.partitions else ErrorCode.INVALID_TXN_STATE for tp in parts}

    async def verify(
        self, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """verify_partitions here when this broker coordinates txn_id, else at the
        coordinator (the produce path's verification)."""
        if self.check_coordinator(txn_id) == ErrorCode.NOT_COORDINATOR:
            node = self.coordinator_node(txn_id)
            if node >= 0:
                return await self.markers.verify(node, txn_id, pid, epoch, partitions)
        return self.verify_partitions(txn_id, pid, epoch, partitions)

    async def add_offsets(self, txn_id: str, pid: int, epoch: int, group_id: str, offsets_partitions: int) -> int:
        """AddOffsetsToTxn: the group's __consumer_offsets partition joins the transaction."""
        return await self.add_partitions(
            txn_id, pid, epoch, [(OFFSETS_TOPIC, partition_for(group_id, offsets_partitions))]
        )

    # ------------------------------------------------------------------ EndTxn

    async def end_txn(
        self, txn_id: str, pid: int, epoch: int, commit: bool, client_version: int = 0
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch) (Kafka's handleEndTransaction from a client);
        client_version 2 (EndTxn v5): transaction.version 2's rules (_end_v2)."""
        err = self.check_coordinator(txn_id)
        if err:
            return err, -1, -1
        coord_epoch = self._epoch_of(txn_id)
        assert coord_epoch is not None
        md = self.txns.get(txn_id)
        if client_version >= 2:
            if md is None:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
            return await self._end_v2(txn_id, md, pid, epoch, commit, coord_epoch)
        if md is None or md.producer_id != pid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        if epoch == md.producer_epoch and (md.pending_in_progress or md.state in _BUSY):
            await self._settle(txn_id, md)  # the previous end completing (not answered busy at once)
            if self.txns.get(txn_id) is not md or self._epoch_of(txn_id) != coord_epoch:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        code = await self._end(txn_id, md, pid, epoch, commit, coord_epoch, from_client=True)
        return code, md.producer_id, md.producer_epoch

    async def _end_v2(
        self, txn_id: str, md: TransactionMetadata, pid: int, epoch: int, commit: bool, coord_epoch: int
    ) -> tuple[int, int, int]:
        """EndTxn of a transaction.version 2 client (Kafka 4's endTransaction): every end,
        commit or abort, bumps the epoch (the markers carry the bumped one) and the answer
        names the producer id and epoch the client goes on with: the next producer id at
        epoch 0 when the epoch is exhausted. A retry of an end already done (its epoch is
        the one before the current, or the previous id's last epoch after a rotation) gets
        the same answer again; an abort with no transaction open (Empty, or completed at
        the current epoch) still bumps the epoch.

        While the previous end's markers are being written (or any transition is), the
        answer is CONCURRENT_TRANSACTIONS whatever the epoch (KAFKA-18464): the producer
        goes on at the epoch the end answered, and its next request — an abort of a
        transaction none of whose produces succeeded comes at once — is early, not
        fenced. A commit at a retry's epoch of a transaction that ended in an abort (the
        coordinator's own, at a timeout) is PRODUCER_FENCED, not the fatal
        INVALID_TXN_STATE (KAFKA-20785)."""
        if md.pending_in_progress or md.state in _BUSY:
            await self._settle(txn_id, md)  # the previous end completing (not answered busy at once)
            if self.txns.get(txn_id) is not md or self._epoch_of(txn_id) != coord_epoch:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        state = md.state
        retry_on_overflow = (
            md.previous_producer_id == pid
            and epoch == MAX_EPOCH - 1
            and md.producer_epoch == 0
            and md.producer_id != pid
        )
        retry_on_bump = md.producer_id == pid and md.producer_epoch == epoch + 1
        if md.producer_id != pid and not retry_on_overflow and not _next_producer(md, pid):
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        if _ending(md):
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow or epoch == md.producer_epoch
        else:
            valid = md.producer_id == pid and epoch == md.producer_epoch
        if not valid:
            return ErrorCode.PRODUCER_FENCED, -1, -1
        retry = retry_on_bump or retry_on_overflow
        current = (0, md.producer_id, md.producer_epoch)
        bad = (ErrorCode.INVALID_TXN_STATE, -1, -1)
        if state == S.ONGOING:
            return await self._prepare_end_v2(
                txn_id, md, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, coord_epoch, no_partitions=False
            )
        if state == S.COMPLETE_COMMIT:
            if commit:
                return current if retry else bad
            return bad if retry else await self._prepare_end_v2(txn_id, md, S.PREPARE_ABORT, coord_epoch, True)
        if state == S.COMPLETE_ABORT:
            if not commit:
                return current if retry else await self._prepare_end_v2(txn_id, md, S.PREPARE_ABORT, coord_epoch, True)
            # a commit at a retry's epoch: it raced the coordinator's own abort, which
            # ended its transaction (a client's abort is never retried as a commit)
            return (ErrorCode.PRODUCER_FENCED, -1, -1) if retry else bad
        if state == S.EMPTY:
            return bad if commit else await self._prepare_end_v2(txn_id, md, S.PREPARE_ABORT, coord_epoch, True)
        if state == S.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        return bad  # Dead

    async def _prepare_end_v2(
        self, txn_id: str, md: TransactionMetadata, target: TxnState, coord_epoch: int, no_partitions: bool
    ) -> tuple[int, int, int]:
        """Writes PrepareCommit / PrepareAbort at the bumped epoch (with the next producer
        id when the epoch is exhausted) and starts the markers; the answer is the id and
        epoch of the completed transaction."""
        next_pid = None
        if md.epoch_exhausted():
            try:
                next_pid = await self.producer_ids.generate()
            except Exception as exc:
                log.warning("%s: no producer id: %s", txn_id, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            if md.pending_in_progress or self._epoch_of(txn_id) != coord_epoch or self.txns.get(txn_id) is not md:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        try:
            t = md.prepare_abort_or_commit(
                target, self.clock(), next_producer_id=next_pid, client_version=2, no_partitions=no_partitions
            )
        except IllegalTransition as exc:
            log.warning("%s", exc)
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        code = await self._write(txn_id, md, t, coord_epoch)
        if code:
            return code, -1, -1
        self.runtime.spawn(self._complete(txn_id, md, coord_epoch))
        if t.next_producer_id >= 0:
            return 0, t.next_producer_id, 0
        return 0, t.producer_id, t.producer_epoch

    async def _end(
        self,
        txn_id: str,
        md: TransactionMetadata,
        pid: int,
        epoch: int,
        commit: bool,
        coord_epoch: int,
        from_client: bool,
    ) -> int:
        if epoch != md.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if md.pending_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = md.state
        if state == S.ONGOING or (state == S.PREPARE_EPOCH_FENCE and not from_client and not commit):
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            try:
                if state == S.PREPARE_EPOCH_FENCE and md.client_version >= 2 and md.producer_epoch < MAX_EPOCH:
                    # transaction.version 2 bumps again over the fenced epoch (as Kafka's), so
                    # the fenced producer's EndTxn is no retry of this abort but fenced
                    t = md.prepare_abort_or_commit(target, self.clock(), client_version=md.client_version)
                else:
                    t = md.prepare_abort_or_commit(target, self.clock())
            except IllegalTransition:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            code = await self._write(txn_id, md, t, coord_epoch)
            if code:
                return code
            self.runtime.spawn(self._complete(txn_id, md, coord_epoch))
            return 0
        if state == S.COMPLETE_COMMIT:
            return 0 if commit else ErrorCode.INVALID_TXN_STATE
        if state == S.COMPLETE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else 0
        if state in _MARKING:
            # the markers are being written (Kafka: a pending CompleteX): retry, commit or abort
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if state == S.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE  # Empty, Dead

    # ------------------------------------------------------------------ markers

    async def _complete(self, txn_id: str, md: TransactionMetadata, coord_epoch: int) -> None:
        """Writes the markers of md's PrepareCommit / PrepareAbort to every partition's
        leader (retrying until each has it, while this broker is still the coordinator at
        `coord_epoch`), then CompleteCommit / CompleteAbort."""
        commit = md.state == S.PREPARE_COMMIT
        remaining = set(md.partitions)
        pid, epoch = md.producer_id, md.producer_epoch
        while remaining:
            if self._closed or self._epoch_of(txn_id) != coord_epoch or self.txns.get(txn_id) is not md:
                return  # another coordinator finishes it
            by_broker: dict[int, list[tuple[str, int]]] = {}
            for topic, p in sorted(remaining):
                info = self.metadata.topic(topic)
                if info is None or p not in info.partitions:
                    log.info("%s: %s-%d no longer exists: no marker", txn_id, topic, p)
                    remaining.discard((topic, p))
                    continue
                leader = info.partitions[p].leader
                if leader >= 0:
                    by_broker.setdefault(leader, []).append((topic, p))
            if not by_broker:
                if remaining:
                    await asyncio.sleep(MARKER_RETRY_S)
                continue
            tv = 2 if md.client_version >= 2 else 0
            sends = [
                self._send(b, Marker(pid, epoch, commit, coord_epoch, tuple(parts), tv))
                for b, parts in by_broker.items()
            ]
            results = await asyncio.gather(*sends)
            fenced = False
            for answers in results:
                for (_pid, topic, p), code in answers.items():
                    if code in _MARKER_DONE:
                        remaining.discard((topic, p))
                    elif code in _MARKER_FENCED:
                        fenced = True
            if fenced:
                log.info("%s: a newer coordinator writes its markers", txn_id)
                return
            if remaining:
                await asyncio.sleep(MARKER_RETRY_S)
        if self._epoch_of(txn_id) != coord_epoch or self.txns.get(txn_id) is not md:
            return
        while True:
            try:
                t = md.prepare_complete(self.clock())
            except IllegalTransition as exc:
                log.warning("%s", exc)
                return
            code = await self._write(txn_id, md, t, coord_epoch)
            if code in (0, ErrorCode.NOT_COORDINATOR):
                return
            await asyncio.sleep(MARKER_RETRY_S)
            if self._closed or self._epoch_of(txn_id) != coord_epoch:
                return

    async def _send(self, broker_id: int, marker: Marker) -> dict[tuple[int, str, int], int]:
        try:
            return await self.markers.send(broker_id, [marker])
        except Exception as exc:
            log.debug("markers to broker %d: %s", broker_id, exc)
            return {}

    # ------------------------------------------------------------------ timers

    def abort_timed_out(self) -> int:
        """Aborts (with an epoch bump, fencing the producer) open transactions past their
        timeout (Kafka's abortTimedOutTransactions)."""
        now = self.clock()
        n = 0
        for txn_id, md in list(self.txns.items()):
            if md.pending_in_progress:
                continue
            if md.state == S.PREPARE_EPOCH_FENCE or (
                md.state == S.ONGOING and md.start_ms >= 0 and now - md.start_ms > md.timeout_ms
            ):
                coord_epoch = self._epoch_of(txn_id)
                if coord_epoch is None:
                    continue
                log.info(
                    "%s: aborting the transaction of producer %d open since %d ms (timeout %d ms)",
                    txn_id,
                    md.producer_id,
                    now - md.start_ms,
                    md.timeout_ms,
                )
                self.runtime.spawn(self._fence_and_abort(txn_id, md, coord_epoch))
                n += 1
        return n

    def remove_expired(self) -> int:
        """Tombstones ids idle for transactional.id.expiration.ms with no open transaction."""
        now = self.clock()
        expiry = self.config["transactional.id.expiration.ms"]
        n = 0
        for txn_id, md in list(self.txns.items()):
            if md.state in COMPLETED and not md.pending_in_progress and now - md.last_update_ms >= expiry:
                coord_epoch = self._epoch_of(txn_id)
                if coord_epoch is None:
                    continue
                t = md.prepare_dead(now)
                self.runtime.spawn(self._write(txn_id, md, t, coord_epoch))
                n += 1
        return n

    # ------------------------------------------------------------------ admin (ListTransactions, DescribeTransactions)

    def list_transactions(
        self, states: Iterable[str], pids: Iterable[int], min_duration_ms: int = -1
    ) -> tuple[list[tuple[str, int, str]], list[str]]:
        """([(id, producer id, state name)], unknown state filters) over the ids coordinated here."""
        wanted: set[TxnState] = set()
        unknown: list[str] = []
        for name in states:
            st = TxnState.from_kafka_name(name)
            if st is None:
                unknown.append(name)
            else:
                wanted.add(st)
        pid_set = set(pids)
        now = self.clock()
        out = []
        for txn_id, md in sorted(self.txns.items()):
            if states and not wanted:
                break
            if wanted and md.state not in wanted:
                continue
            if pid_set and md.producer_id not in pid_set:
                continue
            if min_duration_ms >= 0 and (md.state != S.ONGOING or now - md.start_ms < min_duration_ms):
                continue
            out.append((txn_id, md.producer_id, md.state.kafka_name))
        return out, unknown

    def describe(self, txn_id: str) -> tuple[int, TransactionMetadata | None]:
        err = self.check_coordinator(txn_id)
        if err:
            return err, None
        md = self.txns.get(txn_id)
        if md is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return 0, md
