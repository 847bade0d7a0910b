"""Compaction of __consumer_offsets: with a small segment size many commits roll
segments, the cleaner (short backoff) keeps only the latest record per key, the
partition's .log files shrink, and after restarts (clean and kill -9) the committed
offsets replayed from the compacted log are still the latest."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from broker.group import records as R
from broker.native import iter_batches
from broker.protocol.messages.offset_commit import OffsetCommitRequest as O
from tests.groups.helpers import committed, connect, create_topic, find_coordinator, wait_until

SEGMENT_BYTES = 16384
BROKER_CONFIG = {
    "offsets.topic.num.partitions": 1,
    "offsets.topic.segment.bytes": SEGMENT_BYTES,
    "log.cleaner.backoff.ms": 200,
}
OFFSETS = "__consumer_offsets"
COMMITS = 1500


def _dir(broker) -> Path:
    return broker.data_dir / f"{OFFSETS}-0"


def _size(broker) -> int:
    """Total size of the partition's .log files (the cleaner may swap files meanwhile)."""
    total = 0
    for f in _dir(broker).glob("*.log"):
        try:
            total += f.stat().st_size
        except FileNotFoundError:
            pass
    return total


def _records(d: Path, skip_active: bool = False):
    """(decoded key, value bytes) of every record in the partition, in offset order."""
    logs = sorted(d.glob("*.log"))
    if skip_active:
        logs = logs[:-1]
    out = []
    for path in logs:
        for batch in iter_batches(path.read_bytes()):
            if batch.is_control:
                continue
            for rec in batch.records():
                out.append((R.decode_key(bytes(rec.key)), None if rec.value is None else bytes(rec.value)))
    return out


def _commit_many(broker, group, topic, first, last):
    """Commits i (partition 0, metadata m<i>) and 2i (partition 1) for i in first..last,
    one request each, pipelined; returns (largest .log size seen, bytes per commit)."""
    assert find_coordinator(broker.bootstrap, group)[0] == 0  # creates __consumer_offsets
    largest = per_commit = 0
    start = _size(broker)
    with connect(broker.bootstrap) as conn:
        inflight = 0
        for i in range(first, last + 1):
            conn.send(
                O(
                    group_id=group,
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    topics=[
                        O.OffsetCommitRequestTopic(
                            name=topic,
                            partitions=[
                                O.OffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=i, committed_metadata=f"m{i}"
                                ),
                                O.OffsetCommitRequestPartition(
                                    partition_index=1, committed_offset=2 * i, committed_metadata=""
                                ),
                            ],
                        )
                    ],
                )
            )
            inflight += 1
            if inflight == 50 or i == last:
                for _ in range(inflight):
                    r = conn.receive()
                    errors = [x.error_code for t in r.topics for x in t.partitions]
                    assert errors == [0, 0]
                inflight = 0
                largest = max(largest, _size(broker))
                if i == first + 49:
                    per_commit = (_size(broker) - start) / 50
    return largest, per_commit


def _check_compacted(broker, group, topic, last, largest, per_commit):
    d = _dir(broker)
    written = per_commit * (COMMITS)  # what the log would hold uncompacted
    assert written > 10 * SEGMENT_BYTES  # enough to roll many segments
    # the cleaner compacts the rolled segments: the partition shrinks far below what was written
    wait_until(lambda: _size(broker) < 2 * SEGMENT_BYTES, 60, "the cleaner to compact", interval=0.2)
    assert _size(broker) < written / 5 and _size(broker) < largest

    def settled():
        """(cleaned records, all records) once every inactive segment holds each of our
        keys at most once (the cleaner may still be working on the last rolled ones)."""
        try:
            cleaned, everything = _records(d, skip_active=True), _records(d)
        except (FileNotFoundError, ValueError):  # a swap in progress
            return None
        keys = Counter(k for k, _ in cleaned if k[1] == group)
        if not keys or max(keys.values()) > 1:
            return None
        return cleaned, everything

    # in the cleaned segments every key is there at most once
    cleaned, everything = wait_until(settled, 30, "one record per key in the inactive segments", interval=0.2)
    # the last record of each key is the last commit
    latest = {}
    for k, v in everything:
        if k[1] == group:
            latest[k] = v
    v0 = R.decode_offset_value(latest[("offset", group, topic, 0)])
    assert (v0.offset, v0.metadata) == (last, f"m{last}")
    assert R.decode_offset_value(latest[("offset", group, topic, 1)]).offset == 2 * last


def test_compaction_keeps_only_the_latest_commit_per_key(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    largest, per_commit = _commit_many(broker, group, topic, 1, COMMITS)
    final = {(topic, 0): COMMITS, (topic, 1): 2 * COMMITS}
    assert committed(broker.bootstrap, group, {topic: 2}) == final
    assert len(list(_dir(broker).glob("*.log"))) > 1  # rolled
    _check_compacted(broker, group, topic, COMMITS, largest, per_commit)
    checkpoint = (broker.data_dir / "cleaner-offset-checkpoint").read_text()
    assert f"{OFFSETS} 0 " in checkpoint
    # replayed from the compacted log after restarts: still the latest
    broker.restart()
    assert committed(broker.bootstrap, group, {topic: 2}) == final
    broker.kill()
    broker.start()
    assert committed(broker.bootstrap, group, {topic: 2}) == final


def test_compaction_goes_on_after_a_restart(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    assert find_coordinator(broker.bootstrap, group)[0] == 0  # __consumer_offsets exists before the restart
    broker.restart()
    largest, per_commit = _commit_many(broker, group, topic, 1, COMMITS)
    assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 0): COMMITS, (topic, 1): 2 * COMMITS}
    # the topic's segment.bytes still rolls segments (fails at once under the bug)
    sizes = {f.name: f.stat().st_size for f in _dir(broker).glob("*.log") if f.exists()}
    assert max(sizes.values()) <= SEGMENT_BYTES + 1024, sizes
    _check_compacted(broker, group, topic, COMMITS, largest, per_commit)
