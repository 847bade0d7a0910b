"""Log.truncate_to (a follower diverging from its leader)."""

import os

import pytest

from ._support import batch, batch_ranges, batches, fill, read_all

SIZE = len(batch(1))


def _log(make_log, n=13, epochs=None):
    """n one-record batches, PER segment 3 -> segments 0, 3, 6, 9, 12."""
    lg = make_log({"segment.bytes": 3 * SIZE})
    for i in range(n):
        epoch = 0 if epochs is None else epochs(i)
        lg.append_as_leader(batch(1, ts=1_000 + i), epoch)
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def test_truncate_across_segment_boundaries(make_log):
    lg = _log(make_log)
    assert [s.base_offset for s in lg.segments] == [0, 3, 6, 9, 12]
    gone = [s.log_path for s in lg.segments[3:]]
    lg.truncate_to(7)
    assert lg.log_end_offset == 7
    assert [s.base_offset for s in lg.segments] == [0, 3, 6]
    for path in gone:
        assert not os.path.exists(path)
        assert not os.path.exists(path[:-4] + ".index")
    assert read_all(lg) == list(range(7))
    # the surviving last segment is the active one again: growing indexes, appendable
    assert lg.active.active and lg.active.offset_index.max_entries == 10 * 1024 * 1024 // 8
    assert lg.append_as_leader(batch(1), 0).base_offset == 7
    assert read_all(lg) == list(range(8))


def test_truncate_to_a_segment_base_offset(make_log):
    lg = _log(make_log)
    lg.truncate_to(6)
    assert lg.log_end_offset == 6
    assert all(s.base_offset < 6 for s in lg.segments)
    assert not os.path.exists(os.path.join(lg.dir, "00000000000000000009.log"))
    fill(lg, 4)
    assert read_all(lg) == list(range(10))
    assert os.path.exists(os.path.join(lg.dir, "00000000000000000006.log"))


def test_truncate_to_the_middle_of_a_batch_removes_the_whole_batch(make_log):
    lg = make_log()
    lg.append_as_leader(batches([3, 3, 3]), 0)  # [0-2] [3-5] [6-8]
    lg.update_high_watermark(9)
    lg.truncate_to(4)
    assert lg.log_end_offset == 3  # Kafka drops the batch holding 4
    assert lg.high_watermark == 3
    info = lg.append_as_leader(batch(2), 0)
    assert (info.base_offset, info.last_offset) == (3, 4)
    data = lg.read_bytes(0, 1 << 20, max_offset=lg.log_end_offset)
    assert batch_ranges(data) == [(0, 2), (3, 4)]


def test_truncate_to_zero(make_log):
    lg = _log(make_log)
    lg.truncate_to(0)
    assert (lg.log_start_offset, lg.high_watermark, lg.recovery_point, lg.log_end_offset) == (0, 0, 0, 0)
    assert len(lg.segments) == 1 and lg.active.size == 0 and lg.active.base_offset == 0
    assert sorted(n for n in os.listdir(lg.dir) if n.endswith(".log")) == ["00000000000000000000.log"]
    assert lg.read(0, 100) is None
    assert lg.append_as_leader(batch(1), 1).base_offset == 0
    assert lg.leader_epochs.entries == [(1, 0)]


def test_truncate_at_or_beyond_the_log_end_is_a_no_op(make_log):
    lg = _log(make_log)
    sizes = [s.size for s in lg.segments]
    lg.truncate_to(13)
    lg.truncate_to(100)
    assert [s.size for s in lg.segments] == sizes
    assert lg.log_end_offset == 13


def test_truncate_clamps_high_watermark_recovery_point_and_epochs(make_log):
    lg = _log(make_log, epochs=lambda i: 0 if i < 5 else (1 if i < 9 else 2))
    assert lg.leader_epochs.entries == [(0, 0), (1, 5), (2, 9)]
    lg.flush()
    assert lg.recovery_point == 13
    lg.truncate_to(8)
    assert (lg.high_watermark, lg.recovery_point, lg.log_end_offset) == (8, 8, 8)
    assert lg.leader_epochs.entries == [(0, 0), (1, 5)]
    lg.truncate_to(5)
    assert lg.leader_epochs.entries == [(0, 0)]


def test_truncate_below_the_log_start_starts_the_log_afresh(make_log):
    lg = _log(make_log)
    lg.delete_records(6)
    lg.delete_old_segments(now_ms=0)
    assert lg.segments[0].base_offset == 6
    lg.truncate_to(4)
    assert (lg.log_start_offset, lg.log_end_offset) == (4, 4)
    assert [s.base_offset for s in lg.segments] == [4]
    assert lg.append_as_leader(batch(1), 0).base_offset == 4
    assert read_all(lg) == [4]


@pytest.mark.parametrize("target", [0, 1, 5, 6, 11, 12])
def test_truncated_log_reloads_identically(make_log, target):
    lg = _log(make_log)
    lg.truncate_to(target)
    lg.flush()
    lg.close()
    again = make_log({"segment.bytes": 3 * SIZE}, clean_shutdown=False, recovery_point=0)
    assert again.log_end_offset == target
    assert read_all(again) == list(range(target))
    assert again.append_as_leader(batch(1), 0).base_offset == target
