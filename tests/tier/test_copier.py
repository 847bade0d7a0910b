"""The remote log manager (broker/tier/copier.py) and the remote reader (reader.py) on
real logs, the filesystem storage manager and __remote_log_metadata kept in kbroker logs:
copy, local retention that deletes only copied segments, reads from offset 0 across the
remote/local boundary byte-identical, total retention and DeleteRecords on remote
segments, topic deletion, damaged remote objects answered with an error, the bounded
chunk cache."""

from __future__ import annotations

import asyncio
import os

import pytest

from broker.config import BrokerConfig
from broker.log.log import OffsetInRemoteStorage, OffsetOutOfRange
from broker.native import iter_batches
from broker.tier.copier import LocalMetadataLog, RemoteLogManager
from broker.tier.metadata import SegmentState
from broker.tier.reader import RemoteLogReader
from broker.tier.storage import FileSystemStorageManager, RemoteStorageError

from ._support import TIP, all_bytes, fill, tiered_log


def read_from(lg, reader, offset: int = 0, max_bytes: int = 10_000) -> bytes:
    """What a consumer reading from `offset` gets, remote then local, batch by batch."""
    out = bytearray()
    while offset < lg.high_watermark:
        if offset < lg.local_log_start_offset:
            data = reader.read(TIP, offset, max_bytes)
        else:
            data = lg.read_bytes(offset, max_bytes)
        assert data, f"nothing at offset {offset}"
        out += data
        offset = [b.last_offset for b in iter_batches(data)][-1] + 1
    return bytes(out)


class Tier:
    def __init__(self, tmp_path, **overrides):
        self.tmp = tmp_path
        self.lg = tiered_log(tmp_path / "logs" / "tiered-0", **overrides)
        self.rsm = FileSystemStorageManager(str(tmp_path / "remote"))
        self.open_manager()

    def open_manager(self):
        self.meta = LocalMetadataLog(str(self.tmp / "meta"), BrokerConfig({"log.dir": str(self.tmp)}))
        self.rlm = RemoteLogManager(0, self.rsm, self.meta)
        self.rlm.start()
        self.rlm.attach(self.lg, TIP)
        self.reader = RemoteLogReader(self.rsm, self.rlm.cache, str(self.tmp / "chunks"), chunk_bytes=1000)

    def close(self):
        self.rlm._io.shutdown()
        self.meta.close()
        self.lg.close()


@pytest.fixture
def tier(tmp_path):
    t = Tier(tmp_path)
    yield t
    t.close()


def test_only_copied_segments_leave_the_disk_and_offset_0_reads_back_byte_identical(tier):
    lg = tier.lg
    fill(lg, 150)
    reference = all_bytes(lg)
    rolled = len(lg.segments) - 1
    assert rolled >= 4
    # local.retention.bytes=0, but nothing is copied yet: nothing goes
    assert lg.delete_old_segments() == []
    assert asyncio.run(tier.rlm.copy(tier.lg, TIP, limit=2)) == 2
    gone = lg.delete_old_segments()
    assert len(gone) == 2 and lg.log_start_offset == 0 and lg.local_log_start_offset == gone[-1].next_offset
    for seg in gone:
        seg.delete()
    assert asyncio.run(tier.rlm.copy(tier.lg, TIP)) == rolled - 2
    assert asyncio.run(tier.rlm.copy(tier.lg, TIP)) == 0  # nothing twice
    for seg in lg.delete_old_segments():
        seg.delete()
    assert len(lg.segments) == 1  # the active segment only
    with pytest.raises(OffsetInRemoteStorage):
        lg.read(0, 1000)  # never the bytes of a later offset
    assert read_from(lg, tier.reader) == reference
    assert read_from(lg, tier.reader, max_bytes=1) == reference  # one batch at a time
    # from inside a batch and a segment: the batch holding the offset first
    some = [b for b in iter_batches(reference)][37]
    data = tier.reader.read(TIP, some.base_offset + 2, 1)
    assert next(iter_batches(data)).base_offset == some.base_offset
    # every copy is one STARTED and one FINISHED record in __remote_log_metadata
    states = [r.state for r in tier.meta.records()]
    assert states.count(SegmentState.COPY_SEGMENT_STARTED) == rolled
    assert states.count(SegmentState.COPY_SEGMENT_FINISHED) == rolled
    # a restart replays the same view
    tier.meta.close()
    tier.open_manager()
    assert tier.rlm.cache.highest_copied_offset(TIP) == lg.local_log_start_offset - 1
    assert read_from(lg, tier.reader) == reference


def test_total_retention_delete_records_and_topic_deletion_remove_remote_segments(tier):
    lg = tier.lg
    fill(lg, 150)
    asyncio.run(tier.rlm.copy(lg, TIP))
    for seg in lg.delete_old_segments():
        seg.delete()
    copied = tier.rlm.cache.copied(TIP)
    # DeleteRecords into the second remote segment: the first goes, the second stays
    lg.delete_records(copied[1].start_offset + 1)
    assert asyncio.run(tier.rlm.expire(lg, TIP)) == 1
    assert [s.start_offset for s in tier.rlm.cache.copied(TIP)] == [s.start_offset for s in copied[1:]]
    assert not any(n.startswith(f"{0:020d}-") for n in tier.rsm.listing(TIP))
    with pytest.raises(OffsetOutOfRange):
        read_from(lg, tier.reader, offset=0)
    # retention.bytes: the whole log (remote and local) is kept under it, oldest first
    total = sum(s.segment_size for s in tier.rlm.cache.copied(TIP)) + lg.size
    keep = total - copied[1].segment_size - copied[2].segment_size
    lg.update_config(lg.config.broker.log_config({**lg.config.overrides, "retention.bytes": keep}))
    assert asyncio.run(tier.rlm.expire(lg, TIP)) == 2
    assert lg.log_start_offset == copied[3].start_offset
    states = [r.state for r in tier.meta.records() if hasattr(r, "segment_id")]
    assert states.count(SegmentState.DELETE_SEGMENT_FINISHED) == 3
    # retention.ms: what is older goes (every record here is from 1970)
    lg.update_config(lg.config.broker.log_config({**lg.config.overrides, "retention.ms": 1000}))
    assert asyncio.run(tier.rlm.expire(lg, TIP)) == len(copied) - 3
    assert tier.rlm.cache.copied(TIP) == [] and lg.log_start_offset == lg.local_log_start_offset
    # topic deletion: every object and the partition's directory go
    fill(lg, 60)
    asyncio.run(tier.rlm.copy(lg, TIP))
    assert tier.rsm.listing(TIP)
    asyncio.run(tier.rlm.delete_partition(TIP))
    assert not os.path.exists(tier.rsm.partition_dir(TIP)) and tier.rlm.cache.segments(TIP) == []


def _first_remote(tier):
    seg = tier.rlm.cache.copied(TIP)[0]
    prefix = os.path.join(tier.rsm.partition_dir(TIP), f"{seg.start_offset:020d}-")
    name = next(n for n in tier.rsm.listing(TIP) if n.endswith(".log") and n.startswith(os.path.basename(prefix)))
    return seg, os.path.join(tier.rsm.partition_dir(TIP), name)


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "missing", "index"])
def test_a_damaged_remote_object_is_an_error_never_wrong_bytes(tier, damage):
    lg = tier.lg
    fill(lg, 80)
    asyncio.run(tier.rlm.copy(lg, TIP))
    for seg in lg.delete_old_segments():
        seg.delete()
    seg, path = _first_remote(tier)
    if damage == "flipped byte":
        with open(path, "r+b") as f:
            f.seek(300)
            b = f.read(1)
            f.seek(300)
            f.write(bytes([b[0] ^ 0x40]))
    elif damage == "truncated":
        os.truncate(path, 500)
    elif damage == "missing":
        os.unlink(path)
    else:
        with open(path[: -len(".log")] + ".index", "ab") as f:
            f.write(b"\x00\x00\x00")
    with pytest.raises(RemoteStorageError):
        read_from(tier.lg, tier.reader, max_bytes=100_000)
    assert tier.reader.stats["errors"] == 1
    # the other segments are served still
    later = tier.rlm.cache.copied(TIP)[1]
    data = tier.reader.read(TIP, later.start_offset, 100_000)
    assert next(iter_batches(data, validate=True)).base_offset == later.start_offset


def test_the_chunk_cache_stays_within_its_bound(tmp_path):
    t = Tier(tmp_path)
    try:
        fill(t.lg, 150)
        reference = all_bytes(t.lg)
        asyncio.run(t.rlm.copy(t.lg, TIP))
        for seg in t.lg.delete_old_segments():
            seg.delete()
        t.reader = RemoteLogReader(t.rsm, t.rlm.cache, str(tmp_path / "small"), cache_bytes=3000, chunk_bytes=1000)
        assert read_from(t.lg, t.reader) == reference
        assert 0 < t.reader.cached_bytes <= 3000 and len(os.listdir(tmp_path / "small")) <= 3
        misses = t.reader.stats["chunk_misses"]
        assert read_from(t.lg, t.reader) == reference and t.reader.stats["chunk_misses"] > misses
    finally:
        t.close()


def test_an_open_transaction_holds_copies_back_and_the_abort_index_goes_with_its_segment(tier):
    from broker.log.txn_index import read_txn_index
    from broker.tier.storage import IndexType, RemoteResourceNotFound

    from ._support import batch

    lg = tier.lg
    pid = 4242

    def txn(seq: int) -> bytearray:
        from broker.native import BatchBuilder

        b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
        for j in range(3):
            b.append(2_000_000 + seq + j, None, b"t" * 200)
        return bytearray(b.build())

    fill(lg, 40)
    first_txn = lg.log_end_offset
    lg.append_as_leader(txn(0), 0)
    for i in range(40):
        lg.append_as_leader(batch(i), 0)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == first_txn
    asyncio.run(tier.rlm.copy(lg, TIP))
    # nothing at or above the open transaction's first offset is copied
    assert tier.rlm.cache.highest_copied_offset(TIP) < first_txn
    assert all(s.next_offset <= first_txn for s in lg.segments[:-1] if s.next_offset - 1 <= lg.highest_copied_offset)
    lg.append_marker_as_leader(pid, 0, 0, commit=False, leader_epoch=0)
    for i in range(40):
        lg.append_as_leader(batch(i), 0)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == lg.high_watermark
    asyncio.run(tier.rlm.copy(lg, TIP))
    copied = tier.rlm.cache.copied(TIP)
    with_abort = [s for s in copied if not s.txn_index_empty]
    (marked,) = with_abort  # the segment holding the abort's marker, and only it
    remote = tier.rsm.fetch_index(marked.segment_id, marked.start_offset, IndexType.TRANSACTION)
    local = os.path.join(lg.dir, f"{marked.start_offset:020d}.txnindex")
    assert remote == open(local, "rb").read() and read_txn_index(local)[0].producer_id == pid
    for s in copied:
        assert tier.rsm.fetch_index(s.segment_id, s.start_offset, IndexType.PRODUCER_SNAPSHOT)
        if s is not marked:
            with pytest.raises(RemoteResourceNotFound):
                tier.rsm.fetch_index(s.segment_id, s.start_offset, IndexType.TRANSACTION)


def test_segments_deleted_by_delete_records_before_their_copy_are_never_copied(tier):
    lg = tier.lg
    fill(lg, 100)
    fourth = lg.segments[3]
    lg.delete_records(fourth.base_offset + 1)  # inside the fourth segment
    gone = lg.delete_old_segments()
    assert len(gone) == 3  # wholly below the log start: they go, though never copied
    for seg in gone:
        seg.delete()
    asyncio.run(tier.rlm.copy(lg, TIP))
    copied = tier.rlm.cache.copied(TIP)
    assert copied[0].start_offset == fourth.base_offset  # partly kept: copied whole
    assert len(copied) == len(lg.segments) - 1


def test_a_tiered_log_keeps_the_snapshots_its_copies_need_until_the_manager_takes_it(tmp_path):
    """Segments rolled before the remote log manager first takes the log (a new topic
    written at once) keep their producer snapshots: each copy uploads the one at its end."""
    lg = tiered_log(tmp_path / "logs" / "tiered-0")
    try:
        fill(lg, 150)
        ends = {s.next_offset for s in lg.segments[:-1]}
        assert ends <= set(lg.producer_state.snapshot_offsets())
    finally:
        lg.close()
