"""Segment: appends, reads and lookups against a Python oracle; recovery from torn and
corrupt tails; truncation, roll, reopen."""

import os
import random
import struct
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from broker.native import (
    BatchBuilder,
    CorruptRecordError,
    RecordBatch,
    Segment,
    iter_batches,
    parse_base_offset,
    segment_file_name,
)

from ._support import HEADER_SIZE


class Batch:
    def __init__(self, data, pos):
        self.data = data
        self.pos = pos
        self.size = len(data)
        rb = RecordBatch(data)
        self.base, self.last, self.max_ts = rb.base_offset, rb.last_offset, rb.max_timestamp
        self.records = [(r.offset, r.timestamp) for r in rb.records()]


class LogOracle:
    """What a segment holding `batches` must answer."""

    def __init__(self, base_offset):
        self.base_offset = base_offset
        self.batches = []

    def add(self, data):
        self.batches.append(Batch(data, self.size))

    @property
    def size(self):
        return sum(b.size for b in self.batches)

    @property
    def next_offset(self):
        return self.batches[-1].last + 1 if self.batches else self.base_offset

    @property
    def max_timestamp(self):
        """(max batch timestamp, last offset of the first batch reaching it)."""
        best = (-1, self.base_offset)
        for b in self.batches:
            if b.max_ts > best[0]:
                best = (b.max_ts, b.last)
        return best

    def translate(self, offset, starting_position=0):
        for b in self.batches:
            if b.pos >= starting_position and b.last >= offset:
                return (b.pos, b.size)
        return None

    def find_by_timestamp(self, ts, starting_offset=-1):
        for b in self.batches:
            for off, rts in b.records:
                if rts >= ts and off >= starting_offset:
                    return (off, rts)
        return None

    def keep(self, n):
        self.batches = self.batches[:n]

    def bytes(self):
        return b"".join(b.data for b in self.batches)


CODEC_CHOICES = ["none"] * 5 + ["gzip", "snappy", "lz4", "zstd"]


def make_batch(rng, base_offset, ts, codec=None):
    """A batch of 1..8 records at base_offset; returns (bytes, next timestamp)."""
    b = BatchBuilder(codec or rng.choice(CODEC_CHOICES), base_offset=base_offset)
    for _ in range(rng.randint(1, 8)):
        ts += rng.randint(-30, 100)  # timestamps may go backwards
        value = rng.choice([rng.randbytes(rng.randint(0, 300)), b"z" * rng.randint(0, 600)])
        b.append(ts, rng.choice([None, b"key"]), value)
    return b.build(), ts


def fill(segment, oracle, rng, n, gaps=True):
    """Appends n random batches, sometimes several per append call."""
    ts = rng.randint(10**12, 2 * 10**12)
    pending = []
    offset = oracle.next_offset
    for i in range(n):
        if gaps and rng.random() < 0.2:
            offset += rng.randint(1, 1000)  # offsets need not be dense
        data, ts = make_batch(rng, offset, ts)
        offset = RecordBatch(data).next_offset
        pending.append(data)
        if rng.random() < 0.6 or i == n - 1:
            pos = segment.append(b"".join(pending))
            assert pos == oracle.size
            for p in pending:
                oracle.add(p)
            pending = []


def check_against_oracle(segment, oracle, rng, full=True):
    assert segment.size == oracle.size
    assert segment.next_offset == oracle.next_offset
    assert segment.is_empty == (oracle.size == 0)
    assert (segment.max_timestamp, segment.offset_of_max_timestamp) == oracle.max_timestamp
    assert segment.first_batch_timestamp == (oracle.batches[0].max_ts if oracle.batches else -1)
    assert segment.read_bytes(0, 1 << 30) == oracle.bytes()
    assert os.path.getsize(segment.log_path) == oracle.size
    segment.offset_index.sanity_check()
    segment.time_index.sanity_check()
    # every index entry points at a batch start and names that batch's last offset
    starts = {b.pos: b for b in oracle.batches}
    for i in range(segment.offset_index.entries):
        off, pos = segment.offset_index.entry(i)
        assert pos in starts and starts[pos].last == off
    offsets = range(oracle.base_offset - 2, oracle.next_offset + 3)
    if not full:
        offsets = rng.sample(offsets, min(len(offsets), 300))
    for off in offsets:
        assert segment.translate_offset(off) == oracle.translate(off), off
    for b in oracle.batches:
        assert segment.read_bytes(b.pos, b.size) == b.data


def file_sizes(directory, base):
    return [
        os.path.getsize(os.path.join(directory, segment_file_name(base, s))) for s in (".log", ".index", ".timeindex")
    ]


# ------------------------------------------------------------------ appends and lookups


@settings(max_examples=12)
@given(seed=st.integers(0, 2**32), interval=st.sampled_from([0, 100, 700, 4096]), base=st.sampled_from([0, 42, 2**40]))
def test_appends_and_lookups_against_oracle(tmp_path_factory, seed, interval, base):
    rng = random.Random(seed)
    directory = str(tmp_path_factory.mktemp("seg"))
    seg = Segment(directory, base, index_interval_bytes=interval)
    oracle = LogOracle(base)
    fill(seg, oracle, rng, rng.randint(1, 60))
    check_against_oracle(seg, oracle, rng)
    # as Kafka's LogSegment: a batch is indexed when more than the interval was written
    # since the previous entry (so the segment's first batch never is)
    since, expected = 0, 0
    for b in oracle.batches:
        if since > interval:
            expected += 1
            since = 0
        since += b.size
    assert seg.offset_index.entries == expected
    assert (seg.time_index.entries > 0) == (expected > 0)

    # translate_offset from a starting position (batch boundaries)
    for b in rng.sample(oracle.batches, min(10, len(oracle.batches))):
        for off in (b.base, b.last, oracle.next_offset - 1, base):
            assert seg.translate_offset(off, b.pos) == oracle.translate(off, b.pos)

    # read(): slices of the .log as (fd, position, length)
    for _ in range(30):
        pos = rng.randint(0, oracle.size + 10)
        max_bytes = rng.randint(0, 5000)
        max_pos = rng.choice([-1, rng.randint(0, oracle.size + 10)])
        fd, p, length = seg.read(pos, max_bytes, max_pos)
        end = oracle.size if max_pos < 0 or max_pos > oracle.size else max_pos
        assert (fd, p, length) == (seg.fd, pos, max(0, min(max_bytes, end - pos)))
        assert os.pread(fd, length, p) == oracle.bytes()[p : p + length]

    # read_from_offset(): starts at the batch holding the offset
    for _ in range(40):
        off = rng.randint(base - 1, oracle.next_offset + 1)
        max_bytes = rng.choice([0, 1, 100, 5000, 10**6])
        max_pos = rng.choice([-1, rng.randint(0, oracle.size)])
        min_one = rng.random() < 0.5
        got = seg.read_from_offset(off, max_bytes, max_pos, min_one)
        t = oracle.translate(off)
        end = oracle.size if max_pos < 0 or max_pos > oracle.size else max_pos
        if t is None or t[0] >= end:
            assert got is None
            continue
        length = max(max_bytes, t[1]) if min_one else max_bytes
        assert got == (seg.fd, t[0], min(length, end - t[0]))

    # find_offset_by_timestamp(): first record with timestamp >= ts and offset >= start
    stamps = [ts for b in oracle.batches for _, ts in b.records]
    for _ in range(40):
        ts = rng.choice(stamps) + rng.choice([-1, 0, 1])
        start = rng.choice([-1, base, rng.randint(base, oracle.next_offset + 1)])
        assert seg.find_offset_by_timestamp(ts, start) == oracle.find_by_timestamp(ts, start)
    assert seg.find_offset_by_timestamp(max(stamps) + 1) is None
    assert seg.find_offset_by_timestamp(-(2**63)) == oracle.find_by_timestamp(-(2**63))
    seg.close()


def test_read_clamps_and_rejects(tmp_path):
    seg = Segment(str(tmp_path), 0)
    assert seg.read(0, 100) == (seg.fd, 0, 0)
    assert seg.read_from_offset(0, 100) is None
    assert seg.translate_offset(0) is None
    assert seg.find_offset_by_timestamp(0) is None
    assert seg.read_bytes(0, 10) == b""
    data, _ = make_batch(random.Random(1), 0, 0, "none")
    seg.append(data)
    with pytest.raises(ValueError):
        seg.read(-1, 10)
    with pytest.raises(ValueError):
        seg.read(0, -1)
    with pytest.raises(ValueError):
        seg.read_bytes(-1, 1)
    with pytest.raises(ValueError):
        seg.read_bytes(0, -1)
    assert seg.read_bytes(5, 10**9) == data[5:]
    assert seg.read(len(data) + 5, 10) == (seg.fd, len(data) + 5, 0)
    # min_one_batch=False may return less than a batch; True returns the whole batch
    assert seg.read_from_offset(0, 10, min_one_batch=False) == (seg.fd, 0, 10)
    assert seg.read_from_offset(0, 10) == (seg.fd, 0, len(data))
    assert seg.read_from_offset(0, 10, max_position=20) == (seg.fd, 0, 20)
    with pytest.raises(ValueError):
        seg.read_from_offset(0, -1, min_one_batch=False)
    seg.close()


@pytest.mark.parametrize("bad_base", ["backwards", "below_segment", "beyond_int32"])
def test_recovery_stops_at_offsets_that_do_not_fit(tmp_path, bad_base):
    """Batches with valid CRCs whose offsets cannot follow: recovery (and the clean load
    path, which scans the tail) cut the log there."""
    rng = random.Random(6)
    d = str(tmp_path)
    seg = Segment(d, 1000, index_interval_bytes=10**6)
    oracle = LogOracle(1000)
    fill(seg, oracle, rng, 5, gaps=False)
    seg.close()
    base = {"backwards": oracle.next_offset - 2, "below_segment": 3, "beyond_int32": 1000 + 2**31}[bad_base]
    stray, _ = make_batch(rng, base, 0, "none")
    good_after, _ = make_batch(rng, max(base, oracle.next_offset) + 100, 0, "none")
    with open(os.path.join(d, segment_file_name(1000)), "ab") as f:
        f.write(stray + good_after)
    seg = Segment(d, 1000, index_interval_bytes=10**6)
    assert seg.recovered_truncated_bytes == len(stray) + len(good_after)
    check_against_oracle(seg, oracle, rng)
    seg.close()


# ------------------------------------------------------------------ append validation


def test_append_rejects_bad_input_without_side_effects(tmp_path):
    rng = random.Random(2)
    seg = Segment(str(tmp_path), 100, index_interval_bytes=0)
    oracle = LogOracle(100)
    fill(seg, oracle, rng, 5, gaps=False)
    before = (seg.size, seg.next_offset, seg.offset_index.entries, seg.time_index.entries, seg.max_timestamp)
    good, _ = make_batch(rng, seg.next_offset, 5)
    below, _ = make_batch(rng, seg.next_offset - 1, 5)
    with pytest.raises(ValueError, match="below the next offset"):
        seg.append(below)
    with pytest.raises(ValueError, match="below the next offset"):
        seg.append(good + below)  # the second batch goes backwards
    with pytest.raises(CorruptRecordError, match="partial"):
        seg.append(good[:-1])
    with pytest.raises(CorruptRecordError, match="partial"):
        seg.append(good + good[:HEADER_SIZE])
    with pytest.raises(CorruptRecordError):
        seg.append(b"\x00" * 100)
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError):
        seg.append(bad_magic)
    far, _ = make_batch(rng, 100 + 2**31, 5)  # relative offset beyond int32
    with pytest.raises(ValueError, match="roll"):
        seg.append(far)
    with pytest.raises(ValueError):
        Segment(str(tmp_path), -1)
    with pytest.raises(ValueError):
        Segment(str(tmp_path), 5, index_interval_bytes=-1)
    after = (seg.size, seg.next_offset, seg.offset_index.entries, seg.time_index.entries, seg.max_timestamp)
    assert before == after
    assert os.path.getsize(seg.log_path) == oracle.size
    assert seg.append(b"") == oracle.size
    assert seg.append(good) == oracle.size
    oracle.add(good)
    check_against_oracle(seg, oracle, rng)
    seg.close()
    with pytest.raises(ValueError, match="closed"):
        seg.append(good)
    for op in (
        lambda: seg.read(0, 1),
        lambda: seg.translate_offset(0),
        seg.recover,
        seg.roll,
        seg.flush,
        lambda: seg.read_bytes(0, 1),
        lambda: seg.truncate_to(0),
    ):
        with pytest.raises(ValueError, match="closed"):
            op()
    seg.close()  # idempotent


def test_file_names(tmp_path):
    assert segment_file_name(0) == "00000000000000000000.log"
    assert segment_file_name(42, ".index") == "00000000000000000042.index"
    assert segment_file_name(2**63 - 1, ".timeindex") == "09223372036854775807.timeindex"
    assert parse_base_offset("00000000000000000042.log") == 42
    assert parse_base_offset("00000000000000000042.timeindex") == 42
    for bad in ("42.log", "0000000000000000004x.log", "00000000000000000042", "x.log", "000000000000000000042.log"):
        assert parse_base_offset(bad) is None
    seg = Segment(str(tmp_path), 1234)
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000001234.index",
        "00000000000000001234.log",
        "00000000000000001234.timeindex",
    ]
    assert seg.log_path == os.path.join(str(tmp_path), "00000000000000001234.log")
    assert seg.directory == str(tmp_path) and seg.base_offset == 1234
    assert "Segment(" in repr(seg)
    seg.delete()
    assert os.listdir(tmp_path) == []
    seg.delete()


# ------------------------------------------------------------------ recovery


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32),
    damage=st.sampled_from(["cut", "flip", "garbage", "zeros", "none"]),
    clean_close=st.booleans(),
    interval=st.sampled_from([0, 200, 1000]),
)
def test_recovery_keeps_exactly_the_valid_prefix(tmp_path_factory, seed, damage, clean_close, interval):
    rng = random.Random(seed)
    directory = str(tmp_path_factory.mktemp("rec"))
    base = rng.choice([0, 5000])
    seg = Segment(directory, base, index_interval_bytes=interval)
    oracle = LogOracle(base)
    fill(seg, oracle, rng, rng.randint(1, 40))
    total = oracle.size
    if clean_close:
        seg.close()
    else:
        seg.flush()
        del seg  # a crash: the indexes stay untrimmed

    log = os.path.join(directory, segment_file_name(base))
    if damage == "cut":
        cut = rng.randint(0, total - 1)
        os.truncate(log, cut)
        keep = sum(1 for b in oracle.batches if b.pos + b.size <= cut)
    elif damage == "flip":
        k = rng.randrange(len(oracle.batches))
        b = oracle.batches[k]
        # batchLength, magic, CRC, or anything the CRC covers (baseOffset and the leader
        # epoch lie outside it, by design)
        where = rng.choice([rng.randrange(8, 12), rng.randrange(16, b.size)])
        with open(log, "r+b") as f:
            f.seek(b.pos + where)
            byte = f.read(1)[0]
            f.seek(b.pos + where)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
        keep = k
    elif damage == "garbage":
        with open(log, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 200)))
        keep = len(oracle.batches)
    elif damage == "zeros":
        with open(log, "ab") as f:
            f.write(bytes(rng.randint(1, 5000)))
        keep = len(oracle.batches)
    else:
        keep = len(oracle.batches)
    damaged_size = os.path.getsize(log)

    seg = Segment(directory, base, index_interval_bytes=interval)  # may recover by itself
    first = seg.recovered_truncated_bytes
    again = seg.recover()  # always re-validates
    oracle.keep(keep)
    assert first + again == damaged_size - oracle.size
    assert seg.recovered_truncated_bytes == first
    check_against_oracle(seg, oracle, rng, full=False)
    if interval == 0 and len(oracle.batches) > 1:
        assert seg.offset_index.entries == len(oracle.batches) - 1
    if damage == "none" and clean_close:
        assert first == 0 and again == 0

    # appends continue after recovery
    fill(seg, oracle, rng, 3)
    check_against_oracle(seg, oracle, rng, full=False)
    seg.close()
    seg = Segment(directory, base, index_interval_bytes=interval)
    assert seg.recovered_truncated_bytes == 0
    check_against_oracle(seg, oracle, rng, full=False)
    seg.close()


def test_crash_loses_at_most_the_unwritten_index_entries(tmp_path):
    """kill -9 (no close): the index files hold the entries written so far, never a
    preallocated tail; the reopened segment needs no recovery and answers exactly."""
    rng = random.Random(11)
    seg = Segment(str(tmp_path), 0, index_interval_bytes=100, max_index_size=4096)
    oracle = LogOracle(0)
    fill(seg, oracle, rng, 30)
    entries = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    written = seg.offset_index.entries - seg.offset_index.pending_entries
    assert entries
    del seg  # pending index entries are lost
    assert file_sizes(str(tmp_path), 0)[1] == written * 8
    seg = Segment(str(tmp_path), 0, index_interval_bytes=100, max_index_size=4096)
    assert seg.recovered_truncated_bytes == 0
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == entries[:written]
    check_against_oracle(seg, oracle, rng)
    assert seg.recover() == 0  # recovery rebuilds every entry
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == entries
    check_against_oracle(seg, oracle, rng)
    seg.close()


def test_read_only_segment(tmp_path):
    rng = random.Random(4)
    seg = Segment(str(tmp_path), 0, index_interval_bytes=100)
    oracle = LogOracle(0)
    fill(seg, oracle, rng, 10)
    seg.close()
    ro = Segment(str(tmp_path), 0, writable=False)
    check_against_oracle(ro, oracle, rng)
    with pytest.raises(ValueError, match="read-only"):
        ro.append(oracle.batches[0].data)
    with pytest.raises(ValueError, match="read-only"):
        ro.recover()
    ro.close()
    with open(os.path.join(str(tmp_path), segment_file_name(0)), "ab") as f:
        f.write(b"\x00" * 30)  # a torn tail
    with pytest.raises(CorruptRecordError):
        Segment(str(tmp_path), 0, writable=False)  # a read-only segment cannot repair
    with pytest.raises(OSError):
        Segment(str(tmp_path), 99, writable=False)  # missing files are not created
    assert not os.path.exists(os.path.join(str(tmp_path), segment_file_name(99)))


# ------------------------------------------------------------------ truncation


@settings(max_examples=20)
@given(seed=st.integers(0, 2**32), interval=st.sampled_from([0, 300, 4096]))
def test_truncate_to(tmp_path_factory, seed, interval):
    rng = random.Random(seed)
    directory = str(tmp_path_factory.mktemp("trunc"))
    seg = Segment(directory, 10, index_interval_bytes=interval)
    oracle = LogOracle(10)
    fill(seg, oracle, rng, rng.randint(1, 40))
    for _ in range(3):
        target = rng.choice(
            [rng.randint(5, oracle.next_offset + 5)]
            + [b.base for b in oracle.batches[-3:]]
            + [b.last for b in oracle.batches[-3:]]
        )
        size_before = oracle.size
        removed = seg.truncate_to(target)
        oracle.keep(sum(1 for b in oracle.batches if b.last < target))
        assert removed == size_before - oracle.size
        check_against_oracle(seg, oracle, rng, full=False)
        assert all(seg.offset_index.entry(i)[0] < target for i in range(seg.offset_index.entries))
        assert all(seg.time_index.entry(i)[1] < target for i in range(seg.time_index.entries))
        fill(seg, oracle, rng, rng.randint(0, 5) or 1)
        check_against_oracle(seg, oracle, rng, full=False)
    seg.close()
    seg = Segment(directory, 10, index_interval_bytes=interval)
    assert seg.recovered_truncated_bytes == 0
    check_against_oracle(seg, oracle, rng, full=False)
    seg.close()


def test_truncate_to_everything_resets_the_segment(tmp_path):
    rng = random.Random(8)
    seg = Segment(str(tmp_path), 0, index_interval_bytes=0)
    oracle = LogOracle(0)
    fill(seg, oracle, rng, 10)
    assert seg.truncate_to(0) == oracle.size
    oracle.keep(0)
    check_against_oracle(seg, oracle, rng)
    assert (seg.offset_index.entries, seg.time_index.entries) == (0, 0)
    assert seg.truncate_to(0) == 0
    fill(seg, oracle, rng, 4)
    check_against_oracle(seg, oracle, rng)
    seg.close()


# ------------------------------------------------------------------ lifecycle


def test_roll_trims_indexes_and_reopen_is_clean(tmp_path):
    rng = random.Random(21)
    d = str(tmp_path)
    seg = Segment(d, 0, index_interval_bytes=150)
    oracle = LogOracle(0)
    fill(seg, oracle, rng, 40)
    # nothing preallocated: the files hold the entries written so far
    n_off = seg.offset_index.entries
    assert file_sizes(d, 0)[1] == (n_off - seg.offset_index.pending_entries) * 8
    assert seg.active and not seg.offset_index.is_full
    seg.roll()
    n_time = seg.time_index.entries
    assert file_sizes(d, 0) == [oracle.size, n_off * 8, n_time * 12]
    assert not seg.active and seg.offset_index.is_full
    # the final max timestamp is in the time index after roll
    assert seg.time_index.last_entry == oracle.max_timestamp
    check_against_oracle(seg, oracle, rng)
    seg.resize_indexes(4096)
    assert seg.active and (seg.offset_index.max_entries, seg.time_index.max_entries) == (512, 341)
    assert file_sizes(d, 0)[1:] == [n_off * 8, n_time * 12]
    fill(seg, oracle, rng, 5)
    check_against_oracle(seg, oracle, rng)
    seg.close()
    assert file_sizes(d, 0)[1:] == [seg.offset_index.entries * 8, seg.time_index.entries * 12]

    # a clean reopen takes the load path: it trusts the closed files, and does not
    # re-validate CRCs (so a flip in an early batch is noticed only by recover())
    with open(os.path.join(d, segment_file_name(0)), "r+b") as f:
        f.seek(oracle.batches[0].pos + 30)
        f.write(b"\xee")
    seg = Segment(d, 0, index_interval_bytes=150)
    assert seg.recovered_truncated_bytes == 0
    assert seg.size == oracle.size and seg.next_offset == oracle.next_offset
    assert (seg.max_timestamp, seg.offset_of_max_timestamp) == oracle.max_timestamp
    assert seg.first_batch_timestamp == oracle.batches[0].max_ts
    assert seg.recover() == oracle.size
    assert seg.size == 0 and seg.next_offset == 0
    seg.close()


def test_created_and_flush(tmp_path):
    seg = Segment(str(tmp_path), 0)
    assert seg.created > 0
    assert not seg.closed
    data, _ = make_batch(random.Random(3), 0, 0)
    seg.append(data)
    seg.flush()
    with seg:
        pass
    assert seg.closed
    assert [b.tobytes() for b in iter_batches(open(seg.log_path, "rb").read())] == [data]


def test_index_gaps_do_not_break_lookups(tmp_path):
    """Offsets with holes (as after compaction) and a single huge batch."""
    seg = Segment(str(tmp_path), 0, index_interval_bytes=0)
    oracle = LogOracle(0)
    for base in (0, 10, 13, 500, 10**6):
        b = BatchBuilder(base_offset=base)
        for i in range(3):
            b.append(base + i, None, b"v" * 100)
        data = b.build()
        seg.append(data)
        oracle.add(data)
    big = BatchBuilder("zstd", base_offset=2 * 10**6)
    for i in range(5000):
        big.append(i, None, struct.pack(">I", i) * 10)
    seg.append(big.build())
    oracle.add(big.build())
    rng = random.Random(0)
    for off in [
        0,
        1,
        3,
        4,
        9,
        10,
        12,
        13,
        15,
        16,
        499,
        500,
        503,
        10**6 + 2,
        10**6 + 3,
        2 * 10**6,
        2 * 10**6 + 4999,
        2 * 10**6 + 5000,
    ]:
        assert seg.translate_offset(off) == oracle.translate(off), off
    check_against_oracle(seg, oracle, rng, full=False)
    seg.close()


def test_full_indexes_stop_growing_but_lookups_stay_right(tmp_path):
    rng = random.Random(13)
    d = str(tmp_path)
    seg = Segment(d, 0, index_interval_bytes=0, max_index_size=24)  # 3 / 2 entries
    oracle = LogOracle(0)
    fill(seg, oracle, rng, 30)
    assert seg.offset_index.is_full and seg.time_index.is_full
    assert (seg.offset_index.entries, seg.time_index.entries) == (3, 2)
    check_against_oracle(seg, oracle, rng)
    seg.roll()
    check_against_oracle(seg, oracle, rng)
    assert seg.recover() == 0
    check_against_oracle(seg, oracle, rng)
    seg.close()


def test_open_detects_preallocated_index_tail_and_lost_index(tmp_path):
    """A crash of a version that preallocated indexes left the active segment's index
    untrimmed (zeros after the entries) and a lost .index leaves a big log without
    entries: opening notices both in O(1) and rebuilds the indexes, so lookups stay
    exact."""
    import os

    from broker.native import BatchBuilder, Segment, assign_offsets

    d = str(tmp_path)
    seg = Segment(d, 0, index_interval_bytes=512)
    off = 0
    for i in range(400):
        b = BatchBuilder()
        b.append(i, b"k", b"x" * 300)
        buf = bytearray(b.build())
        off = assign_offsets(buf, off)[0]
        seg.append(buf)
    entries = seg.offset_index.entries
    assert entries > 10
    expected = [seg.translate_offset(o) for o in range(0, 400, 7)]
    index_path = seg.offset_index.path
    seg.close()
    with open(index_path, "r+b") as f:  # as preallocated, with zeros written
        f.seek(0, os.SEEK_END)
        f.write(b"\x00" * 4096)
        f.truncate(10 * 1024 * 1024)
    crashed = Segment(d, 0, index_interval_bytes=512)
    assert crashed.offset_index.entries == entries
    assert [crashed.translate_offset(o) for o in range(0, 400, 7)] == expected
    crashed.close()
    assert os.path.getsize(index_path) == entries * 8
    os.unlink(index_path)
    rebuilt = Segment(d, 0, index_interval_bytes=512)
    assert rebuilt.offset_index.entries == entries
    assert [rebuilt.translate_offset(o) for o in range(0, 400, 7)] == expected
    rebuilt.close()


# ------------------------------------------------------------------ open files


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def open_limit():
    """Sets the open-segment limit for a test (this thread releases); restores none."""
    from broker.native import set_open_segment_limit

    yield set_open_segment_limit
    set_open_segment_limit(-1)


def make_inactive(d, n, rng):
    """n rolled segments with data, each with its oracle."""
    segs = []
    for i in range(n):
        seg = Segment(d, i * 10**6, index_interval_bytes=100)
        oracle = LogOracle(i * 10**6)
        fill(seg, oracle, rng, 8, gaps=False)
        seg.roll()
        segs.append((seg, oracle))
    return segs


def test_an_active_segment_holds_one_descriptor(tmp_path):
    """The .log only: indexes are mapped, not open (three descriptors per partition made
    6,600 partitions exhaust a 20,000-descriptor limit)."""
    rng = random.Random(5)
    before = open_fds()
    segs = []
    for i in range(60):
        seg = Segment(str(tmp_path), i * 1000, index_interval_bytes=50)
        fill(seg, LogOracle(i * 1000), rng, 20, gaps=False)
        seg.translate_offset(i * 1000 + 5)
        segs.append(seg)
    assert all(s.active for s in segs)
    assert open_fds() - before == 60
    for s in segs:
        s.close()
    assert open_fds() == before


def test_inactive_segments_beyond_the_limit_release_their_files(tmp_path, open_limit):
    from broker.native import open_inactive_segments

    rng = random.Random(9)
    d = str(tmp_path)
    before, base = open_fds(), open_inactive_segments()
    segs = make_inactive(d, 40, rng)
    assert open_inactive_segments() - base == 40 and open_fds() - before == 40
    open_limit(5)
    assert open_inactive_segments() == 5 and open_fds() - before == 5
    assert sum(s.files_open for s, _ in segs) == 5
    # every segment still answers exactly: it reopens, and an older one goes
    for _ in range(3):
        for seg, oracle in rng.sample(segs, len(segs)):
            check_against_oracle(seg, oracle, rng, full=False)
            assert open_inactive_segments() <= 5 and open_fds() - before <= 5
    # the most recently used stay open
    recent = [s for s, _ in segs[-5:]]
    for s in recent:
        s.translate_offset(s.base_offset)
    assert all(s.files_open for s in recent)
    for s, _ in segs:
        s.close()
    assert open_fds() == before


def test_a_pinned_segment_keeps_its_descriptor(tmp_path, open_limit):
    """A pin (a read in flight) outlives releases, close() and delete(): the descriptor
    handed out stays valid and shows the same bytes until unpin()."""
    rng = random.Random(10)
    d = str(tmp_path)
    segs = make_inactive(d, 6, rng)
    open_limit(2)
    seg, oracle = segs[0]
    fd = seg.pin()
    for other, _ in segs[1:]:
        other.read_bytes(0, 10)  # would release segs[0] if unpinned
    assert seg.files_open and os.pread(fd, oracle.size, 0) == oracle.bytes()
    seg.delete()
    assert not os.path.exists(seg.log_path)
    for other, _ in segs[1:]:
        other.read_bytes(0, 10)
    assert os.pread(fd, oracle.size, 0) == oracle.bytes()  # still the segment's bytes
    seg.unpin()
    assert not seg.files_open
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError, match="not pinned"):
        seg.unpin()
    with pytest.raises(ValueError, match="closed"):
        seg.pin()
    for other, _ in segs[1:]:
        other.close()
    assert not any(other.files_open for other, _ in segs)


def test_other_threads_borrow_segments_and_leave_the_set_alone(tmp_path, open_limit):
    """A descriptor the event loop got from a segment stays valid while it runs, and the
    open set stays within its limit whatever other threads do: reads and fsyncs from
    worker threads borrow the segments they reopen, for the moment only. (Before, they
    added each to the set, trimmed by the loop's next use only: after a produce rolled
    300 partitions, the flushes of their finished segments took a broker past its
    open-file limit, and with nothing left to accept a connection it never used a
    segment again.)"""
    import threading

    from broker.native import open_inactive_segments

    rng = random.Random(12)
    segs = make_inactive(str(tmp_path), 10, rng)
    open_limit(3)
    kept = [s for s, _ in segs if s.files_open]
    fds = [s.fd for s in kept]
    before = open_fds()
    worker = threading.Thread(target=lambda: [(s.read_bytes(0, s.size), s.flush()) for s, _ in segs])
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    assert open_inactive_segments() == 3 and open_fds() == before
    assert all(s.files_open for s in kept) and [s.fd for s in kept] == fds
    assert sum(s.files_open for s, _ in segs) == 3


def test_a_segment_a_worker_borrowed_joins_the_set_when_the_loop_uses_it(tmp_path, open_limit):
    import threading

    from broker.native import open_inactive_segments

    rng = random.Random(13)
    segs = make_inactive(str(tmp_path), 6, rng)
    open_limit(3)
    seg, oracle = segs[0]
    assert not seg.files_open
    pinned, done = threading.Event(), threading.Event()
    got = []

    def borrow():
        got.append(seg.pin())
        pinned.set()
        done.wait(30)
        seg.unpin()

    worker = threading.Thread(target=borrow)
    worker.start()
    assert pinned.wait(30)
    before = open_fds()
    assert seg.files_open and open_inactive_segments() == 3  # borrowed: not in the set
    assert seg.fd == got[0]  # the loop's use: it joins
    assert open_inactive_segments() == 3 and open_fds() == before - 1  # and an older one goes
    done.set()
    worker.join(30)
    assert not worker.is_alive()
    assert seg.files_open and os.pread(seg.fd, oracle.size, 0) == oracle.bytes()
    for s, _ in segs:
        s.close()


def test_descriptors_pins_keep_open_count_against_the_limit(tmp_path, open_limit):
    """A send in flight keeps a deleted segment's descriptor open: it still counts, so the
    set makes room for it, and with every member pinned a reopen is refused (EMFILE);
    the unpin() that ends a send applies the limit at once."""
    import errno

    from broker.native import open_inactive_segments

    rng = random.Random(16)
    segs = [s for s, _ in make_inactive(str(tmp_path), 6, rng)]
    open_limit(2)
    before = open_fds()
    sent = segs[0]
    sent.pin()
    sent.delete()
    assert open_inactive_segments() == 2  # the deleted one and one member
    segs[1].pin()  # the other member goes for it
    assert open_inactive_segments() == 2 and open_fds() == before
    with pytest.raises(OSError) as exc:
        segs[2].read_bytes(0, 10)
    assert exc.value.errno == errno.EMFILE
    assert open_inactive_segments() == 2 and open_fds() == before
    sent.unpin()  # the send is over: room again
    assert segs[2].read_bytes(0, 10) and open_inactive_segments() == 2
    # every member pinned while a segment rolls: beyond the limit until a send ends
    segs[2].pin()
    rolled = Segment(str(tmp_path), 10**8, index_interval_bytes=100)
    fill(rolled, LogOracle(10**8), rng, 3, gaps=False)
    rolled.roll()
    assert open_inactive_segments() == 3
    segs[1].unpin()
    assert open_inactive_segments() == 2 and not segs[1].files_open
    segs[2].unpin()
    for s in segs[1:] + [rolled]:
        s.close()
    assert open_fds() == before - 2


def test_release_and_reactivate(tmp_path):
    rng = random.Random(14)
    d = str(tmp_path)
    seg = Segment(d, 0, index_interval_bytes=100)
    oracle = LogOracle(0)
    fill(seg, oracle, rng, 30)
    seg.release()  # an active segment: rolled first
    assert not seg.active and not seg.files_open and not seg.offset_index.mapped
    assert seg.offset_index.pending_entries == 0 and seg.offset_index.is_full
    check_against_oracle(seg, oracle, rng)
    seg.resize_indexes(1 << 20)
    assert seg.active and seg.files_open
    fill(seg, oracle, rng, 10)
    check_against_oracle(seg, oracle, rng)
    seg.close()
    seg = Segment(d, 0, index_interval_bytes=100)
    assert not seg.active and seg.recovered_truncated_bytes == 0
    check_against_oracle(seg, oracle, rng)
    seg.close()


def test_rolling_past_the_limit_releases_older_segments(tmp_path, open_limit):
    from broker.native import open_inactive_segments

    rng = random.Random(15)
    open_limit(4)
    before = open_fds()
    segs = []
    for i in range(20):
        seg = Segment(str(tmp_path), i * 1000, index_interval_bytes=100)
        fill(seg, LogOracle(i * 1000), rng, 3, gaps=False)
        seg.roll()
        segs.append(seg)
        assert open_inactive_segments() <= 4 and open_fds() - before <= 4
    for s in segs:
        s.close()


# ------------------------------------------------------------------ blocks allocated ahead


def allocated(path):
    return os.stat(path).st_blocks * 512


@pytest.fixture
def allocate_ahead():
    """broker.native's names for the setting; the default is restored after the test."""
    import broker.native as native

    yield SimpleNamespace(
        ALLOCATE_AHEAD=native.SEGMENT_ALLOCATE_AHEAD, set_allocate_ahead=native.set_segment_allocate_ahead
    )
    native.set_segment_allocate_ahead(native.SEGMENT_ALLOCATE_AHEAD)


def test_blocks_are_allocated_ahead_of_the_active_segment_and_freed_when_it_stops(tmp_path, allocate_ahead):
    """The active segment's appends allocate ALLOCATE_AHEAD beyond themselves (this test's
    tmp dir is on a file system with fallocate(2), as CI's is); its size stays the
    data's, and the blocks beyond it go at roll, close, and the reopen after a crash."""
    rng = random.Random(5)
    d = str(tmp_path)
    path = os.path.join(d, segment_file_name(0))
    ahead = allocate_ahead.ALLOCATE_AHEAD
    seg = Segment(d, 0)
    oracle = LogOracle(0)
    fill(seg, oracle, rng, 10)
    assert os.path.getsize(path) == seg.size == oracle.size
    assert allocated(path) >= max(ahead, oracle.size + 65536)
    check_against_oracle(seg, oracle, rng)
    seg.roll()
    assert allocated(path) < oracle.size + 65536
    seg.resize_indexes(4096)  # active again: it allocates again, close frees
    fill(seg, oracle, rng, 3)
    assert allocated(path) >= max(ahead, oracle.size + 65536)
    seg.close()
    assert allocated(path) < oracle.size + 65536

    # a crash: the segment never closed; opening it again frees what was allocated ahead
    seg = Segment(d, 0)
    seg.resize_indexes(4096)
    fill(seg, oracle, rng, 3)
    assert allocated(path) >= max(ahead, oracle.size + 65536)
    again = Segment(d, 0)
    assert allocated(path) < oracle.size + 65536
    assert again.recovered_truncated_bytes == 0 and again.size == oracle.size
    check_against_oracle(again, oracle, rng)
    again.close()
    seg.close()

    # none ahead: the file holds about its data
    allocate_ahead.set_allocate_ahead(0)
    seg = Segment(d, 10**6)
    fill(seg, LogOracle(10**6), rng, 10)
    assert allocated(seg.log_path) < seg.size + 65536
    seg.close()
    with pytest.raises(ValueError):
        allocate_ahead.set_allocate_ahead(-1)
