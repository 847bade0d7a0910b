"""Shared strategies and helpers for the native-core tests (not a test module)."""

import struct

from hypothesis import strategies as st

from broker.native import BatchBuilder, crc32c

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
HEADER_SIZE = 61

# Header field offsets (records.pxd), used to craft and check bytes independently of the
# implementation under test.
HEADER = struct.Struct(">qiibIhiqqqhii")
OFF_CRC = 17
OFF_ATTRIBUTES = 21

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

header_keys = st.text(max_size=12)  # any unicode, incl. empty
header_values = st.none() | st.binary(max_size=24)
headers_st = st.lists(st.tuples(header_keys, header_values), max_size=4)
keys_st = st.none() | st.binary(max_size=40)
values_st = st.none() | st.binary(max_size=300)

# (timestamp, key, value, headers); timestamps jump around so that deltas go negative
record_st = st.tuples(
    st.integers(min_value=-(2**40), max_value=2**45),
    keys_st,
    values_st,
    headers_st,
)
records_st = st.lists(record_st, min_size=1, max_size=40)


def build(records, codec="none", **kwargs):
    """One batch holding `records` [(ts, key, value, headers)]."""
    b = BatchBuilder(codec, **kwargs)
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    return b.build()


def simple_batch(n=3, codec="none", base_ts=1_000, value_size=20, base_offset=0, **kwargs):
    b = BatchBuilder(codec, base_offset=base_offset, **kwargs)
    for i in range(n):
        b.append(base_ts + i, b"k%d" % i, (b"v%d-" % i) * value_size, [("h", b"%d" % i)])
    return b.build()


def header_of(data, pos=0):
    """The 13 header fields, parsed with struct (an oracle independent of RecordBatch)."""
    return HEADER.unpack_from(data, pos)


def fix_crc(buf, pos=0):
    """Recomputes the CRC of the batch at `pos` of bytearray `buf` (after crafting it)."""
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    end = pos + 12 + length
    struct.pack_into(">I", buf, pos + OFF_CRC, crc32c(bytes(buf[pos + OFF_ATTRIBUTES : end])))
    return buf


def zigzag_varint(v):
    """Kafka's zigzag varint encoding (pure Python, for crafting inputs)."""
    u = (v << 1) ^ (v >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def raw_batch(body, record_count, *, attributes=0, last_offset_delta=None, base_offset=0, base_ts=0, max_ts=0):
    """A batch header around an arbitrary (possibly hostile) records body, valid CRC."""
    if last_offset_delta is None:
        last_offset_delta = max(record_count - 1, 0)
    header = HEADER.pack(
        base_offset,
        HEADER_SIZE - 12 + len(body),
        -1,
        2,
        0,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        -1,
        -1,
        -1,
        record_count,
    )
    return bytes(fix_crc(bytearray(header + body)))


def raw_record(
    *,
    attributes=b"\x00",
    ts_delta=0,
    offset_delta=0,
    key_len=None,
    key=b"",
    value_len=None,
    value=b"",
    header_count=None,
    headers=b"",
    length=None,
    tail=b"",
):
    """One record; every length field can be overridden with a lie."""
    body = (
        attributes
        + zigzag_varint(ts_delta)
        + zigzag_varint(offset_delta)
        + zigzag_varint(len(key) if key_len is None else key_len)
        + key
        + zigzag_varint(len(value) if value_len is None else value_len)
        + value
        + zigzag_varint(0 if header_count is None else header_count)
        + headers
        + tail
    )
    return zigzag_varint(len(body) if length is None else length) + body
