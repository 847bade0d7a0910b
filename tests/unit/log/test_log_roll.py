"""Segment rolls: segment.bytes, segment.ms, full indexes, offset overflow; file layout."""

import os
import time as real_time
import types

import pytest

import broker.log.log as log_module
from broker.native import BatchBuilder

from ._support import batch, fill, read_all, segment_files

SIZE = len(batch(1))


def _fake_clock(monkeypatch, offset_s: float):
    """Shifts the log module's wall clock by offset_s (segments record their real
    creation time; the log compares it with its own clock)."""
    fake = types.SimpleNamespace(time=lambda: real_time.time() + offset_s, monotonic=real_time.monotonic)
    monkeypatch.setattr(log_module, "time", fake)


# ---------------------------------------------------------------- segment.bytes


@pytest.mark.parametrize("segment_bytes, per_segment", [(3 * SIZE, 3), (3 * SIZE - 1, 2), (3 * SIZE + SIZE - 1, 3)])
def test_roll_on_segment_bytes(make_log, segment_bytes, per_segment):
    lg = make_log({"segment.bytes": segment_bytes})
    fill(lg, 10)
    bases = [s.base_offset for s in lg.segments]
    assert bases == list(range(0, 10, per_segment))
    for seg in lg.segments:
        assert seg.size <= segment_bytes
    assert read_all(lg) == list(range(10))


def test_a_batch_bigger_than_segment_bytes_goes_into_an_empty_segment(make_log):
    lg = make_log({"segment.bytes": 100})
    fill(lg, 1, value_size=10)
    big = batch(1, value_size=500)
    info = lg.append_as_leader(big, 0)
    assert [s.base_offset for s in lg.segments] == [0, 1]
    assert lg.active.size == len(big)
    assert info.base_offset == 1
    fill(lg, 1, value_size=10)  # and the next one rolls again
    assert [s.base_offset for s in lg.segments] == [0, 1, 2]


def test_multi_batch_request_is_not_split_across_segments(make_log):
    lg = make_log({"segment.bytes": 5 * SIZE})
    fill(lg, 3)
    lg.append_as_leader(bytearray().join(batch(1) for _ in range(3)), 0)
    assert [s.base_offset for s in lg.segments] == [0, 3]
    assert lg.segments[1].next_offset == 6


# ---------------------------------------------------------------- segment.ms


def test_roll_on_segment_ms_uses_first_batch_and_incoming_timestamps(make_log):
    lg = make_log({"segment.ms": 1_000})
    lg.append_as_leader(batch(2, ts=10_000), 0)  # first batch max timestamp 10_001
    assert lg.active.first_batch_timestamp == 10_001
    lg.append_as_leader(batch(1, ts=10_500), 0)
    lg.append_as_leader(batch(1, ts=11_001), 0)  # exactly segment.ms later: no roll
    assert len(lg.segments) == 1
    lg.append_as_leader(batch(1, ts=5_000), 0)  # older timestamps never roll
    assert len(lg.segments) == 1
    lg.append_as_leader(batch(1, ts=11_002), 0)  # more than segment.ms: roll
    assert [s.base_offset for s in lg.segments] == [0, 5]
    assert lg.active.first_batch_timestamp == 11_002
    # the incoming request's max timestamp counts, not its first record's
    lg.append_as_leader(batch(3, ts=12_000), 0)  # max 12_002 - 11_002 = 1_000: stays
    assert len(lg.segments) == 2
    lg.append_as_leader(batch(3, ts=12_001), 0)  # max 12_003: rolls
    assert [s.base_offset for s in lg.segments] == [0, 5, 9]


def test_roll_on_segment_ms_ignores_wall_clock_when_timestamps_known(make_log, monkeypatch):
    lg = make_log({"segment.ms": 1_000})
    lg.append_as_leader(batch(1, ts=10_000), 0)
    _fake_clock(monkeypatch, 3_600)  # an hour later by the wall clock
    lg.append_as_leader(batch(1, ts=10_100), 0)
    assert len(lg.segments) == 1


def test_roll_on_segment_ms_falls_back_to_creation_time(make_log, monkeypatch):
    lg = make_log({"segment.ms": 60_000})
    lg.append_as_leader(batch(1, ts=-1), 0)  # no timestamp: creation time counts
    assert lg.active.first_batch_timestamp == -1
    lg.append_as_leader(batch(1, ts=-1), 0)
    assert len(lg.segments) == 1
    _fake_clock(monkeypatch, 61)
    lg.append_as_leader(batch(1, ts=-1), 0)
    assert [s.base_offset for s in lg.segments] == [0, 2]
    # a known first timestamp with an unknown incoming one also uses the creation time
    lg2 = make_log({"segment.ms": 60_000}, directory=lg.dir + "-other")
    monkeypatch.undo()
    lg2.append_as_leader(batch(1, ts=1_000), 0)
    lg2.append_as_leader(batch(1, ts=-1), 0)
    assert len(lg2.segments) == 1
    _fake_clock(monkeypatch, 61)
    lg2.append_as_leader(batch(1, ts=-1), 0)
    assert len(lg2.segments) == 2


def test_maybe_roll_by_time_rolls_idle_non_empty_segments_only(make_log, monkeypatch):
    lg = make_log({"segment.ms": 60_000})
    lg.maybe_roll_by_time()
    assert len(lg.segments) == 1
    _fake_clock(monkeypatch, 120)
    lg.maybe_roll_by_time()  # empty: never rolled
    assert len(lg.segments) == 1
    monkeypatch.undo()
    fill(lg, 2)
    lg.maybe_roll_by_time()
    assert len(lg.segments) == 1
    _fake_clock(monkeypatch, 120)
    lg.maybe_roll_by_time()
    assert [s.base_offset for s in lg.segments] == [0, 2]
    assert lg.active.size == 0


# ---------------------------------------------------------------- full indexes


def test_roll_when_the_offset_index_is_full(make_log):
    # index.interval.bytes=0: an index entry for every batch after the first; 3 entries fit
    lg = make_log({"segment.index.bytes": 24, "index.interval.bytes": 0})
    fill(lg, 12, ts_step=1)
    assert len(lg.segments) > 1
    for seg in lg.segments[:-1]:
        assert seg.offset_index.is_full or seg.time_index.is_full
    assert read_all(lg) == list(range(12))
    for prev, seg in zip(lg.segments, lg.segments[1:]):
        assert seg.base_offset == prev.next_offset


def test_roll_when_the_time_index_is_full(make_log):
    # room for 4 offset entries but only 2 time entries (12 bytes each)
    lg = make_log({"segment.index.bytes": 32, "index.interval.bytes": 0})
    fill(lg, 10, ts_step=10)
    assert len(lg.segments) > 1
    for seg in lg.segments[:-1]:
        assert seg.time_index.entries == 2
        assert seg.offset_index.entries < 32 // 8  # the offset index still had room
    assert read_all(lg) == list(range(10))


# ---------------------------------------------------------------- file layout


def test_rolled_indexes_are_trimmed_and_the_active_ones_may_grow(make_log):
    lg = make_log({"segment.bytes": 6 * SIZE, "segment.index.bytes": 4096, "index.interval.bytes": 100})
    fill(lg, 20, ts_step=5)
    assert len(lg.segments) == 4
    for seg in lg.segments[:-1]:
        assert seg.offset_index.entries > 0
        assert os.path.getsize(seg.offset_index.path) == 8 * seg.offset_index.entries
        assert os.path.getsize(seg.time_index.path) == 12 * seg.time_index.entries
        # the rolled segment's last time entry is its max timestamp (Kafka's onBecomeInactive)
        assert seg.time_index.last_entry == (seg.max_timestamp, seg.offset_of_max_timestamp)
    # the active segment's indexes hold their entries only (nothing preallocated), and
    # may grow to segment.index.bytes
    active = lg.active
    assert (active.offset_index.max_entries, active.time_index.max_entries) == (4096 // 8, 4096 // 12)
    written = active.offset_index.entries - active.offset_index.pending_entries
    assert os.path.getsize(active.offset_index.path) == 8 * written


def test_default_active_index_capacity_is_segment_index_bytes(make_log):
    lg = make_log()
    fill(lg, 1)
    assert lg.active.offset_index.max_entries == 10 * 1024 * 1024 // 8
    assert os.path.getsize(lg.active.offset_index.path) == 0


def test_segment_files_are_named_by_20_digit_base_offsets(make_log):
    lg = make_log({"segment.bytes": 2 * SIZE})
    fill(lg, 7)
    expected = []
    for base in (0, 2, 4, 6):
        expected += [f"{base:020d}.index", f"{base:020d}.log", f"{base:020d}.timeindex"]
    assert segment_files(lg.dir) == sorted(expected)
    assert os.path.basename(lg.segments[1].log_path) == "00000000000000000002.log"


def test_roll_then_reopen_keeps_every_segment(make_log):
    lg = make_log({"segment.bytes": 2 * SIZE})
    fill(lg, 7)
    lg.flush()
    lg.close()
    again = make_log({"segment.bytes": 2 * SIZE}, clean_shutdown=True)
    assert [s.base_offset for s in again.segments] == [0, 2, 4, 6]
    assert again.log_end_offset == 7
    assert read_all(again) == list(range(7))
    # the reopened active segment is active again: its indexes may grow
    assert again.active.active and again.active.offset_index.max_entries == 10 * 1024 * 1024 // 8
    assert all(not s.active for s in again.segments[:-1])


# ---------------------------------------------------------------- offset overflow


def _follower_batch(base_offset, n=1):
    b = BatchBuilder(base_offset=base_offset, partition_leader_epoch=0)
    for i in range(n):
        b.append(1_000 + i, b"k", b"v")
    return b.build()


def test_follower_offsets_beyond_int32_of_the_segment_base_roll_at_the_batch_offset(make_log):
    """Offsets in a segment are int32 relative to its base. A follower of a compacted
    topic can receive a batch far beyond the active segment's base: Kafka rolls a new
    segment based at that batch's offset."""
    lg = make_log()
    lg.append_as_follower(_follower_batch(0, 2))
    far = 2**31 + 10
    assert lg.append_as_follower(_follower_batch(far, 3)) == far + 3
    assert [s.base_offset for s in lg.segments] == [0, far]
    assert read_all(lg) == [0, 1, far, far + 1, far + 2]
    # an empty active segment too: the batch gets a segment of its own
    lg2 = make_log(directory=lg.dir + "-empty")
    assert lg2.append_as_follower(_follower_batch(far, 2)) == far + 2
    assert lg2.active.base_offset == far
    assert read_all(lg2, start=0) == [far, far + 1]


def test_roll_of_an_empty_active_segment_keeps_it(make_log):
    lg = make_log()
    seg = lg.active
    assert lg.roll() is seg
    assert len(lg.segments) == 1
    fill(lg, 2)
    assert lg.roll().base_offset == 2
    assert lg.roll() is lg.active
    assert [s.base_offset for s in lg.segments] == [0, 2]
    fill(lg, 1)
    assert read_all(lg) == [0, 1, 2]
