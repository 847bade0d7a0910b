"""CRC-32C: known vectors on every path, hardware vs table, incremental use, an independent
pure-Python oracle (kafka-python's), and the buffer types accepted without a copy."""

import array
import mmap
import random

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record import _crc32c as kafka_crc32c

from broker.native import crc32c, crc32c_hardware, crc32c_hardware_available, crc32c_implementation, crc32c_software

HW = crc32c_hardware_available()

PATHS = [pytest.param(crc32c, id="crc32c"), pytest.param(crc32c_software, id="software")]
if HW:
    PATHS.append(pytest.param(crc32c_hardware, id="hardware"))

# RFC 3720 (iSCSI) appendix B.4, plus the customary check value of "123456789"
ISCSI_READ_PDU = bytes.fromhex(
    "01c000000000000000000000000000001400000000000400000000140000001828000000000000000200000000000000"
)
VECTORS = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (ISCSI_READ_PDU, 0xD9963A56),
    (b"123456789", 0xE3069283),
    (b"", 0),
]

# lengths around every boundary of the implementations: the 8-byte words, the three
# interleaved lanes of 256 and 8192 bytes, with odd tails
EDGE_LENGTHS = sorted(
    {
        0,
        1,
        2,
        3,
        7,
        8,
        9,
        15,
        16,
        17,
        63,
        64,
        65,
        255,
        256,
        257,
        3 * 256 - 1,
        3 * 256,
        3 * 256 + 1,
        3 * 256 + 7,
        2 * 3 * 256 + 5,
        4095,
        4096,
        8191,
        8192,
        8193,
        3 * 8192 - 1,
        3 * 8192,
        3 * 8192 + 1,
        3 * 8192 + 3 * 256 + 13,
        2 * 3 * 8192 + 9,
        65535,
        65536,
        65537,
        100_003,
    }
)


def oracle(data, crc=0):
    """kafka-python's pure-Python table implementation."""
    return kafka_crc32c.crc_finalize(kafka_crc32c.crc_update(crc, bytes(data)))


@pytest.mark.parametrize("fn", PATHS)
@pytest.mark.parametrize("data,expected", VECTORS, ids=[f"v{i}" for i in range(len(VECTORS))])
def test_known_vectors(fn, data, expected):
    assert fn(data) == expected


def test_oracle_agrees_with_vectors():
    for data, expected in VECTORS:
        assert oracle(data) == expected


def test_implementation_name():
    name = crc32c_implementation()
    assert name in ("sse4.2", "armv8-crc", "slicing-by-8")
    assert (name != "slicing-by-8") == HW


@pytest.mark.skipif(HW, reason="the CPU has CRC-32C instructions")
def test_hardware_unavailable_raises():
    with pytest.raises(RuntimeError):
        crc32c_hardware(b"x")


def test_paths_agree_on_lengths_and_alignments():
    rng = random.Random(1234)
    buf = rng.randbytes(max(EDGE_LENGTHS) + 64)
    mv = memoryview(buf)
    for length in EDGE_LENGTHS:
        for start in (0, 1, 3, 5, 7, 8, 13):
            piece = mv[start : start + length]
            expected = crc32c_software(piece)
            assert crc32c(piece) == expected, (length, start)
            if HW:
                assert crc32c_hardware(piece) == expected, (length, start)


def test_against_pure_python_oracle_on_edges():
    rng = random.Random(99)
    for length in EDGE_LENGTHS:
        if length > 30_000:
            continue  # the pure-Python oracle is slow
        data = rng.randbytes(length)
        assert crc32c(data) == oracle(data), length


@settings(max_examples=150)
@given(st.binary(max_size=2000), st.integers(min_value=0, max_value=15))
def test_against_pure_python_oracle(data, start):
    piece = memoryview(data)[min(start, len(data)) :]
    expected = oracle(piece)
    assert crc32c(piece) == expected
    assert crc32c_software(piece) == expected
    if HW:
        assert crc32c_hardware(piece) == expected


@settings(max_examples=150)
@given(st.binary(max_size=3000), st.binary(max_size=3000), st.integers(0, 2**32 - 1))
def test_incremental(a, b, seed_crc):
    for fn in (crc32c, crc32c_software) + ((crc32c_hardware,) if HW else ()):
        assert fn(b, fn(a)) == fn(a + b)
        # continuing from an arbitrary crc is the same as having hashed some prefix
        assert fn(b, fn(a, seed_crc)) == fn(a + b, seed_crc)


def test_incremental_long_pieces():
    rng = random.Random(5)
    data = rng.randbytes(3 * 8192 * 3 + 1234)
    whole = crc32c(data)
    for cut in (1, 255, 3 * 256 + 1, 8193, 3 * 8192 + 5, len(data) - 3):
        assert crc32c(data[cut:], crc32c(data[:cut])) == whole
        assert crc32c_software(data[cut:], crc32c_software(data[:cut])) == whole


def test_large_buffer_releases_gil_path():
    # >= 64 KiB takes the nogil branch; results must not depend on it
    rng = random.Random(7)
    data = rng.randbytes(1 << 20)
    assert crc32c(data) == crc32c_software(data)
    assert crc32c(data[:65535]) == crc32c_software(data[:65535])


def test_buffer_types(tmp_path):
    payload = b"123456789"
    expected = 0xE3069283
    import pyarrow as pa

    path = tmp_path / "f"
    path.write_bytes(b"xx" + payload)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        assert crc32c(memoryview(m)[2:]) == expected
        assert crc32c(m) == crc32c(b"xx" + payload)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert crc32c(m) == crc32c(b"xx" + payload)

    assert crc32c(payload) == expected
    assert crc32c(bytearray(payload)) == expected
    assert crc32c(memoryview(payload)) == expected
    assert crc32c(memoryview(b"ab" + payload + b"cd")[2:-2]) == expected
    assert crc32c(pa.py_buffer(payload)) == expected
    assert crc32c(pa.py_buffer(b"zz" + payload).slice(2)) == expected
    assert crc32c(array.array("B", payload)) == expected
    # a multi-byte item array is summed over its raw bytes
    ints = array.array("I", [1, 2, 3, 0xDEADBEEF])
    assert crc32c(ints) == crc32c(ints.tobytes())
    # a 2-D C-contiguous view is contiguous, so it is accepted
    assert crc32c(memoryview(bytes(range(12))).cast("B", (3, 4))) == crc32c(bytes(range(12)))


def test_memoryview_is_not_a_snapshot():
    # the buffer is read where it lies: later writes through the exporter are seen
    buf = bytearray(b"a" * 100)
    mv = memoryview(buf)
    before = crc32c(mv)
    buf[50] = ord("b")
    assert crc32c(mv) != before
    assert crc32c(mv) == crc32c(bytes(buf))


def test_non_contiguous_raises():
    data = memoryview(bytes(range(64)))[::2]
    assert not data.contiguous
    for fn in (crc32c, crc32c_software) + ((crc32c_hardware,) if HW else ()):
        with pytest.raises((BufferError, ValueError, TypeError)):
            fn(data)


@pytest.mark.parametrize("bad", ["text", 12, None, 1.5, [1, 2]])
def test_non_buffers_raise_type_error(bad):
    with pytest.raises(TypeError):
        crc32c(bad)


def test_crc_argument_range():
    assert crc32c(b"", 0xFFFFFFFF) == 0xFFFFFFFF
    with pytest.raises(OverflowError):
        crc32c(b"", -1)
    with pytest.raises(OverflowError):
        crc32c(b"", 2**32)


def test_concurrent_use_without_the_gil():
    # buffers of 64 KiB and more are summed with the GIL released: threads must agree
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(77)
    buffers = [rng.randbytes(rng.choice([65536, 200_003, 3 * 8192 * 4 + 1])) for _ in range(8)]
    expected = [crc32c_software(b) for b in buffers]
    fns = [crc32c, crc32c_software] + ([crc32c_hardware] if HW else [])
    with ThreadPoolExecutor(4) as pool:
        for fn in fns:
            for _ in range(5):
                assert list(pool.map(fn, buffers)) == expected
