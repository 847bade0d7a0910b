"""Log compaction (broker/log/cleaner.py) on real logs: the latest record per key
survives at its offset, files shrink, the active segment is never touched, tombstones go
after delete.retention.ms, a pass the log outran is discarded, and a crash in the middle
of a swap is completed by the next load."""

from __future__ import annotations

import asyncio
import os
import random
import re

from broker.config import BrokerConfig
from broker.log.checkpoints import OffsetCheckpoint, TopicPartition
from broker.log.cleaner import CHECKPOINT, SWAP, LogCleaner, complete_swaps
from broker.log.log import Log
from broker.log.manager import LogManager
from broker.native import BatchBuilder, iter_batches, segment_file_name

TP = TopicPartition("c", 0)
COMPACT = {"cleanup.policy": ["compact"], "segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.01}


def manager(tmp_path, overrides=None):
    cfg = BrokerConfig({"log.dir": str(tmp_path / "data")})
    lc = cfg.log_config(dict(COMPACT, **(overrides or {})))
    mgr = LogManager(cfg, lambda topic: lc)
    mgr.startup()
    return mgr


def write(lg: Log, records: list[tuple[bytes | None, bytes | None]], ts: int, per_batch: int = 5) -> list[int]:
    offsets = []
    for i in range(0, len(records), per_batch):
        b = BatchBuilder(random.Random(i).choice([None, "zstd", "lz4"]))
        for k, v in records[i : i + per_batch]:
            b.append(ts, k, v)
        info = lg.append_as_leader(bytearray(b.build()), 0)
        offsets.extend(range(info.base_offset, info.last_offset + 1))
    lg.update_high_watermark(lg.log_end_offset)
    return offsets


def all_records(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for seg in lg.segments:
        for b in iter_batches(seg.read_bytes(0, seg.size), validate=True):
            out += [(r.offset, r.key, r.value) for r in b.records()]
    return out


def run(coro):
    return asyncio.run(coro)


def test_compaction_keeps_latest_per_key_and_shrinks(tmp_path):
    mgr = manager(tmp_path)
    lg = mgr.get_or_create(TP)
    rng = random.Random(1)
    written = []
    for round_ in range(30):
        recs = [(b"key-%d" % rng.randrange(10), b"round-%d-" % round_ + rng.randbytes(30)) for _ in range(10)]
        offs = write(lg, recs, ts=1_000 + round_)
        written += list(zip(offs, (k for k, _ in recs), (v for _, v in recs)))
    active = lg.active
    active_bytes = active.read_bytes(0, active.size)
    size_before = lg.size
    segments_before = len(lg.segments)

    async def go():
        return await mgr.cleaner.clean_once()

    result = run(go())
    assert result is not None and result.records_removed > 0
    assert lg.size < size_before and len(lg.segments) <= segments_before
    # no empty segment file is left behind (the first one may stay to anchor the start)
    assert all(s.size > 0 for s in lg.segments[1:-1])
    # the active segment is untouched, byte for byte
    assert lg.active is active and active.read_bytes(0, active.size) == active_bytes
    # the latest record of every key in the cleaned range survives at its offset; every
    # record of the active segment survives; nothing else of the cleaned range does
    stop = result.next_dirty
    latest = {}
    for off, k, _ in written:
        if off < stop:
            latest[k] = off
    survivors = all_records(lg)
    assert [o for o, _, _ in survivors] == sorted(o for o, _, _ in survivors)
    by_offset = {o: (k, v) for o, k, v in written}
    for off, k, v in survivors:
        assert by_offset[off] == (k, v)
    surviving_offsets = {o for o, _, _ in survivors}
    for off, k, _ in written:
        if off >= stop or latest.get(k) == off or any(o > off and kk == k and o >= stop for o, kk, _ in written):
            continue
        assert off not in surviving_offsets, f"superseded offset {off} survived"
    for k, off in latest.items():
        later = [o for o, kk, _ in written if kk == k and o > off]
        if not later:
            assert off in surviving_offsets
    # reads and offset lookups still work over the rewritten segments
    assert lg.log_end_offset == written[-1][0] + 1
    first = survivors[0][0]
    sl = lg.read(first, 1 << 20)
    assert sl is not None and next(iter_batches(sl.read())).base_offset <= first
    sl.close()
    ck = OffsetCheckpoint(str(tmp_path / "data" / CHECKPOINT)).read()
    assert ck[TP] == stop
    mgr.shutdown()
    # a clean restart sees the compacted log
    mgr2 = manager(tmp_path)
    assert [(o, k, v) for o, k, v in all_records(mgr2.get(TP))] == survivors
    mgr2.shutdown()


def test_tombstones_go_after_delete_retention(tmp_path):
    mgr = manager(tmp_path, {"delete.retention.ms": 1000})
    lg = mgr.get_or_create(TP)
    write(lg, [(b"a", b"1"), (b"b", b"1")] * 20, ts=1_000)
    write(lg, [(b"a", None)] + [(b"c", b"x" * 100)] * 60, ts=2_000)  # tombstone for a
    write(lg, [(b"d", b"y" * 100)] * 40, ts=3_000)

    async def go(now):
        return await mgr.cleaner.clean_once(now_ms=now, force=True)

    run(go(2_500))  # first pass keeps the tombstone (and drops a's values)
    recs = all_records(lg)
    assert [(k, v) for _, k, v in recs if k == b"a"] == [(b"a", None)]
    # a later pass, past the horizon, drops it (it was below the first dirty offset)
    write(lg, [(b"e", b"z" * 100)] * 150, ts=4_000)
    run(go(10_000_000))
    assert not [1 for _, k, _ in all_records(lg) if k == b"a"]
    assert [v for _, k, v in all_records(lg) if k == b"b"] == [b"1"]
    mgr.shutdown()


def test_pass_discarded_when_retention_removed_a_segment(tmp_path):
    mgr = manager(tmp_path)
    lg = mgr.get_or_create(TP)
    rng = random.Random(5)
    write(lg, [(b"k%d" % (i % 3), rng.randbytes(200)) for i in range(100)], ts=1_000)
    segs = mgr.cleaner.cleanable(lg, 10**13)
    assert len(segs) > 2
    victim = lg.segments[0]
    lg.log_start_offset = lg.segments[1].base_offset
    gone = lg.delete_old_segments(10**13)
    assert victim in gone
    before = [(s.base_offset, s.size) for s in lg.segments]
    result = run(mgr.cleaner.clean(lg, segs, 10**13))
    assert result is None
    assert [(s.base_offset, s.size) for s in lg.segments] == before
    assert not os.path.exists(os.path.join(lg.dir, ".cleaner-tmp"))
    for s in gone:
        s.delete()
    mgr.shutdown()


def test_interrupted_swap_is_completed_on_load(tmp_path):
    """A crash after the cleaned files were moved in as .swap but before the old segments
    were deleted: loading finishes the swap (old segments inside it go)."""
    mgr = manager(tmp_path)
    lg = mgr.get_or_create(TP)
    rng = random.Random(6)
    write(lg, [(b"k%d" % (i % 4), b"v%d" % i + rng.randbytes(150)) for i in range(120)], ts=1_000)
    d = lg.dir
    latest = {}
    for off, k, v in all_records(lg):
        latest[k] = (off, v)
    # build a cleaned replacement of the first three segments by hand, as the cleaner would
    olds = lg.segments[:3]
    cleaner: LogCleaner = mgr.cleaner
    plan = cleaner._build(lg, olds, 0, -1)
    groups, stop, kept, removed = plan
    assert removed > 0
    for group, tmp_log in groups:
        base = group[0].base_offset
        tmp_dir = os.path.dirname(tmp_log)
        for suffix in (".index", ".timeindex", ".log"):
            os.replace(
                os.path.join(tmp_dir, segment_file_name(base, suffix)),
                os.path.join(d, segment_file_name(base, suffix) + SWAP),
            )
    mgr.shutdown()  # "crash": old segments still there, .swap files beside them
    assert any(n.endswith(".log.swap") for n in os.listdir(d))
    complete_swaps(d)
    assert not any(n.endswith(SWAP) for n in os.listdir(d))
    mgr2 = manager(tmp_path)
    recs = all_records(mgr2.get(TP))
    offs = [o for o, _, _ in recs]
    assert offs == sorted(set(offs))
    for k, (off, v) in latest.items():
        assert (off, k, v) in recs
    mgr2.shutdown()


def test_an_aborted_write_never_supersedes_a_committed_one(tmp_path):
    """Kafka's cleaner leaves aborted transactions out of its offset map: compacting a key
    whose latest record was aborted keeps its committed value (a group's committed offset
    after an aborted transactional offset commit, say). An open transaction is never
    compacted (the cleanable range stops at the last stable offset)."""
    mgr = manager(tmp_path)
    lg = mgr.get_or_create(TP)
    committed = write(lg, [(b"k", b"committed"), (b"other", b"o1")], ts=1_000)
    pid = 9001
    b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)
    b.append(1_001, b"k", b"aborted")
    aborted = lg.append_as_leader(bytearray(b.build()), 0).base_offset
    lg.append_marker_as_leader(pid, 0, 0, commit=False, leader_epoch=0)
    write(lg, [(b"other", b"o%d" % i) for i in range(2, 200)], ts=1_002)  # fills and rolls segments
    assert len(lg.segments) > 2

    result = run(mgr.cleaner.clean_once())
    assert result is not None and result.records_removed > 0
    left = {off: (k, v) for off, k, v in all_records(lg)}
    assert left[committed[0]] == (b"k", b"committed")
    assert left[aborted] == (b"k", b"aborted")  # kept; read_committed readers skip it
    assert lg.collect_aborted(0, lg.log_end_offset)[0].first_offset == aborted
    # an open transaction bounds the cleanable range
    b = BatchBuilder(producer_id=pid + 1, producer_epoch=0, base_sequence=0, is_transactional=True)
    b.append(1_003, b"k", b"open")
    opened = lg.append_as_leader(bytearray(b.build()), 0).base_offset
    write(lg, [(b"other", b"p%d" % i) for i in range(200)], ts=1_004)
    assert all(s.next_offset <= opened for s in mgr.cleaner.cleanable(lg, 10_000))
    mgr.shutdown()


def test_a_pass_over_several_segments_reports_its_progress(tmp_path, caplog):
    mgr = manager(tmp_path)
    lg = mgr.get_or_create(TP)
    rng = random.Random(2)
    for round_ in range(30):
        write(lg, [(b"key-%d" % rng.randrange(10), rng.randbytes(30)) for _ in range(10)], ts=1_000 + round_)
    with caplog.at_level("INFO", logger="broker.log.cleaner"):
        result = run(mgr.cleaner.clean_once())
    assert result is not None
    lines = [r.getMessage() for r in caplog.records if "compacting segment group" in r.getMessage()]
    n = len(lines)
    assert n > 1, caplog.text
    for i, line in enumerate(lines, 1):
        assert re.fullmatch(
            rf"c-0: compacting segment group {i} of {n} \(base offset \d+\): [\d.]+ MB read, "
            rf"[\d.]+ MB/s",
            line,
        ), line
    mgr.shutdown()
