"""OffsetIndex / TimeIndex against a plain-Python oracle (a list and bisect)."""

import bisect
import os
import random
import struct
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

from broker.native import CorruptIndexError, OffsetIndex, TimeIndex

OFFSET_ENTRY, TIME_ENTRY = 8, 12
# lookups search the last 8 KiB of entries first: more entries than that exercise both
WARM_OFFSET_ENTRIES, WARM_TIME_ENTRIES = 8192 // OFFSET_ENTRY, 8192 // TIME_ENTRY


class OffsetOracle:
    def __init__(self, base):
        self.base = base
        self.entries = []  # [(offset, position)]

    def lookup(self, target):
        i = bisect.bisect_right([o for o, _ in self.entries], target)
        return self.entries[i - 1] if i else (self.base, 0)

    def truncate_to(self, offset):
        self.entries = [e for e in self.entries if e[0] < offset]


class TimeOracle:
    def __init__(self, base):
        self.base = base
        self.entries = []  # [(timestamp, offset)]

    def maybe_append(self, ts, offset):
        if self.entries and ts <= self.entries[-1][0]:
            return False
        self.entries.append((ts, offset))
        return True

    def lookup(self, target):
        i = bisect.bisect_right([t for t, _ in self.entries], target)
        return self.entries[i - 1] if i else (-1, self.base)

    def truncate_to(self, offset):
        self.entries = [e for e in self.entries if e[1] < offset]


def offset_targets(rng, entries, base):
    """Targets below the first entry, on every kind of hit, between and beyond."""
    offs = [o for o, _ in entries]
    targets = [base - 1, base, -(2**63), 2**63 - 1]
    if offs:
        targets += [offs[0] - 1, offs[0], offs[-1], offs[-1] + 1, offs[-1] + 10**6]
        for _ in range(300):
            o = rng.choice(offs)
            targets += [o, o - 1, o + 1]
    return targets


def make_offset_entries(rng, base, n):
    offset, position, out = base, 0, []
    for _ in range(n):
        offset += rng.randint(1, 50)
        position += rng.randint(0, 5000)
        out.append((offset, position))
    return out


def file_size(path):
    return os.stat(path).st_size


# ------------------------------------------------------------------ OffsetIndex


@settings(max_examples=12)
@given(
    seed=st.integers(0, 2**32),
    n=st.sampled_from([0, 1, 2, 5, 700, WARM_OFFSET_ENTRIES, WARM_OFFSET_ENTRIES + 1, 3000]),
    base=st.integers(0, 2**60),
)
def test_offset_index_against_oracle(seed, n, base):
    rng = random.Random(seed)
    entries = make_offset_entries(rng, base, n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.index")
        idx = OffsetIndex(path, base, max_index_size=(n + 10) * OFFSET_ENTRY)
        oracle = OffsetOracle(base)
        for off, pos in entries:
            idx.append(off, pos)
            oracle.entries.append((off, pos))
        assert idx.entries == n
        assert idx.size_in_bytes == n * OFFSET_ENTRY
        assert idx.last_offset == (entries[-1][0] if entries else base)
        for target in offset_targets(rng, entries, base):
            assert idx.lookup(target) == oracle.lookup(target), target
        for i in rng.sample(range(n), min(n, 50)):
            assert idx.entry(i) == entries[i]
        # truncate_to at random points, checking lookups after each
        for _ in range(5):
            cut = rng.choice(
                [base, base - 1, base + 10**9] + [o + rng.choice((-1, 0, 1)) for o, _ in oracle.entries[-50:]]
            )
            idx.truncate_to(cut)
            oracle.truncate_to(cut)
            assert idx.entries == len(oracle.entries)
            assert idx.last_offset == (oracle.entries[-1][0] if oracle.entries else base)
            for target in offset_targets(rng, oracle.entries, base)[:100]:
                assert idx.lookup(target) == oracle.lookup(target), target
        # appends continue after the truncation point
        nxt = (oracle.entries[-1][0] if oracle.entries else base) + 1
        npos = (oracle.entries[-1][1] if oracle.entries else 0) + 1
        idx.append(nxt, npos)
        oracle.entries.append((nxt, npos))
        assert idx.lookup(nxt + 5) == (nxt, npos)
        idx.sanity_check()
        # trim + reopen: the entries survive, the file holds exactly them
        idx.trim()
        assert file_size(path) == len(oracle.entries) * OFFSET_ENTRY
        idx.close()
        assert idx.closed
        with OffsetIndex(path, base, max_index_size=(n + 10) * OFFSET_ENTRY, writable=False) as ro:
            assert ro.entries == len(oracle.entries)
            for target in offset_targets(rng, oracle.entries, base)[:200]:
                assert ro.lookup(target) == oracle.lookup(target)
        with OffsetIndex(path, base, max_index_size=(n + 10) * OFFSET_ENTRY) as again:
            assert again.entries == len(oracle.entries)
            assert again.last_offset == oracle.entries[-1][0]
            again.sanity_check()
            # an existing index keeps its entries as its capacity (Kafka's rule) until
            # resize(), when its segment becomes the active one; the file never grows
            # beyond its entries
            assert again.is_full
            again.resize((n + 10) * OFFSET_ENTRY)
            assert not again.is_full
            assert file_size(path) == len(oracle.entries) * OFFSET_ENTRY
            again.append(nxt + 1, npos + 1)
            assert again.lookup(nxt + 1) == (nxt + 1, npos + 1)
        assert file_size(path) == (len(oracle.entries) + 1) * OFFSET_ENTRY  # close writes


def test_offset_index_capacity_full_and_resize(tmp_path):
    path = str(tmp_path / "a.index")
    idx = OffsetIndex(path, 100, max_index_size=100)  # rounded down to 12 entries
    assert idx.max_index_size == 100
    assert file_size(path) == 0  # nothing preallocated
    assert (idx.entries, idx.max_entries, idx.is_full) == (0, 12, False)
    assert idx.lookup(500) == (100, 0)
    for i in range(12):
        idx.append(100 + i, i * 10)
    assert idx.is_full
    with pytest.raises(ValueError, match="full"):
        idx.append(200, 500)
    idx.resize(200)
    assert idx.max_entries == 25
    idx.append(200, 500)
    assert idx.lookup(10**9) == (200, 500)
    idx.resize(8)  # never below the entries
    assert idx.max_entries == 13 and idx.is_full
    assert file_size(path) == 0 and idx.pending_entries == 13
    idx.trim()
    assert file_size(path) == 13 * OFFSET_ENTRY and idx.pending_entries == 0
    idx.flush()
    idx.close()
    idx.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        idx.append(300, 1)
    for op in (
        idx.trim,
        idx.truncate,
        idx.sanity_check,
        idx.flush,
        lambda: idx.resize(100),
        lambda: idx.truncate_to(1),
    ):
        with pytest.raises(ValueError, match="closed"):
            op()


def test_offset_index_rejects_bad_appends(tmp_path):
    idx = OffsetIndex(str(tmp_path / "b.index"), 1000, max_index_size=1024)
    with pytest.raises(ValueError):
        idx.append(999, 0)  # below the base offset
    with pytest.raises(ValueError):
        idx.append(1000 + 2**31, 0)  # relative offset beyond int32
    with pytest.raises(ValueError):
        idx.append(1000, -1)  # negative position
    idx.append(1000, 0)  # rel 0 is fine as a first entry
    idx.append(1000 + 2**31 - 1, 5)
    assert idx.lookup(2**40) == (1000 + 2**31 - 1, 5)
    idx.truncate_to(1001)
    idx.append(1005, 7)
    for off in (1005, 1004, 1000):  # not strictly increasing
        with pytest.raises(ValueError):
            idx.append(off, 8)
    with pytest.raises(IndexError):
        idx.entry(2)
    with pytest.raises(IndexError):
        idx.entry(-1)
    idx.truncate()
    assert (idx.entries, idx.last_offset) == (0, 1000)
    idx.append(1000, 0)
    with pytest.raises(ValueError):
        OffsetIndex(str(tmp_path / "c.index"), 0, max_index_size=7)


def _legacy_crash_file(path, entries, preallocated):
    """An index file as versions that preallocated left it after a crash: the entries
    written, then a sparse zero tail up to the preallocated size."""
    with open(path, "wb") as f:
        f.write(entries)
        f.truncate(preallocated)


def _data_end(path):
    """Where the file's data ends as the filesystem reports it (SEEK_HOLE)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE)
    finally:
        os.close(fd)


def test_offset_index_sanity_check_catches_zero_filled_tail(tmp_path):
    """A crash of a version that preallocated left the file untrimmed: valid entries,
    then zeros. Opened again, the hole is not counted as entries (SEEK_HOLE), the zeros
    within the last page of data are, and sanity_check must refuse them."""
    path = str(tmp_path / "crash.index")
    entries = b"".join(struct.pack(">II", 1 + 3 * i, 100 * i) for i in range(10))
    _legacy_crash_file(path, entries, 10 * 1024 * 1024)
    reopened = OffsetIndex(path, 50, max_index_size=10 * 1024 * 1024)
    assert reopened.entries == _data_end(path) // OFFSET_ENTRY
    assert 10 < reopened.entries < 10 * 1024 * 1024 // OFFSET_ENTRY
    with pytest.raises(CorruptIndexError) as exc:
        reopened.sanity_check()
    assert isinstance(exc.value, ValueError)
    assert "entry 10" in str(exc.value)
    reopened.truncate()
    reopened.sanity_check()
    reopened.close()
    assert file_size(path) == 0  # the tail is gone for good
    # other corruptions: decreasing positions, and an offset below the base offset
    for entries in ([(1, 10), (2, 5)], [(-1 & 0xFFFFFFFF, 0)]):
        with open(path, "wb") as f:
            for rel, pos in entries:
                f.write(struct.pack(">II", rel, pos))
        with OffsetIndex(path, 50, writable=False) as ro:
            with pytest.raises(CorruptIndexError):
                ro.sanity_check()


def test_offset_index_read_only(tmp_path):
    path = str(tmp_path / "ro.index")
    with pytest.raises(OSError):
        OffsetIndex(path, 0, writable=False)  # missing, and not created
    with OffsetIndex(path, 0, max_index_size=800) as idx:
        for i in range(20):
            idx.append(i * 2, i * 100)
    os.chmod(path, 0o444)
    try:
        ro = OffsetIndex(path, 0, writable=False)
        assert (ro.writable, ro.entries, ro.max_entries) == (False, 20, 20)
        assert ro.lookup(7) == (6, 300)
        with pytest.raises(ValueError, match="read-only"):
            ro.append(100, 1)
        ro.sanity_check()
        ro.close()
        assert file_size(path) == 20 * OFFSET_ENTRY
    finally:
        os.chmod(path, 0o644)
    # an empty read-only index answers lookups without a mapping
    open(str(tmp_path / "empty.index"), "wb").close()
    with OffsetIndex(str(tmp_path / "empty.index"), 9, writable=False) as empty:
        assert empty.lookup(100) == (9, 0)
        assert empty.entries == 0


def test_rename_and_delete(tmp_path):
    path = str(tmp_path / "r.index")
    idx = OffsetIndex(path, 0, max_index_size=64)
    idx.append(3, 4)
    new = str(tmp_path / "renamed.index")
    idx.rename(new)
    assert idx.path == new and not os.path.exists(path)
    assert idx.lookup(3) == (3, 4)  # the mapping is still valid
    idx.delete()
    assert not os.path.exists(new)
    assert idx.closed
    idx.delete()  # idempotent


# ------------------------------------------------------------------ TimeIndex


@settings(max_examples=12)
@given(
    seed=st.integers(0, 2**32),
    n=st.sampled_from([0, 1, 3, 500, WARM_TIME_ENTRIES, WARM_TIME_ENTRIES + 1, 2500]),
    base=st.integers(0, 2**60),
)
def test_time_index_against_oracle(seed, n, base):
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.timeindex")
        idx = TimeIndex(path, base, max_index_size=(n + 10) * TIME_ENTRY)
        oracle = TimeOracle(base)
        ts, offset = rng.randint(-(10**6), 10**12), base
        for _ in range(n):
            # timestamps mostly rise but sometimes repeat or fall (not appended then)
            ts += rng.choice([rng.randint(1, 1000), 0, -rng.randint(1, 50)])
            offset += rng.randint(0, 20)
            assert idx.maybe_append(ts, offset) == oracle.maybe_append(ts, offset)
        assert idx.entries == len(oracle.entries)
        assert idx.last_entry == (oracle.entries[-1] if oracle.entries else (-1, base))
        stamps = [t for t, _ in oracle.entries]
        targets = [-(2**63), 2**63 - 1, -1, 0]
        if stamps:
            targets += [stamps[0] - 1, stamps[-1] + 1]
            for _ in range(300):
                t = rng.choice(stamps)
                targets += [t, t - 1, t + 1]
        for target in targets:
            assert idx.lookup(target) == oracle.lookup(target), target
        for i in rng.sample(range(len(stamps)), min(len(stamps), 50)):
            assert idx.entry(i) == oracle.entries[i]
        idx.sanity_check()
        for _ in range(4):
            offs = [o for _, o in oracle.entries]
            cut = rng.choice([base, base + 10**9] + [o + rng.choice((-1, 0, 1)) for o in offs[-30:]])
            idx.truncate_to(cut)
            oracle.truncate_to(cut)
            assert idx.entries == len(oracle.entries)
            assert idx.last_entry == (oracle.entries[-1] if oracle.entries else (-1, base))
            for target in targets[:200]:
                assert idx.lookup(target) == oracle.lookup(target), target
        idx.trim()
        assert file_size(path) == len(oracle.entries) * TIME_ENTRY
        idx.close()
        with TimeIndex(path, base, writable=False) as ro:
            assert ro.entries == len(oracle.entries)
            assert ro.last_entry == (oracle.entries[-1] if oracle.entries else (-1, base))
            for target in targets[:200]:
                assert ro.lookup(target) == oracle.lookup(target)


def test_time_index_rules(tmp_path):
    path = str(tmp_path / "t.timeindex")
    idx = TimeIndex(path, 10, max_index_size=3 * TIME_ENTRY + 5)
    assert idx.max_entries == 3 and file_size(path) == 0
    assert idx.last_entry == (-1, 10)
    assert idx.lookup(0) == (-1, 10)
    assert idx.maybe_append(100, 12)
    assert not idx.maybe_append(100, 13)  # same timestamp: skipped
    assert not idx.maybe_append(99, 14)  # older: skipped
    with pytest.raises(ValueError):
        idx.maybe_append(200, 11)  # offset below the last entry's
    assert idx.maybe_append(101, 12)  # equal offsets are allowed
    with pytest.raises(ValueError):
        idx.maybe_append(300, 9)  # below the base offset
    with pytest.raises(ValueError):
        idx.maybe_append(300, 10 + 2**31)  # relative offset beyond int32
    assert idx.maybe_append(300, 20)
    assert idx.is_full
    with pytest.raises(ValueError, match="full"):
        idx.maybe_append(400, 21)
    assert idx.maybe_append(400, 21, skip_full_check=True) is False
    assert idx.lookup(10**15) == (300, 20)
    assert idx.lookup(100) == (100, 12)
    assert idx.lookup(99) == (-1, 10)
    with pytest.raises(IndexError):
        idx.entry(3)
    idx.truncate()
    assert idx.last_entry == (-1, 10) and idx.entries == 0
    assert idx.maybe_append(-5, 10)  # negative timestamps are fine
    idx.close()
    with pytest.raises(ValueError, match="closed"):
        idx.maybe_append(1, 11)


def test_time_index_sanity_check_catches_zero_filled_tail(tmp_path):
    path = str(tmp_path / "crash.timeindex")
    entries = b"".join(struct.pack(">qI", 1_700_000_000_000 + i, i * 3) for i in range(7))
    _legacy_crash_file(path, entries, 1200)
    reopened = TimeIndex(path, 0, max_index_size=1200)
    assert reopened.entries == _data_end(path) // TIME_ENTRY
    assert reopened.entries > 7
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.truncate()
    reopened.sanity_check()
    reopened.close()
    # decreasing offsets are corrupt as well
    with open(path, "wb") as f:
        f.write(struct.pack(">qI", 5, 9) + struct.pack(">qI", 6, 8))
    with TimeIndex(path, 0, writable=False) as ro:
        with pytest.raises(CorruptIndexError):
            ro.sanity_check()


def test_partial_trailing_entry_is_ignored(tmp_path):
    path = str(tmp_path / "p.index")
    with open(path, "wb") as f:
        f.write(struct.pack(">II", 1, 10) + struct.pack(">II", 2, 20) + b"\x00\x00\x00")
    with OffsetIndex(path, 0, writable=False) as ro:
        assert ro.entries == 2
        assert ro.lookup(5) == (2, 20)
    with OffsetIndex(path, 0, max_index_size=16) as rw:
        assert rw.entries == 2
        rw.sanity_check()
    assert file_size(path) == 16


# ------------------------------------------------------------------ files and descriptors


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_indexes_hold_no_file_descriptor(tmp_path):
    """Kafka closes an index file once mapped: 300 indexes with entries, written and
    pending, looked up and appended to, hold no descriptor."""
    before = open_fds()
    indexes = []
    for i in range(150):
        off = OffsetIndex(str(tmp_path / f"{i}.index"), 0, max_index_size=4096)
        tim = TimeIndex(str(tmp_path / f"{i}.timeindex"), 0, max_index_size=4096)
        for j in range(i % 100):
            off.append(j + 1, j * 10)
            tim.maybe_append(1000 + j, j)
        indexes += [off, tim]
    for idx in indexes:
        idx.lookup(50)
        idx.entry(0) if idx.entries else None
    assert open_fds() == before
    for idx in indexes:
        idx.close()
    assert open_fds() == before


def test_entries_are_written_in_batches_and_seen_at_once(tmp_path):
    path = str(tmp_path / "w.index")
    idx = OffsetIndex(path, 0, max_index_size=4096)
    for i in range(63):
        idx.append(i + 1, i)
        assert idx.lookup(i + 1) == (i + 1, i)  # pending entries are found
    assert (file_size(path), idx.pending_entries) == (0, 63)
    idx.append(64, 63)  # the 64th writes them all
    assert (file_size(path), idx.pending_entries) == (64 * OFFSET_ENTRY, 0)
    assert idx.mapped is False  # mapped on demand
    for i in range(64, 100):
        idx.append(i + 1, i)
    for target in (1, 30, 64, 65, 80, 100, 10**6):
        assert idx.lookup(target) == (min(target, 100), min(target, 100) - 1)
    assert idx.mapped
    idx.truncate_to(50)  # cuts written entries from the file
    assert (idx.entries, file_size(path)) == (49, 49 * OFFSET_ENTRY)
    assert idx.lookup(10**6) == (49, 48)
    idx.append(70, 69)
    assert idx.lookup(10**6) == (70, 69) and idx.pending_entries == 1
    del idx  # a crash: the pending entry is lost
    with OffsetIndex(path, 0, writable=False) as ro:
        assert ro.entries == 49 and ro.lookup(10**6) == (49, 48)
        ro.sanity_check()


def test_release_drops_the_mapping_and_lookups_map_again(tmp_path):
    path = str(tmp_path / "r.timeindex")
    with TimeIndex(path, 0, max_index_size=4096) as idx:
        for i in range(200):
            idx.maybe_append(10 * i, i)
        assert idx.lookup(555) == (550, 55) and idx.mapped
        idx.release()
        assert not idx.mapped and idx.entries == 200
        assert idx.lookup(555) == (550, 55) and idx.mapped
        assert idx.last_entry == (1990, 199)


def test_a_failed_write_keeps_entries_pending(tmp_path):
    """A write that fails (here: the file is gone for a moment, as writes fail on a full
    disk) keeps the entries in memory: lookups stay right, flush() raises, and the next
    write puts them in the file. Beyond the pending limit, entries are dropped."""
    path = str(tmp_path / "f.index")
    away = str(tmp_path / "away.index")
    idx = OffsetIndex(path, 0, max_index_size=4096)
    idx.append(1, 0)
    idx.flush()
    assert idx.lookup(1) == (1, 0)  # mapped while the file is there
    os.rename(path, away)
    for i in range(2, 200):
        idx.append(i, i)
    assert idx.entries == 65 and idx.pending_entries == 64  # 1 written, 64 kept, rest dropped
    assert idx.lookup(10**6) == (65, 65) and idx.lookup(30) == (30, 30)
    with pytest.raises(OSError):
        idx.flush()
    os.rename(away, path)
    idx.append(300, 300)
    assert idx.pending_entries == 1 and file_size(path) == 65 * OFFSET_ENTRY
    idx.close()
    with OffsetIndex(path, 0, writable=False) as ro:
        assert ro.entries == 66
        ro.sanity_check()
        assert ro.lookup(299) == (65, 65)
