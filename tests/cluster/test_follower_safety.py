"""Issue 16, real processes: the high watermark a log opens with when nobody
checkpointed it is 0 (defect 5), and a broker alone — the only replica, in the ISR
alone — still serves every acknowledged record after kill -9, as Kafka's leader moves
its high watermark to the log end on becoming leader.

(The follower-side defects — truncation without epochs, stale answers, truncation
rounds, stalled connections — are proved in tests/unit/cluster/test_fetcher.py against a
real Log and a real loopback server; the network-cut scenarios belong to tests/faults.)
"""

from __future__ import annotations

import time

from broker.client import Cluster, Producer
from tests.interop.helpers import offsets, read_all
from tests.support.broker_proc import BrokerProcess


def _produce(bootstrap, topic, n):
    with Cluster(bootstrap) as c:
        c.create_topic(topic, 1, 1)
    with Producer(bootstrap, acks=-1) as p:
        for i in range(n):
            p.send(topic, b"v-%d" % i, partition=0)
        p.flush()
    assert offsets(bootstrap, topic, [0]) == {0: (0, n)}


def _serves_everything(b, topic, n):
    deadline = time.monotonic() + 20
    while offsets(b.bootstrap, topic, [0]) != {0: (0, n)}:
        assert time.monotonic() < deadline, f"offsets {offsets(b.bootstrap, topic, [0])} after the restart"
        time.sleep(0.1)
    got = read_all(b.bootstrap, topic, [0])
    assert [got[(0, o)].value for o in range(n)] == [b"v-%d" % i for i in range(n)]


def test_a_lone_broker_killed_before_its_first_checkpoint_serves_every_acknowledged_record(tmp_path):
    topic = "hw-missing"
    with BrokerProcess(tmp_path / "data") as b:
        _produce(b.bootstrap, topic, 50)
        b.kill()  # within the checkpoint interval: no entry for the topic
        ck = b.data_dir / "replication-offset-checkpoint"
        assert not ck.exists() or f"{topic} 0 50" not in ck.read_text()
        b.start()
        _serves_everything(b, topic, 50)


def test_a_lone_broker_with_an_unreadable_high_watermark_checkpoint_serves_everything(tmp_path):
    topic = "hw-unreadable"
    with BrokerProcess(tmp_path / "data") as b:
        _produce(b.bootstrap, topic, 30)
        b.kill()
        (b.data_dir / "replication-offset-checkpoint").write_text("0\n2\nnot a checkpoint\n")
        b.start()
        _serves_everything(b, topic, 30)
