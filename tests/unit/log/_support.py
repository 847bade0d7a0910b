"""Helpers for the storage-layer tests (not a test module)."""

from __future__ import annotations

import os
import struct

from broker.config import BrokerConfig
from broker.log.checkpoints import TopicPartition
from broker.log.log import Log
from broker.native import BatchBuilder, iter_batches

TP = TopicPartition("t", 0)
HEADER_SIZE = 61
OFF_MAX_TIMESTAMP = 35


def broker_config(tmp_path, **values) -> BrokerConfig:
    props = {"log.dir": str(tmp_path / "data")}
    props.update({k.replace("_", "."): v for k, v in values.items()})
    return BrokerConfig(props)


def log_config(tmp_path, overrides=None, **broker_values):
    return broker_config(tmp_path, **broker_values).log_config(overrides or {})


def batch(n: int = 1, ts: int = 1_000, value_size: int = 40, key: bytes | None = b"k", **kwargs) -> bytearray:
    """One uncompressed batch of `n` records with timestamps ts, ts+1, ..."""
    b = BatchBuilder(**kwargs)
    for i in range(n):
        b.append(ts + i, key, (b"%d-" % i) + b"v" * value_size)
    return bytearray(b.build())


def batches(counts, ts: int = 1_000, value_size: int = 40) -> bytearray:
    """Several batches back to back (one produce request holding many batches)."""
    out = bytearray()
    for n in counts:
        out += batch(n, ts=ts, value_size=value_size)
    return out


def fill(
    lg: Log,
    n_batches: int,
    records_per_batch: int = 1,
    ts: int = 1_000,
    value_size: int = 40,
    ts_step: int = 0,
    epoch: int = 0,
) -> list[tuple[int, int]]:
    """Appends n batches as leader; returns [(base_offset, last_offset)]."""
    out = []
    for i in range(n_batches):
        info = lg.append_as_leader(batch(records_per_batch, ts=ts + i * ts_step, value_size=value_size), epoch)
        out.append((info.base_offset, info.last_offset))
    return out


def offsets_of(data) -> list[int]:
    """Every record offset in whole batches of `data` (partial tail ignored)."""
    out = []
    for b in iter_batches(data):
        out.extend(range(b.base_offset, b.last_offset + 1))
    return out


def batch_ranges(data) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in iter_batches(data)]


def read_all(lg: Log, start: int | None = None, max_offset: int | None = None) -> list[int]:
    """Every offset readable from `start` up to max_offset (default: log end), following
    segment boundaries as a consumer would."""
    offset = lg.log_start_offset if start is None else start
    limit = lg.log_end_offset if max_offset is None else max_offset
    out: list[int] = []
    while offset < limit:
        s = lg.read(offset, 1 << 20, max_offset=limit)
        if s is None:
            break
        try:
            data = s.read()
        finally:
            s.close()
        got = [o for o in offsets_of(data) if o >= offset]
        assert got, f"read at {offset} returned no record"
        out.extend(got)
        offset = got[-1] + 1
    return out


def segment_files(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((".log", ".index", ".timeindex")))


def batch_positions(path) -> list[tuple[int, int, int, int]]:
    """[(position, size, base_offset, last_offset)] of the batches in a .log file, parsed
    with struct (independent of the code under test)."""
    with open(path, "rb") as f:
        data = f.read()
    out = []
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        size = 12 + length
        if pos + size > len(data):
            break
        out.append((pos, size, base, base + last_delta))
        pos += size
    return out
