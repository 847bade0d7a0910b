"""Log compaction for topics with cleanup.policy=compact (Kafka's LogCleaner).

A pass over one log:

    cleanable range   every inactive segment (never the active one), below the last
                      stable offset (so no open transaction), older than
                      min.compaction.lag.ms; oldest first
    dirty section     the part of it from the cleaner checkpoint (first dirty offset) on
    1. offset map     key -> latest offset over the dirty section (native OffsetMap; a
                      full map ends this pass early, the next pass continues); the
                      batches of aborted transactions (the log's aborted-transaction
                      index) do not count, as in Kafka: an aborted write never supersedes
                      a committed one (it stays, and read_committed readers skip it)
    2. filter         each group of consecutive segments (<= segment.bytes together) is
                      rewritten keeping the latest record per key and dropping tombstones
                      older than delete.retention.ms that an earlier pass already kept
                      once; offsets never change (native filter_batches)
    3. swap           new files written in <partition>/.cleaner-tmp/, moved in as
                      <base>.log.swap (+ .index.swap, .timeindex.swap), old segments
                      deleted, .swap renamed to the final names, segments reopened

Crash safety: Log.load completes an interrupted swap (a .swap file replaces every old
segment whose base offset falls inside it) and discards .cleaner-tmp/. The cleaner
checkpoint (`cleaner-offset-checkpoint` per log dir, Kafka's name and format) records
the first dirty offset of each log.

Threading: the map and the rewrite run in a worker thread on inactive segments only;
the swap runs on the event loop, after checking no segment of the group went away
meanwhile (retention); a changed log aborts the pass.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker._native.compaction import OffsetMap, filter_batches
from broker.log.checkpoints import CheckpointError, OffsetCheckpoint, TopicPartition
from broker.log.log import INT32_MAX, Log
from broker.native import Segment, iter_batches, segment_file_name

if TYPE_CHECKING:
    from broker.log.manager import LogManager

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-offset-checkpoint"
TMP_DIR = ".cleaner-tmp"
SWAP = ".swap"
READ_CHUNK = 16 * 1024 * 1024
DEFAULT_MAP_ENTRIES = 4 * 1024 * 1024  # in 8M slots of 24 bytes: up to 192 MiB, touched as it fills


@dataclass
class CleanResult:
    tp: TopicPartition
    bytes_before: int
    bytes_after: int
    records_kept: int
    records_removed: int
    first_dirty: int
    next_dirty: int


#: what a compaction pass built in its worker thread: ([(old segments, new .log path)],
#: next dirty offset, records kept, records removed)
_Built = tuple[list[tuple[list[Segment], str]], int, int, int]


def read_batches_in_chunks(seg: Segment) -> Iterator[tuple[bytes, int]]:
    """Yields (bytes of whole batches, offset after the last of them) over a segment, in
    chunks (a batch larger than the chunk size comes on its own)."""
    pos = 0
    while pos < seg.size:
        chunk = seg.read_bytes(pos, READ_CHUNK)
        it = iter_batches(chunk)
        end = -1
        for batch in it:
            end = batch.next_offset
        used = it.bytes_consumed
        if used == 0:
            size = 12 + int.from_bytes(chunk[8:12], "big", signed=True)
            if size <= len(chunk) or size < 61:
                raise ValueError(f"{seg.log_path}: corrupt batch at byte {pos}")
            chunk = seg.read_bytes(pos, size)
            used = size
            end = next(iter_batches(chunk)).next_offset
        yield chunk[:used], end
        pos += used


def _aborted_ranges(lg: Log) -> dict[int, list[tuple[int, int]]]:
    """producer id -> [(first offset, marker offset)] of the log's aborted transactions
    (a copy, for the worker thread)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for e in lg.txn_index.entries:
        out.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
    return out


def _committed_runs(
    chunk: bytes, end: int, aborted: dict[int, list[tuple[int, int]]] | None
) -> Iterator[tuple[bytes | memoryview, int]]:
    """The chunk's batches minus those of aborted transactions, as runs of consecutive
    batches: (bytes, offset after the run). Headers only; the chunk itself when nothing of
    it is aborted."""
    if not aborted:
        yield chunk, end
        return
    mv = memoryview(chunk)
    start = -1
    run_end = -1
    for b in iter_batches(mv):
        ranges = aborted.get(b.producer_id) if b.is_transactional and not b.is_control else None
        if ranges and any(first <= b.base_offset <= last for first, last in ranges):
            if start >= 0:
                yield mv[start : b.position], run_end
                start = -1
            continue
        if start < 0:
            start = b.position
        run_end = b.next_offset
    if start >= 0:
        yield mv[start:], run_end


def complete_swaps(directory: str) -> None:
    """Finishes a compaction swap a crash interrupted (called by Log.load first)."""
    tmp = os.path.join(directory, TMP_DIR)
    if os.path.isdir(tmp):
        shutil.rmtree(tmp, ignore_errors=True)
    names = os.listdir(directory)
    for name in sorted(n for n in names if n.endswith(".log" + SWAP)):
        base = int(name[:20])
        path = os.path.join(directory, name)
        end = base
        with open(path, "rb") as f:
            data = f.read()
        for batch in iter_batches(data):
            end = batch.next_offset
        # the swap replaces every old segment whose base offset lies within it
        for other in os.listdir(directory):
            stem, _, suffix = other.partition(".")
            if len(stem) == 20 and stem.isdigit() and suffix in ("log", "index", "timeindex"):
                if base <= int(stem) < max(end, base + 1):
                    os.unlink(os.path.join(directory, other))
        for suffix in (".log", ".index", ".timeindex"):
            src = os.path.join(directory, segment_file_name(base, suffix) + SWAP)
            if os.path.exists(src):
                os.replace(src, os.path.join(directory, segment_file_name(base, suffix)))
        log.info("%s: completed an interrupted compaction swap of segment %d", directory, base)
    # index swaps without a log swap are leftovers of a finished swap
    for name in os.listdir(directory):
        if name.endswith(SWAP):
            os.unlink(os.path.join(directory, name))


class LogCleaner:
    def __init__(self, manager: LogManager, map_entries: int = DEFAULT_MAP_ENTRIES) -> None:
        self.manager = manager
        self.config = manager.config
        self.map_entries = map_entries
        self.first_dirty: dict[TopicPartition, int] = {}
        for d in manager.dirs:
            try:
                self.first_dirty.update(OffsetCheckpoint(os.path.join(d, CHECKPOINT)).read())
            except CheckpointError as exc:
                log.warning("%s; compaction restarts from each log start", exc)
            except OSError:
                pass  # a failed dir: the log manager's start takes it offline
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.passes = 0

    # ------------------------------------------------------------------ scheduling

    def start(self) -> None:
        if self.config["log.cleaner.enable"]:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        while not self._closed:
            backoff = self.config["log.cleaner.backoff.ms"] / 1000  # a dynamic config: read each pass
            try:
                cleaned = await self.clean_once()
            except Exception:
                log.exception("log cleaner pass failed")
                cleaned = None
            if cleaned is None:
                await asyncio.sleep(backoff)

    def cleanable(self, lg: Log, now_ms: int) -> list[Segment]:
        """Inactive segments below the last stable offset (Kafka's firstUncleanableOffset:
        nothing of an open transaction) and older than the lag, oldest first."""
        lag = lg.config["min.compaction.lag.ms"]
        out = []
        limit = lg.last_stable_offset
        for seg in lg.segments[:-1]:
            if seg.next_offset > limit:
                break
            if lag > 0 and seg.max_timestamp >= 0 and now_ms - seg.max_timestamp < lag:
                break
            out.append(seg)
        return out

    def dirty_ratio(self, lg: Log, segments: list[Segment]) -> float:
        total = sum(s.size for s in segments)
        if total == 0:
            return 0.0
        first_dirty = self.first_dirty.get(lg.tp, 0)
        dirty = sum(s.size for s in segments if s.next_offset > first_dirty)
        return float(dirty / total)

    async def clean_once(self, now_ms: int | None = None, force: bool = False) -> CleanResult | None:
        """Cleans the log with the highest dirty ratio above its min.cleanable.dirty.ratio
        (or, with force, the dirtiest compacted log at all). None when none qualifies."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        best = None
        for lg in list(self.manager.logs.values()):
            if lg.closed or not lg.config.compact:
                continue
            segs = self.cleanable(lg, now_ms)
            if not segs:
                continue
            ratio = self.dirty_ratio(lg, segs)
            threshold = 0.0 if force else lg.config["min.cleanable.dirty.ratio"]
            if ratio > threshold and (best is None or ratio > best[0]):
                best = (ratio, lg, segs)
        if best is None:
            return None
        return await self.clean(best[1], best[2], now_ms)

    # ------------------------------------------------------------------ one pass

    async def clean(self, lg: Log, segments: list[Segment], now_ms: int) -> CleanResult | None:
        loop = asyncio.get_running_loop()
        first_dirty = max(self.first_dirty.get(lg.tp, 0), lg.log_start_offset)
        horizon = now_ms - lg.config["delete.retention.ms"]
        try:
            plan = await loop.run_in_executor(
                None, self._build, lg, segments, first_dirty, horizon, _aborted_ranges(lg)
            )
        except (ValueError, OSError) as exc:
            log.warning("%s: compaction pass abandoned: %s", lg.tp, exc)
            return None
        if plan is None:
            return None
        groups, stop, kept, removed = plan
        # swap on the loop: the log must still hold every segment we rewrote
        current = {id(s) for s in lg.segments[:-1]}
        if lg.closed or any(id(old) not in current for olds, _ in groups for old in olds):
            log.info("%s: log changed during compaction; pass discarded", lg.tp)
            for _, tmp in groups:
                shutil.rmtree(os.path.dirname(tmp), ignore_errors=True)
            return None
        before = sum(s.size for olds, _ in groups for s in olds)
        after = 0
        for olds, tmp_log in groups:
            after += self._swap(lg, olds, tmp_log)
        shutil.rmtree(os.path.join(lg.dir, TMP_DIR), ignore_errors=True)
        self.first_dirty[lg.tp] = stop
        self._write_checkpoints()
        self.passes += 1
        log.info(
            "%s: compacted offsets up to %d: %d -> %d bytes, %d records kept, %d removed",
            lg.tp,
            stop,
            before,
            after,
            kept,
            removed,
        )
        return CleanResult(lg.tp, before, after, kept, removed, first_dirty, stop)

    def _build(
        self,
        lg: Log,
        segments: list[Segment],
        first_dirty: int,
        horizon: int,
        aborted: dict[int, list[tuple[int, int]]] | None = None,
    ) -> _Built | None:
        """Worker thread: offset map over the dirty section, then the rewritten groups in
        the temp dir. Returns ([(old segments, new .log path)], next dirty offset, kept,
        removed) or None when there is nothing to do."""
        offset_map = OffsetMap(self.map_entries)
        stop = first_dirty
        full = False
        for seg in segments:
            if seg.next_offset <= first_dirty:
                continue
            for chunk, end in read_batches_in_chunks(seg):
                for run, run_end in _committed_runs(chunk, end, aborted):
                    nxt = offset_map.add_batches(run, first_dirty)
                    stop = max(stop, nxt)
                    if nxt < run_end:  # the map filled up inside this run
                        full = True
                        break
                if full:
                    break
                stop = max(stop, end)
            if full:
                break
            stop = max(stop, seg.next_offset)
        if stop <= first_dirty:
            return None
        # clean every segment below `stop`, merging neighbours up to segment.bytes
        to_clean = [s for s in segments if s.base_offset < stop]
        groups: list[list[Segment]] = []
        limit = lg.config.segment_bytes
        for seg in to_clean:
            if (
                groups
                and sum(s.size for s in groups[-1]) + seg.size <= limit
                and seg.next_offset - 1 - groups[-1][0].base_offset <= INT32_MAX
            ):
                groups[-1].append(seg)
            else:
                groups.append([seg])
        tmp = os.path.join(lg.dir, TMP_DIR)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        out = []
        kept = removed = 0
        started = time.monotonic()
        read = 0
        for i, group in enumerate(groups, 1):
            base = group[0].base_offset
            new = Segment(
                tmp, base, index_interval_bytes=lg.config.index_interval_bytes, max_index_size=lg.config.max_index_size
            )
            try:
                for seg in group:
                    for chunk, _ in read_batches_in_chunks(seg):
                        data, k, r = filter_batches(chunk, offset_map, horizon, first_dirty)
                        kept += k
                        removed += r
                        if data:
                            new.append(data)
                new.roll()
                new.flush()
                path = new.log_path
            finally:
                new.close()
            out.append((group, path))
            read += sum(s.size for s in group)
            if len(groups) > 1:  # progress of a pass over several segments
                elapsed = max(time.monotonic() - started, 1e-6)
                log.info(
                    "%s: compacting segment group %d of %d (base offset %d): %.1f MB read, %.1f MB/s",
                    lg.tp,
                    i,
                    len(groups),
                    base,
                    read / 1e6,
                    read / 1e6 / elapsed,
                )
        return out, stop, kept, removed

    def _swap(self, lg: Log, olds: list[Segment], tmp_log: str) -> int:
        """Replaces `olds` in the log by the cleaned segment (loop thread). Returns its size."""
        base = olds[0].base_offset
        d = lg.dir
        tmp_dir = os.path.dirname(tmp_log)
        for suffix in (".index", ".timeindex", ".log"):  # the .log last: it marks the swap
            os.replace(
                os.path.join(tmp_dir, segment_file_name(base, suffix)),
                os.path.join(d, segment_file_name(base, suffix) + SWAP),
            )
        _fsync_dir(d)
        for seg in olds:
            seg.delete()
        for suffix in (".index", ".timeindex", ".log"):
            os.replace(
                os.path.join(d, segment_file_name(base, suffix) + SWAP),
                os.path.join(d, segment_file_name(base, suffix)),
            )
        _fsync_dir(d)
        new = Segment(
            d, base, index_interval_bytes=lg.config.index_interval_bytes, max_index_size=lg.config.max_index_size
        )
        i = next(i for i, s in enumerate(lg.segments) if s is olds[0])
        if new.size == 0 and i > 0:
            # compacted to nothing: no need for an empty file (reads of its offsets go on
            # to the next segment); the first segment stays, it anchors the log start
            new.delete()
            del lg.segments[i : i + len(olds)]
            del lg._bases[i : i + len(olds)]
            if lg.txn_index.entries:
                lg.txn_index.rewrite(lg._bases)
            return 0
        lg.segments[i : i + len(olds)] = [new]
        lg._bases[i : i + len(olds)] = [base]
        if lg.txn_index.entries:
            # the merged segments' aborted transactions move into the new one's file
            lg.txn_index.rewrite(lg._bases)
        size: int = new.size
        return size

    def _write_checkpoints(self) -> None:
        for d in self.manager.online_dirs:
            entries = {
                tp: off
                for tp, off in self.first_dirty.items()
                if tp in self.manager.logs and os.path.dirname(self.manager.logs[tp].dir) == d
            }
            try:
                OffsetCheckpoint(os.path.join(d, CHECKPOINT)).write(entries)
            except OSError as exc:
                self.manager.health[d].failed(exc, "writing the cleaner checkpoint")

    def forget(self, tp: TopicPartition) -> None:
        self.first_dirty.pop(tp, None)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
