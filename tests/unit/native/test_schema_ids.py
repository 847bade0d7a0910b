"""check_schema_ids: Confluent's framing (magic byte 0, a 4-byte big-endian schema id)
of each record's key and value, against the ids a topic allows — the per-record check of
schema validation on produce (broker/registry/validation.py). Hostile input for it is in
test_fuzz_native.py (exercise)."""

import struct

import pytest

from broker.native import BatchBuilder, CorruptRecordError, SchemaIds, check_schema_ids

from ._support import CODECS, raw_batch, raw_record

SHORT, MAGIC, UNKNOWN = 1, 2, 3
KEY, VALUE = 0, 1


def framed(schema_id, payload=b"\x02x"):
    return b"\x00" + struct.pack(">i", schema_id) + payload


def batch(values, codec="none", keys=None, **kwargs):
    b = BatchBuilder(codec, **kwargs)
    for i, v in enumerate(values):
        b.append(1000 + i, None if keys is None else keys[i], v)
    return b.build()


def test_schema_ids_is_a_set_of_int32():
    ids = SchemaIds([7, 3, 3, 2**31 - 1, -5])
    assert list(ids) == [-5, 3, 7, 2**31 - 1] and len(ids) == 4
    assert 3 in ids and 7 in ids and -5 in ids and 2**31 - 1 in ids
    assert 4 not in ids and 2**31 not in ids and 0 not in SchemaIds()
    with pytest.raises(ValueError, match="int32"):
        SchemaIds([2**31])


@pytest.mark.parametrize("codec", CODECS)
def test_wrong_id_unframed_and_valid(codec):
    """The issue's three records in one batch: an id not allowed, an unframed value, a
    valid one — the first two named with their index and problem, in every codec."""
    data = batch([framed(99), b"plain text", framed(7)], codec)
    assert check_schema_ids(data, None, SchemaIds([7])) == [(0, VALUE, UNKNOWN, 99), (1, VALUE, MAGIC, -1)]
    assert check_schema_ids(batch([framed(7)] * 3, codec), None, SchemaIds([7])) is None


def test_nulls_pass_and_short_frames_do_not():
    """A null value (a tombstone) and a null key pass; an empty or 4-byte field is not
    framed (no room for the id)."""
    values = [None, b"", b"\x00\x00\x00\x07", framed(7, b""), framed(7)]
    found = check_schema_ids(batch(values), None, SchemaIds([7]))
    assert found == [(1, VALUE, SHORT, -1), (2, VALUE, SHORT, -1)]  # a 5-byte frame with no payload passes


def test_keys_and_values_are_checked_against_their_own_sets():
    data = batch([framed(2), framed(1), None], keys=[framed(1), framed(2), None])
    assert check_schema_ids(data, SchemaIds([1]), SchemaIds([2])) == [
        (1, KEY, UNKNOWN, 2),
        (1, VALUE, UNKNOWN, 1),
    ]
    assert check_schema_ids(data, SchemaIds([1]), None) == [(1, KEY, UNKNOWN, 2)]
    assert check_schema_ids(data, None, None) is None


def test_indexes_count_across_batches_and_skip_control_batches():
    first = batch([framed(7), framed(7)])
    control = raw_batch(raw_record(key=b"\x00\x00\x00\x00", value=b"\x00\x00\x00\x00\x00\x00"), 1, attributes=0x30)
    second = batch([framed(7), b"x"], codec="lz4")
    assert check_schema_ids(first + control + second, None, SchemaIds([7])) == [(3, VALUE, SHORT, -1)]


def test_max_errors_bounds_the_list():
    data = batch([b"bad"] * 50, keys=[b"bad"] * 50)
    found = check_schema_ids(data, SchemaIds([1]), SchemaIds([1]), max_errors=5)
    assert len(found) == 5 and found[:2] == [(0, KEY, SHORT, -1), (0, VALUE, SHORT, -1)]
    with pytest.raises(ValueError, match="max_errors"):
        check_schema_ids(data, None, SchemaIds([1]), max_errors=0)


@pytest.mark.parametrize(
    "name,data",
    [
        ("truncated batch", batch([framed(7)])[:-3]),
        ("record length past the batch", raw_batch(raw_record(value=framed(7), length=200), 1)),
        ("value length past the record", raw_batch(raw_record(value=framed(7), value_len=90), 1)),
        ("negative value length", raw_batch(raw_record(value=framed(7), value_len=-7), 1)),
        ("more records than bytes", raw_batch(raw_record(value=framed(7)), 5)),
        ("garbage gzip block", raw_batch(b"\x1f\x8b not gzip", 1, attributes=1)),
    ],
)
def test_bad_input_is_a_clear_error(name, data):
    with pytest.raises(CorruptRecordError) as info:
        check_schema_ids(data, SchemaIds([1]), SchemaIds([7]))
    assert "batch at byte" in str(info.value), name
