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
later point is noticed on the next start. Shutdown: flush, checkpoints, close, marker.

Background work (run() on the event loop): retention every
log.retention.check.interval.ms, time/size flushes, checkpoints every few seconds.
File deletion and fsync run in worker threads.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import uuid
from typing import Callable, Mapping

from broker.config import BrokerConfig, LogConfig
from broker.log.checkpoints import CheckpointError, OffsetCheckpoint, TopicPartition, write_atomically
from broker.log.log import Log, PartitionMetadataError, parse_partition_dir, partition_dir_name

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
RECOVERY_POINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK = "replication-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
META = "meta.properties"
LOCK_FILE = ".lock"
CHECKPOINT_INTERVAL_S = 5.0

LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


class LogDirError(RuntimeError):
    """A log directory that cannot be used (other broker's, unwritable)."""


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
        self.logs: dict[TopicPartition, Log] = {}
        self.cluster_id: str | None = None
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self.loaded_cleanly: dict[str, bool] = {}
        self._locks: list[int] = []
        self._locked: set[str] = set()
        self._written: dict[str, dict] = {}          # checkpoint path -> content last written
        from broker.log.cleaner import LogCleaner
        self.cleaner = LogCleaner(self)

    # ------------------------------------------------------------------ startup

    def lock_dirs(self) -> None:
        """Creates the log dirs and takes their locks (one broker process per dir)."""
        for d in self.dirs:
            if d not in self._locked:
                os.makedirs(d, exist_ok=True)
                self._lock(d)
                self._locked.add(d)

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
        rebuild a damaged partition.metadata; without them it stops the start."""
        self.lock_dirs()
        self._check_meta(write=False)
        if cluster_id is not None:
            if self.cluster_id is not None and self.cluster_id != cluster_id:
                raise LogDirError(f"the log dirs belong to cluster {self.cluster_id}, "
                                  f"but this broker joins cluster {cluster_id}")
            self.cluster_id = cluster_id
        new_dirs = {d for d in self.dirs if not os.path.lexists(os.path.join(d, META))}
        self._check_meta(write=True)
        for d in self.dirs:
            clean = os.path.exists(os.path.join(d, CLEAN_SHUTDOWN))
            self.loaded_cleanly[d] = clean
            recovery = self._read_checkpoint(d, RECOVERY_POINT)
            hws = self._read_checkpoint(d, HIGH_WATERMARK)
            starts = self._read_checkpoint(d, LOG_START)
            t0 = time.monotonic()
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith("-delete"):
                    self._remove_tree(path)
                    continue
                tp = parse_partition_dir(name)
                if tp is None:
                    continue
                if tp in self.logs:
                    raise LogDirError(f"partition {tp} found in two log dirs ({self.logs[tp].dir}, {path})")
                try:
                    self.logs[tp] = Log.load(path, tp, self.config_for(tp.topic),
                                             topic_id=(topic_ids or {}).get(tp.topic),
                                             recovery_point=recovery.get(tp, 0),
                                             log_start_offset=starts.get(tp, 0),
                                             high_watermark=hws.get(tp),
                                             clean_shutdown=clean)
                except PartitionMetadataError as exc:
                    raise LogDirError(str(exc)) from None
            log.info("loaded %d logs from %s in %.3f s (%s)", len(self.logs), d, time.monotonic() - t0,
                     "new log dir" if d in new_dirs else "clean shutdown" if clean else "unclean shutdown")
            # from now on a crash must be noticed at the next start
            try:
                os.unlink(os.path.join(d, CLEAN_SHUTDOWN))
            except FileNotFoundError:
                pass

    def _check_meta(self, write: bool = True) -> None:
        """Every dir's meta.properties must name this broker and one cluster (Kafka refuses
        mixed dirs); dirs without one get it, once all existing ones were checked."""
        missing = []
        for d in self.dirs:
            path = os.path.join(d, META)
            if not os.path.lexists(path):
                missing.append(path)
                continue
            id_key, bid, cid = _read_meta(path)
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
            write_atomically(path, f"#kbroker\nversion=0\nbroker.id={self.config.broker_id}\n"
                                   f"cluster.id={self.cluster_id}\n")

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
        existing = self.logs.get(tp)
        if existing is not None:
            if existing.topic_id is None and topic_id is not None:
                existing.assign_topic_id(topic_id)
            return existing
        problem = validate_topic_name(tp.topic)
        if problem:
            raise ValueError(problem)
        d = self._pick_dir()
        lg = Log.load(os.path.join(d, partition_dir_name(tp)), tp, self.config_for(tp.topic), topic_id=topic_id,
                      clean_shutdown=True)
        self.logs[tp] = lg
        return lg

    def _pick_dir(self) -> str:
        counts = {d: 0 for d in self.dirs}
        for lg in self.logs.values():
            parent = os.path.dirname(lg.dir)
            if parent in counts:
                counts[parent] += 1
        return min(self.dirs, key=lambda d: counts[d])

    def delete(self, tp: TopicPartition) -> None:
        """Removes a partition's log: renamed to <dir>.<id>-delete at once (so a crash
        cannot bring it back), its files deleted in a worker thread."""
        lg = self.logs.pop(tp, None)
        if lg is None:
            return
        self.cleaner.forget(tp)
        lg.close()
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

    def _background(self, fn, *args) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            fn(*args)
            return
        loop.run_in_executor(None, fn, *args)

    # ------------------------------------------------------------------ periodic work

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        deleted = 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for lg in list(self.logs.values()):
            lg.producer_state.remove_expired(now)
            lg.maybe_roll_by_time()
            gone = lg.delete_old_segments(now_ms)
            for seg in gone:
                log.info("%s: retention deletes segment %d (%d bytes)", lg.tp, seg.base_offset, seg.size)
                self._background(seg.delete)
            deleted += len(gone)
        return deleted

    def flush_dirty(self) -> None:
        for lg in self.logs.values():
            if lg.needs_flush():
                lg.schedule_flush()

    def checkpoint(self, fsync: bool = True) -> None:
        """Writes the recovery points, high watermarks and log start offsets of each dir
        (a file whose content has not changed since its last write is left alone)."""
        for d in self.dirs:
            logs = [lg for lg in list(self.logs.values()) if os.path.dirname(lg.dir) == d]
            for name, attr in ((RECOVERY_POINT, "recovery_point"), (HIGH_WATERMARK, "high_watermark"),
                               (LOG_START, "log_start_offset")):
                values = {lg.tp: getattr(lg, attr) for lg in logs}
                path = os.path.join(d, name)
                if self._written.get(path) == values and os.path.exists(path):
                    continue
                OffsetCheckpoint(path).write(values, fsync)
                self._written[path] = values

    def start_background(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._every(self.config["log.retention.check.interval.ms"] / 1000,
                                                        self.cleanup_logs)))
        flush_s = min(self.config["log.flush.scheduler.interval.ms"], self.config.flush_ms, 3_600_000) / 1000
        self._tasks.append(loop.create_task(self._every(max(flush_s, 0.01), self.flush_dirty)))
        self._tasks.append(loop.create_task(self._every(CHECKPOINT_INTERVAL_S, self._checkpoint_async)))
        self.cleaner.start()

    async def _checkpoint_async(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.checkpoint)

    async def _every(self, seconds: float, fn) -> None:
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
        """Clean shutdown: fsync every log, write the checkpoints, close, leave the marker."""
        self._closed = True
        for lg in self.logs.values():
            lg.flush()
            lg.producer_state.take_snapshot(lg.log_end_offset)   # reaches the disk with os.sync below
        self.checkpoint()
        for lg in self.logs.values():
            lg.close()
        os.sync()           # checkpoints written without fsync (leader epochs) reach the disk
        for d in self.dirs:
            with open(os.path.join(d, CLEAN_SHUTDOWN), "w"):
                pass
        self.release_locks()

    def _lock(self, d: str) -> None:
        """Kafka's <log.dir>/.lock: one broker process per log dir."""
        import fcntl
        fd = os.open(os.path.join(d, LOCK_FILE), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirError(f"log dir {d} is in use by another broker process (it holds {d}/{LOCK_FILE})") \
                from None
        self._locks.append(fd)

    def release_locks(self) -> None:
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()
        self._locked.clear()


def _read_meta(path: str) -> tuple[str, int, str]:
    """A dir's meta.properties -> (the key naming the broker, its id, the cluster id).
    Kafka's version 0 (broker.id) or 1 (node.id, KRaft), cluster.id in both. Anything else
    is a damaged file, refused with one line naming it: taken for a fresh dir, it would
    have the broker start a new cluster on the data of another."""
    from broker.config import parse_properties

    def damaged(why: str) -> LogDirError:
        return LogDirError(f"{path} is damaged ({why}); refusing to start: restore it (version=0, "
                           f"broker.id=N, cluster.id=ID), or move the log dir aside")

    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise damaged(f"cannot read it: {exc.strerror}") from None
    if not raw.strip():
        raise damaged("empty")
    try:
        props = parse_properties(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise damaged("not UTF-8 text") from None
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


def new_cluster_id() -> str:
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
