"""Retention on a live broker (log.retention.check.interval.ms = 200): by size, by time
(records with old timestamps) and DeleteRecords. The log start offset moves, whole old
segments leave the disk, reads below the start get OFFSET_OUT_OF_RANGE and consumers
that reset to earliest receive exactly the retained records."""

from __future__ import annotations

import time

import pytest

from broker.client import BrokerConnection, Cluster, Consumer, Producer
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from tests.interop.helpers import confluent_read_all, fetch_once, offsets, read_all
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module

pytestmark = pytest.mark.interop

WAIT_S = 20.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(
        tmp_path_factory.mktemp("retention") / "data", config={"log.retention.check.interval.ms": 200}
    ) as b:
        yield b


def value(i: int, tag: bytes = b"r") -> bytes:
    return tag + b"%05d-" % i + bytes([65 + i % 26]) * 100


def segment_files(broker, topic: str, partition: int) -> list[tuple[int, int]]:
    """(base offset, size) of each .log file in the partition directory, by base offset."""
    d = broker.data_dir / f"{topic}-{partition}"
    out = []
    for f in d.iterdir():
        if f.name.endswith(".log"):
            try:
                out.append((int(f.name[:-4]), f.stat().st_size))
            except FileNotFoundError:  # deleted by retention meanwhile
                pass
    return sorted(out)


def wait_for(what: str, cond, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


def produce_one_per_batch(bootstrap, topic, partition, n, tag=b"r", timestamp=None):
    # batch_size=1: every record is a batch of its own (with linger_ms=0 alone, records sent
    # while an earlier batch is in flight join one batch, as Kafka's producer does)
    with Producer(bootstrap, acks=-1, linger_ms=0, batch_size=1) as p:
        for i in range(n):
            p.send(topic, value(i, tag), key=b"k%d" % i, partition=partition, timestamp=timestamp)
        p.flush()  # every batch acknowledged: results complete
        offs = [base for _, part, base in p.results if part == partition]
    assert offs == list(range(n))


def assert_out_of_range(broker, topic: str, partition: int, offset: int) -> None:
    """A Fetch at `offset` gets OFFSET_OUT_OF_RANGE, both as a raw Fetch and through the
    project's consumer with auto_offset_reset="none"."""
    with Cluster(broker.bootstrap) as c:
        topic_id = c.topic(topic).topic_id
    with BrokerConnection("127.0.0.1", broker.port) as conn:
        d = fetch_once(conn, topic, topic_id, partition, offset)
    assert d.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert not d.records
    with Consumer(broker.bootstrap, auto_offset_reset="none", max_wait_ms=100) as c:
        c.assign(topic, [partition], offset)
        with pytest.raises(KafkaProtocolError) as exc:
            c.poll(2.0)
        assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_retention_bytes_deletes_old_segments(broker, topic_name):
    require_module("confluent_kafka")
    n = 400
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1, {"segment.bytes": "2048"})
    produce_one_per_batch(broker.bootstrap, topic_name, 0, n)
    written = segment_files(broker, topic_name, 0)
    assert len(written) >= 20, written
    assert offsets(broker.bootstrap, topic_name, [0]) == {0: (0, n)}

    with Cluster(broker.bootstrap) as c:
        c.alter_topic_configs(topic_name, {"retention.bytes": "8192"})

    def settled():
        start = offsets(broker.bootstrap, topic_name, [0])[0][0]
        files = segment_files(broker, topic_name, 0)
        return (start, files) if start > 0 and files[0][0] == start else None

    start, files = wait_for("log start offset above 0 and the old segment files gone", settled)
    assert len(files) < len(written)
    assert [b for b, _ in files] == [b for b, _ in written if b >= start], "segments kept are not the newest"
    total = sum(size for _, size in files)
    # Kafka's rule: the oldest segment goes while the rest alone still reach retention.bytes
    assert total - files[0][1] < 8192 <= total, files
    assert offsets(broker.bootstrap, topic_name, [0]) == {0: (start, n)}

    assert_out_of_range(broker, topic_name, 0, 0)
    assert_out_of_range(broker, topic_name, 0, start - 1)

    # a real consumer asked for offset 0 resets to the new start and gets exactly the rest
    got = confluent_read_all(broker.bootstrap, topic_name, [0], start={0: 0})
    assert [(o, v) for _, o, _, v, _ in got] == [(i, value(i)) for i in range(start, n)]


def test_retention_ms_deletes_segments_of_old_records(broker, topic_name):
    n = 200
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 2, 1, {"segment.bytes": "2048", "retention.ms": "60000"})
    # partition 1: current timestamps (the control); partition 0: a day old
    produce_one_per_batch(broker.bootstrap, topic_name, 1, n, tag=b"new")
    old_ts = int(time.time() * 1000) - 24 * 3600 * 1000
    produce_one_per_batch(broker.bootstrap, topic_name, 0, n, tag=b"old", timestamp=old_ts)

    def only_active_left():
        files = segment_files(broker, topic_name, 0)
        start = offsets(broker.bootstrap, topic_name, [0])[0][0]
        return (start, files) if len(files) == 1 and files[0][0] == start else None

    start, files = wait_for("every old segment but the active one deleted", only_active_left)
    assert 0 < start < n
    got = read_all(broker.bootstrap, topic_name, [0])
    assert sorted(got) == [(0, o) for o in range(start, n)]
    assert all(r.value == value(o, b"old") and r.timestamp == old_ts for (_, o), r in got.items())
    assert_out_of_range(broker, topic_name, 0, start - 1)

    # the pass that cleaned partition 0 left partition 1 (recent records) alone
    kept = segment_files(broker, topic_name, 1)
    assert len(kept) >= 10 and kept[0][0] == 0
    assert offsets(broker.bootstrap, topic_name, [1]) == {1: (0, n)}
    got = read_all(broker.bootstrap, topic_name, [1])
    assert [got[(1, o)].value for o in range(n)] == [value(i, b"new") for i in range(n)]


def test_delete_records_moves_the_low_watermark(broker, topic_name):
    require_module("confluent_kafka")
    n = 100
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 2, 1, {"segment.bytes": "2048"})
    for p in range(2):
        produce_one_per_batch(broker.bootstrap, topic_name, p, n, tag=b"p%d" % p)

    with Cluster(broker.bootstrap) as c:
        assert c.delete_records(topic_name, {0: 40, 1: -1}) == {0: 40, 1: n}
        # not above the high watermark
        with pytest.raises(KafkaProtocolError) as exc:
            c.delete_records(topic_name, {0: n + 1})
        assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        # never backwards: the low watermark stays where it is
        assert c.delete_records(topic_name, {0: 10}) == {0: 40}
    assert offsets(broker.bootstrap, topic_name, [0, 1]) == {0: (40, n), 1: (n, n)}

    assert_out_of_range(broker, topic_name, 0, 0)
    assert_out_of_range(broker, topic_name, 0, 39)
    assert_out_of_range(broker, topic_name, 1, n - 1)
    got = confluent_read_all(broker.bootstrap, topic_name, [0, 1])
    assert [(p, o, v) for p, o, _, v, _ in got] == [(0, i, value(i, b"p0")) for i in range(40, n)]

    # whole segments below the new start leave the disk at the next retention pass
    wait_for(
        "segments below offset 40 deleted", lambda: [b for b, _ in segment_files(broker, topic_name, 0)][:1] != [0]
    )
    files = segment_files(broker, topic_name, 0)
    assert 0 < files[0][0] <= 40
    assert len(segment_files(broker, topic_name, 1)) == 1  # everything gone but the active one

    # the new log start offsets survive a restart
    broker.restart()
    assert offsets(broker.bootstrap, topic_name, [0, 1]) == {0: (40, n), 1: (n, n)}
    got = read_all(broker.bootstrap, topic_name, [0, 1])
    assert sorted(got) == [(0, o) for o in range(40, n)]
