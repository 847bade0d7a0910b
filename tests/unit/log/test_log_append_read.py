"""Log.append_as_leader / append_as_follower / read: offsets, read limits, FileSlice."""

import os
import random
import struct

import pytest

from broker.log.log import FileSlice, OffsetOutOfRange, RecordTooLarge
from broker.native import BatchBuilder, CorruptRecordError, RecordBatch, iter_batches

from ._support import batch, batch_ranges, batches, fill, offsets_of, read_all


def _slice_bytes(s: FileSlice) -> bytes:
    try:
        return s.read()
    finally:
        s.close()


# ---------------------------------------------------------------- append


def test_offsets_are_dense_across_many_appends(make_log):
    rng = random.Random(7)
    lg = make_log({"segment.bytes": 4_000})
    expected_next = 0
    for _ in range(120):
        n = rng.randint(1, 6)
        info = lg.append_as_leader(batch(n, value_size=rng.randint(0, 80)), 0)
        assert info.base_offset == expected_next
        assert info.last_offset == expected_next + n - 1
        assert info.record_count == n
        expected_next += n
    assert lg.log_end_offset == expected_next
    assert len(lg.segments) > 3  # the appends crossed segments
    # segments are contiguous: each starts where the previous one ends
    for prev, seg in zip(lg.segments, lg.segments[1:]):
        assert seg.base_offset == prev.next_offset
    assert read_all(lg) == list(range(expected_next))


def test_multi_batch_request_gets_consecutive_offsets(make_log):
    lg = make_log()
    info = lg.append_as_leader(batches([3, 1, 4]), 0)
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 7, 8)
    info = lg.append_as_leader(batches([2, 5]), 0)
    assert (info.base_offset, info.last_offset, info.record_count) == (8, 14, 7)
    lg.update_high_watermark(lg.log_end_offset)
    data = _slice_bytes(lg.read(0, 1 << 20))
    assert batch_ranges(data) == [(0, 2), (3, 3), (4, 7), (8, 9), (10, 14)]
    # stored batches keep a valid CRC after the in-place offset rewrite
    assert all(b.is_valid() for b in iter_batches(data))


def test_append_info_reports_max_timestamp_size_and_log_start(make_log):
    lg = make_log()
    req = batch(4, ts=5_000)
    info = lg.append_as_leader(req, 0)
    assert info.max_timestamp == 5_003
    assert info.size == len(req)
    assert info.log_append_time == -1
    assert info.log_start_offset == 0


def test_read_only_input_buffer_is_accepted(make_log):
    lg = make_log()
    data = bytes(batch(2))
    info = lg.append_as_leader(data, 0)
    assert (info.base_offset, info.last_offset) == (0, 1)
    info = lg.append_as_leader(data, 0)  # the caller's bytes were not needed
    assert (info.base_offset, info.last_offset) == (2, 3)
    assert read_all(lg) == [0, 1, 2, 3]


def test_batch_over_max_message_bytes_is_refused_and_nothing_appended(make_log):
    lg = make_log({"max.message.bytes": 200})
    lg.append_as_leader(batch(1, value_size=10), 0)
    with pytest.raises(RecordTooLarge):
        lg.append_as_leader(batches([1, 1]) + batch(1, value_size=500), 0)
    assert lg.log_end_offset == 1
    assert lg.active.size == len(batch(1, value_size=10))


@pytest.mark.parametrize("damage", ["crc", "partial", "empty", "magic"])
def test_corrupt_produce_data_is_refused_and_nothing_appended(make_log, damage):
    lg = make_log()
    fill(lg, 2)
    before = (lg.log_end_offset, lg.active.size)
    data = batches([2, 3])
    if damage == "crc":
        data[-1] ^= 0xFF  # inside the second batch's records
    elif damage == "partial":
        data = data[:-5]
    elif damage == "empty":
        data = bytearray()
    elif damage == "magic":
        data[16] = 1
    with pytest.raises(CorruptRecordError):
        lg.append_as_leader(data, 0)
    assert (lg.log_end_offset, lg.active.size) == before


def test_leader_epochs_are_stamped_and_cached(make_log):
    lg = make_log()
    fill(lg, 2, epoch=0)
    fill(lg, 3, epoch=4)
    fill(lg, 1, epoch=4)
    assert lg.leader_epochs.entries == [(0, 0), (4, 2)]
    lg.update_high_watermark(lg.log_end_offset)
    data = _slice_bytes(lg.read(0, 1 << 20))
    assert [b.partition_leader_epoch for b in iter_batches(data)] == [0, 0, 4, 4, 4, 4]
    assert lg.leader_epochs.end_offset_for(0, lg.log_end_offset) == (0, 2)
    assert lg.leader_epochs.end_offset_for(4, lg.log_end_offset) == (4, 6)
    assert lg.leader_epochs.end_offset_for(2, lg.log_end_offset) == (0, 2)
    # the cache is persisted (Kafka's leader-epoch-checkpoint format)
    with open(os.path.join(lg.dir, "leader-epoch-checkpoint")) as f:
        assert f.read().split("\n") == ["0", "2", "0 0", "4 2", ""]


def test_log_append_time_rewrites_timestamps_with_valid_crc(make_log):
    lg = make_log({"message.timestamp.type": "LogAppendTime"})
    info = lg.append_as_leader(batch(3, ts=1_000), 0)
    assert info.log_append_time > 1_000_000_000_000  # wall-clock milliseconds
    assert info.max_timestamp == info.log_append_time
    lg.update_high_watermark(lg.log_end_offset)
    (b,) = list(iter_batches(_slice_bytes(lg.read(0, 1 << 20))))
    assert b.is_valid()
    assert b.timestamp_type == 1
    assert b.max_timestamp == info.log_append_time


# ---------------------------------------------------------------- follower append


def _with_offsets(counts, start):
    out = bytearray()
    off = start
    for n in counts:
        b = BatchBuilder(base_offset=off, partition_leader_epoch=3)
        for i in range(n):
            b.append(1_000 + i, b"k", b"v" * 30)
        out += b.build()
        off += n
    return out


def test_follower_append_keeps_leader_offsets_and_epochs(make_log):
    lg = make_log()
    assert lg.append_as_follower(_with_offsets([2, 3], 0)) == 5
    assert lg.append_as_follower(_with_offsets([1], 5)) == 6
    assert lg.leader_epochs.entries == [(3, 0)]
    assert read_all(lg) == list(range(6))
    with pytest.raises(ValueError):
        lg.append_as_follower(_with_offsets([1], 4))  # below the log end
    assert lg.log_end_offset == 6


def test_follower_append_ignores_a_partial_trailing_batch(make_log):
    """A leader's fetch response may end in a partial batch (it cuts at max_bytes, as
    Kafka does); the follower appends the whole batches and drops the tail."""
    lg = make_log()
    data = _with_offsets([2, 3, 4], 0)
    cut = data[:-7]
    assert lg.append_as_follower(cut) == 5
    assert lg.log_end_offset == 5
    assert read_all(lg) == list(range(5))
    assert lg.append_as_follower(data[len(_with_offsets([2, 3], 0)) :]) == 9


# ---------------------------------------------------------------- read


def _one_record_log(make_log, n=10, overrides=None):
    lg = make_log(overrides)
    fill(lg, n)
    size = len(batch(1))
    return lg, size


def test_read_respects_max_bytes(make_log):
    lg, size = _one_record_log(make_log)
    lg.update_high_watermark(lg.log_end_offset)
    s = lg.read(0, 2 * size + 10)
    assert s.length == 2 * size + 10  # a partial third batch, as Kafka sends
    data = _slice_bytes(s)
    assert offsets_of(data) == [0, 1]
    s = lg.read(3, 3 * size)
    assert offsets_of(_slice_bytes(s)) == [3, 4, 5]


def test_read_min_one_batch_returns_a_whole_first_batch_bigger_than_max_bytes(make_log):
    lg, size = _one_record_log(make_log)
    lg.update_high_watermark(lg.log_end_offset)
    s = lg.read(4, 10, min_one_batch=True)
    assert s.length == size
    assert offsets_of(_slice_bytes(s)) == [4]
    s = lg.read(4, 10, min_one_batch=False)  # Kafka: max_bytes of a partial batch
    assert s.length == 10
    assert offsets_of(_slice_bytes(s)) == []
    assert lg.read(4, 0, min_one_batch=False) is None


def test_read_from_an_offset_inside_a_batch_starts_at_that_batch(make_log):
    lg = make_log()
    lg.append_as_leader(batches([4, 4, 4]), 0)
    lg.update_high_watermark(lg.log_end_offset)
    assert batch_ranges(_slice_bytes(lg.read(6, 1 << 20))) == [(4, 7), (8, 11)]


def test_read_stops_at_the_high_watermark(make_log):
    lg, _ = _one_record_log(make_log)
    assert lg.high_watermark == 0
    assert lg.read(0, 1 << 20) is None  # nothing committed yet
    lg.update_high_watermark(5)
    assert offsets_of(_slice_bytes(lg.read(0, 1 << 20))) == [0, 1, 2, 3, 4]
    assert lg.read(5, 1 << 20) is None
    assert lg.read(8, 1 << 20) is None  # between HW and log end
    # an explicit max_offset (a follower or the log end) reads past the high watermark
    assert offsets_of(_slice_bytes(lg.read(5, 1 << 20, max_offset=lg.log_end_offset))) == [5, 6, 7, 8, 9]
    assert offsets_of(_slice_bytes(lg.read(2, 1 << 20, max_offset=4))) == [2, 3]


def test_read_max_offset_inside_a_batch_excludes_that_batch(make_log):
    lg = make_log()
    lg.append_as_leader(batches([3, 3, 3]), 0)
    assert batch_ranges(_slice_bytes(lg.read(0, 1 << 20, max_offset=4))) == [(0, 2)]
    assert lg.read(3, 1 << 20, max_offset=4) is None


def test_read_spanning_segments_returns_data_from_one_segment(make_log):
    lg, size = _one_record_log(make_log, n=12, overrides={"segment.bytes": 4 * len(batch(1))})
    lg.update_high_watermark(lg.log_end_offset)
    assert [s.base_offset for s in lg.segments] == [0, 4, 8]
    assert offsets_of(_slice_bytes(lg.read(0, 1 << 20))) == [0, 1, 2, 3]
    assert offsets_of(_slice_bytes(lg.read(2, 1 << 20))) == [2, 3]
    assert offsets_of(_slice_bytes(lg.read(4, 1 << 20))) == [4, 5, 6, 7]
    assert offsets_of(_slice_bytes(lg.read(9, 1 << 20))) == [9, 10, 11]
    assert read_all(lg) == list(range(12))


def test_read_outside_the_log_raises_offset_out_of_range(make_log):
    lg, _ = _one_record_log(make_log)
    lg.update_high_watermark(lg.log_end_offset)
    with pytest.raises(OffsetOutOfRange):
        lg.read(11, 100)
    with pytest.raises(OffsetOutOfRange):
        lg.read(-1, 100)
    assert lg.read(10, 100) is None  # exactly the log end: nothing yet
    assert lg.delete_records(4) == 4
    with pytest.raises(OffsetOutOfRange):
        lg.read(3, 100)
    assert offsets_of(_slice_bytes(lg.read(4, 1 << 20)))[0] == 4


def test_read_of_an_empty_log_at_zero_is_none(make_log):
    lg = make_log()
    assert lg.read(0, 100) is None
    assert lg.read(0, 100, max_offset=lg.log_end_offset) is None
    with pytest.raises(OffsetOutOfRange):
        lg.read(1, 100)


def test_file_slice_survives_closing_and_deleting_the_log(make_log):
    lg, size = _one_record_log(make_log, n=3)
    lg.update_high_watermark(lg.log_end_offset)
    s = lg.read(0, 1 << 20)
    seg = lg.active
    expected = seg.read_bytes(0, 3 * size)
    assert s.fd == seg.fd and seg.pins == 1  # the segment's own, pinned
    lg.close()
    assert s.read() == expected
    lg.delete_files()
    assert not os.path.exists(lg.dir)
    assert s.read() == expected
    fd = s.fd
    s.close()
    assert s.fd == -1 and seg.pins == 0
    s.close()  # idempotent
    with pytest.raises(OSError):
        os.fstat(fd)  # the last unpin closed it


def test_closing_a_slice_does_not_close_the_segment(make_log):
    lg, _ = _one_record_log(make_log, n=3)
    lg.update_high_watermark(lg.log_end_offset)
    lg.read(0, 100).close()
    assert offsets_of(_slice_bytes(lg.read(0, 1 << 20))) == [0, 1, 2]
    fill(lg, 1)
    assert lg.log_end_offset == 4


def test_read_bytes_and_offsets_via_struct(make_log):
    """Cross-check the stored bytes with struct: base offsets rewritten, lengths intact."""
    lg = make_log()
    req = batches([2, 3])
    lg.append_as_leader(bytearray(req), 0)
    data = lg.read_bytes(0, 1 << 20, max_offset=lg.log_end_offset)
    assert len(data) == len(req)
    first_len = struct.unpack_from(">i", data, 8)[0] + 12
    assert struct.unpack_from(">q", data, 0)[0] == 0
    assert struct.unpack_from(">q", data, first_len)[0] == 2
    assert RecordBatch(data, first_len).record_count == 3


# ---------------------------------------------------------------- ListOffsets


def test_offset_for_timestamp(make_log):
    from broker.log.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

    lg = make_log({"segment.bytes": 3 * len(batch(2))})
    for i in range(8):  # batch i: offsets 2i, 2i+1; ts 100i, 100i+1
        lg.append_as_leader(batch(2, ts=100 * i), 0)
    assert len(lg.segments) == 3
    lg.update_high_watermark(12)
    assert lg.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert lg.offset_for_timestamp(LATEST_TIMESTAMP) == (12, -1)
    assert lg.offset_for_timestamp(0) == (0, 0)
    assert lg.offset_for_timestamp(1) == (1, 1)
    assert lg.offset_for_timestamp(2) == (2, 100)
    assert lg.offset_for_timestamp(301) == (7, 301)  # across a segment boundary
    assert lg.offset_for_timestamp(502) is None  # offset 12 (600) is not below the high watermark
    lg.update_high_watermark(16)
    assert lg.offset_for_timestamp(502) == (12, 600)
    assert lg.offset_for_timestamp(10_000) is None
    assert lg.offset_for_timestamp(MAX_TIMESTAMP) == (15, 701)
    # the first record carrying the largest timestamp, not its batch's last offset (Kafka)
    b = BatchBuilder()
    for ts in (900, 950, 950, 940):
        b.append(ts, b"k", b"v")
    lg.append_as_leader(bytearray(b.build()), 0)  # offsets 16..19
    assert lg.offset_for_timestamp(MAX_TIMESTAMP) == (17, 950)
    lg.delete_records(5)
    assert lg.offset_for_timestamp(EARLIEST_TIMESTAMP) == (5, -1)
    assert lg.offset_for_timestamp(0) == (5, 201)  # never below the log start offset


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_compressed_batches_are_stored_as_sent_with_offsets_assigned(make_log, codec):
    lg = make_log()
    fill(lg, 1)
    b = BatchBuilder(codec)
    for i in range(20):
        b.append(2_000 + i, b"key-%d" % i, b"value " * 20)
    req = bytearray(b.build())
    info = lg.append_as_leader(bytearray(req), 0)
    assert (info.base_offset, info.last_offset, info.record_count) == (1, 20, 20)
    lg.update_high_watermark(lg.log_end_offset)
    data = _slice_bytes(lg.read(1, 1 << 20))
    assert len(data) == len(req)  # not recompressed
    assert data[61:] == req[61:]  # the compressed block is byte-identical
    (stored,) = list(iter_batches(data))
    assert stored.compression_name == codec
    assert stored.is_valid()
    assert [r.offset for r in stored.records()] == list(range(1, 21))
    assert [r.value for r in stored.records()] == [b"value " * 20] * 20
