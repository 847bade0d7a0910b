"""batches_to_arrow against the record-by-record decode (RecordBatch.records())."""

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from broker.native import BatchBuilder, CorruptRecordError, arrow_schema, assign_offsets, batches_to_arrow, iter_batches

from ._support import CODECS, HEADER_SIZE, fix_crc, raw_batch, raw_record, records_st

COLUMNS = ["offset", "timestamp", "key", "value", "headers"]


def rows_of(table):
    assert table.schema == arrow_schema()
    assert table.schema.names == COLUMNS
    table.validate(full=True)
    cols = {
        "offset": table.column("offset").to_pylist(),
        "timestamp": table.column("timestamp").cast(pa.int64()).to_pylist(),
        "key": table.column("key").to_pylist(),
        "value": table.column("value").to_pylist(),
        "headers": [[(h["key"], h["value"]) for h in hs] for hs in table.column("headers").to_pylist()],
    }
    return list(zip(*(cols[c] for c in COLUMNS)))


def oracle_rows(data, start=None, end=None, skip_control=True):
    out = []
    for batch in iter_batches(data):
        if skip_control and batch.is_control:
            continue
        for r in batch.records():
            if (start is None or r.offset >= start) and (end is None or r.offset < end):
                out.append((r.offset, r.timestamp, r.key, r.value, r.headers))
    return out


def stream_of(batches_records, codecs, ts_types, base=0):
    """Batches back to back with dense offsets from `base`."""
    parts = []
    for records, codec, ts_type in zip(batches_records, codecs, ts_types):
        b = BatchBuilder(codec, timestamp_type=ts_type)
        for ts, key, value, headers in records:
            b.append(ts, key, value, headers)
        parts.append(b.build())
    buf = bytearray(b"".join(parts))
    assign_offsets(buf, base)
    return bytes(buf)


@settings(max_examples=60)
@given(
    batches=st.lists(records_st, min_size=1, max_size=5),
    codecs=st.lists(st.sampled_from(CODECS), min_size=5, max_size=5),
    ts_types=st.lists(st.sampled_from([0, 1]), min_size=5, max_size=5),
    base=st.integers(0, 2**40),
    data=st.data(),
)
def test_matches_record_decode(batches, codecs, ts_types, base, data):
    stream = stream_of(batches, codecs, ts_types, base)
    total = sum(len(b) for b in batches)
    table = batches_to_arrow(stream)
    assert table.num_rows == total
    assert rows_of(table) == oracle_rows(stream)
    # offset windows
    start = data.draw(st.one_of(st.none(), st.integers(base - 2, base + total + 2)))
    end = data.draw(st.one_of(st.none(), st.integers(base - 2, base + total + 2)))
    assert rows_of(batches_to_arrow(stream, start, end)) == oracle_rows(stream, start, end)
    # a torn tail is ignored, in any buffer type
    # (shorter than the first batch: a copy of that batch whole is no torn tail; a batch of
    # one record of nulls is 68 bytes, under HEADER_SIZE + 20)
    first = 12 + int.from_bytes(stream[8:12], "big")
    cut = data.draw(st.integers(1, min(HEADER_SIZE + 20, first - 1)))
    torn = stream + stream[:cut]
    for buf in (torn, bytearray(torn), memoryview(torn), pa.py_buffer(torn)):
        assert rows_of(batches_to_arrow(buf, validate=False)) == oracle_rows(stream)


@pytest.mark.parametrize("codec", CODECS)
def test_nulls_log_append_time_and_many_records(codec):
    b = BatchBuilder(codec, timestamp_type=1)
    expected_ts = 1_700_000_000_000 + 4999
    for i in range(5000):
        b.append(
            1_700_000_000_000 + (i if i != 17 else 4999),
            None if i % 3 == 0 else b"k%d" % i,
            None if i % 5 == 0 else (b"" if i % 7 == 0 else b"v" * (i % 50)),
            [("a", None), ("ü", b"x")] if i % 2 else None,
        )
    data = b.build()
    table = batches_to_arrow(data)
    rows = rows_of(table)
    assert rows == oracle_rows(data)
    assert all(ts == expected_ts for _, ts, *_ in rows)
    assert table.column("key").null_count == len(range(0, 5000, 3))
    assert table.column("value").null_count == len(range(0, 5000, 5))
    assert table.column("headers").null_count == 0
    assert table.column("timestamp").type == pa.timestamp("ms")


def test_control_batches_are_skipped():
    plain = BatchBuilder()
    plain.append(10, b"k", b"v")
    plain.append(11, None, b"w")
    ctrl = BatchBuilder(is_control=True, is_transactional=True, producer_id=5, producer_epoch=0)
    ctrl.append(12, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    buf = bytearray(plain.build() + ctrl.build() + plain.build())
    assign_offsets(buf, 100)
    rows = rows_of(batches_to_arrow(buf))
    assert [r[0] for r in rows] == [100, 101, 103, 104]
    with_ctrl = rows_of(batches_to_arrow(buf, skip_control=False))
    assert [r[0] for r in with_ctrl] == [100, 101, 102, 103, 104]
    assert with_ctrl == oracle_rows(buf, skip_control=False)


def test_offset_filtering_edges():
    records = [[(i, b"k", b"v%d" % i, [])] * 3 for i in range(4)]
    stream = stream_of(records, ["none", "gzip", "zstd", "none"], [0] * 4, base=10)
    offsets = list(range(10, 22))
    for start in range(8, 24):
        for end in range(8, 24):
            got = [r[0] for r in rows_of(batches_to_arrow(stream, start, end))]
            assert got == [o for o in offsets if start <= o < end], (start, end)


def test_empty_inputs_give_empty_tables():
    empty_batch = BatchBuilder().build()
    one = BatchBuilder()
    one.append(0, b"k", b"v")
    for data in (b"", b"\x00" * 5, empty_batch, one.build()[:40], empty_batch * 3):
        table = batches_to_arrow(data)
        assert table.num_rows == 0
        assert rows_of(table) == []
    # everything filtered away
    assert batches_to_arrow(one.build(), 5, 10).num_rows == 0
    assert batches_to_arrow(one.build(), 0, 0).num_rows == 0


def test_validation_and_corruption():
    b = BatchBuilder()
    for i in range(3):
        b.append(i, b"k", b"v", [("h", b"x")])
    good = b.build()
    bad_crc = bytearray(good + good)
    bad_crc[len(good) + 40] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC") as exc:
        batches_to_arrow(bad_crc)
    assert exc.value.position == len(good)
    # without validation the records still parse (the flip hit a value byte)
    assert batches_to_arrow(bad_crc, validate=False).num_rows == 6
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    for validate in (True, False):
        with pytest.raises(CorruptRecordError):
            batches_to_arrow(bad_magic, validate=validate)
    # a lying record inside a valid CRC
    liar = raw_batch(raw_record(key_len=-5), 1)
    with pytest.raises(CorruptRecordError):
        batches_to_arrow(liar)
    too_many = raw_batch(raw_record(key=b"k"), 2)
    with pytest.raises(CorruptRecordError):
        batches_to_arrow(too_many)
    # invalid UTF-8 in a header key: refused unless check_utf8=False
    bad_key = raw_batch(raw_record(header_count=1, headers=b"\x04\xff\xfe\x00"), 1)
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        batches_to_arrow(bad_key)
    assert batches_to_arrow(bad_key, check_utf8=False).num_rows == 1


def test_decompress_limit_applies():
    b = BatchBuilder("zstd")
    b.append(0, None, b"\x00" * 100_000)
    data = b.build()
    with pytest.raises(CorruptRecordError, match="more than"):
        batches_to_arrow(data, decompress_limit=50_000)
    assert batches_to_arrow(data).column("value").to_pylist() == [b"\x00" * 100_000]


def test_lying_record_count_is_not_trusted_for_allocation():
    b = BatchBuilder()
    b.append(0, b"k", b"v")
    liar = bytearray(b.build())
    struct.pack_into(">i", liar, 57, 2**31 - 1)
    fix_crc(liar)
    with pytest.raises(CorruptRecordError):
        batches_to_arrow(liar)


def test_schema_is_stable():
    schema = arrow_schema()
    assert schema is arrow_schema()
    assert [f.name for f in schema] == COLUMNS
    assert not schema.field("offset").nullable and not schema.field("timestamp").nullable
    assert schema.field("key").nullable and schema.field("value").nullable
    assert not schema.field("headers").nullable
    item = schema.field("headers").type.value_type
    assert [f.name for f in item] == ["key", "value"]
    assert item.field("key").type == pa.string() and not item.field("key").nullable
