"""Hostile input for every parser of the native core.

Random bytes, bit flips, truncations, lying lengths and counts, huge varints and
decompression bombs may only ever raise CorruptRecordError / ValueError (or end an
iteration): never another exception, a crash, a hang or a huge allocation. The
allocation part is checked in a subprocess whose address space is capped.
"""

import gzip
import os
import struct
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from broker.native import (
    CorruptRecordError,
    RecordBatch,
    SchemaIds,
    assign_offsets,
    batches_to_arrow,
    check_schema_ids,
    compress_block,
    decompress_block,
    iter_batches,
    read_unsigned_varint,
    read_varint,
    read_varlong,
    require_keys,
    write_unsigned_varint,
    write_varint,
    write_varlong,
)

from ._support import (
    CODECS,
    HEADER_SIZE,
    build,
    fix_crc,
    raw_batch,
    raw_record,
    records_st,
    simple_batch,
    zigzag_varint,
)

ALLOWED = (ValueError, StopIteration)  # CorruptRecordError is a ValueError
LIMIT = 1 << 20  # decompression limit used while fuzzing
KEY_IDS, VALUE_IDS = SchemaIds([1]), SchemaIds([1, 2, 2**31 - 1])  # for check_schema_ids


def attempt(fn, *args, **kwargs):
    """Calls fn; returns its result, or the allowed exception it raised."""
    try:
        return fn(*args, **kwargs)
    except ALLOWED as exc:
        return exc


def exercise(data, positions=(0,)):
    """Every parser over `data`. Anything but ALLOWED propagates and fails the test."""
    data = bytes(data)
    for pos in positions:
        if pos > len(data):
            continue
        batch = attempt(RecordBatch, data, pos)
        if isinstance(batch, RecordBatch):
            # header properties never fail on a constructed view
            (
                batch.base_offset,
                batch.batch_length,
                batch.partition_leader_epoch,
                batch.magic,
                batch.crc,
                batch.attributes,
                batch.compression,
                batch.compression_name,
                batch.timestamp_type,
                batch.is_transactional,
                batch.is_control,
                batch.has_delete_horizon,
                batch.last_offset_delta,
                batch.base_timestamp,
                batch.max_timestamp,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.record_count,
                batch.last_offset,
                batch.next_offset,
                batch.size,
                repr(batch),
                batch.compute_crc(),
                batch.tobytes(),
            )
            batch.is_valid()
            attempt(batch.validate)
            attempt(batch.records, LIMIT)
        for validate in (False, True):
            it = iter_batches(data, pos, validate=validate)
            while True:
                b = attempt(next, it)
                if isinstance(b, StopIteration):
                    break
                if isinstance(b, ValueError):
                    assert isinstance(b, CorruptRecordError)
                    break
                attempt(b.records, LIMIT)
    for validate in (False, True):
        attempt(assign_offsets, bytearray(data), 5, 1, validate)
        attempt(batches_to_arrow, data, validate=validate, decompress_limit=LIMIT)
        attempt(
            batches_to_arrow,
            data,
            2,
            4,
            validate=validate,
            decompress_limit=LIMIT,
            skip_control=False,
            check_utf8=False,
        )
    attempt(require_keys, data, LIMIT)
    for keys, values in ((KEY_IDS, VALUE_IDS), (None, VALUE_IDS), (KEY_IDS, None)):
        found = attempt(check_schema_ids, data, keys, values, 3, LIMIT)
        assert found is None or isinstance(found, (list, ValueError)), found
        if isinstance(found, list):
            assert 1 <= len(found) <= 3 and all(0 <= f[0] and f[1] in (0, 1) for f in found), found


# ------------------------------------------------------------------ random input


@settings(max_examples=2500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes(data):
    exercise(data, positions=(0, 1, len(data) // 2))


@settings(max_examples=1500)
@given(
    st.binary(min_size=HEADER_SIZE - 12, max_size=300),
    st.integers(-1, 2**31 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from(range(8)),
    st.booleans(),
)
def test_random_bodies_behind_a_plausible_header(body, count, lod, codec, control):
    """Random records blocks under a header that passes the length, magic and CRC checks,
    so the record parsers (and the codecs) see them."""
    data = raw_batch(body, count, attributes=codec | (0x20 if control else 0), last_offset_delta=lod)
    exercise(data)
    exercise(data + data[: len(data) // 2])


@settings(max_examples=250)
@given(records_st, st.sampled_from(CODECS), st.data())
def test_bit_flips_with_and_without_crc_repair(records, codec, draw):
    data = build(records, codec)
    for _ in range(6):
        buf = bytearray(data)
        for _ in range(draw.draw(st.integers(1, 4))):
            pos = draw.draw(st.integers(0, len(buf) - 1))
            buf[pos] ^= 1 << draw.draw(st.integers(0, 7))
        exercise(buf)
        if len(buf) >= HEADER_SIZE and struct.unpack_from(">i", buf, 8)[0] + 12 == len(buf):
            exercise(fix_crc(buf))  # past the CRC, into the records


@settings(max_examples=400)
@given(records_st, st.sampled_from(CODECS), st.data())
def test_random_overwrites_of_the_records_block_with_crc_repair(records, codec, draw):
    data = bytearray(build(records, codec))
    assume(len(data) > HEADER_SIZE)
    start = draw.draw(st.integers(HEADER_SIZE, len(data) - 1))
    chunk = draw.draw(st.binary(min_size=1, max_size=16))
    data[start : start + len(chunk)] = chunk[: len(data) - start]
    exercise(fix_crc(data))


@pytest.mark.parametrize("codec", CODECS)
def test_truncations_at_every_length(codec):
    data = simple_batch(4, codec=codec, value_size=3) + simple_batch(2, codec=codec, base_offset=4)
    for cut in range(len(data) + 1):
        piece = data[:cut]
        exercise(piece)
        # and the same truncation with the length field and CRC made to agree, so the
        # records (or compressed) block itself is cut short
        if HEADER_SIZE <= cut:
            buf = bytearray(piece)
            struct.pack_into(">i", buf, 8, cut - 12)
            exercise(fix_crc(buf))


# ------------------------------------------------------------------ crafted lies


def crafted_records():
    big = 2**31 - 1
    r = raw_record
    out = {
        "key length -5": r(key_len=-5, key=b"abc"),
        "key length -2**31": r(key_len=-(2**31)),
        "key length huge": r(key_len=big, key=b"abc"),
        "value length -2": r(value_len=-2),
        "value length huge": r(value_len=big, value=b"x"),
        "header count 2**31-1": r(header_count=big, headers=b"\x02a\x00"),
        "header count -1": r(header_count=-1),
        "header count -2**31": r(header_count=-(2**31)),
        "header key length -1 (null key)": r(header_count=1, headers=b"\x01\x00"),
        "header key length huge": r(header_count=1, headers=zigzag_varint(big) + b"ab\x00"),
        "header value length -7": r(header_count=1, headers=b"\x02a" + zigzag_varint(-7)),
        "header value length huge": r(header_count=1, headers=b"\x02a" + zigzag_varint(big)),
        "record length larger than the batch": r(length=10_000),
        "record length 2**31-1": r(length=big),
        "record length -1": r(length=-1),
        "record length 0": r(length=0),
        "record length 1": r(length=1),
        "record shorter than its fields": r(length=3),
        "record longer than its fields": r(tail=b"\x00\x00\x00"),
        "varint too long (length)": b"\xff" * 12,
        "varint too long (timestamp)": b"\x20\x00" + b"\xff" * 11 + b"\x00" * 20,
        "varint too long (offset delta)": b"\x20\x00\x00" + b"\xff" * 6 + b"\x00" * 20,
        "varint too long (key length)": b"\x20\x00\x00\x00" + b"\xff" * 6 + b"\x00" * 20,
        "int32 varint over 32 bits": b"\x20\x00\x00\x00" + b"\xff\xff\xff\xff\x7f" + b"\x00" * 20,
        "offset delta negative": r(offset_delta=-5),
        "offset delta huge": r(offset_delta=big),
        "timestamp delta extreme": r(ts_delta=-(2**63)),
        "invalid utf-8 header key": r(header_count=1, headers=b"\x04\xc0\xaf\x00"),
        "surrogate header key": r(header_count=1, headers=b"\x06\xed\xa0\x80\x00"),
        "empty": b"",
    }
    return out


CRAFTED = crafted_records()


@pytest.mark.parametrize("name", list(CRAFTED))
@pytest.mark.parametrize("count", [1, 2, 2**31 - 1])
def test_crafted_records(name, count):
    body = CRAFTED[name]
    good = raw_record(key=b"k", value=b"v")
    for block in (body, good + body, body + good):
        data = raw_batch(block, count)
        exercise(data)
        batch = RecordBatch(data)
        batch.validate()  # the CRC is right: only records are wrong
        # compressed with a real codec, the same lies reach the parser after decompression
        for codec in (1, 2, 3, 4):
            exercise(raw_batch(compress_block(codec, block), count, attributes=codec))


@pytest.mark.parametrize(
    "name",
    [
        "key length -5",
        "value length huge",
        "header count 2**31-1",
        "record length -1",
        "record length larger than the batch",
        "varint too long (length)",
        "invalid utf-8 header key",
        "header key length -1 (null key)",
    ],
)
def test_crafted_records_raise_corrupt_record_error(name):
    data = raw_batch(CRAFTED[name], 1)
    with pytest.raises(CorruptRecordError):
        RecordBatch(data).records()
    with pytest.raises(CorruptRecordError):
        batches_to_arrow(data)


def test_lying_batch_headers():
    good = simple_batch(3)
    cases = []
    for length in (-1, -(2**31), 0, HEADER_SIZE - 13, 2**31 - 1, len(good)):
        buf = bytearray(good)
        struct.pack_into(">i", buf, 8, length)
        cases.append(buf)
    for field, value in ((57, 2**31 - 1), (57, -1), (23, -1), (23, 2**31 - 1), (57, 0)):
        buf = bytearray(good)
        struct.pack_into(">i", buf, field, value)
        cases.append(fix_crc(buf))
    for attrs in (5, 6, 7, 0x7FFF, -1):
        buf = bytearray(good)
        struct.pack_into(">h", buf, 21, attrs)
        cases.append(fix_crc(buf))
    for magic in (0, 1, 3, -1):
        buf = bytearray(good)
        struct.pack_into(">b", buf, 16, magic)
        cases.append(buf)
    for buf in cases:
        exercise(buf)
        exercise(buf + good)
        exercise(good + buf)


# ------------------------------------------------------------------ UTF-8 header keys

utf8_edge_cases = st.sampled_from(
    [
        b"\xc0\x80",
        b"\xc1\xbf",
        b"\xe0\x80\x80",
        b"\xe0\x9f\xbf",
        b"\xf0\x80\x80\x80",
        b"\xf0\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80",
        b"\xf5\x80\x80\x80",
        b"\xed\xa0\x80",
        b"\xed\xbf\xbf",
        b"\xed\x9f\xbf",
        b"\xee\x80\x80",
        b"\xef\xbf\xbf",
        b"\xf4\x8f\xbf\xbf",
        b"\xc2",
        b"\xe2\x82",
        b"\xf0\x9f\x98",
        b"\x80",
        b"\xbf",
        b"\xfe",
        b"\xff",
        b"\x00",
    ]
)
header_key_bytes = st.one_of(
    st.binary(max_size=8),
    st.text(max_size=4).map(lambda t: t.encode("utf-8")),
    st.lists(st.one_of(utf8_edge_cases, st.text(max_size=2).map(lambda t: t.encode("utf-8"))), max_size=4).map(
        b"".join
    ),
    st.integers(0xD800, 0xDFFF).map(lambda c: chr(c).encode("utf-8", "surrogatepass")),
)


@settings(max_examples=1000)
@given(header_key_bytes)
def test_header_key_utf8_validation_agrees_with_python(key):
    """Header keys are strict UTF-8 (no overlongs, surrogates, or code points past
    U+10FFFF): exactly what Python's decoder accepts."""
    headers = zigzag_varint(len(key)) + key + zigzag_varint(1) + b"v"
    data = raw_batch(raw_record(key=b"k", value=b"v", header_count=1, headers=headers), 1)
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(CorruptRecordError, match="UTF-8"):
            RecordBatch(data).records()
        with pytest.raises(CorruptRecordError, match="UTF-8"):
            batches_to_arrow(data)
    else:
        assert RecordBatch(data).records()[0].headers == [(text, b"v")]
        table = batches_to_arrow(data)
        table.validate(full=True)
        assert table.column("headers").to_pylist() == [[{"key": text, "value": b"v"}]]


# ------------------------------------------------------------------ varints


@settings(max_examples=1000)
@given(st.binary(max_size=24), st.integers(0, 24))
def test_varint_readers_on_random_bytes(data, pos):
    for fn in (read_varint, read_varlong, read_unsigned_varint):
        result = attempt(fn, data, pos)
        if isinstance(result, tuple):
            value, nxt = result
            assert pos < nxt <= len(data)
            assert nxt - pos <= (10 if fn is read_varlong else 5)
        else:
            assert isinstance(result, ValueError)


@pytest.mark.parametrize("fn,max_len", [(read_varint, 5), (read_varlong, 10), (read_unsigned_varint, 5)])
def test_huge_varints(fn, max_len):
    for n in range(1, 16):
        data = b"\xff" * n + b"\x01"
        result = attempt(fn, data)
        if n + 1 > max_len:
            assert isinstance(result, ValueError), (n, result)
    with pytest.raises(ValueError):
        fn(b"\x80" * 3)  # truncated
    with pytest.raises(ValueError):
        fn(b"", 0)
    with pytest.raises(ValueError):
        fn(b"\x01", 2)
    with pytest.raises(ValueError):
        fn(b"\x01", -1)
    if max_len == 5:
        with pytest.raises(ValueError):
            fn(b"\xff\xff\xff\xff\x7f")  # more than 32 bits
    else:
        # like Kafka's ByteUtils.readVarlong, a 10th byte is taken for its low bit only
        assert fn(b"\xff" * 9 + b"\x01") == (-(2**63), 10)
        assert fn(b"\xfe" + b"\xff" * 8 + b"\x01") == (2**63 - 1, 10)


@settings(max_examples=300)
@given(
    st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 - 1), st.binary(max_size=3)
)
def test_varint_round_trips(i32, i64, u32, prefix):
    assert read_varint(prefix + write_varint(i32), len(prefix)) == (i32, len(prefix) + len(write_varint(i32)))
    assert read_varlong(prefix + write_varlong(i64), len(prefix))[0] == i64
    assert read_unsigned_varint(prefix + write_unsigned_varint(u32), len(prefix))[0] == u32
    assert write_varint(i32) == zigzag_varint(i32)
    assert write_varlong(i64) == zigzag_varint(i64)


def test_varint_writer_ranges():
    for fn, bad in (
        (write_varint, 2**31),
        (write_varint, -(2**31) - 1),
        (write_varlong, 2**63),
        (write_unsigned_varint, -1),
        (write_unsigned_varint, 2**32),
    ):
        with pytest.raises(OverflowError):
            fn(bad)


# ------------------------------------------------------------------ codecs


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
@settings(max_examples=400)
@given(data=st.binary(max_size=300))
def test_decompress_random_bytes(codec, data):
    result = attempt(decompress_block, codec, data, LIMIT)
    assert isinstance(result, (bytes, ValueError))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
@settings(max_examples=200)
@given(payload=st.binary(max_size=3000), flips=st.lists(st.integers(0, 10**6), max_size=3), cut=st.integers(0, 10**6))
def test_decompress_corrupted_blocks(codec, payload, flips, cut):
    block = bytearray(compress_block(codec, payload * 3))
    for f in flips:
        block[f % len(block)] ^= 1 << (f % 8)
    for piece in (block, block[: cut % (len(block) + 1)]):
        result = attempt(decompress_block, codec, bytes(piece), LIMIT)
        assert isinstance(result, (bytes, ValueError))


def snappy_preamble(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def hostile_blocks():
    """Small blocks that claim (or expand to) enormous outputs."""
    lz4_header_big = (
        b"\x04\x22\x4d\x18"  # magic
        + bytes([0x68, 0x70])  # FLG: version 01, block indep, content size
        + struct.pack("<Q", 2**62)
        + b"\x00"
    )
    zstd_big = bytes.fromhex("28b52ffd") + bytes([0xE4]) + struct.pack("<Q", 2**62) + b"\x00" * 8
    return {
        1: [gzip.compress(b"\x00" * (8 << 20)), b"\x1f\x8b\x08\x00" + b"\x00" * 6],
        2: [
            snappy_preamble(2**32 - 1),
            snappy_preamble(2**32 - 1) + b"\x00" * 40,
            snappy_preamble(LIMIT + 1) + b"\x00" * 10,
            b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">i", 5) + snappy_preamble(2**32 - 1),
            b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + struct.pack(">i", -1),
            b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00",
        ],
        3: [lz4_header_big, compress_block(3, b"\x00" * (8 << 20))],
        4: [zstd_big, compress_block(4, b"\x00" * (8 << 20))],
    }


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bombs_and_lying_sizes(codec):
    for block in hostile_blocks()[codec]:
        with pytest.raises(CorruptRecordError):
            decompress_block(codec, block, LIMIT)
        batch = raw_batch(block, 1, attributes=codec)
        with pytest.raises(CorruptRecordError):
            RecordBatch(batch).records(LIMIT)
        with pytest.raises(CorruptRecordError):
            batches_to_arrow(batch, decompress_limit=LIMIT)


# ------------------------------------------------------------------ memory

CAPPED_SCRIPT = textwrap.dedent(r"""
    import resource, struct, sys
    sys.path.insert(0, sys.argv[1])
    import pyarrow, zstandard, lz4.frame, cramjam, gzip, zlib   # load before capping
    from broker.native import (BatchBuilder, RecordBatch, batches_to_arrow, decompress_block,
                               compress_block, crc32c, CorruptRecordError)
    from native.test_fuzz_native import hostile_blocks, raw_batch

    def vm_bytes():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024

    # valid batches to decode under the cap, with the default 1 GiB decompress limit
    valid = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        b = BatchBuilder(codec)
        for i in range(50):
            b.append(i, b"k%d" % i, b"value-%d " % i * 20, [("h", b"v")])
        valid.append(b.build())
    hostile = [(codec, block) for codec, blocks in hostile_blocks().items() for block in blocks]
    # a batch that claims 2**31-1 records in a few bytes, with a valid CRC
    liar = bytearray(valid[0])
    struct.pack_into(">i", liar, 57, 2**31 - 1)
    struct.pack_into(">I", liar, 17, crc32c(bytes(liar[21:])))

    cap = vm_bytes() + (int(sys.argv[2]) << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))

    for data in valid:
        recs = RecordBatch(data).records()
        assert len(recs) == 50, len(recs)
        assert batches_to_arrow(data).num_rows == 50
    for codec, block in hostile:
        # with the default 1 GiB limit: a block may decode (the 8 MiB bombs are within
        # it) or be refused, but never by running out of memory
        for call in (lambda: decompress_block(codec, block),
                     lambda: RecordBatch(raw_batch(block, 1, attributes=codec)).records(),
                     lambda: batches_to_arrow(raw_batch(block, 1, attributes=codec))):
            try:
                call()
            except CorruptRecordError:
                pass
        try:
            decompress_block(codec, block, 1 << 20)
        except CorruptRecordError:
            pass
        else:
            raise AssertionError(f"codec {codec}: hostile block decoded")
    for fn in (lambda: RecordBatch(liar).records(), lambda: batches_to_arrow(liar)):
        try:
            fn()
        except CorruptRecordError:
            pass
        else:
            raise AssertionError("lying record count accepted")
    print("OK")
""")


def test_no_huge_allocations_under_a_capped_address_space(tmp_path):
    """Decoding valid batches with the default (1 GiB) decompress limit and decoding
    hostile blocks that claim gigabytes must fit in 512 MiB more address space."""
    script = tmp_path / "capped.py"
    script.write_text(CAPPED_SCRIPT)
    tests_unit = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, str(script), tests_unit, "512"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), (
        f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    )


def test_gzip_members_are_bounded():
    # concatenated gzip members are read (a few), but a block of thousands of tiny
    # members is refused instead of taking quadratic time (each member copies the rest)
    import gzip

    a, b = gzip.compress(b"hello "), gzip.compress(b"world")
    assert decompress_block(1, a + b) == b"hello world"
    assert decompress_block(1, gzip.compress(b"x") * 64) == b"x" * 64
    empty = gzip.compress(b"")
    with pytest.raises(CorruptRecordError, match="more than 64 gzip members"):
        decompress_block(1, empty * 60_000)
