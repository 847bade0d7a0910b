"""Native core micro-benchmarks: CRC-32C, batch validate + offset assignment, index lookup,
segment append, Arrow decode. Run with `make bench` (pytest-benchmark); each reports a
throughput in `extra_info` so RESULTS.md can quote GB/s, batches/s and records/s.

No assertion here is about speed: targets live in RESULTS.md, not in pass/fail.
"""

from __future__ import annotations

import os
import zlib

import pytest

from broker.native import BatchBuilder, OffsetIndex, Segment, assign_offsets, batches_to_arrow, crc32c, crc32c_software

MIB = 1 << 20


@pytest.fixture(scope="module")
def one_mib():
    return os.urandom(MIB)


def test_crc32c_1mib(benchmark, one_mib):
    benchmark.extra_info["bytes"] = MIB
    result = benchmark(crc32c, one_mib)
    assert result == crc32c_software(one_mib)
    benchmark.extra_info["GB/s"] = MIB / benchmark.stats.stats.min / 1e9


def test_zlib_crc32_1mib(benchmark, one_mib):
    """The comparison point: zlib's CRC-32 on the same buffer."""
    benchmark(zlib.crc32, one_mib)
    benchmark.extra_info["GB/s"] = MIB / benchmark.stats.stats.min / 1e9


def _batches(count: int, batch_bytes: int, value_size: int = 100) -> bytearray:
    value = os.urandom(value_size)
    b = BatchBuilder()
    while b.size_in_bytes < batch_bytes - value_size - 20:
        b.append(1_700_000_000_000, None, value)
    one = b.build()
    return bytearray(one * count)


def test_validate_assign_16k_batches(benchmark):
    """validate (CRC-32C) + offset assignment in place, 64 batches of 16 KiB per call."""
    data = _batches(64, 16384)
    nxt = benchmark(assign_offsets, data, 0, 0)
    assert nxt[1] == 64
    benchmark.extra_info["batches/s"] = 64 / benchmark.stats.stats.min
    benchmark.extra_info["GB/s"] = len(data) / benchmark.stats.stats.min / 1e9


def test_index_lookup(benchmark, tmp_path):
    ix = OffsetIndex(str(tmp_path / "0.index"), 0, 10 * MIB)
    for i in range(100_000):
        ix.append(i * 10, i * 4096 % (1 << 30))
    benchmark(ix.lookup, 555_555)
    benchmark.extra_info["ns/lookup"] = benchmark.stats.stats.min * 1e9
    ix.close()


def test_segment_append_1mib(benchmark, tmp_path):
    data = _batches(64, 16384)
    assign_offsets(data, 0, 0)
    seg = Segment(str(tmp_path), 0)
    state = {"next": 0}

    def append():
        buf = bytearray(data)
        state["next"] = assign_offsets(buf, state["next"], 0)[0]
        seg.append(buf)

    benchmark.pedantic(append, rounds=50, iterations=1)
    benchmark.extra_info["MB/s"] = len(data) / benchmark.stats.stats.min / 1e6
    seg.close()


def test_arrow_decode_100b(benchmark):
    data = _batches(160, 16384)
    assign_offsets(data, 0, 0)
    table = benchmark(batches_to_arrow, data)
    benchmark.extra_info["records/s"] = table.num_rows / benchmark.stats.stats.min
    assert table.num_rows > 10_000
