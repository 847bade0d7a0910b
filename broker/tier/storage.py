"""Remote storage managers (Kafka's RemoteStorageManager): where copied segments live.

The interface is Kafka's, blocking (callers run it in worker threads): copy a segment's
files, fetch a byte range of its log or one of its indexes, delete them. Objects are
named by the segment's RemoteLogSegmentId (a random id per copy attempt), so a copy that
is retried never overwrites what an earlier attempt left: the metadata (metadata.py)
decides which copy is visible, and an attempt that never finished is an orphan to delete.

The filesystem manager (`remote.log.storage.manager.class.name=filesystem`, or Kafka's
`org.apache.kafka.server.log.remote.storage.LocalTieredStorage`; `rsm.config.dir=PATH`, a
mounted NAS or in tests a directory) lays the objects out as Kafka's LocalTieredStorage:

    PATH/kafka-tiered-storage/
        <topic>-<partition>-<topic id>/                       one per partition
            <start offset, 20 digits>-<segment id>.log          the segment's batches
                                                  .index        offset index
                                                  .timeindex    time index
                                                  .txnindex     aborted transactions (when any)
                                                  .snapshot     producer state at the segment's end
                                                  .leader_epoch_checkpoint   epochs up to its end

(ids in Kafka's base64 text). Each file is written to a temporary name in the same
directory, fsynced and renamed: a reader sees a whole object or none. A crash mid-copy
leaves temporary files, removed with the segment's other objects by
delete_log_segment_data.
"""

from __future__ import annotations

import abc
import enum
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.config import ConfigError
from broker.uuids import uuid_text

ROOT_DIR_NAME = "kafka-tiered-storage"
FILESYSTEM = "filesystem"
S3 = "s3"
KAFKA_LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
RSM_PREFIX = "rsm.config."


class RemoteStorageError(Exception):
    """The remote store failed or holds something unusable (Kafka's RemoteStorageException):
    a fetch served from it answers KAFKA_STORAGE_ERROR."""


class RemoteResourceNotFound(RemoteStorageError):
    """An object the metadata names is not in the store (Kafka's RemoteResourceNotFoundException)."""


class IndexType(enum.Enum):
    """Kafka's RemoteStorageManager.IndexType, with the file suffix each is stored under."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = ".leader_epoch_checkpoint"


SEGMENT_SUFFIX = ".log"


@dataclass(frozen=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{uuid_text(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RemoteLogSegmentId:
    tp: TopicIdPartition
    id: uuid.UUID


@dataclass(frozen=True)
class LogSegmentData:
    """What one copy uploads (Kafka's LogSegmentData): paths of the segment's files, and
    the leader epoch checkpoint's text up to the segment's end as bytes."""

    log_segment: str
    offset_index: str
    time_index: str
    transaction_index: str | None
    producer_snapshot: str
    leader_epoch_index: bytes


class RemoteStorageManager(abc.ABC):
    """Kafka's RemoteStorageManager, blocking. Every method raises RemoteStorageError (or
    RemoteResourceNotFound) for what the store cannot do; never a partial object."""

    @abc.abstractmethod
    def copy_log_segment_data(self, segment_id: RemoteLogSegmentId, start_offset: int, data: LogSegmentData) -> None:
        """Uploads a segment's files under `segment_id`."""

    @abc.abstractmethod
    def fetch_log_segment(self, segment_id: RemoteLogSegmentId, start_offset: int, start: int, end: int) -> bytes:
        """Bytes [start, end] (end inclusive, as Kafka's fetchLogSegment and HTTP ranges;
        clipped to the object's end) of the segment's log."""

    @abc.abstractmethod
    def segment_size(self, segment_id: RemoteLogSegmentId, start_offset: int) -> int:
        """The stored size of the segment's log (to check it against the metadata's)."""

    @abc.abstractmethod
    def fetch_index(self, segment_id: RemoteLogSegmentId, start_offset: int, index: IndexType) -> bytes:
        """One index whole; RemoteResourceNotFound when it was not copied (a segment
        without aborted transactions has no transaction index)."""

    @abc.abstractmethod
    def delete_log_segment_data(self, segment_id: RemoteLogSegmentId, start_offset: int) -> None:
        """Removes every object of the segment, and what an interrupted copy of it left;
        nothing there is no error (deletes are retried)."""

    def close(self) -> None:  # noqa: B027 - most managers hold nothing
        """Releases what the manager holds."""


def _object_prefix(start_offset: int, segment_id: RemoteLogSegmentId) -> str:
    return f"{start_offset:020d}-{uuid_text(segment_id.id)}"


def partition_dir_name(tp: TopicIdPartition) -> str:
    """Kafka's RemoteTopicPartitionDirectory name: <topic>-<partition>-<topic id>."""
    return f"{tp.topic}-{tp.partition}-{uuid_text(tp.topic_id)}"


_TEMP = re.compile(r"\.tmp-[0-9a-f]{32}$")


class FileSystemStorageManager(RemoteStorageManager):
    """Kafka's LocalTieredStorage layout under `directory` (see the module docstring)."""

    def __init__(self, directory: str):
        if not os.path.isabs(directory):
            raise ConfigError(f"{RSM_PREFIX}dir", f"{directory!r} is not an absolute path")
        self.root = os.path.join(directory, ROOT_DIR_NAME)
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{RSM_PREFIX}dir", f"cannot create {self.root}: {exc.strerror or exc}") from None

    def partition_dir(self, tp: TopicIdPartition) -> str:
        return os.path.join(self.root, partition_dir_name(tp))

    def _path(self, segment_id: RemoteLogSegmentId, start_offset: int, suffix: str) -> str:
        return os.path.join(self.partition_dir(segment_id.tp), _object_prefix(start_offset, segment_id) + suffix)

    def copy_log_segment_data(self, segment_id: RemoteLogSegmentId, start_offset: int, data: LogSegmentData) -> None:
        pdir = self.partition_dir(segment_id.tp)
        try:
            os.makedirs(pdir, exist_ok=True)
            files: list[tuple[str, str | bytes]] = [
                (IndexType.OFFSET.value, data.offset_index),
                (IndexType.TIMESTAMP.value, data.time_index),
                (IndexType.PRODUCER_SNAPSHOT.value, data.producer_snapshot),
                (IndexType.LEADER_EPOCH.value, data.leader_epoch_index),
            ]
            if data.transaction_index is not None and os.path.exists(data.transaction_index):
                files.append((IndexType.TRANSACTION.value, data.transaction_index))
            files.append((SEGMENT_SUFFIX, data.log_segment))
            for suffix, source in files:
                self._write_atomically(self._path(segment_id, start_offset, suffix), source)
            _fsync_dir(pdir)
        except OSError as exc:
            raise RemoteStorageError(f"copying segment {start_offset} of {segment_id.tp} to {pdir}: {exc}") from exc

    @staticmethod
    def _write_atomically(path: str, source: str | bytes) -> None:
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as out:
                if isinstance(source, bytes):
                    out.write(source)
                else:
                    with open(source, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            os.rename(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def _open(self, path: str, what: str) -> int:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RemoteResourceNotFound(f"{what} not found in remote storage: {path}") from None
        except OSError as exc:
            raise RemoteStorageError(f"reading {path}: {exc.strerror or exc}") from exc

    def fetch_log_segment(self, segment_id: RemoteLogSegmentId, start_offset: int, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"bad byte range [{start}, {end}]")
        path = self._path(segment_id, start_offset, SEGMENT_SUFFIX)
        fd = self._open(path, "segment")
        try:
            return os.pread(fd, end - start + 1, start)
        except OSError as exc:
            raise RemoteStorageError(f"reading {path}: {exc.strerror or exc}") from exc
        finally:
            os.close(fd)

    def segment_size(self, segment_id: RemoteLogSegmentId, start_offset: int) -> int:
        path = self._path(segment_id, start_offset, SEGMENT_SUFFIX)
        fd = self._open(path, "segment")
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def fetch_index(self, segment_id: RemoteLogSegmentId, start_offset: int, index: IndexType) -> bytes:
        path = self._path(segment_id, start_offset, index.value)
        fd = self._open(path, f"{index.name.lower()} index")
        try:
            with open(fd, "rb", closefd=False) as f:
                return f.read()
        except OSError as exc:
            raise RemoteStorageError(f"reading {path}: {exc.strerror or exc}") from exc
        finally:
            os.close(fd)

    def delete_log_segment_data(self, segment_id: RemoteLogSegmentId, start_offset: int) -> None:
        pdir = self.partition_dir(segment_id.tp)
        prefix = _object_prefix(start_offset, segment_id)
        try:
            names = os.listdir(pdir)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise RemoteStorageError(f"listing {pdir}: {exc.strerror or exc}") from exc
        try:
            for name in names:
                if name.startswith(prefix):
                    try:
                        os.unlink(os.path.join(pdir, name))
                    except FileNotFoundError:
                        pass
            _fsync_dir(pdir)
        except OSError as exc:
            raise RemoteStorageError(f"deleting segment {start_offset} of {segment_id.tp}: {exc}") from exc

    def delete_partition(self, tp: TopicIdPartition) -> None:
        """Removes the partition's directory with whatever is left in it (topic deletion)."""
        try:
            shutil.rmtree(self.partition_dir(tp))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise RemoteStorageError(f"deleting {self.partition_dir(tp)}: {exc}") from exc

    def listing(self, tp: TopicIdPartition) -> list[str]:
        """The names in the partition's directory (tests, tools)."""
        try:
            return sorted(os.listdir(self.partition_dir(tp)))
        except FileNotFoundError:
            return []


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_manager(class_name: str | None, settings: Mapping[str, str]) -> str:
    """The short name of the manager `remote.log.storage.manager.class.name` names, its
    `rsm.config.` settings (`settings`: the keys with the prefix removed) checked;
    ConfigError, one line, for what cannot be served."""
    key = "remote.log.storage.manager.class.name"
    if not class_name:
        raise ConfigError(key, "must be set when remote.log.storage.system.enable is true (filesystem or s3)")
    name = class_name.strip()
    if name in (FILESYSTEM, KAFKA_LOCAL_TIERED_STORAGE):
        directory = settings.get("dir")
        if not directory:
            raise ConfigError(f"{RSM_PREFIX}dir", "the filesystem remote storage manager needs a directory")
        if not os.path.isabs(directory):
            raise ConfigError(f"{RSM_PREFIX}dir", f"{directory!r} is not an absolute path")
        return FILESYSTEM
    if name == S3:
        raise ConfigError(key, "s3: the S3 remote storage manager is not available in this kbroker yet; use filesystem")
    raise ConfigError(
        key,
        f"{name}: kbroker loads no Java plugins; its remote storage managers are filesystem "
        f"(or {KAFKA_LOCAL_TIERED_STORAGE}) and s3",
    )


def storage_manager(class_name: str | None, settings: Mapping[str, str]) -> RemoteStorageManager:
    """The manager `remote.log.storage.manager.class.name` names, configured with the
    `rsm.config.` settings (check_manager's checks first)."""
    check_manager(class_name, settings)
    return FileSystemStorageManager(settings["dir"])
