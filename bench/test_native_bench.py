"""Native core micro-benchmarks: CRC-32C, batch validate + offset assignment, index lookup,
segment append, Arrow decode. Run with `make bench` (pytest-benchmark); each reports a
throughput in `extra_info` so RESULTS.md can quote GB/s, batches/s and records/s.

No assertion here is about speed: targets live in RESULTS.md, not in pass/fail.
"""

from __future__ import annotations

import os
import zlib

import pytest

from broker.native import (
    BatchBuilder,
    OffsetIndex,
    SchemaIds,
    Segment,
    assign_offsets,
    batches_to_arrow,
    check_schema_ids,
    crc32c,
    crc32c_software,
    iter_batches,
)

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


@pytest.mark.parametrize("value_size", [100, 1024])
def test_schema_ids_check(benchmark, value_size):
    """Validation on produce's per-record check (check_schema_ids: framing and the id's
    membership), 64 batches of 128 KiB of framed values per call, beside the CRC pass every
    produce pays (assign_offsets over the same bytes, extra_info)."""
    value = b"\x00\x00\x00\x00\x07" + os.urandom(value_size - 5)
    b = BatchBuilder()
    while b.size_in_bytes < 131072 - value_size - 20:
        b.append(1_700_000_000_000, None, value)
    data = bytearray(b.build() * 64)
    assign_offsets(data, 0, 0)
    ids = SchemaIds([3, 7, 11])
    assert benchmark(check_schema_ids, data, None, ids) is None
    records = sum(b.record_count for b in iter_batches(data))
    benchmark.extra_info["ns/record"] = benchmark.stats.stats.min / records * 1e9
    benchmark.extra_info["s/GB"] = benchmark.stats.stats.min / len(data) * 1e9
