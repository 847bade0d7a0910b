"""The remote log manager of one broker (Kafka's RemoteLogManager): what the leader of a
partition with remote storage does with its rolled segments.

Copy (Kafka's RLMCopyTask): each rolled segment wholly below the last stable offset (and
so the high watermark) and above what is already copied goes, oldest first, as

    COPY_SEGMENT_STARTED   published (metadata.py), durable before anything is uploaded
    the objects            the segment's log, offset and time indexes, transaction index,
                           producer snapshot at its end, leader epochs up to its end
    COPY_SEGMENT_FINISHED  published: from now on the segment is readable remotely and
                           the log's highest_copied_offset covers it

so a crash at any point leaves either a FINISHED segment or a STARTED one nobody reads;
`clean_orphans()` (at start, then each pass) deletes the latter's objects
(DELETE_SEGMENT_STARTED, delete, DELETE_SEGMENT_FINISHED). Local retention
(local.retention.*, Log.delete_old_segments) deletes only copied segments.

Total retention (Kafka's RLMExpirationTask): remote segments are deleted oldest first
when wholly below the log start offset (DeleteRecords), older than retention.ms, or while
the whole log (remote segments and the local ones not copied) stays at or above
retention.bytes without them; the log start offset moves past each before it goes.
`delete_partition()` removes every remote segment of a deleted topic's partition
(RemotePartitionDeleteMetadataRecord MARKED, STARTED, FINISHED around them).

Where the records go is a MetadataLog: the broker's is its topic __remote_log_metadata
(broker/server/tier.py TopicMetadataLog); LocalMetadataLog keeps them in kbroker logs of
that topic's partitions in a directory of their own (tools, tests), fsynced per record.
Remote storage calls block: they run on the manager's own threads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from broker.config import BrokerConfig
from broker.log.checkpoints import TopicPartition
from broker.log.log import Log
from broker.native import BatchBuilder, crc32c, iter_batches
from broker.tier import metadata as md
from broker.tier.storage import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)

log = logging.getLogger(__name__)


class MetadataLog(Protocol):
    """Where remote log metadata records are published (durably before publish returns)
    and replayed from."""

    async def publish(self, record: md.Record) -> None: ...

    def records(self) -> Iterable[md.Record]: ...


class LocalMetadataLog:
    """__remote_log_metadata's partitions as kbroker logs in `directory`
    (`__remote_log_metadata-<p>/`), one record per batch (null key), fsynced per record.
    One broker's: a stand-in for the replicated internal topic with the same bytes in the
    same partitions."""

    def __init__(self, directory: str, config: BrokerConfig, partitions: int = md.DEFAULT_PARTITIONS):
        self.directory = directory
        self.partitions = partitions
        self._config = config.log_config({"cleanup.policy": ["delete"], "retention.ms": -1})
        self._logs: dict[int, Log] = {}
        os.makedirs(directory, exist_ok=True)
        for name in sorted(os.listdir(directory)):
            topic, _, p = name.rpartition("-")
            if topic == md.TOPIC and p.isdigit():
                self._open(int(p))

    def _open(self, p: int) -> Log:
        lg = self._logs.get(p)
        if lg is None:
            lg = Log.load(
                os.path.join(self.directory, f"{md.TOPIC}-{p}"),
                TopicPartition(md.TOPIC, p),
                self._config,
                high_watermark=2**62,  # one replica: everything written is committed
            )
            self._logs[p] = lg
        return lg

    def _partition(self, record: md.Record) -> int:
        tp = record.tp if isinstance(record, md.PartitionDelete) else record.segment_id.tp
        return md.metadata_partition(tp, self.partitions)

    async def publish(self, record: md.Record) -> None:
        lg = self._open(self._partition(record))
        b = BatchBuilder()
        b.append(int(time.time() * 1000), None, md.encode(record))
        lg.append_as_leader(bytearray(b.build()), 0)
        lg.flush()
        lg.high_watermark = lg.log_end_offset

    def records(self) -> Iterable[md.Record]:
        """Every record, partition by partition, in each partition's order (the records of
        one remote partition are in one metadata partition)."""
        for p in sorted(self._logs):
            lg = self._logs[p]
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                data = lg.read_bytes(offset, 1 << 20, lg.log_end_offset)
                if not data:
                    break
                for batch in iter_batches(data, validate=True):
                    for rec in batch.records():
                        if rec.value is not None:
                            yield md.decode(rec.value)
                    offset = batch.last_offset + 1

    def close(self) -> None:
        for lg in self._logs.values():
            lg.close()


#: a producer snapshot holding no producer (kbroker's snapshot format), uploaded when the
#: snapshot at a segment's end is gone (a crash before the OS wrote it): the state is then
#: rebuilt from the batches, as after a lost local snapshot
EMPTY_SNAPSHOT = struct.pack(">hI", 1, crc32c(struct.pack(">i", 0))) + struct.pack(">i", 0)


def leader_epoch_text(entries: Iterable[tuple[int, int]]) -> bytes:
    """A leader-epoch-checkpoint file's text (Kafka's format)."""
    entries = list(entries)
    lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
    return ("\n".join(lines) + "\n").encode()


def segment_epochs(entries: list[tuple[int, int]], base: int, end: int) -> tuple[tuple[int, int], ...]:
    """The epochs of offsets [base, end]: the one in force at `base` (from `base`) and those
    starting inside (Kafka's epochEntriesInRange as RemoteLogSegmentMetadata holds them)."""
    out: list[tuple[int, int]] = []
    for epoch, start in entries:
        if start <= base:
            out = [(epoch, base)]
        elif start <= end:
            out.append((epoch, start))
    return tuple(out)


class RemoteLogManager:
    """One broker's copies, remote retention and orphan clean-up (see the module docstring).
    The caller decides which logs it leads (`copy(lg, tp)` for those only: followers never
    copy) and runs the passes; every method runs on the event loop."""

    def __init__(
        self,
        broker_id: int,
        rsm: RemoteStorageManager,
        metadata_log: MetadataLog,
        threads: int = 2,
    ):
        self.broker_id = broker_id
        self.rsm = rsm
        self.metadata_log = metadata_log
        self.cache = md.RemoteLogMetadataCache()
        self._io = ThreadPoolExecutor(threads, thread_name_prefix="remote-log")
        self._in_flight: set[uuid.UUID] = set()
        #: what the manager did (metrics, tests): segments and bytes copied and deleted,
        #: failed remote storage calls
        self.stats = {"copied": 0, "copied_bytes": 0, "deleted": 0, "orphans": 0, "errors": 0}

    def start(self) -> None:
        """Replays the published records into the view (before any pass)."""
        self.cache.replay_records(self.metadata_log.records())

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def _publish(self, record: md.Record) -> None:
        await self.metadata_log.publish(record)
        self.cache.apply(record)

    def _event(self, sid: RemoteLogSegmentId, state: md.SegmentState) -> md.SegmentUpdate:
        return md.SegmentUpdate(sid, self.broker_id, int(time.time() * 1000), state)

    # ------------------------------------------------------------------ the log's view

    def attach(self, lg: Log, tp: TopicIdPartition) -> None:
        """Takes a log with remote storage (loaded with remote_log_enabled): tells it what
        is copied, and raises its log start offset to the first remote offset when
        remote storage no longer holds what the checkpoint said (offsets below the
        first remote segment are not readable anywhere)."""
        lg.remote_log_enabled = True
        lg.highest_copied_offset = max(lg.highest_copied_offset, self.cache.highest_copied_offset(tp))
        copied = self.cache.copied(tp)
        earliest = copied[0].start_offset if copied else lg.segments[0].base_offset
        if lg.log_start_offset < earliest:
            lg.log_start_offset = min(earliest, lg.high_watermark)
        self._keep_snapshots(lg)

    def _keep_snapshots(self, lg: Log) -> None:
        # the snapshot at the end of the oldest segment not yet copied, and those after it
        lg.producer_state.keep_snapshots_from = lg.highest_copied_offset + 1

    # ------------------------------------------------------------------ copy

    def candidates(self, lg: Log) -> list[Any]:
        """The rolled segments to copy next: above the highest copied offset and not wholly
        below the log start offset, wholly below the last stable offset (which the high
        watermark bounds)."""
        bound = min(lg.last_stable_offset, lg.high_watermark)
        out = []
        for seg in lg.segments[:-1]:
            if seg.next_offset - 1 <= lg.highest_copied_offset or seg.size == 0:
                continue
            if seg.next_offset <= lg.log_start_offset:
                continue  # deleted (DeleteRecords) before it was copied: nothing to keep
            if seg.next_offset > bound:
                break
            out.append(seg)
        return out

    async def copy(self, lg: Log, tp: TopicIdPartition, limit: int | None = None) -> int:
        """Copies the log's candidates in order (at most `limit`); returns how many. A
        remote storage failure stops the pass (logged; the next pass retries)."""
        if lg.config["remote.log.copy.disable"]:
            return 0
        done = 0
        for seg in self.candidates(lg):
            if limit is not None and done >= limit:
                break
            if not await self._copy_segment(lg, tp, seg):
                break
            done += 1
        return done

    async def _copy_segment(self, lg: Log, tp: TopicIdPartition, seg: Any) -> bool:
        base, end, size = seg.base_offset, seg.next_offset - 1, seg.size
        sid = RemoteLogSegmentId(tp, uuid.uuid4())
        txn_path = os.path.join(lg.dir, f"{base:020d}.txnindex")
        snapshot = os.path.join(lg.dir, f"{seg.next_offset:020d}.snapshot")
        epochs = [e for e in lg.leader_epochs.entries if e[1] <= end]
        meta = md.SegmentMetadata(
            sid,
            base,
            end,
            self.broker_id,
            seg.max_timestamp,
            int(time.time() * 1000),
            segment_epochs(epochs, base, end) or ((max(lg.leader_epochs.latest_epoch, 0), base),),
            size,
            txn_index_empty=not os.path.exists(txn_path),
        )
        self._in_flight.add(sid.id)
        try:
            await self._publish(meta)
            if not os.path.exists(snapshot):
                log.warning(
                    "%s: no producer snapshot at %d; copying segment %d with an empty one", lg.tp, end + 1, base
                )
                snapshot = os.path.join(lg.dir, f"{seg.next_offset:020d}.snapshot.empty")
                with open(snapshot, "wb") as f:
                    f.write(EMPTY_SNAPSHOT)
            seg.pin()
            try:
                data = LogSegmentData(
                    seg.log_path,
                    seg.offset_index.path,
                    seg.time_index.path,
                    txn_path if os.path.exists(txn_path) else None,
                    snapshot,
                    leader_epoch_text(epochs),
                )
                await self._call(self.rsm.copy_log_segment_data, sid, base, data)
            finally:
                seg.unpin()
            await self._publish(self._event(sid, md.SegmentState.COPY_SEGMENT_FINISHED))
        except (RemoteStorageError, OSError) as exc:
            self.stats["errors"] += 1
            log.error("%s: copying segment %d to remote storage failed: %s (retried later)", lg.tp, base, exc)
            return False
        finally:
            self._in_flight.discard(sid.id)
            if snapshot.endswith(".empty"):
                try:
                    os.unlink(snapshot)
                except OSError:
                    pass
        lg.highest_copied_offset = max(lg.highest_copied_offset, end)
        self._keep_snapshots(lg)
        self.stats["copied"] += 1
        self.stats["copied_bytes"] += size
        log.info("%s: segment %d-%d (%d bytes) copied to remote storage", lg.tp, base, end, size)
        return True

    # ------------------------------------------------------------------ orphans and deletes

    async def _delete_segment(self, segment: md.SegmentMetadata) -> bool:
        sid = segment.segment_id
        try:
            if segment.state != md.SegmentState.DELETE_SEGMENT_STARTED:
                await self._publish(self._event(sid, md.SegmentState.DELETE_SEGMENT_STARTED))
            await self._call(self.rsm.delete_log_segment_data, sid, segment.start_offset)
            await self._publish(self._event(sid, md.SegmentState.DELETE_SEGMENT_FINISHED))
        except (RemoteStorageError, OSError) as exc:
            self.stats["errors"] += 1
            log.error("%s: deleting remote segment %d failed: %s (retried later)", sid.tp, segment.start_offset, exc)
            return False
        return True

    async def clean_orphans(self, tp: TopicIdPartition | None = None) -> int:
        """Deletes the objects of copies that never finished (a crash, a failed upload)
        and finishes deletions a crash interrupted; returns how many."""
        done = 0
        for p in [tp] if tp is not None else self.cache.partitions():
            for segment in self.cache.unfinished(p):
                if segment.segment_id.id in self._in_flight:
                    continue
                if await self._delete_segment(segment):
                    done += 1
        self.stats["orphans"] += done
        return done

    # ------------------------------------------------------------------ total retention

    async def expire(self, lg: Log, tp: TopicIdPartition, now_ms: int | None = None) -> int:
        """Total retention of the remote segments (see the module docstring); returns
        how many were deleted."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        cfg = lg.config
        copied = self.cache.copied(tp)
        local_only = sum(s.size for s in lg.segments if s.base_offset > lg.highest_copied_offset)
        total = sum(s.segment_size for s in copied) + local_only
        done = 0
        for segment in copied:
            below_start = segment.end_offset < lg.log_start_offset
            expired = cfg.retention_ms >= 0 and now - segment.max_timestamp_ms > cfg.retention_ms
            oversize = cfg.retention_bytes >= 0 and total - segment.segment_size >= cfg.retention_bytes
            if not (below_start or expired or oversize):
                break
            # readers move past it first (Kafka's updateRemoteLogStartOffset)
            if lg.log_start_offset <= segment.end_offset:
                lg.log_start_offset = segment.end_offset + 1
                lg.leader_epochs.truncate_from_start(lg.log_start_offset)
            if not await self._delete_segment(segment):
                break
            total -= segment.segment_size
            done += 1
        self.stats["deleted"] += done
        if lg.log_start_offset > lg.high_watermark:
            lg.log_start_offset = lg.high_watermark
        return done

    async def delete_partition(self, tp: TopicIdPartition) -> None:
        """Removes every remote object of a deleted topic's partition."""
        now = int(time.time() * 1000)
        await self._publish(
            md.PartitionDelete(tp, self.broker_id, now, md.PartitionDeleteState.DELETE_PARTITION_MARKED)
        )
        await self._publish(
            md.PartitionDelete(tp, self.broker_id, now, md.PartitionDeleteState.DELETE_PARTITION_STARTED)
        )
        for segment in self.cache.segments(tp):
            if not await self._delete_segment(segment):
                raise RemoteStorageError(f"{tp}: remote segment {segment.start_offset} could not be deleted")
        delete_dir = getattr(self.rsm, "delete_partition", None)
        if delete_dir is not None:
            await self._call(delete_dir, tp)
        await self._publish(
            md.PartitionDelete(
                tp, self.broker_id, int(time.time() * 1000), md.PartitionDeleteState.DELETE_PARTITION_FINISHED
            )
        )

    def close(self) -> None:
        self._io.shutdown(wait=True)
        self.rsm.close()
