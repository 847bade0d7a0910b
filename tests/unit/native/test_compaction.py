"""broker._native.compaction against a plain-Python oracle: the latest record per key
survives at its original offset, superseded ones go, tombstones go only past the
horizon, batches stay valid (CRC) and keep their codecs; hostile input only raises."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from broker._native.compaction import OffsetMap, filter_batches
from broker.native import BatchBuilder, CorruptRecordError, assign_offsets, iter_batches

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def make_log(rng: random.Random, batches: int, keys: int, tombstone_rate: float = 0.1):
    data = bytearray()
    written = []  # (offset, key, value, batch max ts)
    off = 0
    for i in range(batches):
        b = BatchBuilder(rng.choice(CODECS))
        n = rng.randrange(1, 8)
        ts = 1000 * (i + 1)
        recs = []
        for _ in range(n):
            key = None if rng.random() < 0.05 else b"key-%d" % rng.randrange(keys)
            value = None if (key is not None and rng.random() < tombstone_rate) else rng.randbytes(rng.randrange(0, 40))
            b.append(ts, key, value)
            recs.append((key, value))
        buf = bytearray(b.build())
        base = off
        off = assign_offsets(buf, off)[0]
        data += buf
        written += [(base + j, k, v, ts) for j, (k, v) in enumerate(recs)]
    return bytes(data), written


def records_of(data):
    out = []
    for batch in iter_batches(data, validate=True):
        for r in batch.records():
            out.append((r.offset, r.key, r.value))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_filter_matches_oracle(seed):
    rng = random.Random(seed)
    data, written = make_log(rng, rng.randrange(1, 40), rng.randrange(1, 20))
    m = OffsetMap(10_000)
    assert m.add_batches(data) == written[-1][0] + 1
    latest = {}
    for off, k, _v, _ in written:
        if k is not None:
            latest[k] = off
    for k, off in latest.items():
        assert m.get(k) == off
    out, kept, removed = filter_batches(data, m)
    want = [(off, k, v) for off, k, v, _ in written if k is None or latest[k] == off]
    assert records_of(out) == want
    assert kept == len(want) and removed == len(written) - len(want)
    # a second pass changes nothing; with a horizon past every batch tombstones go too
    again, _, removed2 = filter_batches(out, m)
    assert again == out and removed2 == 0
    final, _, _ = filter_batches(out, m, delete_horizon_ms=10**12, tombstone_offset_limit=10**12)
    assert records_of(final) == [(o, k, v) for o, k, v in want if v is not None or k is None]
    # tombstones newer than the horizon stay
    partial, _, _ = filter_batches(out, m, delete_horizon_ms=0, tombstone_offset_limit=10**12)
    assert partial == out


def test_offset_map_capacity_stops_at_a_whole_batch():
    rng = random.Random(7)
    data, written = make_log(rng, 30, 1000, tombstone_rate=0)
    m = OffsetMap(20)
    stop = m.add_batches(data)
    assert len(m) <= 20
    assert 0 < stop <= written[-1][0] + 1
    # every keyed record below `stop` is in the map
    for off, k, _, _ in written:
        if off < stop and k is not None:
            assert m.get(k) >= off
    with pytest.raises(OverflowError):
        b = BatchBuilder()
        for i in range(50):
            b.append(0, b"k%d" % i, b"v")
        OffsetMap(10).add_batches(b.build())


@settings(max_examples=150)
@given(st.binary(max_size=400))
def test_hostile_input_only_raises_clean_errors(blob):
    m = OffsetMap(64)
    for fn in (lambda: m.add_batches(blob), lambda: filter_batches(blob, m)):
        try:
            fn()
        except (CorruptRecordError, ValueError, OverflowError):
            pass


@settings(max_examples=150)
@given(st.integers(0, 10_000), st.integers(0, 255))
def test_bit_flips_of_a_valid_log(pos, mask):
    rng = random.Random(3)
    data, _ = make_log(rng, 5, 4)
    bad = bytearray(data)
    bad[pos % len(bad)] ^= mask or 1
    m = OffsetMap(64)
    try:
        m.add_batches(bytes(bad))
        filter_batches(bytes(bad), m)
    except (CorruptRecordError, ValueError, OverflowError):
        pass
