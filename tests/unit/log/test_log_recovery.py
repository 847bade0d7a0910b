"""Log.load: recovery after an unclean stop (torn tails, corrupt batches, segments after
a corruption), the recovery point contract, leftovers, epoch cache truncation."""

import logging
import os
import random
import uuid

import pytest

from broker.log.checkpoints import LeaderEpochCheckpoint
from broker.native import RecordBatch

from ._support import batch, batch_positions, read_all

SEG_BYTES = 2_000
OVERRIDES = {"segment.bytes": SEG_BYTES, "index.interval.bytes": 200}


def _build(make_log, seed, n_batches=40):
    """A log of ~4 segments of random batches (epochs 0, 1, 2 over thirds); flushed and
    closed without the clean-shutdown path. Returns {segment base: [(pos, size, base,
    last)]} parsed from the files with struct."""
    rng = random.Random(seed)
    lg = make_log(OVERRIDES)
    for i in range(n_batches):
        epoch = 3 * i // n_batches
        lg.append_as_leader(batch(rng.randint(1, 4), ts=1_000 + i, value_size=rng.randint(5, 120)), epoch)
    assert len(lg.segments) >= 3
    lg.flush()
    layout = {s.base_offset: batch_positions(s.log_path) for s in lg.segments}
    paths = {s.base_offset: s.log_path for s in lg.segments}
    end = lg.log_end_offset
    epochs = list(lg.leader_epochs.entries)
    lg.close()
    return layout, paths, end, epochs


def _all_batches(layout):
    return [b for base in sorted(layout) for b in layout[base]]


def _flip(path, pos):
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x5A]))


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def _expected_after_cut(layout, seg_base, cut_pos):
    """Offsets kept when segment `seg_base` keeps only the batches ending at or before
    cut_pos and every later segment goes."""
    kept = []
    for base in sorted(layout):
        if base > seg_base:
            break
        for pos, size, first, last in layout[base]:
            if base == seg_base and pos + size > cut_pos:
                break
            kept.extend(range(first, last + 1))
    return kept


# ---------------------------------------------------------------- torn tails


@pytest.mark.parametrize("seed", range(6))
def test_truncated_active_segment_keeps_the_valid_prefix(make_log, seed):
    layout, paths, end, _ = _build(make_log, seed)
    active = max(layout)
    size = os.path.getsize(paths[active])
    cut = random.Random(seed).randrange(0, size)
    _truncate(paths[active], cut)
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=active)
    expected = _expected_after_cut(layout, active, cut)
    assert lg.log_end_offset == (expected[-1] + 1 if expected else active)
    assert read_all(lg) == expected
    assert os.path.getsize(paths[active]) == lg.active.size
    assert lg.active.size <= cut
    # appends continue right after the recovered end
    info = lg.append_as_leader(batch(2), 3)
    assert info.base_offset == lg.log_end_offset - 2 == (expected[-1] + 1 if expected else active)


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 7, b"\x00" * 100, bytes(range(256)) * 3], ids=["7 zeros", "100 zeros", "768 bytes"]
)
def test_garbage_after_the_last_batch_is_cut(make_log, garbage):
    layout, paths, end, _ = _build(make_log, 1)
    active = max(layout)
    before = os.path.getsize(paths[active])
    with open(paths[active], "ab") as f:
        f.write(garbage)
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=active)
    assert lg.log_end_offset == end
    assert os.path.getsize(paths[active]) == before
    assert read_all(lg) == list(range(end))


# ---------------------------------------------------------------- corrupt batches


def _corrupt_random_batch(layout, paths, seg_base, rng):
    """Flips a CRC-covered byte (attributes .. end) of a random batch of a segment;
    returns that batch's position."""
    pos, size, _first, _last = rng.choice(layout[seg_base])
    _flip(paths[seg_base], pos + rng.randrange(21, size))
    return pos


@pytest.mark.parametrize("seed", range(6))
def test_corrupt_batch_in_the_active_segment_is_cut_with_everything_after(make_log, seed):
    rng = random.Random(100 + seed)
    layout, paths, end, _ = _build(make_log, seed)
    active = max(layout)
    pos = _corrupt_random_batch(layout, paths, active, rng)
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=active)
    expected = _expected_after_cut(layout, active, pos)
    assert read_all(lg) == expected
    assert lg.active.size == pos == os.path.getsize(paths[active])


@pytest.mark.parametrize("seed", range(6))
def test_corruption_in_an_earlier_segment_above_the_recovery_point_deletes_later_segments(make_log, seed):
    rng = random.Random(200 + seed)
    layout, paths, end, _ = _build(make_log, seed)
    bases = sorted(layout)
    target = bases[1]  # segment 0 lies below the recovery point
    pos = _corrupt_random_batch(layout, paths, target, rng)
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=target)
    expected = _expected_after_cut(layout, target, pos)
    assert [s.base_offset for s in lg.segments] == bases[:2]
    assert read_all(lg) == expected
    assert lg.log_end_offset == (expected[-1] + 1 if pos else target)
    for later in bases[2:]:  # the segments after the corruption are gone
        assert not os.path.exists(paths[later])
        assert not os.path.exists(paths[later][:-4] + ".index")
        assert not os.path.exists(paths[later][:-4] + ".timeindex")
    assert os.path.getsize(paths[target]) == pos
    # the truncated segment is the active one again: its indexes may grow again
    assert lg.active.active and lg.active.offset_index.max_entries == 10 * 1024 * 1024 // 8
    info = lg.append_as_leader(batch(1), 5)
    assert info.base_offset == lg.log_end_offset - 1
    assert read_all(lg)[-1] == info.base_offset


def test_corrupted_batch_length_is_cut(make_log):
    layout, paths, end, _ = _build(make_log, 3)
    active = max(layout)
    pos, size, first, last = layout[active][2]
    with open(paths[active], "r+b") as f:
        f.seek(pos + 8)
        f.write((size * 50).to_bytes(4, "big"))  # batchLength far past the file end
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=active)
    assert lg.log_end_offset == first
    assert read_all(lg) == list(range(first))


# ---------------------------------------------------------------- the recovery point contract


def _middle_batch(layout, seg_base):
    entries = layout[seg_base]
    return entries[len(entries) // 2]


@pytest.mark.parametrize("clean, recovery_point_at", [(True, "end"), (True, "zero"), (False, "end")])
def test_corruption_below_the_recovery_point_or_after_a_clean_shutdown_is_not_scanned(
    make_log, clean, recovery_point_at
):
    """Kafka's contract: flushed segments (wholly below the recovery point) and every
    segment after a clean shutdown are trusted, not CRC-checked, at load."""
    layout, paths, end, _ = _build(make_log, 4)
    first_seg = min(layout)
    pos, size, first, last = _middle_batch(layout, first_seg)
    _flip(paths[first_seg], pos + size // 2 + 10)
    rp = end if recovery_point_at == "end" else 0
    lg = make_log(OVERRIDES, clean_shutdown=clean, recovery_point=rp)
    assert lg.log_end_offset == end
    assert [s.base_offset for s in lg.segments] == sorted(layout)
    assert read_all(lg) == list(range(end))
    # the damaged batch is served as stored (consumers detect it by its CRC)
    data = lg.read_bytes(first, 1 << 20, max_offset=end)
    assert not RecordBatch(data).is_valid()


@pytest.mark.parametrize("where", ["segment start", "inside the segment"])
def test_the_same_corruption_above_the_recovery_point_is_detected(make_log, where):
    layout, paths, end, _ = _build(make_log, 4)
    first_seg = min(layout)
    pos, size, first, last = _middle_batch(layout, first_seg)
    _flip(paths[first_seg], pos + size // 2 + 10)
    # the recovery point at the segment's start, or inside it before the damaged batch:
    # either way the segment holds offsets at or above it and is scanned
    rp = first_seg if where == "segment start" else first - 1
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=rp)
    assert lg.log_end_offset == first
    assert [s.base_offset for s in lg.segments] == [first_seg]
    assert read_all(lg) == list(range(first))
    for later in sorted(layout)[1:]:
        assert not os.path.exists(paths[later])


@pytest.mark.parametrize("recovery_point_at", ["end", "inside the last segment"])
def test_recovery_costs_only_what_lies_above_the_recovery_point(make_log, recovery_point_at):
    """The active segment too: wholly below the recovery point (a kill -9 of a broker
    whose logs were all flushed) it is not re-validated; `recovered` says what was.
    Restart time after kill -9 followed what was once preallocated, not what was
    unflushed (issue 11 item 9)."""
    layout, paths, end, _ = _build(make_log, 6)
    last_seg = max(layout)
    pos, size, first, last = _middle_batch(layout, last_seg)
    _flip(paths[last_seg], pos + size // 2 + 10)
    rp = end if recovery_point_at == "end" else first
    last_size = os.path.getsize(paths[last_seg])
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=rp)
    if recovery_point_at == "end":
        assert lg.recovered == (0, 0)  # trusted, as earlier segments are
        assert lg.log_end_offset == end
    else:
        assert lg.recovered == (1, last_size)  # the last segment only: damage found
        assert lg.log_end_offset == first
    lg.close()


def test_recovery_point_after_load(make_log):
    """After a clean shutdown the whole log is flushed: the recovery point is the log end.
    After an unclean one, recovery validated data that may still sit in the page cache
    only, so the recovery point stays where it was (Kafka's LogLoader): advancing it
    would let a later crash skip recovery of unflushed data."""
    layout, paths, end, _ = _build(make_log, 5)
    bases = sorted(layout)
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=bases[1])
    assert lg.log_end_offset == end
    assert lg.recovery_point == bases[1]
    lg.flush()
    assert lg.recovery_point == end
    lg.close()
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=end + 100)
    assert lg.recovery_point == end  # never above the log end
    lg.close()
    lg = make_log(OVERRIDES, clean_shutdown=True, recovery_point=0)
    assert lg.recovery_point == end


def test_load_clamps_log_start_and_high_watermark(make_log):
    layout, paths, end, _ = _build(make_log, 6)
    lg = make_log(OVERRIDES, clean_shutdown=True, log_start_offset=5, high_watermark=end + 50)
    assert lg.log_start_offset == 5
    assert lg.high_watermark == end
    lg.close()
    lg = make_log(OVERRIDES, clean_shutdown=True, log_start_offset=end + 50, high_watermark=2)
    assert lg.log_start_offset == end
    assert lg.high_watermark == end  # never below the log start
    lg.close()
    lg = make_log(OVERRIDES, clean_shutdown=True, log_start_offset=3, high_watermark=1)
    assert (lg.log_start_offset, lg.high_watermark) == (3, 3)


def test_a_fresh_log_starts_at_the_log_start_offset(make_log):
    lg = make_log(log_start_offset=42)
    assert (lg.log_start_offset, lg.log_end_offset) == (42, 42)
    assert lg.active.base_offset == 42
    assert os.path.exists(os.path.join(lg.dir, "00000000000000000042.log"))
    assert lg.append_as_leader(batch(1), 0).base_offset == 42


# ---------------------------------------------------------------- leader epochs


def test_leader_epoch_cache_is_truncated_with_the_log(make_log):
    layout, paths, end, epochs = _build(make_log, 7)
    assert [e for e, _ in epochs] == [0, 1, 2]
    epoch2_start = epochs[2][1]
    # cut the log inside epoch 1: epoch 2 must go from the cache and its checkpoint
    batches = _all_batches(layout)
    victim = next(b for b in batches if epochs[1][1] < b[2] < epoch2_start)
    seg_base = max(b for b in layout if b <= victim[2])
    _flip(paths[seg_base], victim[0] + 30)
    lg = make_log(OVERRIDES, clean_shutdown=False, recovery_point=0)
    assert lg.log_end_offset == victim[2]
    assert lg.leader_epochs.entries == epochs[:2]
    assert LeaderEpochCheckpoint(os.path.join(lg.dir, "leader-epoch-checkpoint")).read() == epochs[:2]
    assert lg.leader_epochs.latest_epoch == 1


def test_corrupt_leader_epoch_checkpoint_is_rebuilt_from_the_batches(make_log):
    # not started afresh (issue 16): an empty history would skip truncation as a follower
    layout, paths, end, epochs = _build(make_log, 8)
    path = os.path.join(os.path.dirname(paths[0]), "leader-epoch-checkpoint")
    with open(path, "w") as f:
        f.write("0\nthree\n")
    lg = make_log(OVERRIDES, clean_shutdown=True)
    assert lg.leader_epochs.entries == epochs
    assert LeaderEpochCheckpoint(path).read() == epochs
    assert lg.log_end_offset == end


# ---------------------------------------------------------------- indexes and leftovers


def test_garbage_index_is_rebuilt(make_log):
    layout, paths, end, _ = _build(make_log, 9)
    active = max(layout)
    index_path = paths[active][:-4] + ".index"
    with open(index_path, "r+b") as f:
        f.write(b"\xff" * 64)  # offsets and positions out of range
    lg = make_log(OVERRIDES, clean_shutdown=True)
    assert lg.log_end_offset == end
    assert read_all(lg) == list(range(end))
    for first in (b[2] for b in layout[active]):
        assert lg.active.translate_offset(first)[0] == next(p for p, _, f, _ in layout[active] if f == first)


@pytest.mark.parametrize("suffix, entry, why", [(".index", 8, "offset index"), (".timeindex", 12, "time index")])
def test_a_rebuilt_index_is_logged_once_naming_the_file(make_log, caplog, suffix, entry, why):
    layout, paths, end, _ = _build(make_log, 12)
    lg = make_log(OVERRIDES, clean_shutdown=True)  # an intact log: no word of rebuilding
    lg.close()
    base = min(layout)
    index_path = paths[base][:-4] + suffix
    size = os.path.getsize(index_path)
    assert size >= 2 * entry
    with open(index_path, "r+b") as f:
        f.seek(size - entry)
        f.write(b"\0" * entry)  # a last entry a crash left unwritten
    with caplog.at_level(logging.INFO, logger="broker.log"):
        lg = make_log(OVERRIDES, clean_shutdown=True)
    assert lg.log_end_offset == end
    lines = [r.getMessage() for r in caplog.records if "rebuilt" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert index_path in lines[0] and why in lines[0] and f"segment {base}" in lines[0]
    assert "bytes cut" not in lines[0]  # the log itself was whole


def test_leftover_files_are_removed_at_load(make_log):
    layout, paths, end, _ = _build(make_log, 10)
    d = os.path.dirname(paths[0])
    leftovers = [
        "00000000000000000000.log.deleted",
        "00000000000000000000.index.swap",
        "00000000000000000000.log.cleaned",
        "something.tmp",
        "00000000000099999999.index",
        "00000000000099999999.timeindex",
    ]
    for name in leftovers:
        with open(os.path.join(d, name), "wb") as f:
            f.write(b"x" * 16)
    lg = make_log(OVERRIDES, clean_shutdown=True)
    for name in leftovers:
        assert not os.path.exists(os.path.join(d, name)), name
    assert lg.log_end_offset == end
    assert [s.base_offset for s in lg.segments] == sorted(layout)


def test_topic_id_is_kept_in_partition_metadata(make_log):
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    lg = make_log(topic_id=tid)
    lg.close()
    with open(os.path.join(lg.dir, "partition.metadata")) as f:
        text = f.read()
    assert text.startswith("version: 0\ntopic_id: ")
    again = make_log()
    assert again.topic_id == tid
