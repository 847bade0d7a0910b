"""Log.delete_old_segments (retention.ms, retention.bytes, log start offset) and
delete_records."""

import os

import pytest

from broker.log.log import OffsetOutOfRange

from ._support import batch, read_all

SIZE = len(batch(1))
PER_SEGMENT = 3


def _log(make_log, overrides=None, segments=4, ts=(1_000, 2_000, 3_000, 4_000, 5_000), hw="end"):
    """`segments` full segments of PER_SEGMENT one-record batches plus an active one
    holding one batch; segment i's batches carry timestamps around ts[i]."""
    cfg = {"segment.bytes": PER_SEGMENT * SIZE}
    cfg.update(overrides or {})
    lg = make_log(cfg)
    for i in range(segments):
        for j in range(PER_SEGMENT):
            lg.append_as_leader(batch(1, ts=ts[i] - (PER_SEGMENT - 1 - j)), 0)
    lg.append_as_leader(batch(1, ts=ts[segments]), 0)
    assert len(lg.segments) == segments + 1
    if hw == "end":
        lg.update_high_watermark(lg.log_end_offset)
    return lg


def _bases(lg):
    return [s.base_offset for s in lg.segments]


# ---------------------------------------------------------------- retention.ms


def test_retention_ms_deletes_segments_by_their_max_timestamp(make_log):
    lg = _log(make_log, {"retention.ms": 1_500})
    assert [s.max_timestamp for s in lg.segments] == [1_000, 2_000, 3_000, 4_000, 5_000]
    assert lg.delete_old_segments(now_ms=2_400) == []  # segment 0 is 1_400 ms old
    gone = lg.delete_old_segments(now_ms=3_501)  # 2_501 and 1_501 ms old
    assert [s.base_offset for s in gone] == [0, 3]
    assert _bases(lg) == [6, 9, 12]
    assert lg.log_start_offset == 6
    assert read_all(lg) == list(range(6, 13))


def test_retention_ms_boundary_is_strict(make_log):
    lg = _log(make_log, {"retention.ms": 1_500})
    assert lg.delete_old_segments(now_ms=2_500) == []  # exactly retention.ms old
    gone = lg.delete_old_segments(now_ms=2_501)
    assert [s.base_offset for s in gone] == [0]


def test_retention_ms_stops_at_the_first_segment_that_must_stay(make_log):
    # segment 1 is newer than segment 2: segment 2 waits although it is expired
    lg = _log(make_log, {"retention.ms": 1_000}, ts=(1_000, 9_000, 1_500, 9_500, 9_900))
    gone = lg.delete_old_segments(now_ms=5_000)
    assert [s.base_offset for s in gone] == [0]
    assert _bases(lg) == [3, 6, 9, 12]


def test_retention_ms_minus_one_keeps_everything(make_log):
    lg = _log(make_log, {"retention.ms": -1})
    assert lg.delete_old_segments(now_ms=10**15) == []
    assert lg.log_start_offset == 0


def test_retention_ms_falls_back_to_file_mtime_without_timestamps(make_log):
    lg = _log(make_log, {"retention.ms": 60_000}, ts=(-1, -1, -1, -1, -1))
    assert all(s.max_timestamp == -1 for s in lg.segments)
    now_ms = 2_000_000_000_000
    os.utime(lg.segments[0].log_path, (now_ms / 1000 - 120, now_ms / 1000 - 120))
    os.utime(lg.segments[1].log_path, (now_ms / 1000 - 30, now_ms / 1000 - 30))
    gone = lg.delete_old_segments(now_ms=now_ms)
    assert [s.base_offset for s in gone] == [0]


def test_compact_policy_skips_time_and_size_retention(make_log):
    lg = _log(make_log, {"retention.ms": 10, "retention.bytes": 0, "cleanup.policy": ["compact"]})
    assert lg.delete_old_segments(now_ms=10**13) == []
    # ... but segments below the log start offset still go
    lg.delete_records(7)
    gone = lg.delete_old_segments(now_ms=10**13)
    assert [s.base_offset for s in gone] == [0, 3]


# ---------------------------------------------------------------- retention.bytes


@pytest.mark.parametrize(
    "retention_segments, expected_bases",
    [
        (4, [0, 3, 6, 9, 12]),
        (3, [3, 6, 9, 12]),
        (1, [9, 12]),
        (0, [12]),
    ],
)
def test_retention_bytes(make_log, retention_segments, expected_bases):
    seg_bytes = PER_SEGMENT * SIZE
    # total = 4 full segments + 1 batch; keep the log within `retention_segments` segments + 1 batch
    lg = _log(make_log, {"retention.bytes": retention_segments * seg_bytes + SIZE})
    gone = lg.delete_old_segments(now_ms=5_000)
    assert _bases(lg) == expected_bases
    assert len(gone) == 4 - len(expected_bases) + 1
    assert lg.size <= max(retention_segments * seg_bytes + SIZE, lg.active.size)
    assert lg.log_start_offset == expected_bases[0]


def test_retention_bytes_deletes_a_segment_only_if_the_rest_still_reaches_the_limit(make_log):
    """Kafka: a segment goes when size - retention.bytes - segment size >= 0."""
    lg = _log(make_log)
    total = lg.size
    seg0 = lg.segments[0].size

    def with_retention(n):
        lg.update_config(lg.config.broker.log_config({"segment.bytes": PER_SEGMENT * SIZE, "retention.bytes": n}))

    with_retention(total - seg0 + 1)  # one byte short of freeing segment 0
    assert lg.delete_old_segments(now_ms=5_000) == []
    with_retention(total - seg0)
    gone = lg.delete_old_segments(now_ms=5_000)
    assert [s.base_offset for s in gone] == [0]
    assert lg.size == total - seg0


# ---------------------------------------------------------------- log start offset


def test_segments_below_the_log_start_offset_are_deleted(make_log):
    lg = _log(make_log)
    assert lg.delete_records(7) == 7
    assert lg.log_start_offset == 7
    assert _bases(lg) == [0, 3, 6, 9, 12]  # delete_records deletes nothing itself
    gone = lg.delete_old_segments(now_ms=5_000)
    assert [s.base_offset for s in gone] == [0, 3]
    assert lg.log_start_offset == 7  # not moved back to the segment base
    assert read_all(lg) == list(range(7, 13))
    with pytest.raises(OffsetOutOfRange):
        lg.read(6, 100)


def test_delete_records_bounds(make_log):
    lg = _log(make_log, hw=None)
    lg.update_high_watermark(5)
    with pytest.raises(OffsetOutOfRange):
        lg.delete_records(6)  # above the high watermark
    with pytest.raises(OffsetOutOfRange):
        lg.delete_records(-5)
    assert lg.delete_records(-1) == 5  # -1: up to the high watermark
    assert lg.delete_records(2) == 5  # never moves back


# ---------------------------------------------------------------- limits


def test_the_active_segment_is_never_deleted(make_log):
    lg = _log(make_log, {"retention.ms": 1, "retention.bytes": 0})
    gone = lg.delete_old_segments(now_ms=10**13)
    assert len(gone) == 4
    assert _bases(lg) == [12]
    assert lg.delete_old_segments(now_ms=10**13) == []
    assert lg.log_start_offset == 12
    assert lg.log_end_offset == 13


def test_nothing_above_the_high_watermark_is_deleted(make_log):
    lg = _log(make_log, {"retention.ms": 1, "retention.bytes": 0}, hw=None)
    lg.update_high_watermark(5)  # inside segment 1 [3, 6)
    gone = lg.delete_old_segments(now_ms=10**13)
    assert [s.base_offset for s in gone] == [0]
    lg.update_high_watermark(6)  # segment 1 now wholly committed
    gone = lg.delete_old_segments(now_ms=10**13)
    assert [s.base_offset for s in gone] == [3]
    assert lg.log_start_offset == 6 <= lg.high_watermark


def test_retention_moves_the_recovery_point_and_epoch_cache(make_log):
    lg = _log(make_log, {"retention.ms": 1_500})
    lg.leader_epochs.assign(1, 10)
    assert lg.recovery_point == 0  # nothing flushed (no event loop)
    gone = lg.delete_old_segments(now_ms=3_501)
    assert lg.log_start_offset == 6
    assert lg.recovery_point == 6
    assert lg.leader_epochs.entries == [(0, 6), (1, 10)]
    for seg in gone:
        assert not seg.closed


def test_returned_segments_can_be_deleted(make_log):
    lg = _log(make_log, {"retention.ms": 1_500})
    gone = lg.delete_old_segments(now_ms=3_501)
    paths = [(s.log_path, s.offset_index.path, s.time_index.path) for s in gone]
    for seg in gone:
        seg.delete()
    for group in paths:
        for p in group:
            assert not os.path.exists(p)
    assert sorted(n for n in os.listdir(lg.dir) if n.endswith(".log")) == [f"{b:020d}.log" for b in (6, 9, 12)]
    assert read_all(lg) == list(range(6, 13))
    lg.append_as_leader(batch(1), 0)
    assert read_all(lg) == list(range(6, 14))
