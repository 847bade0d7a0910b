"""Committed offsets and group metadata in __consumer_offsets, on the default 50
partitions: the group's partition is abs(Java hashCode(group)) % 50, commits survive
clean and unclean broker restarts (the group resumes exactly after them), a live member
keeps its identity across a restart, a deleted group stays deleted."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from broker.group import records as R
from broker.native import iter_batches
from broker.protocol.messages.delete_groups import DeleteGroupsRequest
from tests.groups.helpers import (
    HEARTBEAT_MS,
    SESSION_MS,
    committed,
    connect,
    create_topic,
    describe,
    find_coordinator,
    java_string_hash,
    offsets_partition,
    produce,
    simple_commit,
)
from tests.support.deps import require_module

BROKER_CONFIG = {"offsets.topic.num.partitions": 50}  # Kafka's default, stated for clarity
OFFSETS = "__consumer_offsets"


def _dir(broker, p: int) -> Path:
    return broker.data_dir / f"{OFFSETS}-{p}"


def _log_sizes(broker) -> dict[int, int]:
    out = {}
    for p in range(50):
        d = _dir(broker, p)
        out[p] = sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else 0
    return out


def test_java_hash_reference_values():
    # values of java.lang.String.hashCode
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair: 0xD83D, 0xDE00


@pytest.mark.parametrize(
    "group",
    ["hello", "polygenelubricants", "console-consumer-40123", "gr\u00fcppe-\U0001f600", "payments"],
    ids=["hello", "min-value-hash", "console", "non-ascii", "payments"],
)
def test_commit_lands_in_the_partition_kafka_would_choose(broker, name, group):
    require_module("confluent_kafka")
    import confluent_kafka as ck

    topic = name
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 5, 1)
    expected = offsets_partition(group, 50)
    if group == "polygenelubricants":
        assert expected == 0  # Utils.abs(Integer.MIN_VALUE) == 0
    err, node, _, _ = find_coordinator(broker.bootstrap, group)
    assert (err, node) == (0, 0)
    assert sorted(int(d.name.rsplit("-", 1)[1]) for d in broker.data_dir.glob(f"{OFFSETS}-*")) == list(range(50))
    before = _log_sizes(broker)
    # a real client's commit outside group management (assign + commit)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        c.commit(offsets=[ck.TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        c.close()
    after = _log_sizes(broker)
    grew = [p for p in range(50) if after[p] != before[p]]
    assert grew == [expected]
    assert committed(broker.bootstrap, group, {topic: 1}) == {(topic, 0): 3}
    # and the record in that partition is Kafka's OffsetCommitKey / OffsetCommitValue
    found = [(k, v) for k, v in _records(_dir(broker, expected)) if k == ("offset", group, topic, 0)]
    assert found and R.decode_offset_value(found[-1][1]).offset == 3


def _records(d: Path, skip_active: bool = False):
    """(decoded key, value bytes) of every record in a partition directory, in offset order."""
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


def _consume(c, count, timeout=60.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for m in c.consume(count - len(got), 0.2):
            assert not m.error(), m.error()
            got.append((m.partition(), m.offset(), m.value()))
    return got


def _consumer(bootstrap, group, reset="earliest", session_ms=SESSION_MS):
    import confluent_kafka as ck

    return ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "fetch.wait.max.ms": 100,
        }
    )


@pytest.mark.parametrize("how", ["clean", "kill"])
def test_group_resumes_after_the_committed_offsets_after_a_restart(broker, name, how):
    require_module("confluent_kafka")
    import confluent_kafka as ck

    topic, group = name, name
    create_topic(broker.bootstrap, topic, 4)
    produce(broker.bootstrap, topic, 400, 4)
    chosen = {0: 30, 1: 55, 2: 0, 3: 100}
    c = _consumer(broker.bootstrap, group)
    try:
        c.subscribe([topic])
        assert len(_consume(c, 400)) == 400
        done = c.commit(offsets=[ck.TopicPartition(topic, p, o) for p, o in chosen.items()], asynchronous=False)
        assert all(tp.error is None for tp in done)
    finally:
        c.close()
    if how == "clean":
        broker.restart()
    else:
        broker.kill()
        broker.start()
    d = describe(broker.bootstrap, group)
    assert (d["state"], d["protocol_type"], d["members"]) == ("Empty", "consumer", {})
    assert committed(broker.bootstrap, group, {topic: 4}) == {(topic, p): o for p, o in chosen.items()}
    # "latest" for partitions without a commit: partition 2 (committed 0) proves the commit is used
    c = _consumer(broker.bootstrap, group, reset="latest")
    try:
        c.subscribe([topic])
        want = sum(100 - o for o in chosen.values())
        got = _consume(c, want)
        assert len(got) == want
        assert c.consume(100, 1.0) == []  # nothing more
    finally:
        c.close()
    firsts = {}
    for p, o, _ in got:
        firsts[p] = min(o, firsts.get(p, o))
    assert firsts == {p: o for p, o in chosen.items() if o < 100}
    assert Counter((p, o) for p, o, _ in got).most_common(1)[0][1] == 1
    assert {(p, o) for p, o, _ in got} == {(p, o) for p, start in chosen.items() for o in range(start, 100)}


def test_a_live_member_keeps_its_identity_across_a_broker_restart(broker, name):
    require_module("confluent_kafka")
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 100, 2)
    # a session long enough to outlast the restart on a loaded machine (librdkafka gives
    # up its membership by itself when no heartbeat succeeds for session.timeout.ms)
    c = _consumer(broker.bootstrap, group, session_ms=30000)
    try:
        c.subscribe([topic])
        first = _consume(c, 100)
        assert len(first) == 100
        c.commit(asynchronous=False)
        before = describe(broker.bootstrap, group)
        assert before["state"] == "Stable" and len(before["members"]) == 1
        broker.restart()
        # the group metadata was replayed: same member, same assignment, still Stable
        after = describe(broker.bootstrap, group)
        assert after["state"] == "Stable"
        assert after["members"] == before["members"]
        produce(broker.bootstrap, topic, 100, 2, start=100)
        second = _consume(c, 100)
        assert len(second) == 100
        assert {v for _, _, v in second} == {f"m-{i}".encode() for i in range(100, 200)}
        c.commit(asynchronous=False)
        assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 0): 100, (topic, 1): 100}
        # the member was never replaced (heartbeats and commits were accepted)
        assert set(describe(broker.bootstrap, group)["members"]) == set(before["members"])
    finally:
        c.close()


def test_deleted_group_stays_deleted_after_a_restart(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    assert simple_commit(broker.bootstrap, group, topic, {0: 0, 1: 0}) == {0: 0, 1: 0}
    with connect(broker.bootstrap) as conn:
        r = conn.request(DeleteGroupsRequest(groups_names=[group]))
    assert r.results[0].error_code == 0
    broker.restart()
    assert committed(broker.bootstrap, group, {topic: 2}) == {}
    assert group not in _listed(broker)
    d = describe(broker.bootstrap, group)
    assert d["state"] in ("Dead", "") and not d["members"]


def _listed(broker):
    from broker.protocol.messages.list_groups import ListGroupsRequest

    with connect(broker.bootstrap) as conn:
        return {g.group_id for g in conn.request(ListGroupsRequest(states_filter=[])).groups}


def test_offsets_of_a_deleted_topic_are_forgotten(broker, name):
    # Kafka removes every group's committed offsets of a deleted topic: a topic created
    # again under the same name must not inherit them (nor after a restart)
    topic, other, busy, idle = name, f"{name}-other", f"{name}-busy", f"{name}-idle"
    create_topic(broker.bootstrap, topic, 2)
    create_topic(broker.bootstrap, other, 1)
    assert simple_commit(broker.bootstrap, busy, topic, {0: 7, 1: 9}) == {0: 0, 1: 0}
    assert simple_commit(broker.bootstrap, busy, other, {0: 3}) == {0: 0}
    assert simple_commit(broker.bootstrap, idle, topic, {0: 1}) == {0: 0}
    with connect(broker.bootstrap) as conn:
        from broker.protocol.messages.delete_topics import DeleteTopicsRequest

        r = conn.request(DeleteTopicsRequest(topic_names=[topic], timeout_ms=10000), 5)
    assert r.responses[0].error_code == 0
    create_topic(broker.bootstrap, topic, 2)
    # the group keeps what it committed elsewhere; the one that only had the topic is gone
    assert committed(broker.bootstrap, busy, {topic: 2, other: 1}) == {(other, 0): 3}
    assert idle not in _listed(broker) and committed(broker.bootstrap, idle, {topic: 2}) == {}
    broker.restart()
    assert committed(broker.bootstrap, busy, {topic: 2, other: 1}) == {(other, 0): 3}
    assert committed(broker.bootstrap, idle, {topic: 2}) == {} and idle not in _listed(broker)
    assert busy in _listed(broker)
