"""Interop with an encoder and a decoder we did not write: kafka-python's pure-Python
DefaultRecordBatchBuilder / DefaultRecordBatch (RecordBatch v2, magic 2)."""

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker.native import COMPRESSION_NAMES, BatchBuilder, RecordBatch, assign_offsets, batches_to_arrow, iter_batches

from ._support import CODECS

CODE = {name: i for i, name in enumerate(COMPRESSION_NAMES)}

# kafka-python's builder falls back to no compression when compressing does not pay, so
# values are drawn to be compressible often (repeated chunks) but not always.
value_st = st.none() | st.binary(max_size=64) | st.binary(min_size=1, max_size=8).map(lambda b: b * 50)
kp_record_st = st.tuples(
    st.integers(min_value=0, max_value=2**42),  # kafka-python wants ints >= 0
    st.none() | st.binary(max_size=20),
    value_st,
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
)
kp_records_st = st.lists(kp_record_st, min_size=1, max_size=30)


def kafka_python_batch(records, codec, *, producer_id=-1, producer_epoch=-1, base_sequence=-1, transactional=False):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODE[codec],
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for delta, (ts, key, value, headers) in enumerate(records):
        assert builder.append(delta, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


def ours(records, codec, **kwargs):
    b = BatchBuilder(codec, **kwargs)
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    return b.build()


def kafka_python_read(data):
    """[(batch, [records])] read by kafka-python, CRC checked."""
    out = []
    mem = MemoryRecords(data)
    while mem.has_next():
        batch = mem.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc()
        out.append((batch, [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]))
    return out


def expected(records, base_offset=0):
    return [(base_offset + i, ts, key, value, list(headers)) for i, (ts, key, value, headers) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=25)
@given(records=kp_records_st)
def test_kafka_python_batches_parse_with_ours(codec, records):
    data = kafka_python_batch(records, codec)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.compression in (0, CODE[codec])
    assert batch.record_count == len(records)
    assert batch.last_offset_delta == len(records) - 1
    assert batch.max_timestamp == max(r[0] for r in records)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
    assert got == expected(records)
    # the append path works on them too
    buf = bytearray(data)
    assert assign_offsets(buf, 1000, 3)[:3] == (1000 + len(records), 1, len(records))
    assert [r.offset for r in RecordBatch(buf).records()] == list(range(1000, 1000 + len(records)))
    table = batches_to_arrow(buf)
    assert table.column("value").to_pylist() == [r[2] for r in records]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_compressed_batches_really_compressed(codec):
    records = [
        (1_700_000_000_000 + i, b"key-%d" % (i % 5), b"value " * 40, [("trace", b"t%d" % i)]) for i in range(200)
    ]
    data = kafka_python_batch(records, codec, producer_id=77, producer_epoch=3, base_sequence=10, transactional=True)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.compression == CODE[codec]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 10)
    assert batch.is_transactional
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
    assert got == expected(records)


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=25)
@given(records=kp_records_st, base_offset=st.integers(0, 2**40))
def test_our_batches_parse_with_kafka_python(codec, records, base_offset):
    data = ours(records, codec, base_offset=base_offset)
    [(batch, got)] = kafka_python_read(data)
    assert batch.compression_type == CODE[codec]
    assert batch.base_offset == base_offset
    assert batch.records_count == len(records)
    assert batch.last_offset_delta == len(records) - 1
    assert batch.first_timestamp == records[0][0]
    assert batch.max_timestamp == max(r[0] for r in records)
    assert got == expected(records, base_offset)


@pytest.mark.parametrize("codec", CODECS)
def test_our_batch_fields_and_stream_with_kafka_python(codec):
    records = [
        (
            5_000 + (i * 37) % 11,
            None if i % 4 == 0 else b"k%d" % i,
            None if i % 7 == 0 else b"v" * i,
            [("h", None), ("ü", b"%d" % i)],
        )
        for i in range(60)
    ]
    a = ours(
        records,
        codec,
        base_offset=0,
        partition_leader_epoch=9,
        producer_id=123456789,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
    )
    b = ours(records[:3], codec, base_offset=60, timestamp_type=1)
    ctrl = ours(
        [(1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
        "none",
        base_offset=63,
        is_control=True,
        is_transactional=True,
        producer_id=123456789,
        producer_epoch=2,
    )
    stream = a + b + ctrl + a[:30]  # a torn tail is ignored by both
    read = kafka_python_read(stream)
    assert [len(recs) for _, recs in read] == [60, 3, 1]
    (ba, ra), (bb, rb), (bc, _) = read
    assert (ba.leader_epoch, ba.producer_id, ba.producer_epoch, ba.base_sequence) == (9, 123456789, 2, 40)
    assert ba.is_transactional and not ba.is_control_batch
    assert ra == expected(records)
    assert bb.timestamp_type == 1
    assert [r[1] for r in rb] == [max(r[0] for r in records[:3])] * 3  # LogAppendTime
    assert bc.is_control_batch
    assert [b.record_count for b in iter_batches(stream)] == [60, 3, 1]
