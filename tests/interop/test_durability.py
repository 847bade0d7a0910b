"""Durability across restarts, with real clients and a real broker process:

- a clean restart (SIGTERM) keeps every message at its offset, byte for byte, and the
  log start / end offsets;
- kill -9 in the middle of an acks=all produce run loses no acknowledged message, moves
  none, duplicates none, invents none, and the broker says it recovered;
- kill -9 right after a clean restart (nothing new written) changes nothing;
- after kill -9 the high watermark covers every acknowledged message, even though its
  checkpoint (written every few seconds) is older than the log.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.client import Cluster, Producer
from tests.interop import crash_producer
from tests.interop.helpers import confluent_read_all, offsets, read_all
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module

pytestmark = pytest.mark.interop

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        yield b


def last_load(broker) -> str:
    """The broker log's line about its latest start: "loaded N logs from DIR in T s
    (clean|unclean shutdown)"."""
    lines = [x for x in broker.log_tail(2000).splitlines() if " logs from " in x and "shutdown)" in x]
    assert lines, broker.log_tail(40)
    return lines[-1]


def _checkpointed_hw(broker, topic: str) -> dict[int, int]:
    """partition -> high watermark in the broker's replication-offset-checkpoint (written
    every few seconds), for the partitions of `topic` with a non-zero entry."""
    path = broker.data_dir / "replication-offset-checkpoint"
    try:
        lines = path.read_text().splitlines()[2:]
    except OSError:
        return {}
    out = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[2].isdigit() and int(parts[2]) > 0:
            out[int(parts[1])] = int(parts[2])
    return out


def _read_acked(path: Path):
    acked, summary = [], None
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            summary = line
            continue
        p, o, i = map(int, line.split())
        acked.append((p, o, i))
    return acked, summary


def test_clean_restart_keeps_every_message_at_its_offset(broker, topic_name):
    ck = require_module("confluent_kafka")
    n = 10_000
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, PARTITIONS, 1)
    rnd = random.Random(7)
    sent = {}  # value -> (key, headers)
    delivered = {}  # value -> (partition, offset)
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.value()] = (msg.partition(), msg.offset())

    p = ck.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": False,
            "compression.type": "lz4",
        }
    )
    for i in range(n):
        value = b"%05d:" % i + rnd.randbytes(rnd.randrange(0, 200))
        key = b"key-%d" % rnd.randrange(40)
        headers = [("i", b"%d" % i), ("bin", rnd.randbytes(4))]
        sent[value] = (key, headers)
        while True:
            try:
                p.produce(topic_name, value=value, key=key, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "messages left undelivered"
    assert not errors, errors[:3]
    assert len(delivered) == n

    before = offsets(broker.bootstrap, topic_name, range(PARTITIONS))
    assert sum(hi - lo for lo, hi in before.values()) == n
    broker.restart()
    after = offsets(broker.bootstrap, topic_name, range(PARTITIONS))
    assert after == before, "log start / end offsets changed across a clean restart"

    got = confluent_read_all(broker.bootstrap, topic_name, range(PARTITIONS))
    assert len(got) == n
    for part, off, key, value, headers in got:
        assert delivered.get(value) == (part, off), (
            f"{value[:6]!r} read at {part}/{off}, delivered at {delivered.get(value)}"
        )
        want_key, want_headers = sent[value]
        assert key == want_key
        assert [(k, bytes(v)) for k, v in headers] == want_headers
    assert "(clean shutdown)" in last_load(broker)


def test_kill_9_during_produce_loses_no_acknowledged_message(broker, topic_name, tmp_path):
    require_module("confluent_kafka")
    with Cluster(broker.bootstrap) as c:
        # small segments: the crash lands after several rolls (recovery point > 0)
        c.create_topic(topic_name, PARTITIONS, 1, {"segment.bytes": "131072"})
    acked_path = tmp_path / "acked.txt"
    acked_path.touch()
    # at most 40 s and 15,000 messages/s (keeps the read-back short)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.interop.crash_producer",
            broker.bootstrap,
            topic_name,
            str(acked_path),
            "40",
            "15000",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        # let it run for ~1.5 s and at least a few thousand acknowledged messages, and
        # until the broker has checkpointed a high watermark of the topic (as a broker
        # that has been up a while has): the crash must not bring that old value back
        t0 = time.monotonic()
        deadline = t0 + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"producer exited early: {proc.stdout.read().decode(errors='replace')}"
            lines = acked_path.read_bytes().count(b"\n")
            if time.monotonic() - t0 >= 1.5 and lines >= 3000 and _checkpointed_hw(broker, topic_name):
                break
            time.sleep(0.1)
        else:
            pytest.fail(
                f"producer acknowledged {lines} messages in 30 s; high watermark checkpoint: "
                f"{_checkpointed_hw(broker, topic_name)}"
            )
        assert proc.poll() is None, "the producer must still be producing when the broker dies"
        broker.kill()
        out, _ = proc.communicate(timeout=30)  # it notices the dead broker and exits by itself
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out.decode(errors="replace")
    acked, summary = _read_acked(acked_path)
    assert summary is not None and summary.startswith("# attempted"), summary
    attempted = int(summary.split()[2])
    assert len(acked) >= 3000

    broker.start()
    assert "(unclean shutdown)" in last_load(broker), broker.log_tail(40)

    ends = offsets(broker.bootstrap, topic_name, range(PARTITIONS))
    got = read_all(broker.bootstrap, topic_name, range(PARTITIONS))
    # offsets dense from 0 in every partition
    for p in range(PARTITIONS):
        start, end = ends[p]
        assert start == 0
        assert sorted(o for q, o in got if q == p) == list(range(end)), f"partition {p}: offsets not dense"
    # nothing that was never produced, nothing twice
    seen = {}
    for (p, o), r in got.items():
        i = int(r.value[6:14])
        assert 0 <= i < attempted and r.value == crash_producer.value_for(i), f"{p}/{o}: unknown value {r.value!r}"
        assert r.key == crash_producer.key_for(i)
        assert i not in seen, f"message {i} stored twice: {seen[i]} and {(p, o)}"
        seen[i] = (p, o)
    # every acknowledged message, at its acknowledged offset
    missing = [(p, o, i) for p, o, i in acked if seen.get(i) != (p, o)]
    assert not missing, f"{len(missing)} acknowledged messages lost or moved, e.g. " + ", ".join(
        f"#{i} acked at {p}/{o}, found at {seen.get(i)}" for p, o, i in missing[:5]
    )


def test_kill_9_right_after_clean_restart_changes_nothing(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, PARTITIONS, 1, {"segment.bytes": "16384"})
    with Producer(broker.bootstrap, acks=-1, linger_ms=0, batch_size=4096) as p:
        for i in range(3000):
            p.send(topic_name, b"v%05d" % i + b"." * (i % 50), key=b"k%d" % (i % 11), headers=[("n", b"%d" % i)])
    before = offsets(broker.bootstrap, topic_name, range(PARTITIONS))
    data = {
        k: (r.key, r.value, r.headers, r.timestamp)
        for k, r in read_all(broker.bootstrap, topic_name, range(PARTITIONS)).items()
    }
    assert len(data) == 3000

    broker.restart()
    broker.kill()  # nothing produced in between
    broker.start()
    assert "(unclean shutdown)" in last_load(broker)

    assert offsets(broker.bootstrap, topic_name, range(PARTITIONS)) == before
    again = {
        k: (r.key, r.value, r.headers, r.timestamp)
        for k, r in read_all(broker.bootstrap, topic_name, range(PARTITIONS)).items()
    }
    assert again == data
    # and the log still takes appends after the two restarts, at the next offsets
    with Producer(broker.bootstrap, acks=-1) as p:
        p.send(topic_name, b"after", partition=0)
        p.flush()
        assert p.results == [(topic_name, 0, before[0][1])]


def test_kill_9_after_a_checkpoint_keeps_acknowledged_messages_visible(broker, topic_name):
    """The high watermark checkpoint is written every few seconds, so after a crash it is
    older than the log. A broker alone (ISR = itself) must make everything acknowledged
    visible again at once, as Kafka's leader does on becoming leader (HW = LEO)."""
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    with Producer(broker.bootstrap, acks=-1) as p:
        for i in range(100):
            p.send(topic_name, b"before-%d" % i, partition=0)
    deadline = time.monotonic() + 20
    while _checkpointed_hw(broker, topic_name).get(0) != 100:
        assert time.monotonic() < deadline, "no high watermark checkpoint within 20 s"
        time.sleep(0.1)
    with Producer(broker.bootstrap, acks=-1) as p:
        for i in range(100):
            p.send(topic_name, b"after-%d" % i, partition=0)
    assert offsets(broker.bootstrap, topic_name, [0]) == {0: (0, 200)}
    broker.kill()
    broker.start()
    assert offsets(broker.bootstrap, topic_name, [0]) == {0: (0, 200)}, (
        "acknowledged messages above the checkpointed high watermark are invisible after kill -9"
    )
    got = read_all(broker.bootstrap, topic_name, [0])
    assert [got[(0, o)].value for o in range(200)] == [b"before-%d" % i for i in range(100)] + [
        b"after-%d" % i for i in range(100)
    ]


@pytest.mark.parametrize("stop", ["clean", "kill -9"])
def test_topic_configs_survive_a_restart(broker, topic_name, stop):
    """Per-topic overrides apply to the logs after a restart too (they are read before the
    logs load): segment.bytes keeps rolling segments, DescribeConfigs still shows it."""
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1, {"segment.bytes": "4096", "retention.ms": "86400000"})
    if stop == "clean":
        broker.restart()
    else:
        broker.kill()
        broker.start()
    with Producer(broker.bootstrap, acks=1, batch_size=1024, linger_ms=0) as p:
        for _i in range(200):
            p.send(topic_name, b"v" * 100, partition=0)
    segments = list((broker.data_dir / f"{topic_name}-0").glob("*.log"))
    assert len(segments) >= 4, f"segment.bytes=4096 not applied after a {stop} restart: {len(segments)} segments"
    with Cluster(broker.bootstrap) as c:
        cfg = {e.name: e.value for e in c.describe_configs(2, topic_name)}
    assert cfg["segment.bytes"] == "4096" and cfg["retention.ms"] == "86400000"
