"""Test 1 of issue 17: confluent-kafka consume-transform-produce with
send_offsets_to_transaction, the copier process killed -9 five times mid-transaction and
restarted; the output read with read_committed holds every input exactly once, and
read_uncommitted also shows aborted copies (the markers are real)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from broker.client import Cluster
from tests.support.deps import require_module
from tests.txn.test_single_broker import read

pytestmark = pytest.mark.interop

RECORDS = 20_000
PARTITIONS = 3
PER_TXN = 500
KILLS = 5
ROOT = Path(__file__).resolve().parents[2]


def _commits(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def test_copier_killed_five_times_copies_each_record_exactly_once(broker, topic_name, tmp_path):
    ck = require_module("confluent_kafka")
    seed = int(os.environ.get("TXN_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (TXN_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    src, dst = f"{topic_name}-in", f"{topic_name}-out"
    with Cluster(broker.bootstrap) as c:
        c.create_topic(src, PARTITIONS, 1)
        c.create_topic(dst, PARTITIONS, 1)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i in range(RECORDS):
        p.produce(src, b"v%06d" % i, key=b"k%d" % (i % 31), partition=i % PARTITIONS)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    cmd = [
        sys.executable,
        "-m",
        "tests.txn.eos_copier",
        broker.bootstrap,
        src,
        dst,
        f"g-{topic_name}",
        f"tx-{topic_name}",
        str(PARTITIONS),
        str(RECORDS),
        str(PER_TXN),
        str(tmp_path / "progress"),
    ]
    kills = 0
    deadline = time.monotonic() + 240
    while True:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if kills < KILLS:
            # let it commit a few transactions, then kill it soon after a commit: inside
            # the next transaction (produced, flushed, not committed) most of the time
            target = _commits(tmp_path / "progress") + rng.randint(1, 4)
            while _commits(tmp_path / "progress") < target and proc.poll() is None:
                assert time.monotonic() < deadline, "the copier makes no progress"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.03))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                kills += 1
                continue
        try:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise AssertionError(f"the copier did not finish: {out[-2000:]}") from None
        assert proc.returncode == 0, out[-2000:]
        break
    assert kills == KILLS
    committed = read(broker.bootstrap, dst, PARTITIONS, "read_committed", deadline_s=60)
    counts = Counter(committed)
    dupes = [v for v, n in counts.items() if n > 1]
    assert not dupes, f"{len(dupes)} records copied more than once, e.g. {dupes[:3]}"
    assert set(counts) == {b"copy-v%06d" % i for i in range(RECORDS)}
    everything = read(broker.bootstrap, dst, PARTITIONS, "read_uncommitted", deadline_s=60)
    assert len(everything) > len(committed), "no aborted copy: the kills hit no open transaction"
