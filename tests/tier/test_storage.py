"""The filesystem remote storage manager (broker/tier/storage.py): Kafka's LocalTieredStorage
layout, whole objects only (temp + rename), byte-range fetches, idempotent deletes, the
manager chosen by remote.log.storage.manager.class.name with clear refusals."""

from __future__ import annotations

import os

import pytest

from broker.config import ConfigError
from broker.log.checkpoints import LeaderEpochCheckpoint
from broker.tier.storage import (
    FileSystemStorageManager,
    IndexType,
    LogSegmentData,
    RemoteResourceNotFound,
    RemoteStorageError,
    storage_manager,
)
from broker.uuids import uuid_text

from ._support import TIP, TOPIC_ID, fill, make_log, segment_id


def segment_data(lg, i: int = 0) -> LogSegmentData:
    seg = lg.segments[i]
    # any producer snapshot will do here: what is copied is the file
    snap = os.path.join(lg.dir, f"{lg.producer_state.snapshot_offsets()[-1]:020d}.snapshot")
    return LogSegmentData(
        seg.log_path,
        seg.offset_index.path,
        seg.time_index.path,
        os.path.join(lg.dir, f"{seg.base_offset:020d}.txnindex"),
        snap,
        b"0\n1\n0 0\n",
    )


@pytest.fixture
def log_with_segments(tmp_path):
    lg = make_log(tmp_path / "logs" / "tiered-0")
    fill(lg, 120)
    assert len(lg.segments) >= 3
    yield lg
    lg.close()


def test_a_copied_segment_is_laid_out_as_kafkas_local_tiered_storage(tmp_path, log_with_segments):
    lg = log_with_segments
    rsm = FileSystemStorageManager(str(tmp_path / "remote"))
    sid = segment_id(7)
    seg = lg.segments[0]
    lg.segments[0].flush()
    rsm.copy_log_segment_data(sid, seg.base_offset, segment_data(lg))
    pdir = tmp_path / "remote" / "kafka-tiered-storage" / f"tiered-0-{uuid_text(TOPIC_ID)}"
    prefix = f"{seg.base_offset:020d}-{uuid_text(sid.id)}"
    # no transaction index: the segment has no aborted transaction (Kafka's is optional too)
    assert sorted(os.listdir(pdir)) == sorted(
        prefix + s for s in (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint")
    )
    with open(seg.log_path, "rb") as f:
        local = f.read(seg.size)
    assert (pdir / f"{prefix}.log").read_bytes() == local
    assert rsm.segment_size(sid, 0) == seg.size
    # byte ranges, end inclusive and clipped to the object
    assert rsm.fetch_log_segment(sid, 0, 0, 99) == local[:100]
    assert rsm.fetch_log_segment(sid, 0, 100, 10**9) == local[100:]
    assert rsm.fetch_index(sid, 0, IndexType.LEADER_EPOCH) == b"0\n1\n0 0\n"
    with open(seg.offset_index.path, "rb") as f:
        assert rsm.fetch_index(sid, 0, IndexType.OFFSET) == f.read()
    with pytest.raises(RemoteResourceNotFound):
        rsm.fetch_index(sid, 0, IndexType.TRANSACTION)
    # Kafka's own reader of its checkpoint format takes the leader epochs object
    epochs_path = pdir / f"{prefix}.leader_epoch_checkpoint"
    assert LeaderEpochCheckpoint(str(epochs_path)).read() == [(0, 0)]


def test_a_failed_copy_leaves_no_object_and_delete_removes_every_leftover(tmp_path, log_with_segments):
    lg = log_with_segments
    rsm = FileSystemStorageManager(str(tmp_path / "remote"))
    sid = segment_id(1)
    data = segment_data(lg)
    broken = LogSegmentData(data.log_segment, data.offset_index, data.time_index, None, str(tmp_path / "gone"), b"")
    with pytest.raises(RemoteStorageError, match="gone"):
        rsm.copy_log_segment_data(sid, 0, broken)
    names = rsm.listing(TIP)
    assert not any(".tmp-" in n for n in names)  # the failed object's temp file went
    assert not any(n.endswith(".log") for n in names)  # the segment is written last
    # a crash mid-copy leaves temp files: the segment's delete takes them too
    pdir = rsm.partition_dir(TIP)
    open(os.path.join(pdir, f"{0:020d}-{uuid_text(sid.id)}.log.tmp-{'0' * 32}"), "wb").close()
    other = segment_id(2)
    rsm.copy_log_segment_data(other, 0, data)
    rsm.delete_log_segment_data(sid, 0)
    assert all(uuid_text(other.id) in n for n in rsm.listing(TIP))
    rsm.delete_log_segment_data(sid, 0)  # again: nothing there is no error
    with pytest.raises(RemoteResourceNotFound):
        rsm.fetch_log_segment(sid, 0, 0, 10)
    rsm.delete_partition(TIP)
    assert rsm.listing(TIP) == []


def test_the_manager_is_chosen_by_kafkas_class_name(tmp_path):
    assert isinstance(storage_manager("filesystem", {"dir": str(tmp_path)}), FileSystemStorageManager)
    kafka_name = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
    assert isinstance(storage_manager(kafka_name, {"dir": str(tmp_path)}), FileSystemStorageManager)
    for name, settings, message in (
        (None, {}, "remote.log.storage.manager.class.name: must be set"),
        ("filesystem", {}, "rsm.config.dir: the filesystem remote storage manager needs a directory"),
        ("filesystem", {"dir": "relative/dir"}, "is not an absolute path"),
        ("s3", {}, "s3: the S3 remote storage manager is not available in this kbroker yet; use filesystem"),
        ("io.aiven.kafka.tieredstorage.RemoteStorageManager", {}, "kbroker loads no Java plugins"),
    ):
        with pytest.raises(ConfigError) as info:
            storage_manager(name, settings)
        assert message in str(info.value)
