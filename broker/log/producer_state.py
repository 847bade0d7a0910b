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
MAX_CACHED_BATCHES = 5          # Kafka's NUM_BATCHES_TO_RETAIN (max.in.flight.requests 5)
INT32_MAX = 2**31 - 1
NO_SEQUENCE = -1

_HEAD = struct.Struct(">hIi")                 # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")           # see the module docstring


class OutOfOrderSequence(Exception):
    """OUT_OF_ORDER_SEQUENCE_NUMBER."""


class InvalidProducerEpoch(Exception):
    """INVALID_PRODUCER_EPOCH."""


class CorruptSnapshot(Exception):
    pass


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


class ProducerStateManager:
    """The producer state of one partition; `directory` holds its snapshot files."""

    def __init__(self, directory: str, tp: TopicPartition, expiration_ms: int = 86_400_000) -> None:
        self.dir = directory
        self.tp = tp
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}

    # ------------------------------------------------------------------ appends

    def check(self, batches: Iterable[RecordBatch]) -> BatchMetadata | None:
        """Validates the producer batches of one append (RecordBatch views with a
        producer id, in order) against the state, changing nothing. Returns the metadata
        of the earlier write when the append is a retry of a batch already written
        (then nothing is to be appended), None when it may be appended. Raises
        OutOfOrderSequence or InvalidProducerEpoch."""
        pending: dict[int, tuple[int, int]] = {}        # pid -> (epoch, last seq) within this append
        for b in batches:
            pid, epoch, first = b.producer_id, b.producer_epoch, b.base_sequence
            last = last_sequence(first, b.last_offset_delta)
            entry = self.producers.get(pid)
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
                    f"{self.tp}: producer {pid} epoch {epoch} is older than the current epoch {cur_epoch}")
            if epoch != cur_epoch:
                # a new epoch starts its sequences at 0; a producer never seen (or
                # expired) may start anywhere
                if first != 0 and cur_epoch != -1:
                    raise OutOfOrderSequence(
                        f"{self.tp}: producer {pid} epoch {epoch} must start at sequence 0, not {first}")
            elif cur_last != NO_SEQUENCE and not in_sequence(cur_last, first):
                raise OutOfOrderSequence(
                    f"{self.tp}: producer {pid} epoch {epoch}: sequence {first} after {cur_last} "
                    f"(expected {0 if cur_last == INT32_MAX else cur_last + 1})")
            pending[pid] = (epoch, last)
        return None

    def update(self, batches: Iterable[RecordBatch]) -> None:
        """Records appended producer batches (views showing their assigned offsets)."""
        for b in batches:
            self._apply(b.producer_id, b.producer_epoch, b.base_sequence, b.last_offset_delta,
                        b.base_offset, b.max_timestamp)

    def _apply(self, pid: int, epoch: int, base_seq: int, last_offset_delta: int,
               base_offset: int, max_timestamp: int) -> None:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.batches.append(BatchMetadata(base_seq, last_sequence(base_seq, last_offset_delta),
                                           base_offset, base_offset + last_offset_delta, max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, max_timestamp)

    def remove_expired(self, now_ms: int) -> int:
        gone = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= self.expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # ------------------------------------------------------------------ snapshots

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[:-len(SNAPSHOT_SUFFIX)]
                if len(stem) == 20 and stem.isdigit():
                    out.append(int(stem))
        return sorted(out)

    def take_snapshot(self, offset: int) -> str:
        """Writes the state (each producer's last batch) as `<offset>.snapshot`; keeps
        the two newest snapshots. Not fsynced: at clean shutdown the log manager's
        os.sync covers it; a snapshot lost in a crash only means a longer replay."""
        entries = []
        for e in self.producers.values():
            if not e.batches:
                continue
            last = e.batches[-1]
            entries.append(_ENTRY.pack(e.producer_id, e.epoch, last.last_seq, last.last_offset,
                                       last.last_offset - last.first_offset, e.last_timestamp, -1, -1))
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        data = struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body
        path = os.path.join(self.dir, snapshot_name(offset))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        for old in self.snapshot_offsets()[:-2]:
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
            for pid, epoch, last_seq, last_offset, delta, ts, _coord, _txn in entries:
                if now_ms - ts >= self.expiration_ms:
                    continue
                first_seq = last_seq - delta if last_seq >= delta else last_seq - delta + INT32_MAX + 1
                e = ProducerEntry(pid, epoch, last_timestamp=ts)
                e.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts))
                self.producers[pid] = e
            start = max(off, log_start_offset)
            break
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
            if b.next_offset > start and b.producer_id >= 0 and not b.is_control:
                self._apply(b.producer_id, b.producer_epoch, b.base_sequence, b.last_offset_delta,
                            b.base_offset, b.max_timestamp)
