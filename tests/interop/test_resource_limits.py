"""A real broker process at the edge of its resources (issue 11):

- open files: more partitions and segments than three descriptors each would allow are
  created, written, read and restarted (after SIGTERM and kill -9) within a lowered
  RLIMIT_NOFILE; a data dir the limit cannot fit is refused at start in one line;
- restart after kill -9 costs what lies above the recovery point, not what indexes
  were once preallocated to.
"""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from broker.client import Cluster, Consumer, Producer
from tests.support.broker_proc import BrokerProcess

pytestmark = pytest.mark.interop

NOFILE = 600
PARTITIONS = 300          # 3 descriptors each would need 900, more than NOFILE
SEGMENTS = 3              # per partition: 900 segments, 2,700 files


def write_round(bootstrap: str, topic: str, partitions: int, tag: bytes) -> None:
    with Producer(bootstrap, acks=1, linger_ms=60_000, batch_size=1 << 20) as p:
        for i in range(partitions):
            p.send(topic, tag + b"-%d" % i, partition=i)
        p.flush()


def read_everything(bootstrap: str, topic: str, expected: int) -> dict[int, list[bytes]]:
    """Every record of every partition from offset 0 (one Fetch covers all of them)."""
    out: dict[int, list[bytes]] = {}
    got = 0
    with Consumer(bootstrap, max_wait_ms=200, partition_max_bytes=1 << 20) as c:
        c.assign(topic, offsets="earliest")
        deadline = time.monotonic() + 60
        while got < expected and time.monotonic() < deadline:
            for rec in c.poll(1.0):
                out.setdefault(rec.partition, []).append(rec.value)
                got += 1
    return out


def expected_values(partitions: int, rounds: int) -> dict[int, list[bytes]]:
    return {i: [b"r%d-%d" % (r, i) for r in range(rounds)] for i in range(partitions)}


def test_more_partitions_than_three_descriptors_each_fit_the_limit(tmp_path):
    """300 partitions of 3 segments under RLIMIT_NOFILE=600: before, every partition held
    its .log, .index and .timeindex open, CreateTopics broke off at ~190 partitions with a
    disconnect and the data dir could not be started again."""
    topic = "many"
    with BrokerProcess(tmp_path / "data", nofile=NOFILE, config={"log.segment.bytes": 14}) as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic(topic, PARTITIONS, 1)
        for r in range(SEGMENTS):                       # segment.bytes=14: one segment per round
            write_round(b.bootstrap, topic, PARTITIONS, b"r%d" % r)
        segments = sum(1 for _, _, files in os.walk(b.data_dir) for f in files if f.endswith(".log"))
        assert segments == PARTITIONS * SEGMENTS
        assert read_everything(b.bootstrap, topic, PARTITIONS * SEGMENTS) == expected_values(PARTITIONS, SEGMENTS)
        # one descriptor per partition, old segments open within what the limit leaves
        # beside a reserve for connections (an eighth)
        assert PARTITIONS <= b.open_fds() <= NOFILE - NOFILE // 8 + 20
        b.restart()
        assert read_everything(b.bootstrap, topic, PARTITIONS * SEGMENTS) == expected_values(PARTITIONS, SEGMENTS)
        write_round(b.bootstrap, topic, PARTITIONS, b"r%d" % SEGMENTS)
        b.kill()
        b.start()
        assert read_everything(b.bootstrap, topic, PARTITIONS * (SEGMENTS + 1)) == \
            expected_values(PARTITIONS, SEGMENTS + 1)
        assert b.open_fds() < NOFILE
        assert "Too many open files" not in b.log_tail(5000)


def test_start_refuses_a_data_dir_the_limit_cannot_fit_in_one_line(tmp_path):
    topic = "fits-not"
    b = BrokerProcess(tmp_path / "data", nofile=NOFILE)
    with b:
        with Cluster(b.bootstrap) as c:
            c.create_topic(topic, PARTITIONS, 1)
    small = BrokerProcess(tmp_path / "data", port=b.port, nofile=PARTITIONS)
    r = subprocess.run(small.command(), capture_output=True, text=True, timeout=60, preexec_fn=small.preexec,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("broker: cannot serve: ")
    assert f"{PARTITIONS} partitions need about" in last and f"is {PARTITIONS}: raise it to at least" in last
    assert "Traceback" not in r.stderr
    need = int(last.rsplit(" ", 1)[1])
    with BrokerProcess(tmp_path / "data", port=b.port, nofile=need) as fits:   # the advice is right
        with Cluster(fits.bootstrap) as c:
            assert len(c.topic(topic).partitions) == PARTITIONS
