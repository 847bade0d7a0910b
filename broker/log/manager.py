"""All the partition logs of one broker, across its log directories (Kafka's LogManager).

Per log directory:

    meta.properties                       version=0, broker.id, cluster.id
    recovery-point-offset-checkpoint      offsets below which data is fsynced
    replication-offset-checkpoint         high watermarks
    log-start-offset-checkpoint           log start offsets
    .kafka_cleanshutdown                  present only after a clean shutdown
    <topic>-<partition>/                  one Log each

A damaged meta.properties (or a partition.metadata that cannot be rebuilt from the
metadata store's topic ids) stops the start with one line naming the file: never a fresh
cluster id on old data, never a log under an identity nobody vouches for.

Startup: the clean-shutdown marker decides whether segments above the recovery point
are re-validated; the marker is removed once the logs are loaded, so a crash at any
later point is noticed on the next start. Each dir's logs load in
num.recovery.threads.per.data.dir threads (recovery validates only what lies above each
log's recovery point). Shutdown: flush, checkpoints, close, marker.

Open files: the open-file limit is shared out as

    one per log              its active segment's .log
    inactive segments        open on demand, in the native open set, at most
                             limit - reserve - logs (set_open_segment_limit)
    the reserve              max(64, an eighth of the limit): files in use for a
                             moment (below), the process' own files, connections

Files in use for a moment are bounded by who may hold them: the LOG_IO_THREADS log-io
threads (fsync of segments, checkpoints, deletions), the event loop (a new segment's .log
and an index, a snapshot or a checkpoint file) and the log cleaner's one pass; together
at most 21. Worker threads never add to the open set: a segment they need is borrowed
for the moment (segment.pyx), so fsyncs of many segments at once cannot take the open
set past its limit. Startup refuses, in one line, log dirs holding more partitions than
the limit fits; create_logs() refuses new partitions beyond it, and creates the others
all or none.

Background work (run() on the event loop): retention every
log.retention.check.interval.ms, time/size flushes, checkpoints every few seconds.
File deletion, checkpoints and fsync run on the log-io threads.

Write failures (disk full ...): each dir has one LogDirHealth shared by its logs; the
first failure is logged once, appends answer LogStorageError (KAFKA_STORAGE_ERROR) while
reads go on, and writes resume when they succeed again. A dir where an fsync failed is
not marked as cleanly shut down.

A failed dir (Kafka's LogDirFailureChannel): any other I/O error of a dir (EIO, the dir
removed or made unreadable: log.is_dir_failure) takes it offline until a restart. Its
logs are closed and leave the manager, new logs go to the other dirs, nothing is written
there any more (no checkpoints, no clean-shutdown marker), and the listeners registered
with `on_dir_offline` (the ReplicaManager) hear which partitions it held. A dir that
cannot be used at startup (locked and read it cannot be) starts offline, as Kafka's;
when no dir is left the start fails.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import resource
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from broker.config import BrokerConfig, LogConfig
from broker.log.checkpoints import (
    CheckpointError,
    OffsetCheckpoint,
    TopicPartition,
    read_small_text,
    write_atomically,
)
from broker.log.log import (
    Log,
    LogDirHealth,
    LogStorageError,
    PartitionMetadataError,
    is_dir_failure,
    parse_partition_dir,
    partition_dir_name,
)
from broker.metrics.stats import Histogram
from broker.native import set_open_segment_limit, set_segment_allocate_ahead
from broker.uuids import random_uuid, uuid_text

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
RECOVERY_POINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
META = "meta.properties"
LOCK_FILE = ".lock"
CHECKPOINT_INTERVAL_S = 5.0

LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")

# descriptors kept for everything but partitions (connections, checkpoints, files in
# use for a moment): a share of the limit, at least MIN_RESERVED_FDS
MIN_RESERVED_FDS = 64
RESERVED_FDS_SHARE = 8
# threads for file work off the event loop (fsyncs, checkpoints, deletions). Each holds
# at most 4 descriptors at once (a borrowed .log and an index, or two directory levels of
# a partition being deleted); with the event loop's 2 and the log cleaner's 3 (a borrowed
# .log, the cleaned segment's .log, an index), files in use for a moment take at most 21
# descriptors of the reserve
LOG_IO_THREADS = 4
MIN_OPEN_INACTIVE_SEGMENTS = 16
MAPS_RESERVED = 1024  # mappings of the interpreter and its libraries


class LogDirError(RuntimeError):
    """A log directory that cannot be used (other broker's, unwritable)."""


class LogCapacityError(LogDirError):
    """More partitions than the open-file limit fits (one descriptor each)."""


class LogCreationError(LogDirError):
    """Creating partition logs failed (disk full, too many open files ...); none of the
    logs asked for were left behind."""


def open_file_limit() -> int:
    """The process' open-file limit (RLIMIT_NOFILE, soft)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_open_file_limit() -> None:
    """Raises the soft open-file limit to the hard one (as servers commonly do: the soft
    default, often 1024, is far below what a broker with many partitions needs)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                hard = int(f.read())
        except (OSError, ValueError):
            return
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        except (OSError, ValueError):
            return
        log.info("open-file limit raised from %d to %d (the hard limit)", soft, hard)


def max_map_count() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530


def reserved_fds(limit: int) -> int:
    return max(MIN_RESERVED_FDS, limit // RESERVED_FDS_SHARE)


def partition_capacity(limit: int) -> int:
    """How many partition logs an open-file limit fits."""
    return limit - reserved_fds(limit) - MIN_OPEN_INACTIVE_SEGMENTS


def capacity_problem(partitions: int, limit: int) -> str | None:
    """Why `partitions` logs do not fit the open-file limit, or None."""
    if partitions <= partition_capacity(limit):
        return None
    need = partitions + MIN_OPEN_INACTIVE_SEGMENTS + MIN_RESERVED_FDS
    while partition_capacity(need) < partitions:
        need += 1
    return (
        f"{partitions} partitions need about {need} open files (one per partition, plus "
        f"{need - partitions} for connections and files in use), but the open-file limit "
        f"(ulimit -n, RLIMIT_NOFILE) is {limit}: raise it to at least {need}"
    )


def validate_topic_name(name: str) -> str | None:
    """Kafka's topic name rules; returns the problem or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > 249:
        return f"topic name is longer than 249 characters ({len(name)})"
    if not LEGAL_TOPIC.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


class LogManager:
    def __init__(self, config: BrokerConfig, config_for: Callable[[str], LogConfig]):
        self.config = config
        self.config_for = config_for
        self.dirs = config.log_dirs
        set_segment_allocate_ahead(config["log.segment.allocate.ahead.bytes"])  # a process-wide setting
        self.logs: dict[TopicPartition, Log] = {}
        self.cluster_id: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self.loaded_cleanly: dict[str, bool] = {}
        self._locks: list[int] = []
        self._locked: set[str] = set()
        self._written: dict[str, dict[TopicPartition, int]] = {}  # checkpoint path -> content last written
        self.health = {d: LogDirHealth(d) for d in self.dirs}
        for h in self.health.values():
            h.on_failure = self._dir_failed
        #: offline log dirs (Kafka's LogManager.offlineLogDirs), each with the partitions it held
        self.offline_dirs: dict[str, list[TopicPartition]] = {}
        self._offline_listeners: list[Callable[[str, list[TopicPartition]], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._per_dir = {d: 0 for d in self.dirs}  # logs per dir (new ones go to the emptiest)
        self._max_map_count = max_map_count()
        # file work off the event loop, on LOG_IO_THREADS threads (what they hold open is budgeted)
        self._io = ThreadPoolExecutor(LOG_IO_THREADS, thread_name_prefix="log-io")
        #: the fsync time of every group commit of its logs (Kafka's LogFlushStats
        #: LogFlushRateAndTimeMs): handed to each log, kept when logs come and go
        self.flush_times = Histogram()
        from broker.log.cleaner import LogCleaner

        self.cleaner = LogCleaner(self)

    # ------------------------------------------------------------------ startup

    def lock_dirs(self) -> None:
        """Creates the log dirs (mode log.dirs.mode; a dir that exists keeps its own) and
        takes their locks (one broker process per dir). A dir that cannot be created or
        locked for an I/O error starts offline."""
        for d in self.dirs:
            if d not in self._locked and d not in self.offline_dirs:
                try:
                    os.makedirs(d, mode=self.config.log_dirs_mode, exist_ok=True)
                    self._lock(d)
                except OSError as exc:
                    self._offline_at_start(d, exc)
                    continue
                self._locked.add(d)

    @property
    def online_dirs(self) -> list[str]:
        return [d for d in self.dirs if d not in self.offline_dirs]

    def partition_count(self, d: str) -> int:
        """The partitions whose logs live in log dir `d`."""
        return self._per_dir.get(d, 0)

    def _offline_at_start(self, d: str, exc: OSError) -> None:
        if not is_dir_failure(exc):
            raise LogDirError(f"log dir {d}: {exc.strerror or exc}") from exc
        log.error(
            "log dir %s cannot be used (%s): it stays offline; its partitions are not served here",
            d,
            exc.strerror or exc,
        )
        self.health[d].offline = True
        self.health[d].error = exc
        self.offline_dirs[d] = []
        if not self.online_dirs:
            raise LogDirError(
                f"no log dir can be used ({', '.join(self.dirs)}): the last one failed with {exc.strerror or exc}"
            )

    def read_cluster_id(self) -> str | None:
        """The cluster id the dirs' meta.properties name (None: none names one yet).
        LogDirError for a dir of another broker or dirs of two clusters."""
        self.lock_dirs()
        self._check_meta(write=False)
        return self.cluster_id

    def startup(self, cluster_id: str | None = None, topic_ids: Mapping[str, uuid.UUID] | None = None) -> None:
        """Prepares the log dirs and loads every partition log found in them. A dir
        without meta.properties gets one naming `cluster_id` (default: the one the other
        dirs name, else a new one). `topic_ids` (the metadata store's, by topic name)
        rebuild a damaged partition.metadata; without them it stops the start. Raises
        LogDirError (one line) when the open-file limit cannot fit the logs."""
        self.lock_dirs()
        self._check_meta(write=False)
        if cluster_id is not None:
            if self.cluster_id is not None and self.cluster_id != cluster_id:
                raise LogDirError(
                    f"the log dirs belong to cluster {self.cluster_id}, but this broker joins cluster {cluster_id}"
                )
            self.cluster_id = cluster_id
        new_dirs = {d for d in self.online_dirs if not os.path.lexists(os.path.join(d, META))}
        self._check_meta(write=True)
        raise_open_file_limit()
        found = {}
        for d in self.online_dirs:
            try:
                found[d] = self._partition_dirs(d)
            except OSError as exc:
                self._offline_at_start(d, exc)
        problem = capacity_problem(sum(len(v) for v in found.values()), open_file_limit())
        if problem:
            raise LogCapacityError(f"the logs in {', '.join(self.dirs)} do not fit: {problem}")
        threads = self.config["num.recovery.threads.per.data.dir"]
        for d in self.online_dirs:
            clean = os.path.exists(os.path.join(d, CLEAN_SHUTDOWN))
            self.loaded_cleanly[d] = clean
            t0 = time.monotonic()
            try:
                loaded = self._load_dir(d, found[d], clean, threads, topic_ids or {})
            except OSError as exc:
                for tp in [tp for tp, lg in self.logs.items() if os.path.dirname(lg.dir) == d]:
                    lg = self._drop(tp)
                    if lg is not None:
                        _close_quietly(lg)
                self._offline_at_start(d, exc)
                continue
            segments = sum(lg.recovered[0] for lg in loaded)
            size = sum(lg.recovered[1] for lg in loaded)
            log.info(
                "loaded %d logs from %s in %.3f s, %d segments (%d bytes) at or above their recovery points "
                "validated (%s)",
                len(loaded),
                d,
                time.monotonic() - t0,
                segments,
                size,
                "new log dir" if d in new_dirs else "clean shutdown" if clean else "unclean shutdown",
            )
            # from now on a crash must be noticed at the next start
            try:
                os.unlink(os.path.join(d, CLEAN_SHUTDOWN))
            except FileNotFoundError:
                pass
        self._apply_open_limit()

    def _partition_dirs(self, d: str) -> list[tuple[TopicPartition, str]]:
        """The partition directories of log dir `d` (directories being deleted go)."""
        out = []
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if not os.path.isdir(path):
                continue
            if name.endswith("-delete"):
                self._remove_tree(path)
                continue
            tp = parse_partition_dir(name)
            if tp is not None:
                out.append((tp, path))
        return out

    def _load_dir(
        self,
        d: str,
        partitions: list[tuple[TopicPartition, str]],
        clean: bool,
        threads: int,
        topic_ids: Mapping[str, uuid.UUID],
    ) -> list[Log]:
        """Loads (and after an unclean shutdown recovers) the logs of one dir, with
        `threads` threads (Kafka's num.recovery.threads.per.data.dir)."""
        recovery = self._read_checkpoint(d, RECOVERY_POINT)
        hws = self._read_checkpoint(d, HIGH_WATERMARK)
        starts = self._read_checkpoint(d, LOG_START)
        for tp, path in partitions:
            if tp in self.logs:
                raise LogDirError(f"partition {tp} found in two log dirs ({self.logs[tp].dir}, {path})")

        def load(item: tuple[TopicPartition, str]) -> Log:
            tp, path = item
            try:
                return Log.load(
                    path,
                    tp,
                    self.config_for(tp.topic),
                    topic_id=topic_ids.get(tp.topic),
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp, 0),
                    high_watermark=hws.get(tp),
                    clean_shutdown=clean,
                )
            except PartitionMetadataError as exc:
                raise LogDirError(str(exc)) from None

        if threads <= 1 or len(partitions) <= 1:
            return [self._adopt(load(item)) for item in partitions]
        with ThreadPoolExecutor(threads, thread_name_prefix="log-recovery") as pool:
            futures = [pool.submit(load, item) for item in partitions]
            try:
                return [self._adopt(fut.result()) for fut in futures]
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise

    def _adopt(self, lg: Log) -> Log:
        d = os.path.dirname(lg.dir)
        lg.dir_health = self.health[d]
        lg.io_executor = self._io
        lg.flush_times = self.flush_times
        self.logs[lg.tp] = lg
        self._per_dir[d] += 1
        return lg

    def _drop(self, tp: TopicPartition) -> Log | None:
        lg = self.logs.pop(tp, None)
        if lg is not None:
            self._per_dir[os.path.dirname(lg.dir)] -= 1
        return lg

    # ------------------------------------------------------------------ open files

    def _apply_open_limit(self) -> None:
        """Inactive segments may keep their files open within what the open-file limit
        leaves after one descriptor per log and the reserve (and within vm.max_map_count:
        an open segment maps two indexes)."""
        limit = open_file_limit()
        by_fds = limit - reserved_fds(limit) - len(self.logs)
        by_maps = (self._max_map_count - MAPS_RESERVED) // 2 - len(self.logs)
        set_open_segment_limit(max(MIN_OPEN_INACTIVE_SEGMENTS, min(by_fds, by_maps)))

    def check_capacity(self, new_partitions: int) -> None:
        """Raises LogCapacityError unless `new_partitions` more logs fit the open-file
        limit beside the existing ones."""
        problem = capacity_problem(len(self.logs) + new_partitions, open_file_limit())
        if problem:
            raise LogCapacityError(
                f"{new_partitions} new partitions do not fit beside the {len(self.logs)} this broker hosts: {problem}"
            )

    def _check_meta(self, write: bool = True) -> None:
        """Every dir's meta.properties must name this broker and one cluster (Kafka refuses
        mixed dirs); dirs without one get it, once all existing ones were checked."""
        missing = []
        for d in self.online_dirs:
            path = os.path.join(d, META)
            try:
                if not os.path.lexists(path):
                    missing.append(path)
                    continue
                id_key, bid, cid = _read_meta(path)
            except OSError as exc:
                self._offline_at_start(d, exc)
                continue
            if bid != self.config.broker_id:
                raise LogDirError(f"log dir {d} belongs to {id_key} {bid}, this broker is {self.config.broker_id}")
            if self.cluster_id and cid != self.cluster_id:
                raise LogDirError(f"log dir {d} belongs to cluster.id {cid}, other log dirs to {self.cluster_id}")
            self.cluster_id = self.cluster_id or cid
        if not write:
            return
        if self.cluster_id is None:
            self.cluster_id = new_cluster_id()
        for path in missing:
            try:
                write_atomically(
                    path, f"#kbroker\nversion=0\nbroker.id={self.config.broker_id}\ncluster.id={self.cluster_id}\n"
                )
            except OSError as exc:
                self._offline_at_start(os.path.dirname(path), exc)

    def _read_checkpoint(self, d: str, name: str) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpoint(os.path.join(d, name)).read()
        except CheckpointError as exc:
            log.warning("%s; ignoring it", exc)
            return {}

    # ------------------------------------------------------------------ logs

    def get(self, tp: TopicPartition) -> Log | None:
        return self.logs.get(tp)

    def get_or_create(self, tp: TopicPartition, topic_id: uuid.UUID | None = None) -> Log:
        """The partition's log, created when missing. Raises ValueError for a bad topic
        name, LogCapacityError beyond the open-file limit, OSError when the files
        cannot be created."""
        existing = self.logs.get(tp)
        if existing is not None:
            if existing.topic_id is None and topic_id is not None:
                existing.assign_topic_id(topic_id)
            return existing
        problem = validate_topic_name(tp.topic)
        if problem:
            raise ValueError(problem)
        self.check_capacity(1)
        d = self._pick_dir()
        lg = Log.load(
            os.path.join(d, partition_dir_name(tp)),
            tp,
            self.config_for(tp.topic),
            topic_id=topic_id,
            clean_shutdown=True,
        )
        self._adopt(lg)
        self._apply_open_limit()
        return lg

    def create_logs(self, tps: list[TopicPartition], topic_id: uuid.UUID | None = None) -> list[Log]:
        """The logs of `tps`, creating the missing ones all or none (topic creation):
        ValueError for a bad topic name and LogCapacityError beyond the open-file limit
        before anything is created; LogCreationError when creating one fails (disk
        full, ...), after removing the logs this call created."""
        new = [tp for tp in dict.fromkeys(tps) if tp not in self.logs]
        for tp in new:
            problem = validate_topic_name(tp.topic)
            if problem:
                raise ValueError(problem)
        self.check_capacity(len(new))
        created: list[TopicPartition] = []
        try:
            for tp in new:
                self.get_or_create(tp, topic_id)
                created.append(tp)
        except (OSError, LogDirError) as exc:
            for tp in created:
                lg = self._drop(tp)
                if lg is not None:
                    lg.close()
                    lg.delete_files()
            self._apply_open_limit()
            failed = new[len(created)]
            raise LogCreationError(
                f"cannot create the log of {failed} ({exc}); none of the {len(new)} new logs were kept"
            ) from exc
        return [self.logs[tp] for tp in tps]

    def _pick_dir(self) -> str:
        dirs = self.online_dirs
        if not dirs:
            raise LogDirError("every log dir is offline")
        return min(dirs, key=lambda d: self._per_dir[d])

    # ------------------------------------------------------------------ failed dirs

    def on_dir_offline(self, fn: Callable[[str, list[TopicPartition]], None]) -> None:
        """fn(dir, partitions it held) on the event loop once a dir went offline."""
        self._offline_listeners.append(fn)

    def _dir_failed(self, d: str, exc: OSError) -> None:
        """LogDirHealth's report of a failed dir, from any thread: the dir goes offline on
        the event loop (at once without one)."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            running.call_soon(self.take_dir_offline, d)
        elif loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.take_dir_offline, d)
        else:
            self.take_dir_offline(d)

    def take_dir_offline(self, d: str) -> list[TopicPartition]:
        """Closes the logs of dir `d` and forgets them (Kafka's LogManager.handleLogDirFailure);
        returns the partitions it held. Once per dir."""
        if d in self.offline_dirs or d not in self.health:
            return []
        health = self.health[d]
        health.offline = True
        tps = sorted(tp for tp, lg in self.logs.items() if os.path.dirname(lg.dir) == d)
        self.offline_dirs[d] = tps
        for tp in tps:
            lg = self._drop(tp)
            self.cleaner.forget(tp)
            if lg is not None:
                _close_quietly(lg)
        self._apply_open_limit()
        log.error(
            "log dir %s is offline: %d partitions (%s) are no longer served from it%s",
            d,
            len(tps),
            ", ".join(map(str, tps[:10])) + (" ..." if len(tps) > 10 else ""),
            "" if self.online_dirs else "; no log dir is left",
        )
        for fn in self._offline_listeners:
            try:
                fn(d, tps)
            except Exception:
                log.exception("log dir offline listener %r failed", fn)
        return tps

    def delete(self, tp: TopicPartition) -> None:
        """Removes a partition's log: renamed to <dir>.<id>-delete at once (so a crash
        cannot bring it back), its files deleted in a worker thread."""
        lg = self._drop(tp)
        if lg is None:
            return
        self.cleaner.forget(tp)
        lg.close()
        self._apply_open_limit()
        target = f"{lg.dir}.{uuid.uuid4().hex}-delete"
        try:
            os.rename(lg.dir, target)
        except OSError:
            target = lg.dir
        self._background(self._remove_tree, target)

    def update_config(self, topic: str) -> None:
        cfg = self.config_for(topic)
        for tp, lg in self.logs.items():
            if tp.topic == topic:
                lg.update_config(cfg)

    @staticmethod
    def _remove_tree(path: str) -> None:
        import shutil

        shutil.rmtree(path, ignore_errors=True)

    def _background(self, fn: Callable[..., object], *args: Any) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            fn(*args)
            return
        loop.run_in_executor(self._io, fn, *args)

    # ------------------------------------------------------------------ periodic work

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        deleted = 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for lg in list(self.logs.values()):
            lg.producer_state.remove_expired(now)
            try:
                lg.maybe_roll_by_time()
            except LogStorageError:
                pass  # reported once by the dir's health
            gone = lg.delete_old_segments(now_ms)
            for seg in gone:
                log.info("%s: retention deletes segment %d (%d bytes)", lg.tp, seg.base_offset, seg.size)
                self._background(seg.delete)
            deleted += len(gone)
        return deleted

    def flush_dirty(self) -> None:
        for lg in self.logs.values():
            if lg.needs_flush() and not lg.flush_failed:
                lg.schedule_flush()

    def checkpoint(self, fsync: bool = True) -> None:
        """Writes the recovery points, high watermarks and log start offsets of each dir
        (a file whose content has not changed since its last write is left alone). A
        dir whose files cannot be written is reported to its health; the others go on."""
        for d in self.online_dirs:
            logs = [lg for lg in list(self.logs.values()) if os.path.dirname(lg.dir) == d]
            try:
                self._checkpoint_dir(d, logs, fsync)
            except OSError as exc:
                self.health[d].failed(exc, "writing checkpoints")

    def _checkpoint_dir(self, d: str, logs: list[Log], fsync: bool) -> None:
        for name, attr in (
            (RECOVERY_POINT, "recovery_point"),
            (HIGH_WATERMARK, "high_watermark"),
            (LOG_START, "log_start_offset"),
        ):
            values = {lg.tp: getattr(lg, attr) for lg in logs}
            path = os.path.join(d, name)
            if self._written.get(path) == values and os.path.exists(path):
                continue
            OffsetCheckpoint(path).write(values, fsync)
            self._written[path] = values
            self.health[d].succeeded()

    def start_background(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._tasks.append(
            loop.create_task(self._every(self.config["log.retention.check.interval.ms"] / 1000, self.cleanup_logs))
        )
        flush_s = min(self.config["log.flush.scheduler.interval.ms"], self.config.flush_ms, 3_600_000) / 1000
        self._tasks.append(loop.create_task(self._every(max(flush_s, 0.01), self.flush_dirty)))
        self._tasks.append(loop.create_task(self._every(CHECKPOINT_INTERVAL_S, self._checkpoint_async)))
        self.cleaner.start()

    async def _checkpoint_async(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._io, self.checkpoint)

    async def _every(self, seconds: float, fn: Callable[[], object]) -> None:
        while not self._closed:
            await asyncio.sleep(seconds)
            try:
                r = fn()
                if asyncio.iscoroutine(r):
                    await r
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))

    # ------------------------------------------------------------------ shutdown

    async def stop_background(self) -> None:
        self._closed = True
        await self.cleaner.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()

    def shutdown(self) -> None:
        """Clean shutdown: fsync every log, write the checkpoints, close, leave the marker
        (not in a dir where an fsync failed: its next start recovers it)."""
        self._closed = True
        self._io.shutdown(wait=True)  # deletions, checkpoints and fsyncs under way end
        for lg in self.logs.values():
            health = self.health[os.path.dirname(lg.dir)]
            try:
                lg.flush()
            except OSError as exc:
                health.failed(exc, f"fsync of {lg.tp}", sync=True)
            try:
                lg.producer_state.take_snapshot(lg.log_end_offset)  # reaches the disk with os.sync below
            except OSError as exc:
                health.failed(exc, f"the producer snapshot of {lg.tp}")  # a longer replay at start
        self.checkpoint()
        for lg in self.logs.values():
            lg.close()
        os.sync()  # checkpoints written without fsync (epoch truncations) reach the disk
        for d in self.dirs:
            if d in self.offline_dirs:
                log.error("log dir %s is offline: not marked as cleanly shut down", d)
                continue
            if self.health[d].sync_failed or any(
                lg.flush_failed for lg in self.logs.values() if os.path.dirname(lg.dir) == d
            ):
                log.error(
                    "log dir %s: an fsync failed; not marked as cleanly shut down, so the next start recovers it", d
                )
                continue
            try:
                with open(os.path.join(d, CLEAN_SHUTDOWN), "w"):
                    pass
            except OSError as exc:
                log.error(
                    "log dir %s: cannot write %s (%s); the next start recovers it",
                    d,
                    CLEAN_SHUTDOWN,
                    exc.strerror or exc,
                )
        self.release_locks()

    def _lock(self, d: str) -> None:
        """Kafka's <log.dir>/.lock: one broker process per log dir."""
        import fcntl

        fd = os.open(os.path.join(d, LOCK_FILE), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirError(f"log dir {d} is in use by another broker process (it holds {d}/{LOCK_FILE})") from None
        self._locks.append(fd)

    def release_locks(self) -> None:
        for fd in self._locks:
            try:
                os.close(fd)
            except OSError:
                pass  # the lock of a failed dir: its descriptor goes anyway
        self._locks.clear()
        self._locked.clear()


def _read_meta(path: str) -> tuple[str, int, str]:
    """A dir's meta.properties -> (the key naming the broker, its id, the cluster id).
    Kafka's version 0 (broker.id) or 1 (node.id, KRaft), cluster.id in both. Anything else
    is a damaged file, refused with one line naming it: taken for a fresh dir, it would
    have the broker start a new cluster on the data of another."""
    from broker.config import parse_properties

    def damaged(why: str) -> LogDirError:
        return LogDirError(
            f"{path} is damaged ({why}); refusing to start: restore it (version=0, "
            f"broker.id=N, cluster.id=ID), or move the log dir aside"
        )

    try:
        text = read_small_text(path)
    except ValueError as exc:
        raise damaged(str(exc)) from None
    props = parse_properties(text)
    version = props.get("version")
    if version is None:
        raise damaged("no version")
    if version not in ("0", "1"):
        raise damaged(f"version {version}, where 0 or 1 was expected")
    id_key = "broker.id" if version == "0" else "node.id"
    if id_key not in props:
        raise damaged(f"no {id_key}")
    if not re.fullmatch(r"[0-9]+", props[id_key]):
        raise damaged(f"{id_key} {props[id_key]!r} is not a broker id")
    cluster_id = props.get("cluster.id", "")
    if not cluster_id:
        raise damaged("no cluster.id")
    return id_key, int(props[id_key]), cluster_id


def _close_quietly(lg: Log) -> None:
    """Closes the log of a failed dir: its files may refuse even that."""
    try:
        lg.close()
    except Exception as exc:
        log.warning("%s: closing the log of a failed dir: %s", lg.tp, exc)


def new_cluster_id() -> str:
    return uuid_text(random_uuid())
