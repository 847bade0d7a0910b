"""RecordBatch v2: builder round trips, header properties, validation, in-place rewrites,
iteration over a buffer of batches, offset assignment and the codecs."""

import mmap
import random
import struct
import time

import cramjam
import pytest
from hypothesis import given, settings, strategies as st

from broker.native import (
    COMPRESSION_NAMES,
    BatchBuilder,
    BatchIterator,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordBatch,
    assign_offsets,
    compress_block,
    compression_code,
    crc32c,
    decompress_block,
    iter_batches,
    require_keys,
)

from ._support import CODECS, HEADER_SIZE, build, fix_crc, header_of, raw_batch, raw_record, records_st, simple_batch


def expected_records(records, base_offset=0, log_append_time=False):
    """What records() must return for BatchBuilder input [(ts, key, value, headers)]."""
    max_ts = max(ts for ts, *_ in records)
    return [
        (base_offset + i, max_ts if log_append_time else ts, key, value, [(k, v) for k, v in headers])
        for i, (ts, key, value, headers) in enumerate(records)
    ]


def as_tuples(recs):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs]


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40)
@given(records=records_st, base_offset=st.integers(0, 2**40))
def test_round_trip(codec, records, base_offset):
    data = build(records, codec, base_offset=base_offset)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_valid()
    assert batch.compression == COMPRESSION_NAMES.index(codec)
    assert batch.compression_name == codec
    assert batch.record_count == len(records)
    assert batch.last_offset_delta == len(records) - 1
    assert batch.base_timestamp == records[0][0]
    assert batch.max_timestamp == max(ts for ts, *_ in records)
    assert batch.size == len(data) == len(batch)
    assert as_tuples(batch.records()) == expected_records(records, base_offset)
    assert as_tuples(list(batch)) == expected_records(records, base_offset)
    for rec in batch.records():
        assert rec.attributes == 0


@pytest.mark.parametrize("codec", CODECS)
def test_many_records(codec):
    rng = random.Random(3)
    records = [
        (
            1000 + rng.randint(-500, 500),
            rng.choice([None, b"", b"k%d" % i]),
            rng.choice([None, b"", rng.randbytes(rng.randint(0, 50)), b"x" * 1000]),
            [(f"h{j}", rng.choice([None, b"v"])) for j in range(i % 3)],
        )
        for i in range(5000)
    ]
    data = build(records, codec)
    batch = RecordBatch(data)
    batch.validate()
    assert as_tuples(batch.records()) == expected_records(records)


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_reports_max_timestamp(codec):
    records = [(500, b"a", b"1", []), (100, None, b"2", []), (900, b"c", None, []), (-7, b"d", b"4", [])]
    data = build(records, codec, timestamp_type=1)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.timestamp_type == 1
    assert batch.max_timestamp == 900
    assert [r.timestamp for r in batch.records()] == [900] * 4
    assert as_tuples(batch.records()) == expected_records(records, log_append_time=True)


def test_empty_batch():
    data = BatchBuilder().build()
    batch = RecordBatch(data)
    batch.validate()
    assert (batch.record_count, batch.last_offset_delta, batch.size) == (0, 0, HEADER_SIZE)
    assert (batch.base_timestamp, batch.max_timestamp) == (-1, -1)
    assert batch.records() == []


def test_null_vs_empty_key_and_value_and_unicode_headers():
    records = [
        (1, None, None, []),
        (2, b"", b"", []),
        (3, b"k", b"v", [("", b""), ("ключ", None), ("🔑", b"\x00\xff"), ("a", b"")]),
    ]
    batch = RecordBatch(build(records))
    out = batch.records()
    assert (out[0].key, out[0].value) == (None, None)
    assert (out[1].key, out[1].value) == (b"", b"")
    assert out[2].headers == [("", b""), ("ключ", None), ("🔑", b"\x00\xff"), ("a", b"")]


def test_negative_timestamp_deltas_and_extremes():
    records = [(10**12, b"a", b"", []), (0, b"b", b"", []), (-(10**12), b"c", b"", []), (10**12 + 1, b"d", b"", [])]
    batch = RecordBatch(build(records))
    assert [r.timestamp for r in batch.records()] == [10**12, 0, -(10**12), 10**12 + 1]
    assert batch.base_timestamp == 10**12
    assert batch.max_timestamp == 10**12 + 1


# ------------------------------------------------------------------ header properties


@settings(max_examples=60)
@given(
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    epoch=st.integers(-1, 2**31 - 1),
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
    transactional=st.booleans(),
    control=st.booleans(),
    ts_type=st.sampled_from([0, 1]),
    n=st.integers(1, 5),
)
def test_every_header_property(
    codec, base_offset, epoch, producer_id, producer_epoch, base_sequence, transactional, control, ts_type, n
):
    b = BatchBuilder(
        codec,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        is_control=control,
        timestamp_type=ts_type,
    )
    assert (
        b.compression,
        b.base_offset,
        b.partition_leader_epoch,
        b.producer_id,
        b.producer_epoch,
        b.base_sequence,
        b.is_transactional,
        b.is_control,
        b.timestamp_type,
    ) == (
        COMPRESSION_NAMES.index(codec),
        base_offset,
        epoch,
        producer_id,
        producer_epoch,
        base_sequence,
        transactional,
        control,
        ts_type,
    )
    for i in range(n):
        assert b.append(100 + 3 * i, b"k", b"v" * 10) == i
    assert len(b) == b.record_count == n
    data = b.build()
    (f_base, f_len, f_epoch, f_magic, f_crc, f_attrs, f_lod, f_bts, f_mts, f_pid, f_pep, f_seq, f_count) = header_of(
        data
    )
    batch = RecordBatch(data)
    batch.validate()
    assert batch.base_offset == f_base == base_offset
    assert batch.batch_length == f_len == len(data) - 12
    assert batch.partition_leader_epoch == f_epoch == epoch
    assert batch.magic == f_magic == 2
    assert batch.crc == f_crc == crc32c(data[21:]) == batch.compute_crc()
    assert batch.attributes == f_attrs
    assert f_attrs & 7 == batch.compression == COMPRESSION_NAMES.index(codec)
    assert batch.timestamp_type == ts_type == (f_attrs >> 3) & 1
    assert batch.is_transactional is transactional is bool(f_attrs & 0x10)
    assert batch.is_control is control is bool(f_attrs & 0x20)
    assert batch.has_delete_horizon is False
    assert batch.last_offset_delta == f_lod == n - 1
    assert batch.base_timestamp == f_bts == 100
    assert batch.max_timestamp == f_mts == 100 + 3 * (n - 1)
    assert batch.producer_id == f_pid == producer_id
    assert batch.producer_epoch == f_pep == producer_epoch
    assert batch.base_sequence == f_seq == base_sequence
    assert batch.record_count == f_count == n
    assert batch.last_offset == base_offset + n - 1
    assert batch.next_offset == base_offset + n
    assert batch.size == len(data)
    assert batch.position == 0
    assert batch.writable is False
    assert batch.tobytes() == data
    assert bytes(batch.memoryview()) == data
    assert "RecordBatch(" in repr(batch)


def test_builder_validation_and_reuse():
    with pytest.raises(ValueError):
        BatchBuilder(timestamp_type=2)
    with pytest.raises(ValueError):
        BatchBuilder("brotli")
    with pytest.raises(ValueError):
        BatchBuilder(7)
    b = BatchBuilder("gzip")
    with pytest.raises(ValueError):
        b.append(1, b"k", b"v", [(b"\xff\xfe", b"x")])  # header key not UTF-8
    assert len(b) == 0
    b.append(1, b"k", b"v", [(b"bytes-key", b"x")])
    first = b.build()
    assert b.build() == first  # build() does not consume
    assert b.size_in_bytes > HEADER_SIZE
    b.reset()
    assert (len(b), b.size_in_bytes) == (0, HEADER_SIZE)
    b.append(5, None, b"again")
    batch = RecordBatch(b.build())
    assert as_tuples(batch.records()) == [(0, 5, None, b"again", [])]
    assert RecordBatch(first).records()[0].headers == [("bytes-key", b"x")]


def test_builder_accepts_buffers_and_default_timestamp():
    import array

    import pyarrow as pa

    b = BatchBuilder()
    before = int(time.time() * 1000)
    b.append(None, bytearray(b"ka"), memoryview(b"xxva")[2:])
    after = int(time.time() * 1000)
    b.append(0, pa.py_buffer(b"kb"), array.array("B", b"vb"))
    recs = RecordBatch(b.build()).records()
    assert before <= recs[0].timestamp <= after
    assert [(r.key, r.value) for r in recs] == [(b"ka", b"va"), (b"kb", b"vb")]


def test_record_equality_and_repr():
    a = RecordBatch(simple_batch(2)).records()
    b = RecordBatch(simple_batch(2, codec="zstd")).records()
    assert a == b
    assert a[0] != a[1]
    assert a[0] != "not a record"
    assert isinstance(a[0], Record)
    assert "Record(offset=0" in repr(a[0])


def test_compression_code():
    assert compression_code(None) == 0
    for i, name in enumerate(COMPRESSION_NAMES):
        assert compression_code(name) == i
        assert compression_code(name.upper()) == i
        assert compression_code(i) == i
    for bad in (-1, 5, "lzo"):
        with pytest.raises(ValueError):
            compression_code(bad)


# ------------------------------------------------------------------ validation


def test_every_single_bit_flip_in_the_crc_range_is_detected():
    data = simple_batch(3, value_size=2)
    assert len(data) < 250
    flips = 0
    for pos in range(16, len(data)):  # magic, crc, attributes .. end
        for bit in range(8):
            buf = bytearray(data)
            buf[pos] ^= 1 << bit
            try:
                batch = RecordBatch(buf)
            except CorruptRecordError:
                # magic, or the sign bit of recordCount / lastOffsetDelta: caught even
                # before the CRC is looked at
                assert pos == 16 or (pos in (23, 57) and bit == 7), (pos, bit)
                continue
            assert not batch.is_valid(), (pos, bit)
            with pytest.raises(CorruptRecordError) as exc:
                batch.validate()
            assert exc.value.position == 0
            flips += 1
    assert flips == (len(data) - 17) * 8 - 2


@pytest.mark.parametrize("codec", CODECS)
def test_sampled_bit_flips_in_large_batches(codec):
    rng = random.Random(codec)
    data = build([(i, b"key%d" % i, rng.randbytes(200), [("h", b"v")]) for i in range(200)], codec)
    for _ in range(300):
        pos = rng.randrange(17, len(data))
        buf = bytearray(data)
        buf[pos] ^= 1 << rng.randrange(8)
        batch = RecordBatch(buf)
        with pytest.raises(CorruptRecordError):
            batch.validate()


def test_flips_before_the_crc_range_keep_it_valid():
    data = simple_batch(2)
    for pos in list(range(0, 8)) + list(range(12, 16)):  # baseOffset, partitionLeaderEpoch
        buf = bytearray(data)
        buf[pos] ^= 0x40
        RecordBatch(buf).validate()


def test_construction_checks():
    data = simple_batch(2)
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            RecordBatch(data[:cut])
    bad_magic = bytearray(data)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatch(bad_magic)
    short_len = bytearray(data)
    struct.pack_into(">i", short_len, 8, HEADER_SIZE - 13)
    with pytest.raises(CorruptRecordError, match="batchLength"):
        RecordBatch(short_len)
    for field in (23, 57):  # negative lastOffsetDelta, recordCount
        neg = bytearray(data)
        struct.pack_into(">i", neg, field, -1)
        fix_crc(neg)
        with pytest.raises(CorruptRecordError, match="negative"):
            RecordBatch(neg)
    with pytest.raises(ValueError):
        RecordBatch(data, -1)
    with pytest.raises(ValueError):
        RecordBatch(data, len(data) + 1)
    with pytest.raises(CorruptRecordError):
        RecordBatch(data, len(data))


def test_batch_at_a_position_and_buffer_pinning():
    data = simple_batch(2)
    buf = bytearray(b"\x00" * 7 + data + b"tail")
    batch = RecordBatch(buf, 7)
    assert batch.position == 7
    assert batch.tobytes() == data
    batch.validate()
    with pytest.raises(BufferError):
        buf.extend(b"more")  # the view pins the buffer, so it cannot move
    view = batch.memoryview()
    assert view.readonly is False and len(view) == len(data)
    del batch
    with pytest.raises(BufferError):
        buf.extend(b"more")  # the exported memoryview still pins it
    view.release()
    buf.extend(b"more")


# ------------------------------------------------------------------ in-place rewrites


def test_set_base_offset_and_epoch_in_place():
    data = simple_batch(4, codec="lz4")
    buf = bytearray(b"pad" + data)
    batch = RecordBatch(buf, 3)
    assert batch.writable
    batch.set_base_offset(2**40 + 5)
    batch.set_partition_leader_epoch(123)
    batch.validate()
    assert (batch.base_offset, batch.partition_leader_epoch) == (2**40 + 5, 123)
    assert header_of(buf, 3)[0] == 2**40 + 5
    assert header_of(buf, 3)[2] == 123
    assert [r.offset for r in batch.records()] == [2**40 + 5 + i for i in range(4)]
    assert buf[3 + 16 :] == data[16:]  # nothing else changed
    # writes go through a memoryview of a bytearray as well
    mv_batch = RecordBatch(memoryview(buf)[3:])
    mv_batch.set_base_offset(9)
    assert RecordBatch(buf, 3).base_offset == 9
    batch.set_partition_leader_epoch(-1)
    assert batch.partition_leader_epoch == -1


def test_in_place_rewrites_refuse_read_only_buffers(tmp_path):
    data = simple_batch(2)
    path = tmp_path / "ro"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        sources = [data, memoryview(data), memoryview(bytearray(data)).toreadonly(), m]
        for src in sources:
            batch = RecordBatch(src)
            assert batch.writable is False
            with pytest.raises(TypeError):
                batch.set_base_offset(1)
            with pytest.raises(TypeError):
                batch.set_partition_leader_epoch(1)
            view = batch.memoryview()
            assert view.readonly
            with pytest.raises(TypeError):
                view[0:1] = b"x"
            view.release()
            del batch
    assert path.read_bytes() == data


# ------------------------------------------------------------------ iteration


def test_iter_batches_stops_cleanly_at_every_truncation():
    batches = [simple_batch(i + 1, codec=c, base_offset=10 * i) for i, c in enumerate(["none", "gzip", "none", "zstd"])]
    whole = b"".join(batches)
    boundaries = [0]
    for b in batches:
        boundaries.append(boundaries[-1] + len(b))
    for cut in range(len(whole) + 1):
        for validate in (False, True):
            it = iter_batches(whole[:cut], validate=validate)
            got = list(it)
            complete = max(i for i, end in enumerate(boundaries) if end <= cut)
            assert len(got) == complete
            assert [g.tobytes() for g in got] == batches[:complete]
            assert it.bytes_consumed == boundaries[complete] == it.position
            assert it.partial is (cut != boundaries[complete])
            assert it.validate is validate
            with pytest.raises(StopIteration):
                next(it)  # stays exhausted


def test_iter_batches_from_a_position():
    a, b = simple_batch(1), simple_batch(2, base_offset=1)
    buf = b"junk" + a + b
    it = iter_batches(buf, 4)
    assert isinstance(it, BatchIterator)
    got = list(it)
    assert [g.position for g in got] == [4, 4 + len(a)]
    assert it.bytes_consumed == len(a) + len(b)
    assert it.position == len(buf)
    assert not it.partial
    assert list(iter_batches(buf, len(buf))) == []
    with pytest.raises(ValueError):
        iter_batches(buf, len(buf) + 1)
    with pytest.raises(ValueError):
        iter_batches(buf, -1)


def test_iter_batches_corruption():
    a, b = simple_batch(1), simple_batch(2)
    bad = bytearray(a + b)
    bad[len(a) + 40] ^= 1  # inside b's CRC range
    assert len(list(iter_batches(bad))) == 2  # without validation the CRC is not read
    it = iter_batches(bad, validate=True)
    assert next(it).tobytes() == a
    with pytest.raises(CorruptRecordError) as exc:
        next(it)
    assert exc.value.position == len(a)
    assert it.bytes_consumed == len(a)
    bad_magic = bytearray(a + b)
    bad_magic[len(a) + 16] = 0
    with pytest.raises(CorruptRecordError, match="magic") as exc:
        list(iter_batches(bad_magic))
    assert exc.value.position == len(a)


# ------------------------------------------------------------------ assign_offsets


@settings(max_examples=30)
@given(
    counts=st.lists(st.integers(1, 20), min_size=1, max_size=8),
    codecs=st.lists(st.sampled_from(CODECS), min_size=8, max_size=8),
    base=st.integers(0, 2**50),
    epoch=st.integers(-1, 2**31 - 1),
    seed=st.integers(0, 99),
)
def test_assign_offsets(counts, codecs, base, epoch, seed):
    rng = random.Random(seed)
    parts, max_ts, max_ts_offset, offset = [], -1, -1, base
    for n, codec in zip(counts, codecs):
        stamps = [rng.randint(0, 50) for _ in range(n)]
        parts.append(build([(ts, None, b"v", []) for ts in stamps], codec))
        if max(stamps) > max_ts:
            max_ts, max_ts_offset = max(stamps), offset + n - 1
        offset += n
    buf = bytearray(b"".join(parts))
    result = assign_offsets(buf, base, epoch)
    assert result == (base + sum(counts), len(counts), sum(counts), max_ts, max_ts_offset)
    expect = base
    for batch, n in zip(iter_batches(buf, validate=True), counts):
        assert (batch.base_offset, batch.partition_leader_epoch) == (expect, epoch)
        assert [r.offset for r in batch.records()] == list(range(expect, expect + n))
        expect += n


def test_assign_offsets_errors():
    data = simple_batch(2) + simple_batch(3)
    with pytest.raises(TypeError):
        assign_offsets(data, 0)
    assert assign_offsets(bytearray(), 7) == (7, 0, 0, -1, -1)
    with pytest.raises(CorruptRecordError) as exc:
        assign_offsets(bytearray(data[:-1]), 0)
    assert exc.value.position == len(simple_batch(2))
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        assign_offsets(bad, 0)
    assert assign_offsets(bad, 0, validate=False)[:3] == (5, 2, 5)
    # the default epoch is -1 and memoryviews of writable buffers work
    buf = bytearray(data)
    assign_offsets(memoryview(buf), 40)
    assert [b.partition_leader_epoch for b in iter_batches(buf)] == [-1, -1]
    assert [b.base_offset for b in iter_batches(buf)] == [40, 42]


@pytest.mark.parametrize("codec", CODECS)
def test_require_keys(codec):
    keyed = simple_batch(3, codec) + simple_batch(4, codec)
    require_keys(keyed)  # every record has a key: nothing to say
    require_keys(b"")
    # an empty key is a key; only null is refused
    require_keys(build([(1, b"", b"v", [])], codec))
    holes = build([(1, b"a", b"v", []), (2, b"b", b"v", []), (3, None, b"v", [])], codec)
    with pytest.raises(InvalidRecordError, match=f"record 2 of the batch at byte {len(keyed)} has no key") as exc:
        require_keys(keyed + holes)
    assert exc.value.position == len(keyed)
    # a torn or corrupt buffer is a CorruptRecordError, not a pass
    with pytest.raises(CorruptRecordError):
        require_keys(keyed[:-1])


# ------------------------------------------------------------------ codecs


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
@settings(max_examples=20)
@given(data=st.binary(max_size=100_000) | st.binary(max_size=10).map(lambda b: b * 7000))
def test_compress_decompress_block(codec, data):
    block = compress_block(codec, data)
    assert decompress_block(codec, block) == data
    assert decompress_block(codec, memoryview(bytearray(block))) == data


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompress_limit(codec):
    data = b"abc" * 100_000
    block = compress_block(codec, data)
    assert decompress_block(codec, block, len(data)) == data
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress_block(codec, block, len(data) - 1)
    batch = RecordBatch(build([(1, None, data, [])], COMPRESSION_NAMES[codec]))
    with pytest.raises(CorruptRecordError, match="more than"):
        batch.records(decompress_limit=1000)
    assert batch.records()[0].value == data


def test_compress_block_none_and_unknown():
    assert compress_block(0, b"abc") == b"abc"
    with pytest.raises(ValueError):
        compress_block(9, b"abc")
    for codec in (0, 5, 7, -1):
        with pytest.raises(CorruptRecordError):
            decompress_block(codec, b"abc")


def test_gzip_levels_and_multi_member():
    import gzip
    import zlib

    data = b"hello gzip " * 1000
    for level in (1, 9):
        assert decompress_block(1, compress_block(1, data, level)) == data
    # several gzip members back to back, and a zlib stream, are decoded too
    assert decompress_block(1, gzip.compress(data[:500]) + gzip.compress(data[500:])) == data
    assert decompress_block(1, zlib.compress(data)) == data
    with pytest.raises(CorruptRecordError):
        decompress_block(1, gzip.compress(data)[:-12])


def test_snappy_raw_and_xerial_framing():
    import kafka.codec

    data = b"snappy " * 20_000 + bytes(range(256))
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress_block(2, raw) == data
    ours = compress_block(2, data)
    assert ours.startswith(b"\x82SNAPPY\x00")
    assert decompress_block(2, ours) == data
    theirs = kafka.codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=4096)
    assert theirs.startswith(b"\x82SNAPPY\x00")
    assert decompress_block(2, theirs) == data
    assert decompress_block(2, kafka.codec.snappy_encode(data, xerial_compatible=False)) == data
    assert kafka.codec.snappy_decode(ours) == data
    # a whole batch whose records block is raw (unframed) snappy
    plain = build([(i, b"k", b"v%d" % i, [("h", None)]) for i in range(10)])
    body = bytes(cramjam.snappy.compress_raw(plain[HEADER_SIZE:]))
    crafted = bytearray(plain[:HEADER_SIZE] + body)
    struct.pack_into(">i", crafted, 8, len(crafted) - 12)
    struct.pack_into(">h", crafted, 21, 2)
    fix_crc(crafted)
    batch = RecordBatch(crafted)
    batch.validate()
    assert batch.records() == RecordBatch(plain).records()
    # the densest snappy there is (runs of zeros, ~21x) still decodes: the check of the
    # claimed size against the block's size must not refuse it
    zeros = bytes(4 << 20)
    assert decompress_block(2, bytes(cramjam.snappy.compress_raw(zeros))) == zeros
    assert decompress_block(2, compress_block(2, zeros)) == zeros
    # a block claiming more than its bytes can expand to is refused before allocating
    with pytest.raises(CorruptRecordError):
        decompress_block(2, b"\xff\xff\xff\xff\x0f" + b"\x00" * 100)
    # a corrupt xerial frame: block length past the end
    broken = bytearray(ours)
    struct.pack_into(">i", broken, 16, len(ours))
    with pytest.raises(CorruptRecordError):
        decompress_block(2, broken)


def test_records_trailing_bytes_and_lying_counts():
    rec = raw_record(key=b"k", value=b"v")
    with pytest.raises(CorruptRecordError, match="left after"):
        RecordBatch(raw_batch(rec + rec, 1)).records()
    with pytest.raises(CorruptRecordError, match="record 2"):
        RecordBatch(raw_batch(rec + rec, 3)).records()
    assert len(RecordBatch(raw_batch(rec + rec, 2)).records()) == 2
    # a header key that is not UTF-8 is a corrupt record, not a UnicodeDecodeError
    bad_header = raw_record(header_count=1, headers=b"\x04\xff\xfe\x00")
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        RecordBatch(raw_batch(bad_header, 1)).records()


def test_builder_made_without_init_stays_in_bounds():
    # __new__ skips __init__: the builder must still own room for the header it writes
    b = BatchBuilder.__new__(BatchBuilder)
    empty = RecordBatch(b.build())
    empty.validate()
    assert empty.record_count == 0
    b.append(1, b"k", b"v" * 1000)
    batch = RecordBatch(b.build())
    batch.validate()
    assert as_tuples(batch.records()) == [(0, 1, b"k", b"v" * 1000, [])]


def test_negative_decompress_limit_is_refused():
    # the codec libraries read a negative output bound as "no bound at all"
    for codec in (1, 2, 3, 4):
        block = compress_block(codec, b"x" * 1000)
        with pytest.raises(ValueError):
            decompress_block(codec, block, -1)
        batch = RecordBatch(build([(0, None, b"x" * 1000, [])], COMPRESSION_NAMES[codec]))
        with pytest.raises(ValueError):
            batch.records(decompress_limit=-1)


def test_set_log_append_time_stamps_every_record_and_keeps_crc_valid():
    from broker.native import BatchBuilder, RecordBatch

    b = BatchBuilder(compression="lz4")
    for i in range(5):
        b.append(1000 + i, b"k", b"v%d" % i)
    data = bytearray(b.build())
    batch = RecordBatch(data)
    assert batch.timestamp_type == 0
    batch.set_log_append_time(1_800_000_000_000)
    batch.validate()
    assert batch.timestamp_type == 1 and batch.max_timestamp == 1_800_000_000_000
    assert batch.base_timestamp == 1000
    assert [r.timestamp for r in batch.records()] == [1_800_000_000_000] * 5
    with pytest.raises(TypeError):
        RecordBatch(bytes(data)).set_log_append_time(1)


def test_append_repeated_equals_appends_and_view_guards_the_builder():
    from broker.native import BatchBuilder, RecordBatch

    value = b"v" * 100
    a = BatchBuilder()
    a.append(5, b"k", b"first")
    assert a.append_repeated(value, 300, 7, key=b"kk") == 1
    b = BatchBuilder()
    b.append(5, b"k", b"first")
    for _ in range(300):
        b.append(7, b"kk", value)
    assert a.build() == b.build()
    view = a.view()
    assert bytes(view) == b.build() and view.readonly
    RecordBatch(view).validate()
    with pytest.raises(BufferError):
        a.append(1, None, b"x")
    with pytest.raises(BufferError):
        a.reset()
    view.release()
    a.reset()
    a.append_repeated(value, 2)
    assert RecordBatch(a.view()).record_count == 2
    with pytest.raises(ValueError):
        BatchBuilder("zstd").view()


def test_batch_view_made_without_init_does_not_crash():
    # RecordBatch.__new__ skips __init__: the view must not point at nothing (it sees an
    # all-zero header, which validate() rejects)
    v = RecordBatch.__new__(RecordBatch)
    assert v.base_offset == 0 and v.record_count == 0 and v.magic == 0
    with pytest.raises(CorruptRecordError, match="batchLength 0"):
        v.validate()
    assert not v.is_valid()
    assert v.records() == []
    assert v.tobytes() == bytes(61)
    with pytest.raises(TypeError, match="read-only"):
        v.set_base_offset(5)
