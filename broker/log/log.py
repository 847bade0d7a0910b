"""One partition's log (Kafka's UnifiedLog): segments, log start offset, high watermark,
recovery point, leader epochs, flush policy and retention.

Directory `<log.dir>/<topic>-<partition>/`:

    00000000000000000000.log / .index / .timeindex     first segment
    00000000000000001234.log / .index / .timeindex     next segment (base offset 1234)
    00000000000000001234.txnindex                       aborted transactions (markers in that segment)
    00000000000000001234.snapshot                       producer state at offset 1234
    leader-epoch-checkpoint
    partition.metadata                                  topic id

Invariants:
- segments are sorted by base offset, contiguous in offsets; the last one is the active
  segment, the only one appended to; its indexes are preallocated, the others trimmed.
- log_start_offset <= high_watermark <= log_end_offset; consumers read below the
  high watermark only; the recovery point is the offset below which data is fsynced.
- Appends validate every batch (CRC-32C, sizes) and assign offsets in place, O(1) per
  batch: no record is decoded (native assign_offsets).
- Transactions: last_stable_offset <= high_watermark; it is the first offset of a
  transaction still open, or completed with its marker not yet below the high watermark
  (producer_state.py). Every aborted transaction's marker has an entry in the
  aborted-transaction index (txn_index.py) from the moment it is appended.

Threading: every method runs on the broker's event loop thread, except the blocking
parts of flush() and segment deletion, which run in a worker thread on objects the loop
no longer mutates (a flush syncs file descriptors; deleted segments are already out of
the segment list). Reads hand out FileSlices that pin their segment, so releasing,
closing or deleting it never pulls a file out from under a send in progress.

Open files: the active segment keeps its .log open; the others open on demand and are
released when idle (broker/_native/segment.pyx), so a log costs one descriptor. A flush
in a worker thread borrows a released segment's .log for the fsync only.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import logging
import mmap
import os
import shutil
import struct
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from broker.config import LogConfig
from broker.log.checkpoints import LeaderEpochCheckpoint, TopicPartition, read_small_text, write_atomically
from broker.log.producer_state import BatchMetadata, CompletedTxn, ProducerStateManager, control_record
from broker.log.txn_index import AbortedTxn, AbortedTxnIndex
from broker.metrics.stats import Histogram
from broker.native import (
    BatchBuilder,
    CorruptRecordError,
    InvalidRecordError,
    Segment,
    assign_offsets,
    iter_batches,
    parse_base_offset,
    require_keys,
)
from broker.uuids import parse_uuid, uuid_text

log = logging.getLogger(__name__)

T = TypeVar("T")
#: a batch buffer: appends as leader need it writable (offsets are assigned in place)
Buffer = bytes | bytearray | memoryview

INT32_MAX = 2**31 - 1
PARTITION_METADATA = "partition.metadata"
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the first offset held locally
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the last offset in remote storage


class OffsetOutOfRange(Exception):
    """A read below the log start offset or above the log end offset."""


class OffsetInRemoteStorage(OffsetOutOfRange):
    """A read of an offset the log holds only in remote storage (tiered storage: at or
    above the log start offset, below the local log start offset). A caller that cannot
    read remote storage answers it as OFFSET_OUT_OF_RANGE: never bytes of later offsets."""


class RecordTooLarge(Exception):
    """A batch larger than max.message.bytes."""


class LogStorageError(Exception):
    """Writing the log failed (disk full, I/O error, too many open files): Kafka's
    KAFKA_STORAGE_ERROR. A failed append leaves nothing behind; the log stays readable
    and the next append tries again."""


#: errors a log dir recovers from by itself (space freed, descriptors closed, memory
#: back): its writes fail meanwhile (KAFKA_STORAGE_ERROR) and resume when they succeed.
#: Any other OSError (EIO, the dir gone or unreadable ...) is a failure of the dir,
#: which goes offline until a restart (Kafka's LogDirFailureChannel)
TRANSIENT_ERRNOS = frozenset(
    (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EINTR)
)


def is_dir_failure(exc: BaseException) -> bool:
    """Whether an error of a log dir's I/O takes the dir offline (see TRANSIENT_ERRNOS)."""
    return isinstance(exc, OSError) and exc.errno not in TRANSIENT_ERRNOS


class LogDirHealth:
    """Whether writes to one log dir fail. The first failure logs one line (not one per
    request), the first success after it another: writes resume by themselves once the
    cause goes (a full disk freed). A failed fsync is remembered (`sync_failed`): data
    may be lost, so the dir is not marked as cleanly shut down, and the next start
    recovers it. Updated from the event loop and from worker threads (checkpoints): a
    race costs at most a second log line.

    An error that is not one of TRANSIENT_ERRNOS (an I/O error, the dir removed or made
    unreadable) is a failure of the dir, as Kafka's LogDirFailureChannel decides:
    `on_failure(path, exc)` (set by the LogManager, which takes the dir offline) is called
    once, from whichever thread saw it."""

    def __init__(self, path: str):
        self.path = path
        self.error: OSError | None = None
        self.failures = 0
        self.sync_failed = False
        self.offline = False
        self.on_failure: Callable[[str, OSError], None] | None = None

    def failed(self, exc: OSError, what: str, sync: bool = False) -> None:
        self.failures += 1
        self.sync_failed = self.sync_failed or sync
        if is_dir_failure(exc):
            self.error = exc
            if not self.offline:
                self.offline = True
                log.error(
                    "log dir %s: %s failed: %s; the log dir is taken offline (its partitions are no "
                    "longer served here) until the broker restarts",
                    self.path,
                    what,
                    exc.strerror or exc,
                )
                if self.on_failure is not None:
                    self.on_failure(self.path, exc)
            return
        if self.error is None:
            log.error(
                "log dir %s: %s failed: %s; produce requests to its partitions are answered with "
                "KAFKA_STORAGE_ERROR until writes succeed again (reads go on)",
                self.path,
                what,
                exc.strerror or exc,
            )
        self.error = exc

    def succeeded(self) -> None:
        if self.error is not None and not self.offline:
            log.warning("log dir %s: writes work again (%d failed meanwhile)", self.path, self.failures)
            self.error = None
            self.failures = 0


class PartitionMetadataError(Exception):
    """A damaged partition.metadata whose topic id is not known to rebuild it (the message
    is one line naming the file)."""


class FileSlice:
    """A byte range of a segment file to send with sendfile(2). Pins the segment, whose
    descriptor `fd` stays open until close() (the writer calls it once sent), whatever
    happens to the segment meanwhile; it costs no descriptor of its own."""

    __slots__ = ("fd", "offset", "length", "_segment")

    def __init__(self, segment: Segment, offset: int, length: int):
        self.fd = segment.pin()
        self._segment = segment
        self.offset = offset
        self.length = length

    def close(self) -> None:
        seg, self._segment = self._segment, None
        if seg is not None:
            self.fd = -1
            seg.unpin()

    def read(self) -> bytes:
        """The bytes (a copy; for tests and non-socket consumers)."""
        return os.pread(self.fd, self.length, self.offset)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.fd}, offset={self.offset}, length={self.length})"


@dataclass
class LogAppendInfo:
    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    size: int
    duplicate: bool = False  # a retried idempotent batch: written before, not again


class LeaderEpochCache:
    """(leader epoch, start offset) pairs, as Kafka's LeaderEpochFileCache.

    The checkpoint is rewritten atomically (temp file, fsync, rename, fsync of the dir)
    when an epoch is assigned, as Kafka does: that happens on the first append of a new
    epoch (a leadership change), rarely, so the fsync on the event loop costs little
    (about 1.5 ms, 3.6 ms at worst, on the test machine's ext4: a thousand partitions
    changing leader block the loop a few seconds in all, spread over their first appends). A
    truncation rewrites it without the fsyncs (as Kafka 3.7+): losing one is harmless,
    since Log.load cuts the entries to the recovered log's end and start again.

    An unreadable checkpoint is not taken for an empty history: `unreadable` is set and
    Log.load rebuilds the entries from the batches' partition leader epochs."""

    def __init__(self, path: str):
        self.checkpoint = LeaderEpochCheckpoint(path)
        self.unreadable = False
        self.dirty = False  # the entries in memory are not all in the checkpoint
        try:
            self.entries: list[tuple[int, int]] = self.checkpoint.read()
        except (ValueError, OSError) as exc:
            log.warning("%s; leader epochs will be rebuilt from the log's batches", exc)
            self.entries = []
            self.unreadable = True

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """A new latest epoch starting at start_offset (older or equal epochs: nothing).
        The entry is in memory whatever happens; a failed checkpoint write raises OSError
        and leaves the cache `dirty`, to be written before anything is appended
        (`store_if_dirty`)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries.append((epoch, start_offset))
        self._store(fsync=True)

    def store_if_dirty(self) -> None:
        """Writes (fsynced) the entries an earlier write failed to store."""
        if self.dirty:
            self._store(fsync=True)

    def _store(self, fsync: bool) -> None:
        try:
            self.checkpoint.write(self.entries, fsync=fsync)
        except OSError:
            self.dirty = True
            raise
        self.dirty = False

    def rebuild(self, entries: list[tuple[int, int]]) -> None:
        """Replaces the entries (Log.load, from the batches) and writes them, fsynced."""
        self.entries = entries
        self.unreadable = False
        self._store(fsync=True)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's LeaderEpochFileCache.endOffsetFor (the
        OffsetForLeaderEpoch answer, and a Fetch's diverging-epoch check): the latest epoch
        ends at the log end; another ends where the next larger epoch starts, named by the
        largest epoch not above it (the requested one itself when older than every entry);
        (-1, -1) for an epoch beyond the latest, for -1, or with no entries."""
        entries = self.entries
        if requested_epoch < 0 or not entries:
            return (-1, -1)
        if entries[-1][0] == requested_epoch:
            return (requested_epoch, log_end_offset)
        floor = -1
        for epoch, start in entries:
            if epoch > requested_epoch:
                return (requested_epoch if floor < 0 else floor, start)
            floor = epoch
        return (-1, -1)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch that wrote `offset` (-1 when unknown)."""
        found = -1
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._store(fsync=False)

    def truncate_from_start(self, start_offset: int) -> None:
        if not self.entries:
            return
        kept = [(e, o) for e, o in self.entries if o > start_offset]
        prior = [(e, o) for e, o in self.entries if o <= start_offset]
        if prior:
            kept.insert(0, (prior[-1][0], start_offset))
        if kept != self.entries:
            self.entries = kept
            self._store(fsync=False)


def epochs_from_batches(segments: list[Segment], entries: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`entries` extended with the epochs the batches of `segments` start (Kafka's
    LogSegment.recover: a batch whose partition leader epoch is above the latest known
    one starts that epoch at its base offset). Batch headers only, one mmap per segment."""
    entries = list(entries)
    latest = entries[-1][0] if entries else -1
    for seg in segments:
        if seg.size == 0:
            continue
        fd = seg.pin()
        try:
            # mapped, not read (a segment can be a gigabyte); unmapped when dropped
            try:
                for b in iter_batches(mmap.mmap(fd, seg.size, access=mmap.ACCESS_READ), 0):
                    epoch = b.partition_leader_epoch
                    if epoch > latest:
                        entries.append((epoch, b.base_offset))
                        latest = epoch
            except CorruptRecordError as exc:  # a segment recovery did not re-validate
                log.warning("segment %s: leader epochs read up to a corrupt batch: %s", seg.base_offset, exc)
        finally:
            seg.unpin()
    return entries


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return TopicPartition(topic, int(part))


class Log:
    """Open with Log.load(); see the module docstring for the invariants."""

    def __init__(self, directory: str, tp: TopicPartition, config: LogConfig, topic_id: uuid.UUID | None):
        self.dir = directory
        self.tp = tp
        self.config = config
        self.topic_id = topic_id
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self.leader_epochs = LeaderEpochCache(os.path.join(directory, "leader-epoch-checkpoint"))
        self.producer_state = ProducerStateManager(directory, tp, config.producer_id_expiration_ms)
        self.txn_index = AbortedTxnIndex(directory)
        self._last_flush = time.monotonic()
        self._flush_task: asyncio.Future[None] | None = None
        self._flush_target = 0
        self._truncated_during_flush: int | None = None
        self._flush_error: OSError | None = None  # a failed fsync: no later flush is trusted
        self.dir_health = LogDirHealth(os.path.dirname(directory))  # shared per dir by the manager
        self.io_executor: Executor | None = None  # fsyncs run here: the manager's log-io threads (None: the loop's)
        #: each group commit's fsync time in seconds (Kafka's LogFlushRateAndTimeMs): the
        #: manager gives its logs one histogram, which outlives them
        self.flush_times = Histogram()
        self.recovered = (0, 0)  # (segments, bytes) re-validated by load()
        self.truncations = 0  # truncate_to / truncate_fully_and_start_at calls that cut
        self.closed = False
        #: tiered storage (broker/tier/): the highest offset copied to remote storage (-1:
        #: none), set by the remote log manager of a partition with remote storage. While
        #: remote storage is on (`remote_log_enabled`), local retention (local.retention.*)
        #: deletes only segments wholly at or below it, and never moves the log start
        #: offset: offsets between it and the local log start are read from remote storage
        self.highest_copied_offset = -1
        self.remote_log_enabled = False
        #: ListOffsets by timestamp in remote storage (set by the broker's tiered storage):
        #: timestamp -> (offset, timestamp) of the first record at or after it there, or None
        self.remote_timestamp_lookup: Callable[[int], tuple[int, int] | None] | None = None

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        directory: str,
        tp: TopicPartition,
        config: LogConfig,
        *,
        topic_id: uuid.UUID | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        clean_shutdown: bool = False,
        remote_log_enabled: bool | None = None,
    ) -> Log:
        """Opens (or creates) the log in `directory`. `remote_log_enabled` (default: the
        topic's remote.storage.enable on a broker with remote.log.storage.system.enable)
        keeps a log start offset below the local segments (tiered storage). Unless the broker shut down cleanly,
        every segment holding offsets at or above the recovery point is re-validated
        (CRC, torn tail truncated, indexes rebuilt); segments after a truncation go.
        Segments wholly below it were fsynced: opening one checks its tail's batch
        headers and its indexes in O(1), as after a clean shutdown."""
        os.makedirs(directory, exist_ok=True)
        self = cls(directory, tp, config, topic_id)
        self._read_or_write_partition_metadata()
        # a compaction swap a crash interrupted is completed first (cleaner.py); the
        # directory is listed once otherwise (thousands of logs load at startup)
        from broker.log.cleaner import SWAP, TMP_DIR, complete_swaps

        names = os.listdir(directory)
        if TMP_DIR in names or any(n.endswith(SWAP) for n in names):
            complete_swaps(directory)
            names = os.listdir(directory)
        for name in names:
            if name.endswith((".deleted", ".cleaned", ".tmp")):
                os.unlink(os.path.join(directory, name))
        bases = sorted(b for b in (parse_base_offset(n) for n in names if n.endswith(".log")) if b is not None)
        # index files without a log are leftovers of an interrupted delete
        known = set(bases)
        for name in names:
            b = parse_base_offset(name)
            if b is not None and b not in known and name.endswith((".index", ".timeindex")):
                os.unlink(os.path.join(directory, name))
        segments: list[Segment] = []
        for b in bases:
            seg = Segment(
                directory, b, index_interval_bytes=config.index_interval_bytes, max_index_size=config.max_index_size
            )
            if seg.recovery_reason is not None:
                cut = seg.recovered_truncated_bytes
                log.warning(
                    "%s: segment %d: %s; indexes rebuilt from the log%s",
                    tp,
                    b,
                    seg.recovery_reason,
                    f", {cut} bytes of torn or corrupt tail cut" if cut else "",
                )
            if segments:
                segments[-1].release()  # inactive: its files reopen on demand
            segments.append(seg)
        recovered: list[Segment] = []
        if not clean_shutdown and segments:
            todo = sum(1 for seg in segments if seg.next_offset > recovery_point)
            started = time.monotonic()
            for i, seg in enumerate(segments):
                if seg.next_offset <= recovery_point:
                    continue  # wholly below the recovery point: flushed
                recovered.append(seg)
                self.recovered = (self.recovered[0] + 1, self.recovered[1] + seg.size)
                cut = seg.recover()
                elapsed = time.monotonic() - started
                log.info(
                    "%s: recovering segment %d of %d (base offset %d, %.1f MB so far, %.1f MB/s)",
                    tp,
                    self.recovered[0],
                    todo,
                    seg.base_offset,
                    self.recovered[1] / 1e6,
                    self.recovered[1] / 1e6 / elapsed if elapsed > 0 else 0.0,
                )
                if cut:
                    log.warning(
                        "%s: recovery truncated %d bytes of segment %d at offset %d",
                        tp,
                        cut,
                        seg.base_offset,
                        seg.next_offset,
                    )
                    for later in segments[i + 1 :]:
                        log.warning("%s: deleting segment %d after the corruption", tp, later.base_offset)
                        later.delete()
                    segments = segments[: i + 1]
                    break
                if i + 1 < len(segments):
                    seg.release()
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        if not self.segments:
            self._new_segment(max(log_start_offset, 0))
        # a log with remote storage keeps a log start offset below its local segments
        # (the remote log manager corrects it from the remote metadata once it has it)
        tiered = (
            config.remote_storage and config.broker.remote_log_storage_system_enabled
            if remote_log_enabled is None
            else remote_log_enabled
        )
        local_start = self.segments[0].base_offset
        self.log_start_offset = (
            log_start_offset if tiered and log_start_offset <= local_start else max(log_start_offset, local_start)
        )
        self.remote_log_enabled = tiered
        if tiered:
            # every producer snapshot stays until the remote log manager says what is
            # copied (each copy uploads the one at its segment's end)
            self.producer_state.keep_snapshots_from = 0
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
        self.active.resize_indexes(config.max_index_size)
        # After a clean shutdown everything was flushed. After an unclean one, recovery
        # validated bytes that may sit in the page cache only: the recovery point moves
        # when the log is flushed, never here (Kafka's LogLoader), or a later crash would
        # skip recovering them.
        self.recovery_point = (
            self.log_end_offset
            if clean_shutdown
            else min(max(recovery_point, self.log_start_offset), self.log_end_offset)
        )
        # as Kafka: a high watermark nobody checkpointed is 0, never the log end (records
        # past it may be uncommitted); a leader moves it up as its ISR catches up
        hw = 0 if high_watermark is None else high_watermark
        self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)
        self._load_leader_epochs(recovered)
        self.txn_index.load(self._bases, self.log_end_offset)
        self._load_producer_state()
        return self

    def _load_producer_state(self) -> None:
        """Rebuilds the producer state (snapshot, then replay) and the aborted-transaction
        entries of the replayed range, which a crash may have lost or a truncation made
        stale (Kafka's LogLoader rebuilds both from the recovered segments)."""
        ps = self.producer_state
        ps.load(self.segments, self.log_start_offset, self.log_end_offset, int(time.time() * 1000))
        start = ps.replayed_from
        replayed = [
            AbortedTxn(t.producer_id, t.first_offset, t.last_offset, lso)
            for t, lso in ps.replayed_completions
            if t.aborted
        ]
        idx = self.txn_index
        kept = [e for e in idx.entries if e.last_offset >= start]
        if kept != replayed:
            if kept:
                log.info("%s: aborted-transaction index rebuilt from offset %d", self.tp, start)
            idx.truncate(start, self._bases_from(start))
            for e in replayed:
                idx.append(self._segment_base_of(e.last_offset), e)
        ps.on_high_watermark(self.high_watermark)

    def _bases_from(self, offset: int) -> list[int]:
        """The base offsets of the segments holding `offset` and after."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return self._bases[i:]

    def _segment_base_of(self, offset: int) -> int:
        return self._bases[max(bisect.bisect_right(self._bases, offset) - 1, 0)]

    def _load_leader_epochs(self, recovered: list[Segment]) -> None:
        """The epoch cache made to match the loaded log. An unreadable checkpoint is
        rebuilt from every segment's batches; after an unclean shutdown the entries from
        the first recovered segment on are rebuilt from its batches (as Kafka's
        LogSegment.recover assigns them): a checkpoint written before the crash may lack
        the epochs of the last appends, or name epochs whose records did not survive."""
        cache = self.leader_epochs
        entries = cache.entries
        if cache.unreadable:
            entries = epochs_from_batches(self.segments, [])
        elif recovered:
            first = recovered[0].base_offset
            entries = epochs_from_batches(recovered, [(e, o) for e, o in entries if o < first])
        entries = [(e, o) for e, o in entries if o < self.log_end_offset]
        if entries != cache.entries or cache.unreadable:
            if entries != cache.entries:
                log.info("%s: leader epochs rebuilt from the log: %s", self.tp, entries[-5:])
            cache.rebuild(entries)
        cache.truncate_from_start(self.log_start_offset)

    def _read_or_write_partition_metadata(self) -> None:
        """partition.metadata holds the topic id, in Kafka's format. A damaged one is
        rewritten when the caller knows the id (the metadata store's), else refused: the
        log must not be served under an identity nobody can vouch for."""
        path = os.path.join(self.dir, PARTITION_METADATA)
        if not os.path.lexists(path):
            if self.topic_id is not None:
                self._write_partition_metadata()
            return
        try:
            found = _read_partition_metadata(path)
        except ValueError as exc:
            if self.topic_id is None:
                raise PartitionMetadataError(
                    f"{path} is damaged ({exc}) and the topic id to rebuild it is not known; refusing to start: "
                    "restore it, or remove it to have it rewritten from the cluster metadata"
                ) from None
            log.warning(
                "%s: %s was damaged (%s); rebuilt with topic id %s from the metadata store",
                self.tp,
                path,
                exc,
                uuid_text(self.topic_id),
            )
            self._write_partition_metadata()
            return
        if self.topic_id is None:
            self.topic_id = found

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Names the topic id of a log that had none on disk (its partition.metadata was
        missing) once the controller gives it."""
        self.topic_id = topic_id
        self._write_partition_metadata()

    def _write_partition_metadata(self) -> None:
        assert self.topic_id is not None
        write_atomically(
            os.path.join(self.dir, PARTITION_METADATA), f"version: 0\ntopic_id: {uuid_text(self.topic_id)}\n"
        )

    def _new_segment(self, base_offset: int) -> Segment:
        seg = Segment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.max_index_size,
        )
        self.segments.append(seg)
        self._bases.append(base_offset)
        return seg

    # ------------------------------------------------------------------ state

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        end: int = self.segments[-1].next_offset
        return end

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def name(self) -> str:
        return str(self.tp)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        if config.broker.remote_log_storage_system_enabled:
            self.remote_log_enabled = config.remote_storage  # remote.storage.enable turned on or off
            if self.remote_log_enabled and self.producer_state.keep_snapshots_from is None:
                self.producer_state.keep_snapshots_from = self.highest_copied_offset + 1
        self.producer_state.expiration_ms = config.producer_id_expiration_ms  # a dynamic broker config

    @property
    def last_stable_offset(self) -> int:
        """The LSO: read_committed consumers read below it (never above the high watermark)."""
        first = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        return hw if first < 0 or first > hw else first

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed read of [fetch_offset, upper_bound)
        names to its consumer (per transaction, never per record)."""
        if not self.txn_index.entries:
            return []
        return self.txn_index.collect(fetch_offset, upper_bound)

    # ------------------------------------------------------------------ append

    def append_as_leader(
        self,
        records: Buffer,
        leader_epoch: int,
        control: bool = False,
        client: bool = True,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Validates the batches in `records` (a writable buffer: the request's bytes),
        assigns offsets from the log end in place and appends them.

        `control`: the batches are transaction markers the transaction coordinator asked
        for (WriteTxnMarkers), and nothing else may be (append_markers); their
        `transaction_version` sets the epoch check (ProducerStateManager.check_marker). `client`: the
        batches come from a client, so Kafka's producer batch rules apply
        (assign_offsets' producer_checks); a coordinator's own batches (a transactional
        offset commit: a producer id without a sequence) skip them, as in Kafka.

        Raises CorruptRecordError (CRC, lengths, magic), InvalidRecordError (Kafka's batch
        rules; a record without a key on a compacted topic; a record schema validation
        refuses, with its record errors) or RecordTooLarge."""
        mv = memoryview(records)
        if mv.readonly:
            mv = memoryview(bytearray(mv))
        if control:
            return self._append_markers(mv, leader_epoch, transaction_version)
        limit = self.config.max_message_bytes
        it = iter_batches(mv)
        producer_batches = None
        for batch in it:
            if batch.size > limit:
                raise RecordTooLarge(f"batch of {batch.size} bytes exceeds max.message.bytes {limit}")
            if batch.producer_id >= 0:
                if producer_batches is None:
                    producer_batches = []
                producer_batches.append(batch)
        if it.partial:
            raise CorruptRecordError(
                f"{self.tp}: produce request holds a partial batch at byte {it.position}", it.position
            )
        if producer_batches is not None:
            # OutOfOrderSequence / InvalidProducerEpoch, or the earlier write of a retry
            dup = self.producer_state.check(producer_batches)
            if dup is not None:
                return self._duplicate_info(dup)
        base = self.log_end_offset
        next_offset, batches, count, max_ts, _max_ts_off = assign_offsets(
            mv, base, leader_epoch, producer_checks=client
        )
        if batches == 0:
            raise CorruptRecordError(f"{self.tp}: produce request holds no record batch", 0)
        if self.config.compact:
            require_keys(mv)  # InvalidRecordError: compaction needs a key per record
        schema_check = self.config.schema_check
        if schema_check is not None and client:
            schema_check.check(mv)  # RecordValidationError: broker/registry/validation.py
        append_time = -1
        if self.config.log_append_time:
            append_time = int(time.time() * 1000)
            for batch in iter_batches(mv):
                batch.set_log_append_time(append_time)
            max_ts = append_time
        # the epoch is in the checkpoint before any record of it is on disk (Kafka's
        # maybeAssignEpochStartOffset precedes the append)
        if self._epoch_to_store(leader_epoch):
            self._write("writing the leader epochs of", self._store_epoch, leader_epoch, base)
        self._append(mv, next_offset, max_ts)
        if producer_batches is not None:
            self.producer_state.update(producer_batches)  # the views show the assigned offsets
        return LogAppendInfo(base, next_offset - 1, count, max_ts, append_time, self.log_start_offset, len(mv))

    def append_marker_as_leader(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
        timestamp: int | None = None,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Appends one transaction marker (see marker_batch) for the producer's transaction."""
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        return self.append_as_leader(
            marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, ts),
            leader_epoch,
            control=True,
            transaction_version=transaction_version,
        )

    def _append_markers(self, mv: memoryview, leader_epoch: int, transaction_version: int = 0) -> LogAppendInfo:
        """Markers (control batches of one COMMIT or ABORT record, Kafka's
        EndTransactionMarker). Raises InvalidRecordError for a batch that is no marker,
        InvalidProducerEpoch (a fenced epoch) or CoordinatorFenced (an older coordinator
        epoch than the producer's last marker's)."""
        from broker.log.producer_state import read_marker

        it = iter_batches(mv, validate=True)
        for b in it:
            if not b.is_control or b.producer_id < 0:
                raise InvalidRecordError(f"{self.tp}: a marker append holds a batch that is no marker")
            _commit, coordinator_epoch = read_marker(b)
            self.producer_state.check_marker(b.producer_id, b.producer_epoch, coordinator_epoch, transaction_version)
        if it.partial:
            raise CorruptRecordError(f"{self.tp}: partial marker batch at byte {it.position}", it.position)
        base = self.log_end_offset
        next_offset, batches, count, max_ts, _off = assign_offsets(mv, base, leader_epoch)
        if batches == 0:
            raise CorruptRecordError(f"{self.tp}: no marker to append", 0)
        if self._epoch_to_store(leader_epoch):
            self._write("writing the leader epochs of", self._store_epoch, leader_epoch, base)
        self._append(mv, next_offset, max_ts)
        self._complete_txns(self.producer_state.update(iter_batches(mv)))
        return LogAppendInfo(base, next_offset - 1, count, max_ts, -1, self.log_start_offset, len(mv))

    def _complete_txns(self, completed: list[CompletedTxn]) -> None:
        """Markers just appended closed these transactions: each aborted one gets its entry
        in the aborted-transaction index (in the active segment's file)."""
        for t in completed:
            if t.aborted:
                lso = self.producer_state.last_stable_offset_for(t)
                self._write(
                    "indexing the aborted transactions of",
                    self.txn_index.append,
                    self.active.base_offset,
                    AbortedTxn(t.producer_id, t.first_offset, t.last_offset, lso),
                )

    def _duplicate_info(self, dup: BatchMetadata) -> LogAppendInfo:
        append_time = dup.timestamp if self.config.log_append_time else -1
        return LogAppendInfo(
            dup.first_offset,
            dup.last_offset,
            dup.last_offset - dup.first_offset + 1,
            dup.timestamp,
            append_time,
            self.log_start_offset,
            0,
            duplicate=True,
        )

    def append_as_follower(self, records: Buffer) -> int:
        """Appends batches that already carry offsets (replication). Returns the new log
        end offset. Batches below the log end are refused with ValueError."""
        mv = memoryview(records)
        end = self.log_end_offset
        last_end = end
        epochs = []
        producer_batches = []
        valid = 0
        for batch in iter_batches(mv, validate=True):
            if batch.base_offset < last_end:
                raise ValueError(f"{self.tp}: follower batch at offset {batch.base_offset} below {last_end}")
            last_end = batch.next_offset
            valid = batch.position + batch.size
            epochs.append((batch.partition_leader_epoch, batch.base_offset))
            if batch.producer_id >= 0:
                producer_batches.append(batch)  # markers too: they close transactions
        if last_end == end:
            return end
        # a fetch response may end in a partial batch (the leader cuts at max_bytes): only
        # whole batches are appended, as Kafka's follower trims the invalid tail
        for epoch, start in epochs:
            if self._epoch_to_store(epoch):
                self._write("writing the leader epochs of", self._store_epoch, epoch, start)
        self._append(mv[:valid], last_end, -1)
        # a follower takes the leader's word
        self._complete_txns(self.producer_state.update(producer_batches))
        return last_end

    def _append(self, mv: memoryview, next_offset: int, max_timestamp: int) -> None:
        self._write("appending to", self._append_unchecked, mv, next_offset, max_timestamp)

    def _append_unchecked(self, mv: memoryview, next_offset: int, max_timestamp: int) -> None:
        seg = self.active
        size = len(mv)
        # offsets are int32 relative to the segment base: a batch beyond that range (a
        # follower of a compacted topic) needs a new segment based at its own offset
        if next_offset - 1 - seg.base_offset > INT32_MAX or (
            seg.size > 0
            and (
                seg.size + size > self.config.segment_bytes
                or seg.offset_index.is_full
                or seg.time_index.is_full
                or self._segment_age_exceeded(seg, max_timestamp)
            )
        ):
            seg = self.roll(struct.unpack_from(">q", mv, 0)[0])
        seg.append(mv)

    def _write(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args), a write: an OSError becomes LogStorageError, reported to the dir's
        health; a success after failures tells it writes work again."""
        try:
            result = fn(*args)
        except OSError as exc:
            self.dir_health.failed(exc, f"{what} {self.tp}")
            raise LogStorageError(f"{self.tp}: {what.split()[0]} failed: {exc.strerror or exc}") from exc
        if self.dir_health.error is not None:
            self.dir_health.succeeded()
        return result

    def _epoch_to_store(self, epoch: int) -> bool:
        return self.leader_epochs.dirty or epoch > self.leader_epochs.latest_epoch

    def _store_epoch(self, epoch: int, start_offset: int) -> None:
        self.leader_epochs.store_if_dirty()
        self.leader_epochs.assign(epoch, start_offset)

    def assign_leader_epoch(self, epoch: int, start_offset: int) -> bool:
        """A replica becoming leader starts its epoch at its log end (Kafka's makeLeader).
        The epoch is taken in memory even when its checkpoint cannot be written (a full
        disk): the write is reported to the dir's health and tried again before the next
        append, which fails (KAFKA_STORAGE_ERROR) while it cannot be written — no record
        of the epoch reaches the disk before the epoch does. False when the write failed."""
        if not self._epoch_to_store(epoch):
            return True
        try:
            self._write("writing the leader epochs of", self._store_epoch, epoch, start_offset)
        except LogStorageError:
            return False
        return True

    def _segment_age_exceeded(self, seg: Segment, incoming_timestamp: int = -1) -> bool:
        """segment.ms as Kafka measures it: from the first batch's timestamp to the incoming
        batch's, or — when either is unknown — from the segment's creation to now."""
        first = seg.first_batch_timestamp
        if first >= 0 and incoming_timestamp >= 0:
            return bool(incoming_timestamp - first > self.config.segment_ms)
        return bool((time.time() - seg.created) * 1000 > self.config.segment_ms)

    def roll(self, base_offset: int | None = None) -> Segment:
        """Closes the active segment for appends and starts a new one at the log end (or at
        `base_offset`, the first offset of the batches to come, when that is beyond)."""
        old = self.active
        base = self.log_end_offset if base_offset is None else max(base_offset, self.log_end_offset)
        if old.size == 0 and old.base_offset == base:
            return old  # a new segment would reopen the same files
        # the producer state as of the end of the finished segment (Kafka snapshots here):
        # an unclean restart replays only the batches after it
        self.producer_state.take_snapshot(self.log_end_offset)
        self.txn_index.fsync(old.base_offset)
        old.roll()
        try:
            seg = self._new_segment(base)
        except OSError:
            old.resize_indexes(self.config.max_index_size)  # still the active segment
            raise
        log.debug("%s: rolled to segment %d", self.tp, seg.base_offset)
        # Kafka flushes the finished segment in the background, moving the recovery point
        self.schedule_flush(seg.base_offset)
        return seg

    def maybe_roll_by_time(self) -> None:
        """Rolls a non-empty active segment older than segment.ms (the retention timer
        calls this, so idle partitions roll too)."""
        seg = self.active
        if seg.size > 0 and self._segment_age_exceeded(seg):
            self._write("rolling", self.roll)

    # ------------------------------------------------------------------ high watermark

    def update_high_watermark(self, offset: int) -> bool:
        """Moves the high watermark (bounded by log start / log end). True when it
        advanced (the partition then wakes the requests waiting for it)."""
        offset = min(max(offset, self.log_start_offset), self.log_end_offset)
        if offset == self.high_watermark:
            return False
        advanced = offset > self.high_watermark
        self.high_watermark = offset
        if self.producer_state.unreplicated:
            self.producer_state.on_high_watermark(offset)
        return advanced

    # ------------------------------------------------------------------ flush

    def needs_flush(self) -> bool:
        # flush.messages counts messages not yet fsynced, as Kafka's unflushedMessages
        # (log end - recovery point); recovered but unflushed data counts too
        unflushed = self.log_end_offset - self.recovery_point
        if unflushed <= 0:
            return False
        if unflushed >= self.config.flush_messages:
            return True
        return (time.monotonic() - self._last_flush) * 1000 >= self.config.flush_ms

    def schedule_flush(self, up_to: int | None = None) -> asyncio.Future[None] | None:
        """Group commit: fsyncs everything appended so far in a worker thread. A call while
        a flush runs joins the next one, which covers every batch that arrived meanwhile.
        Returns an awaitable that completes once data up to `up_to` (default: the current
        log end) is durable. Outside an event loop it does nothing and returns None."""
        target = self.log_end_offset if up_to is None else up_to
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if self._flush_error is not None and self.recovery_point < target:
            return self._waiter(target)
        if self.recovery_point >= target:
            fut = loop.create_future()
            fut.set_result(None)
            return fut
        self._flush_target = max(self._flush_target, target)
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = loop.create_task(self._flush_loop())
        return self._waiter(target)

    def _waiter(self, target: int) -> asyncio.Future[None]:
        fut = asyncio.ensure_future(self._wait_recovery_point(target))
        # a failed fsync was reported to the dir's health: a caller that does not await
        # (a roll, the flush timer) needs no "exception never retrieved" traceback
        fut.add_done_callback(_retrieve)
        return fut

    async def _wait_recovery_point(self, target: int) -> None:
        """Raises LogStorageError when an fsync failed (until a restart, no data above the
        recovery point is known to be durable)."""
        # offsets truncated away (a follower diverging) are never coming: the log end bounds
        while self.recovery_point < min(target, self.log_end_offset) and not self.closed:
            if self._flush_error is not None:
                raise LogStorageError(f"{self.tp}: fsync failed: {self._flush_error.strerror or self._flush_error}")
            task = self._flush_task
            if task is None:
                break
            await asyncio.shield(task)
            if self._flush_error is not None:
                continue
            if self.recovery_point < min(target, self.log_end_offset) and (
                self._flush_task is None or self._flush_task.done()
            ):
                self._flush_target = max(self._flush_target, target)
                self._flush_task = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while (
            self.recovery_point < min(self._flush_target, self.log_end_offset)
            and not self.closed
            and self._flush_error is None
        ):
            end = self.log_end_offset
            segs = [s for s in self.segments if s.next_offset > self.recovery_point]
            self._truncated_during_flush = None
            started = time.monotonic()
            try:
                await loop.run_in_executor(self.io_executor, _flush_segments, segs)
            except OSError as exc:
                self._flush_error = exc
                self.dir_health.failed(exc, f"fsync of {self.tp}", sync=True)
                return
            if self._truncated_during_flush is not None:
                # offsets at and above the truncation point may have been rewritten
                # after this fsync was planned: they are not known to be durable
                end = min(end, self._truncated_during_flush)
            self.recovery_point = max(self.recovery_point, min(end, self.log_end_offset))
            self._last_flush = time.monotonic()
            self.flush_times.observe(self._last_flush - started)

    @property
    def flush_failed(self) -> bool:
        """Whether an fsync failed (nothing above the recovery point is durable any more
        until a restart recovers the log)."""
        return self._flush_error is not None

    def flush(self, up_to: int | None = None) -> None:
        """Synchronous fsync of every segment with data at or above the recovery point."""
        end = self.log_end_offset
        _flush_segments([s for s in self.segments if s.next_offset > self.recovery_point and not s.closed])
        self.recovery_point = max(self.recovery_point, end)
        self._last_flush = time.monotonic()

    # ------------------------------------------------------------------ read

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """The file range holding batches from `offset`: at most max_bytes (or one whole
        batch when min_one_batch), never past max_offset (default: the high watermark).
        None when there is nothing to read yet. Raises OffsetOutOfRange, and OSError
        (EMFILE) when the segment is closed and the open-file limit allows no more open
        segments now (every open one is being sent): read it later."""
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRange(f"{self.tp}: offset {offset} outside [{self.log_start_offset}, {end}]")
        if offset < self.segments[0].base_offset:
            raise OffsetInRemoteStorage(
                f"{self.tp}: offset {offset} is in remote storage (local log from {self.segments[0].base_offset})"
            )
        limit = self.high_watermark if max_offset is None else max_offset
        if offset >= limit:
            return None
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            i = 0
        while i < len(self.segments):
            seg = self.segments[i]
            max_position = -1
            if seg.base_offset < limit < seg.next_offset:
                t = seg.translate_offset(limit)
                max_position = t[0] if t is not None else -1
            elif limit <= seg.base_offset:
                return None
            r = seg.read_from_offset(offset, max_bytes, max_position, min_one_batch)
            if r is not None:
                _fd, pos, length = r
                if length > 0:
                    return FileSlice(seg, pos, length)
                return None
            i += 1
        return None

    def read_bytes(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Like read() but returns a copy of the bytes (compaction, tests, internal topics)."""
        s = self.read(offset, max_bytes, max_offset)
        if s is None:
            return b""
        try:
            return s.read()
        finally:
            s.close()

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) for -2 (earliest), -1 (latest), -3 (max
        timestamp), -4 (earliest local: the first offset on this broker's disk), -5
        (latest tiered: the last offset in remote storage, -1 without it) or the first
        record with timestamp >= `timestamp`; None if none."""
        if timestamp == EARLIEST_TIMESTAMP:
            return (self.log_start_offset, -1)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return (self.local_log_start_offset, -1)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return (self.highest_copied_offset if self.remote_log_enabled else -1, -1)
        if timestamp == LATEST_TIMESTAMP:
            return (self.high_watermark, -1)
        if timestamp == MAX_TIMESTAMP:
            best = None
            for seg in self.segments:
                if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best[1]):
                    best = (seg.offset_of_max_timestamp, seg.max_timestamp)
            if best is None:
                return None
            return self._first_record_with_timestamp(*best)
        if self.remote_log_enabled and self.remote_timestamp_lookup is not None:
            if self.log_start_offset < self.segments[0].base_offset:
                found_remote = self.remote_timestamp_lookup(timestamp)
                if found_remote is not None:
                    return found_remote
        for seg in self.segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= self.log_start_offset:
                continue
            found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None and found[0] < self.high_watermark:
                return (found[0], found[1])
        return None

    def _first_record_with_timestamp(self, batch_offset: int, timestamp: int) -> tuple[int, int]:
        """The first record of the batch holding `batch_offset` whose timestamp is
        `timestamp` (Kafka's RecordBatch.offsetOfMaxTimestamp): segments track the batch;
        ListOffsets MAX_TIMESTAMP answers the record. One batch, decoded on demand."""
        try:
            data = self.read_bytes(batch_offset, 1, self.log_end_offset)
            for batch in iter_batches(data):
                if batch.base_offset <= batch_offset <= batch.last_offset:
                    for rec in batch.records():
                        if rec.timestamp == timestamp:
                            return (rec.offset, timestamp)
        except (OffsetOutOfRange, CorruptRecordError, OSError):
            pass
        return (batch_offset, timestamp)

    # ------------------------------------------------------------------ retention

    @property
    def local_log_start_offset(self) -> int:
        """The first offset held locally (Kafka's localLogStartOffset): the log start
        offset, unless remote storage holds the offsets below the local segments."""
        return max(self.log_start_offset, int(self.segments[0].base_offset))

    def delete_old_segments(self, now_ms: int | None = None) -> list[Segment]:
        """Retention: removes from the log (the caller deletes the files) whole segments
        that are below the log start offset, older than retention.ms, or beyond
        retention.bytes — oldest first, never the active segment, never above the high
        watermark. Moves the log start offset.

        With remote storage (remote_log_enabled): local.retention.ms/bytes instead, only
        segments already copied (wholly at or below highest_copied_offset) or wholly
        below the log start offset (DeleteRecords), and the log start offset stays
        (remote storage's total retention moves it)."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        cfg = self.config
        tiered = self.remote_log_enabled
        retention_ms = cfg.local_retention_ms if tiered else cfg.retention_ms
        retention_bytes = cfg.local_retention_bytes if tiered else cfg.retention_bytes
        removable = 0
        total = self.size
        for i, seg in enumerate(self.segments[:-1]):
            if seg.next_offset > self.high_watermark:
                break
            below_start = seg.next_offset <= self.log_start_offset
            if tiered and not below_start and seg.next_offset - 1 > self.highest_copied_offset:
                break  # not in remote storage yet: kept whatever its age or the disk
            expired = False
            if cfg.delete and retention_ms >= 0:
                largest = seg.max_timestamp if seg.max_timestamp >= 0 else int(os.path.getmtime(seg.log_path) * 1000)
                expired = now_ms - largest > retention_ms
            oversize = cfg.delete and retention_bytes >= 0 and total - seg.size >= retention_bytes
            if below_start or expired or oversize:
                removable = i + 1
                total -= seg.size
            else:
                break
        if removable == 0:
            return []
        gone = self.segments[:removable]
        self.segments = self.segments[removable:]
        self._bases = self._bases[removable:]
        self.txn_index.drop_before(self.segments[0].base_offset, [s.base_offset for s in gone])
        if tiered:
            return gone
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        if self.recovery_point < self.log_start_offset:
            self.recovery_point = self.log_start_offset
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        return gone

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: moves the log start offset to `offset` (-1: the high watermark).
        Returns the new low watermark. Raises OffsetOutOfRange above the high watermark."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRange(f"{self.tp}: offset {offset} above the high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epochs.truncate_from_start(offset)
        return self.log_start_offset

    # ------------------------------------------------------------------ truncation (replication)

    def truncate_to(self, offset: int) -> None:
        """Removes every offset >= `offset` (a follower diverged from its leader)."""
        if offset >= self.log_end_offset:
            return
        self.truncations += 1
        keep = [s for s in self.segments if s.base_offset < offset] or []
        for seg in self.segments[len(keep) :]:
            seg.delete()
        if not keep:
            self.segments, self._bases = [], []
            self._new_segment(offset)
        else:
            self.segments = keep
            self._bases = [s.base_offset for s in keep]
            self.active.truncate_to(offset)
            self.active.resize_indexes(self.config.max_index_size)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._flush_target = min(self._flush_target, self.log_end_offset)
        if self._truncated_during_flush is None or self.log_end_offset < self._truncated_during_flush:
            self._truncated_during_flush = self.log_end_offset
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.txn_index.truncate(self.log_end_offset, self._bases_from(self.log_end_offset))
        self._load_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drops every segment and starts empty at `offset` (a follower whose leader no
        longer has what it would need to catch up)."""
        self.truncations += 1
        for seg in self.segments:
            seg.delete()
        self.segments, self._bases = [], []
        self._new_segment(offset)
        self.log_start_offset = self.high_watermark = self.recovery_point = offset
        self._flush_target = min(self._flush_target, offset)
        self._truncated_during_flush = offset
        self.leader_epochs.truncate_from_end(0)
        self.txn_index.clear()
        self._load_producer_state()

    def advance_log_start_offset(self, offset: int) -> None:
        """A follower learns that its leader's log start moved (retention, DeleteRecords):
        never beyond its own high watermark."""
        offset = min(offset, self.high_watermark)
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epochs.truncate_from_start(offset)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Closes every segment (trimming the active one's indexes). Does not fsync."""
        self.closed = True
        for seg in self.segments:
            seg.close()

    def delete_files(self) -> None:
        """Removes the whole partition directory (the log must be closed)."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.tp}, start={self.log_start_offset}, hw={self.high_watermark}, "
            f"end={self.log_end_offset}, segments={len(self.segments)})"
        )


def marker_batch(
    producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp: int
) -> bytearray:
    """A transaction marker as Kafka writes it: a transactional control batch of the
    producer (base sequence -1) holding one control record (key: version 0, type 1 commit
    or 0 abort; value: version 0, the coordinator epoch)."""
    b = BatchBuilder(
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1, is_transactional=True, is_control=True
    )
    key, value = control_record(commit, coordinator_epoch)
    b.append(timestamp, key, value)
    return bytearray(b.build())


def _retrieve(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()


def _flush_segments(segments: list[Segment]) -> None:
    for seg in segments:
        if not seg.closed:
            seg.flush()


def _read_partition_metadata(path: str) -> uuid.UUID:
    """The topic id of a partition.metadata ('version: 0', 'topic_id: <id>'); ValueError
    saying what is wrong with a damaged one."""
    text = read_small_text(path)
    fields = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            fields[k.strip()] = v.strip()
    version = fields.get("version")
    if version is None:
        raise ValueError("no version")
    if version != "0":
        raise ValueError(f"version {version}, where 0 was expected")
    if "topic_id" not in fields:
        raise ValueError("no topic_id")
    try:
        return parse_uuid(fields["topic_id"], "topic id")
    except ValueError as exc:
        raise ValueError(f"topic_id: {exc}") from None
