"""Idempotent producers: per-partition producer state (Kafka's ProducerStateManager).

A producer that got a producer id from InitProducerId numbers its batches per partition
(base sequence, counting records). The partition leader remembers, per producer id, its
epoch and the sequence ranges of its last five batches with the offsets they were
written at. A batch it has already written (a retry after a lost answer) is not written
again: the client gets the offsets of the first write. A gap in the sequence is
OUT_OF_ORDER_SEQUENCE_NUMBER; an epoch older than the one seen is
INVALID_PRODUCER_EPOCH. Only batch headers are looked at, never records.

The state survives restarts as Kafka's `<offset>.snapshot` files (version 1: int16
version, uint32 CRC-32C of the rest, then the entries array: producer id, epoch, last
sequence, last offset, offset delta, timestamp, coordinator epoch, first offset of the
current transaction), taken when a segment rolls and at clean shutdown. On load the
newest snapshot at or below the log end is read and the batches after it are replayed
(headers only), so an unclean restart rereads at most what came after the last roll.
As in Kafka, a snapshot keeps only each producer's last batch: after a restart a retry
of an older batch than the last is not recognised.

Transactions (KIP-98). A transactional batch of a producer with no open transaction on
this partition opens one at its base offset; a control batch (a COMMIT or ABORT marker
the transaction coordinator writes) closes it. Per producer the state keeps the first
offset of its open transaction and the coordinator epoch of its last marker (a marker of
an older coordinator epoch is TRANSACTION_COORDINATOR_FENCED); per partition, the open
transactions in offset order and the completed ones whose marker the high watermark has
not passed yet ("unreplicated"). The first offset of either is the partition's first
unstable offset, and the last stable offset (LSO) is the smaller of it and the high
watermark (Kafka's ProducerStateManager.firstUnstableOffset). A non-transactional batch
of a producer whose transaction is open is INVALID_TXN_STATE. Snapshots carry each
producer's open transaction, so a restart knows where the open ones began. All of this
is per batch (headers, and the one record of a marker), never per record.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from broker.log.checkpoints import TopicPartition
from broker.native import RecordBatch, Segment, crc32c, iter_batches

Buffer = bytes | bytearray | memoryview

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
MAX_CACHED_BATCHES = 5  # Kafka's NUM_BATCHES_TO_RETAIN (max.in.flight.requests 5)
INT32_MAX = 2**31 - 1
NO_SEQUENCE = -1
MAX_EPOCH = 32767  # Short.MaxValue, as broker/txn/metadata.py

_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")  # see the module docstring


class OutOfOrderSequence(Exception):
    """OUT_OF_ORDER_SEQUENCE_NUMBER."""


class InvalidProducerEpoch(Exception):
    """INVALID_PRODUCER_EPOCH."""


class InvalidTxnState(Exception):
    """INVALID_TXN_STATE: a non-transactional batch while the producer's transaction is open."""


class CoordinatorFenced(Exception):
    """TRANSACTION_COORDINATOR_FENCED: a marker of an older coordinator epoch."""


class CorruptSnapshot(Exception):
    pass


@dataclass(slots=True, frozen=True)
class CompletedTxn:
    """A transaction a marker closed: its first offset, the marker's offset, and whether
    it aborted (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


#: a control record's key: version (0), type (0 abort, 1 commit); its value: version (0),
#: coordinator epoch
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def control_record(commit: bool, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """(key, value) of the one record of a transaction marker, as Kafka's EndTransactionMarker."""
    return (
        _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
        _CONTROL_VALUE.pack(0, coordinator_epoch),
    )


def read_marker(batch: RecordBatch) -> tuple[bool, int]:
    """(commit?, coordinator epoch) of a control batch; ValueError for a control batch
    that is no transaction marker (an unknown control type, a short key or value)."""
    recs = batch.records(max_records=1)
    if not recs or recs[0].key is None or len(recs[0].key) < 4:
        raise ValueError(f"control batch at offset {batch.base_offset} has no control record key")
    _version, kind = _CONTROL_KEY.unpack_from(recs[0].key, 0)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise ValueError(f"control batch at offset {batch.base_offset}: unknown control type {kind}")
    value = recs[0].value
    epoch = _CONTROL_VALUE.unpack_from(value, 0)[1] if value is not None and len(value) >= 6 else -1
    return kind == CONTROL_COMMIT, epoch


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # the first offset of its open transaction here, or -1
    # its epoch came from a marker (transaction.version 2): its first batch starts at sequence 0
    epoch_from_marker: bool = False

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def last_sequence(base_seq: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record; sequences wrap from INT32_MAX to 0."""
    last = base_seq + last_offset_delta
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class Verification:
    """A verification in flight for one producer on one partition (the guard of
    start_verification): the epoch and lowest sequence of the batches waiting on it."""

    __slots__ = ("epoch", "lowest_seq")

    def __init__(self, epoch: int, first_seq: int) -> None:
        self.epoch, self.lowest_seq = epoch, first_seq

    def saw(self, epoch: int, first_seq: int) -> None:
        if epoch > self.epoch:
            self.epoch, self.lowest_seq = epoch, first_seq
        elif (
            epoch == self.epoch
            and first_seq != NO_SEQUENCE
            and (self.lowest_seq == NO_SEQUENCE or first_seq < self.lowest_seq)
        ):
            self.lowest_seq = first_seq


class ProducerStateManager:
    """The producer state of one partition; `directory` holds its snapshot files."""

    def __init__(self, directory: str, tp: TopicPartition, expiration_ms: int = 86_400_000) -> None:
        self.dir = directory
        self.tp = tp
        self.expiration_ms = expiration_ms
        #: snapshots at or above this offset outlive the two newest (tiered storage: a
        #: segment not yet copied needs the snapshot at its end); None: none kept beyond
        self.keep_snapshots_from: int | None = None
        self.producers: dict[int, ProducerEntry] = {}
        # open transactions, pid -> first offset, in offset order (a transaction opens at
        # the log end, so insertion order is offset order)
        self.ongoing: dict[int, int] = {}
        # completed transactions whose marker is at or above the high watermark
        self.unreplicated: deque[CompletedTxn] = deque()
        self.verifying: dict[int, Verification] = {}  # pid -> the verification in flight
        # what the last load() replayed: the offset it replayed from, and the transactions
        # the markers it met completed (the log rebuilds its aborted index from them)
        self.replayed_from = 0
        self.replayed_completions: list[tuple[CompletedTxn, int]] = []  # (txn, LSO after it)

    # ------------------------------------------------------------------ appends

    def check(self, batches: Iterable[RecordBatch]) -> BatchMetadata | None:
        """Validates the producer batches of one append (RecordBatch views with a
        producer id, in order) against the state, changing nothing. Returns the metadata
        of the earlier write when the append is a retry of a batch already written
        (then nothing is to be appended), None when it may be appended. Raises
        OutOfOrderSequence or InvalidProducerEpoch."""
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last seq) within this append
        for b in batches:
            pid, epoch, first = b.producer_id, b.producer_epoch, b.base_sequence
            if not b.is_transactional:
                entry = self.producers.get(pid)
                if entry is not None and entry.current_txn_first_offset >= 0 and epoch <= entry.epoch:
                    raise InvalidTxnState(
                        f"{self.tp}: producer {pid} has an open transaction: expected a transactional write"
                    )
            last = last_sequence(first, b.last_offset_delta)
            entry = self.producers.get(pid)
            if first == NO_SEQUENCE:
                # a coordinator's write (a transactional offset commit): no sequence, only
                # the epoch counts (Kafka checks sequences of client appends only)
                if entry is not None and epoch < entry.epoch:
                    raise InvalidProducerEpoch(
                        f"{self.tp}: producer {pid} epoch {epoch} is older than the current epoch {entry.epoch}"
                    )
                pending[pid] = (epoch, NO_SEQUENCE)
                continue
            if pid in pending:
                cur_epoch, cur_last = pending[pid]
            elif entry is not None:
                cur_epoch, cur_last = entry.epoch, entry.last_seq
                dup = entry.find_duplicate(epoch, first, last)
                if dup is not None:
                    return dup
            else:
                cur_epoch, cur_last = -1, NO_SEQUENCE
            if epoch < cur_epoch:
                raise InvalidProducerEpoch(
                    f"{self.tp}: producer {pid} epoch {epoch} is older than the current epoch {cur_epoch}"
                )
            if epoch != cur_epoch:
                # a new epoch starts its sequences at 0; a producer never seen (or
                # expired) may start anywhere
                if first != 0 and cur_epoch != -1:
                    raise OutOfOrderSequence(
                        f"{self.tp}: producer {pid} epoch {epoch} must start at sequence 0, not {first}"
                    )
            elif (
                cur_last == NO_SEQUENCE
                and first != 0
                and pid not in pending
                and entry is not None
                and entry.epoch_from_marker
            ):
                raise OutOfOrderSequence(
                    f"{self.tp}: producer {pid} epoch {epoch} began with a marker: its first sequence must be 0, "
                    f"not {first}"
                )
            elif cur_last != NO_SEQUENCE and not in_sequence(cur_last, first):
                raise OutOfOrderSequence(
                    f"{self.tp}: producer {pid} epoch {epoch}: sequence {first} after {cur_last} "
                    f"(expected {0 if cur_last == INT32_MAX else cur_last + 1})"
                )
            pending[pid] = (epoch, last)
        return None

    def start_verification(self, pid: int, epoch: int = -1, first_seq: int = NO_SEQUENCE) -> Verification:
        """A produce asks the coordinator whether this partition is in the producer's
        transaction (KIP-890 part 1): the guard returned (shared by the producer's
        requests in flight meanwhile) stays valid until a marker of the producer is
        appended or its transaction opens here (Kafka's VerificationGuard). It keeps the
        lowest sequence of the batches waiting on it (Kafka's VerificationStateEntry):
        their verdicts may come back in any order, and only the lowest may open the
        transaction."""
        guard = self.verifying.get(pid)
        if guard is None:
            guard = self.verifying[pid] = Verification(epoch, first_seq)
        else:
            guard.saw(epoch, first_seq)
        return guard

    def verified(self, pid: int, guard: object) -> bool:
        """May a batch verified under `guard` be appended: the guard is still valid (no
        marker since), or the producer's transaction is open here already?"""
        return self.verifying.get(pid) is guard or self.has_open_transaction(pid)

    def check_verified_order(self, pid: int, epoch: int, first_seq: int) -> None:
        """A verified batch about to open the producer's transaction here: OutOfOrderSequence
        when a batch of a lower sequence (of its epoch) waits on the same verification —
        requests pipelined on one connection are verified concurrently, and appending a
        later batch first would leave the earlier ones out of the log (Kafka's check in
        ProducerAppendInfo against the verification's lowest sequence)."""
        guard = self.verifying.get(pid)
        if guard is None or self.has_open_transaction(pid) or first_seq == NO_SEQUENCE:
            return
        if epoch == guard.epoch and guard.lowest_seq != NO_SEQUENCE and first_seq > guard.lowest_seq:
            raise OutOfOrderSequence(
                f"{self.tp}: producer {pid} epoch {epoch}: sequence {first_seq} before {guard.lowest_seq}, "
                "which waits on the same transaction verification"
            )

    def has_open_transaction(self, pid: int, epoch: int | None = None) -> bool:
        """Has `pid` a transaction open here (at `epoch`, when given: with transaction.version
        2 the next transaction's first batch, at the bumped epoch, may come before the
        marker that ends the open one — Kafka's hasOngoingTransaction(pid, epoch))?"""
        e = self.producers.get(pid)
        return e is not None and e.current_txn_first_offset >= 0 and (epoch is None or e.epoch == epoch)

    def check_marker(self, pid: int, epoch: int, coordinator_epoch: int, transaction_version: int = 0) -> None:
        """May the coordinator write a marker for `pid` at `epoch`? InvalidProducerEpoch for
        an epoch older than the producer's (a marker for a fenced epoch), CoordinatorFenced
        for an older coordinator epoch than the last marker's (Kafka's appendEndTxnMarker).

        transaction.version 2 (the marker's TransactionVersion, WriteTxnMarkers v2, KIP-1228):
        the coordinator bumps the epoch at every end, so the marker must be above the epoch
        of the transaction's batches; one at the producer's epoch is late — it would end
        the transaction that epoch opened since — and refused, unless nothing is open
        here (a retry of the marker that completed the transaction: written again,
        harmless) or the epoch is at its maximum (Kafka's checkProducerEpoch)."""
        entry = self.producers.get(pid)
        if entry is None:
            return
        if transaction_version >= 2 and epoch == entry.epoch:
            if entry.current_txn_first_offset >= 0 and epoch != MAX_EPOCH:
                raise InvalidProducerEpoch(
                    f"{self.tp}: marker (transaction version 2) for producer {pid} at epoch "
                    f"{epoch}, not above its epoch {entry.epoch}, while a transaction of "
                    "that epoch is open"
                )
        elif epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"{self.tp}: marker for producer {pid} at epoch {epoch}, older than its epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise CoordinatorFenced(
                f"{self.tp}: marker for producer {pid} of coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def update(self, batches: Iterable[RecordBatch]) -> list[CompletedTxn]:
        """Records appended producer batches (views showing their assigned offsets),
        control batches included; returns the transactions their markers completed."""
        completed: list[CompletedTxn] = []
        for b in batches:
            if b.is_control:
                done = self._apply_marker(b)
                if done is not None:
                    completed.append(done)
            else:
                self._apply(
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    b.last_offset_delta,
                    b.base_offset,
                    b.max_timestamp,
                    b.is_transactional,
                )
        return completed

    def _apply(
        self,
        pid: int,
        epoch: int,
        base_seq: int,
        last_offset_delta: int,
        base_offset: int,
        max_timestamp: int,
        transactional: bool = False,
    ) -> None:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.epoch_from_marker = False
        entry.batches.append(
            BatchMetadata(
                base_seq,
                last_sequence(base_seq, last_offset_delta),
                base_offset,
                base_offset + last_offset_delta,
                max_timestamp,
            )
        )
        entry.last_timestamp = max(entry.last_timestamp, max_timestamp)
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self.ongoing[pid] = base_offset
            self.verifying.pop(pid, None)

    def _apply_marker(self, b: RecordBatch) -> CompletedTxn | None:
        """A COMMIT or ABORT marker at b.base_offset closes the producer's transaction; a
        control batch that is no marker is ignored (Kafka ignores unknown control types)."""
        try:
            commit, coordinator_epoch = read_marker(b)
        except ValueError as exc:
            log.warning("%s: %s: ignored", self.tp, exc)
            return None
        pid = b.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if b.producer_epoch != entry.epoch:
            # a marker of a bumped epoch (an abort that fences, transaction.version 2)
            entry.epoch = b.producer_epoch
            entry.batches.clear()
            entry.epoch_from_marker = True
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, b.max_timestamp)
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        self.ongoing.pop(pid, None)
        self.verifying.pop(pid, None)
        done = CompletedTxn(pid, first if first >= 0 else b.base_offset, b.base_offset, not commit)
        self.unreplicated.append(done)
        return done

    # ------------------------------------------------------------------ the last stable offset

    def first_unstable_offset(self) -> int:
        """The first offset of an open transaction, or of a completed one whose marker is not
        below the high watermark yet; -1 when there is none. O(1) but for the completed
        transactions still replicating (a few, while their markers reach the followers)."""
        first = next(iter(self.ongoing.values())) if self.ongoing else -1
        for u in self.unreplicated:
            if first < 0 or u.first_offset < first:
                first = u.first_offset
        return first

    def on_high_watermark(self, hw: int) -> None:
        """Completed transactions whose marker the high watermark passed are stable."""
        unrep = self.unreplicated
        if unrep and unrep[0].last_offset < hw:
            kept = [u for u in unrep if u.last_offset >= hw]
            unrep.clear()
            unrep.extend(kept)

    def last_stable_offset_for(self, completed: CompletedTxn) -> int:
        """The LSO right after `completed` (Kafka's lastStableOffset(completedTxn)): the
        first offset of another producer's open transaction, else the marker's next offset.
        Written into the aborted-transaction index."""
        for pid, first in self.ongoing.items():
            if pid != completed.producer_id:
                return first
        return completed.last_offset + 1

    def remove_expired(self, now_ms: int) -> int:
        """Forgets producers idle for producer.id.expiration.ms; never one whose
        transaction is open (Kafka's isProducerExpired)."""
        gone = [
            pid
            for pid, e in self.producers.items()
            if now_ms - e.last_timestamp >= self.expiration_ms and e.current_txn_first_offset < 0
        ]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # ------------------------------------------------------------------ snapshots

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if len(stem) == 20 and stem.isdigit():
                    out.append(int(stem))
        return sorted(out)

    def take_snapshot(self, offset: int) -> str:
        """Writes the state (each producer's last batch) as `<offset>.snapshot`; keeps
        the two newest snapshots (and those from keep_snapshots_from on). Not fsynced: at clean shutdown the log manager's
        os.sync covers it; a snapshot lost in a crash only means a longer replay."""
        entries = []
        for e in self.producers.values():
            if e.batches:
                last = e.batches[-1]
                entries.append(
                    _ENTRY.pack(
                        e.producer_id,
                        e.epoch,
                        last.last_seq,
                        last.last_offset,
                        last.last_offset - last.first_offset,
                        e.last_timestamp,
                        e.coordinator_epoch,
                        e.current_txn_first_offset,
                    )
                )
            elif e.epoch >= 0 or e.current_txn_first_offset >= 0:
                # no batch since its epoch changed (a marker bumped it): its epoch and
                # transaction still count
                entries.append(
                    _ENTRY.pack(
                        e.producer_id,
                        e.epoch,
                        NO_SEQUENCE,
                        -1,
                        0,
                        e.last_timestamp,
                        e.coordinator_epoch,
                        e.current_txn_first_offset,
                    )
                )
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        data = struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body
        path = os.path.join(self.dir, snapshot_name(offset))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        keep = self.keep_snapshots_from
        for old in self.snapshot_offsets()[:-2]:
            if keep is None or old < keep:
                self._delete_snapshot(old)
        return path

    def _delete_snapshot(self, offset: int) -> None:
        try:
            os.unlink(os.path.join(self.dir, snapshot_name(offset)))
        except FileNotFoundError:
            pass

    @staticmethod
    def read_snapshot(path: str) -> list[tuple[int, ...]]:
        """The entries of a snapshot file; CorruptSnapshot naming the byte offset."""
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _HEAD.size:
            raise CorruptSnapshot(f"{path}: {len(data)} bytes, shorter than the header (at byte 0)")
        version, crc, count = _HEAD.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshot(f"{path}: version {version} at byte 0, expected {SNAPSHOT_VERSION}")
        if crc32c(memoryview(data)[6:]) != crc:
            raise CorruptSnapshot(f"{path}: CRC-32C of bytes 6..{len(data)} does not match the one at byte 2")
        if count < 0 or _HEAD.size + count * _ENTRY.size != len(data):
            raise CorruptSnapshot(f"{path}: {count} entries at byte 6 do not fill the {len(data)} bytes")
        return [_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size) for i in range(count)]

    def load(self, segments: Sequence[Segment], log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Rebuilds the state for a log opened at load time: snapshots above the log end
        are dropped (their offsets no longer exist), the newest remaining one is read
        (a corrupt one is deleted and the next tried) and the batches after it are
        replayed from `segments`."""
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.replayed_completions = []
        start = log_start_offset
        offsets = self.snapshot_offsets()
        for off in offsets:
            if off > log_end_offset:
                self._delete_snapshot(off)
        for off in reversed([o for o in offsets if o <= log_end_offset]):
            path = os.path.join(self.dir, snapshot_name(off))
            try:
                entries = self.read_snapshot(path)
            except (OSError, CorruptSnapshot) as exc:
                log.warning("%s: producer snapshot unusable (%s): deleted", self.tp, exc)
                self._delete_snapshot(off)
                continue
            open_txns = []
            for pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first in entries:
                if now_ms - ts >= self.expiration_ms and txn_first < 0:
                    continue
                e = ProducerEntry(pid, epoch, last_timestamp=ts, coordinator_epoch=coord)
                if last_seq != NO_SEQUENCE and last_offset >= 0:
                    first_seq = last_seq - delta if last_seq >= delta else last_seq - delta + INT32_MAX + 1
                    e.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts))
                if txn_first >= 0:
                    e.current_txn_first_offset = txn_first
                    open_txns.append((txn_first, pid))
                self.producers[pid] = e
            for first, pid in sorted(open_txns):
                self.ongoing[pid] = first
            start = max(off, log_start_offset)
            break
        self.replayed_from = start
        if start >= log_end_offset:
            return
        for seg in segments:
            if seg.next_offset <= start or seg.size == 0:
                continue
            pos = 0
            if seg.base_offset < start:
                found = seg.translate_offset(start)
                pos = found[0] if found is not None else seg.size
            if pos < seg.size:
                # mapped, not read: a segment can be a gigabyte (unmapped when dropped);
                # pinned while mapped (a recovery thread's descriptor is a borrowed one)
                fd = seg.pin()
                try:
                    self._replay(mmap.mmap(fd, seg.size, access=mmap.ACCESS_READ), pos, start)
                finally:
                    seg.unpin()

    def _replay(self, data: Buffer | mmap.mmap, pos: int, start: int) -> None:
        """Applies the producer batches of `data` from byte `pos` that end at or above
        `start` (headers only)."""
        for b in iter_batches(data, pos):
            if b.next_offset > start and b.producer_id >= 0:
                if b.is_control:
                    done = self._apply_marker(b)
                    if done is not None:
                        self.replayed_completions.append((done, self.last_stable_offset_for(done)))
                else:
                    self._apply(
                        b.producer_id,
                        b.producer_epoch,
                        b.base_sequence,
                        b.last_offset_delta,
                        b.base_offset,
                        b.max_timestamp,
                        b.is_transactional,
                    )
