"""kill -9 of the copier mid-copy, several times at random points (seed printed; set
TIER_SEED to replay one), each followed by a restart: no copied segment is lost or
visible twice, a copy that never finished leaves no object behind once its orphans are
cleaned, and the last run copies what is left; the log then reads back from offset 0
byte-identical. Bounded: each run has 60 s."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from broker.tier.metadata import SegmentState
from broker.uuids import uuid_text

from ._support import TIP, all_bytes, fill, tiered_log
from .test_copier import Tier, read_from

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 4


def run_worker(root: Path, kill_after: int | None, delay: float) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.tier._copy_worker", str(root)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if kill_after is not None and line.startswith("copying") and kill_after == 1:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                break
            if line.startswith("copying") and kill_after is not None:
                kill_after -= 1
            assert time.monotonic() < deadline, "the copier ran for more than 60 s"
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != -signal.SIGKILL:
        assert proc.returncode == 0, err
    return proc.returncode, out


def check_remote(tier: Tier) -> None:
    """Only finished copies are in remote storage, each once, each whole."""
    cache = tier.rlm.cache
    assert cache.unfinished(TIP) == []
    copied = cache.copied(TIP)
    starts = [s.start_offset for s in copied]
    assert len(starts) == len(set(starts)), f"a segment is visible twice: {starts}"
    ids = {uuid_text(s.segment_id.id) for s in copied}
    for name in tier.rsm.listing(TIP):
        assert name.split("-", 1)[1].split(".")[0] in ids, f"orphan object {name}"
        assert ".tmp-" not in name
    for s in copied:
        assert tier.rsm.segment_size(s.segment_id, s.start_offset) == s.segment_size


def test_kill_9_mid_copy_loses_nothing_and_leaves_no_orphan(tmp_path):
    seed = int(os.environ.get("TIER_SEED", random.randrange(2**32)))
    print(f"TIER_SEED={seed}")
    rng = random.Random(seed)
    lg = tiered_log(tmp_path / "logs" / "tiered-0")
    fill(lg, 200)
    reference = all_bytes(lg)
    rolled = len(lg.segments) - 1
    lg.flush()
    lg.close()
    orphans = 0
    for _ in range(ROUNDS):
        code, out = run_worker(tmp_path, kill_after=rng.randint(1, 3), delay=rng.uniform(0.0, 0.1))
        assert code == -signal.SIGKILL
        tier = Tier(tmp_path)
        try:
            orphans += asyncio.run(tier.rlm.clean_orphans())
            check_remote(tier)
        finally:
            tier.close()
    code, out = run_worker(tmp_path, kill_after=None, delay=0)
    assert code == 0 and "copied" in out
    tier = Tier(tmp_path)
    try:
        check_remote(tier)
        assert len(tier.rlm.cache.copied(TIP)) == rolled
        for seg in tier.lg.delete_old_segments():
            seg.delete()
        assert len(tier.lg.segments) == 1
        assert read_from(tier.lg, tier.reader) == reference
        # each kill landed between a STARTED and its FINISHED (the worker pauses 20 ms
        # before each of a segment's 5 or 6 objects, the kill comes within 100 ms of the
        # upload's start): one orphan each, deleted, and every segment copied once
        assert orphans == ROUNDS
        states = [r.state for r in tier.meta.records() if hasattr(r, "segment_id")]
        assert states.count(SegmentState.COPY_SEGMENT_STARTED) == rolled + ROUNDS
        assert states.count(SegmentState.COPY_SEGMENT_FINISHED) == rolled
        assert states.count(SegmentState.DELETE_SEGMENT_STARTED) == ROUNDS
        assert states.count(SegmentState.DELETE_SEGMENT_FINISHED) == ROUNDS
    finally:
        tier.close()
