"""ShareFetch and ShareAcknowledge through a real broker (in this process, on its own event
loop thread: tests/unit/share/inprocess.py) and kbroker's own client over TCP, speaking
the share protocol directly, without group membership (the broker checks none for them, as
Kafka's). The share-partition state is read back from __share_group_state. The real share
consumers (Java's KafkaShareConsumer, franz-go) are tests/groups/test_share_delivery_clients.py's."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter

import pytest

from broker.client.cluster import Cluster
from broker.client.producer import Producer
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.share_fetch import ShareFetchRequest
from broker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from broker.share.partition import ACCEPT, ACKNOWLEDGED, ARCHIVED, REJECT, RELEASE
from tests.unit.share.inprocess import Running, start_broker
from tests.unit.share.share_client import Member, records, runs

LOCK_MS = 1000
LIMIT = 3
Q = ShareFetchRequest


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    r = start_broker(
        tmp_path_factory.mktemp("share"),
        {
            "group.share.record.lock.duration.ms": str(LOCK_MS),
            "group.share.min.record.lock.duration.ms": str(LOCK_MS),
            "group.share.delivery.count.limit": str(LIMIT),
            "group.share.max.share.sessions": "20",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    try:
        yield r
    finally:
        r.stop()


def _topic(running: Running, name: str, values: list[bytes], batch: int = 10) -> uuid.UUID:
    cluster = Cluster(f"127.0.0.1:{running.port}")
    try:
        cluster.create_topic(name, 1, 1)
        p = Producer(cluster, linger_ms=0)
        for i in range(0, len(values), batch):
            for v in values[i : i + batch]:
                p.send(name, v, partition=0)
            p.flush()
        p.close()
        return cluster.topic(name, wait_s=5).topic_id
    finally:
        cluster.close()


def test_four_members_on_one_partition_each_record_accepted_exactly_once(running):
    values = [b"v%d" % i for i in range(300)]
    tid = _topic(running, "share-four", values)
    group = "g-four"
    members = [Member(running.conn(), group, tid) for _ in range(4)]
    got: dict[str, list[tuple[int, bytes, int]]] = {m.member: [] for m in members}
    pending: dict[str, list] = {m.member: [] for m in members}
    released_once = set()
    deliveries = Counter()
    # the partition starts at the latest offset by default: the group's first fetch
    # initializes it there, so the records are produced after
    for m in members:
        err, _ = m.fetch(max_records=20)
        assert err == 0
    more = [b"w%d" % i for i in range(300)]
    cluster = Cluster(f"127.0.0.1:{running.port}")
    p = Producer(cluster, linger_ms=0)
    for i in range(0, 300, 10):
        for v in more[i : i + 10]:
            p.send("share-four", v, partition=0)
        p.flush()
    p.close()
    cluster.close()
    deadline = time.monotonic() + 60
    accepted = Counter()
    while sum(accepted.values()) < 300 and time.monotonic() < deadline:
        for m in members:
            err, d = m.fetch(acks=pending[m.member], max_records=20, max_wait_ms=200)
            assert err == 0
            if pending[m.member]:
                assert d is not None and d.acknowledge_error_code == 0, ErrorCode(d.acknowledge_error_code).name
                for f, la, t in pending[m.member]:
                    if t == ACCEPT:
                        for o in range(f, la + 1):
                            accepted[o] += 1
            pending[m.member] = []
            recs = records(d)
            got[m.member] += recs
            acks = []
            for off, _v, n in recs:
                deliveries[off] += 1
                assert n == deliveries[off], (off, n)
                # every 7th record is released once by whoever first gets it
                if off % 7 == 0 and off not in released_once:
                    released_once.add(off)
                    acks.append((off, off, RELEASE))
                else:
                    acks.append((off, off, ACCEPT))
            pending[m.member] = acks
    assert sorted(accepted) == list(range(300, 600))
    assert set(accepted.values()) == {1}, "a record accepted twice"
    assert all(n > 0 for n in (len(v) for v in got.values())), "a member received nothing"
    # the released ones came again, delivery count 2
    twice = [o for o, n in deliveries.items() if n == 2]
    assert sorted(twice) == sorted(released_once)
    by_offset = {o: v for m in got.values() for o, v, _n in m}
    assert [by_offset[o] for o in range(300, 600)] == more
    st = running.state(group, tid)
    assert st.start_offset == 600 and st.batches == []


def test_lock_timeout_redelivers_with_count_two_and_the_limit_archives(running):
    tid = _topic(running, "share-lock", [])
    group = "g-lock"
    a, b = Member(running.conn(), group, tid), Member(running.conn(), group, tid)
    assert a.fetch()[0] == 0 and b.fetch()[0] == 0
    _topic_append(running, "share-lock", [b"x%d" % i for i in range(5)])
    first = records(a.fetch(max_wait_ms=2000)[1])
    assert [(o, n) for o, _v, n in first] == [(o, 1) for o in range(5)]
    assert records(b.fetch()[1]) == []  # all locked by a
    time.sleep(LOCK_MS / 1000 + 0.5)
    # a's lock expired (it never acknowledged): b gets them, delivery count 2
    second = records(b.fetch(max_wait_ms=2000)[1])
    assert [(o, n) for o, _v, n in second] == [(o, 2) for o in range(5)]
    # a acknowledging now is refused: it no longer holds them
    err, d = a.acknowledge([(0, 4, ACCEPT)])
    assert err == 0 and d.error_code == ErrorCode.INVALID_RECORD_STATE
    # b accepts 0..1, releases 2..4: third delivery to a, then the limit (3) archives
    err, d = b.acknowledge([(0, 1, ACCEPT), (2, 4, RELEASE)])
    assert err == 0 and d.error_code == 0
    third = records(a.fetch(max_wait_ms=2000)[1])
    assert [(o, n) for o, _v, n in third] == [(2, 3), (3, 3), (4, 3)]
    err, d = a.acknowledge([(2, 2, RELEASE), (3, 3, REJECT)])
    assert d.error_code == 0
    time.sleep(LOCK_MS / 1000 + 0.5)  # 4 times out on its third delivery
    assert records(b.fetch(max_wait_ms=300)[1]) == []  # nothing is delivered a fourth time
    st = running.state(group, tid)
    assert st.start_offset == 5 and st.batches == []
    sp = running.broker.share_partitions.entries[(group, tid, 0)].sp
    assert (sp.start, sp.end) == (5, 5)


def _topic_append(running: Running, name: str, values: list[bytes]) -> None:
    cluster = Cluster(f"127.0.0.1:{running.port}")
    p = Producer(cluster, linger_ms=0)
    for v in values:
        p.send(name, v, partition=0)
    p.flush()
    p.close()
    cluster.close()


def test_a_consumer_gone_without_a_word_has_its_records_released(running):
    tid = _topic(running, "share-gone", [])
    group = "g-gone"
    a, b = Member(running.conn(), group, tid), Member(running.conn(), group, tid)
    assert a.fetch()[0] == 0 and b.fetch()[0] == 0
    _topic_append(running, "share-gone", [b"y%d" % i for i in range(4)])
    assert len(records(a.fetch(max_wait_ms=2000)[1])) == 4
    # its socket is reset (as when its process is killed -9): the session goes with it
    a.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    a.conn.sock.close()
    got = records(b.fetch(max_wait_ms=3000)[1])
    assert [(o, n) for o, _v, n in got] == [(o, 2) for o in range(4)]


def test_acknowledging_what_is_not_held_and_session_errors(running):
    tid = _topic(running, "share-bad", [])
    group = "g-bad"
    a, b = Member(running.conn(), group, tid), Member(running.conn(), group, tid)
    # acknowledgements in the request that opens the session
    assert a.fetch(acks=[(0, 0, ACCEPT)])[0] == ErrorCode.INVALID_REQUEST
    assert a.fetch()[0] == 0 and b.fetch()[0] == 0
    _topic_append(running, "share-bad", [b"z%d" % i for i in range(6)])
    assert len(records(a.fetch(max_wait_ms=2000)[1])) == 6
    # b acknowledging a's records; records never delivered; a acknowledging one twice
    assert b.acknowledge([(0, 2, ACCEPT)])[1].error_code == ErrorCode.INVALID_RECORD_STATE
    assert a.acknowledge([(5, 9, ACCEPT)])[1].error_code == ErrorCode.INVALID_REQUEST
    assert a.acknowledge([(4, 4, ACCEPT)])[1].error_code == 0
    assert a.acknowledge([(3, 4, ACCEPT)])[1].error_code == ErrorCode.INVALID_RECORD_STATE
    # the refused acknowledgement changed nothing: 3 is still a's
    assert a.acknowledge([(0, 3, ACCEPT), (5, 5, ACCEPT)])[1].error_code == 0
    assert a.acknowledge([(0, 0, ACCEPT)])[1].error_code == ErrorCode.INVALID_RECORD_STATE
    # a share partition this broker never fetched from for the group (max_records 0: a
    # session opened without fetching)
    other = Member(running.conn(), "g-bad-other", tid)
    err, d = other.fetch(max_records=0)
    assert err == 0 and records(d) == []
    assert other.acknowledge([(0, 0, ACCEPT)])[1].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    st = running.state(group, tid)
    assert st.start_offset == 6
    # a RENEW without IsRenewAck is malformed
    err, d = a.fetch(acks=[(6, 6, 4)])
    assert err == 0 and d.acknowledge_error_code == ErrorCode.INVALID_REQUEST
    # session errors, top-level: a wrong epoch, no session, ShareAcknowledge opening one
    assert a.fetch(epoch=a.epoch + 5)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert a.acknowledge([], epoch=a.epoch - 1)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    ghost = Member(running.conn(), group, tid)
    assert ghost.fetch(epoch=1)[0] == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert ghost.acknowledge([], epoch=0)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    # closing the session (epoch -1), then using it
    assert a.acknowledge([], epoch=-1)[0] == 0
    assert a.fetch()[0] == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_share_fetch_needs_read_on_the_group_and_the_topic(running):
    tid = _topic(running, "share-acl", [b"q"])
    open_tid = _topic(running, "share-acl-open", [b"q"])

    def allow_only_bob(rtype, name):
        binding = AclBinding(rtype, name, PatternType.LITERAL, "User:bob", "*", Operation.READ, Permission.ALLOW)
        running.call(running.broker.update_acls({binding.resource: lambda s: s | {binding}}))

    allow_only_bob(ResourceType.GROUP, "g-locked")
    allow_only_bob(ResourceType.TOPIC, "share-acl")
    m = Member(running.conn(), "g-locked", open_tid)
    assert m.fetch()[0] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert m.acknowledge([(0, 0, ACCEPT)], epoch=1)[0] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    m = Member(running.conn(), "g-open", tid)
    err, d = m.fetch()
    assert err == 0 and d.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert records(d) == []
    err, d = m.acknowledge([(0, 0, ACCEPT)])
    assert err == 0 and d.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_the_long_poll_answers_when_records_come(running):
    tid = _topic(running, "share-poll", [])
    m = Member(running.conn(), "g-poll", tid)
    assert m.fetch()[0] == 0
    threading.Timer(0.5, _topic_append, (running, "share-poll", [b"late"])).start()
    t0 = time.monotonic()
    got = records(m.fetch(max_wait_ms=10000)[1])
    assert [v for _o, v, _n in got] == [b"late"]
    assert time.monotonic() - t0 < 9  # woken by the append, not by the deadline


def test_record_limit_mode_cuts_a_batch_and_the_state_survives_a_new_leader(running):
    tid = _topic(running, "share-move", [])
    group = "g-move"
    a = Member(running.conn(), group, tid)
    assert a.fetch()[0] == 0
    _topic_append(running, "share-move", [b"m%d" % i for i in range(10)])  # one batch
    got = records(a.fetch(max_records=4, mode=1, max_wait_ms=2000)[1])
    assert [o for o, _v, _n in got] == [0, 1, 2, 3]
    got = records(a.fetch(acks=[(0, 1, ACCEPT)], max_records=3, mode=1)[1])
    assert [o for o, _v, _n in got] == [4, 5, 6]
    # the partition's leadership moves (here: away and back, a new epoch's state): what
    # was acknowledged stays so, what was acquired is available again, with the delivery
    # count last written (2..3 were written acquired by the acknowledgement of 0..1;
    # 4..6, acquired after, were not: an acquisition alone is not written)
    mgr = running.broker.share_partitions
    part = mgr.entries[(group, tid, 0)].part

    async def move():
        mgr.leadership_changed([], [part.tp])

    running.call(move())
    assert (group, tid, 0) not in mgr.entries
    b = Member(running.conn(), group, tid)
    err, d = b.fetch()  # the request opening a session fetches too
    assert err == 0
    got = records(d)
    assert [(o, n) for o, _v, n in got] == [(2, 2), (3, 2), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1), (9, 1)]
    assert b.acknowledge(runs(got))[1].error_code == 0
    st = running.state(group, tid)
    assert st.start_offset == 10
    assert all(x.delivery_state in (ACKNOWLEDGED, ARCHIVED) for x in st.batches)


def test_a_groups_configs_set_where_it_starts_and_how_long_it_holds(running):
    """share.auto.offset.reset=earliest: a share partition the group never read starts at
    the log start; share.record.lock.duration.ms and share.delivery.count.limit are the
    group's (kafka-configs --entity-type groups sets them so)."""
    from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I

    tid = _topic(running, "share-configs", [b"old-%d" % i for i in range(5)])
    group = "g-configs"
    conn = running.conn()
    r = conn.request(
        I(
            resources=[
                I.AlterConfigsResource(
                    resource_type=32,
                    resource_name=group,
                    configs=[
                        I.AlterableConfig(name=n, config_operation=0, value=v)
                        for n, v in [
                            ("share.auto.offset.reset", "earliest"),
                            ("share.record.lock.duration.ms", "2000"),
                            ("share.delivery.count.limit", "2"),
                        ]
                    ],
                )
            ],
            validate_only=False,
        )
    ).responses[0]
    assert r.error_code == 0, r.error_message
    conn.close()
    m = Member(running.conn(), group, tid)
    err, d = m.fetch()
    assert err == 0 and m.last.acquisition_lock_timeout_ms == 2000
    assert [v for _o, v, _n in records(d)] == [b"old-%d" % i for i in range(5)]
    err, d = m.acknowledge([(0, 4, RELEASE)])
    assert d.error_code == 0
    got = records(m.fetch()[1])
    assert [(o, n) for o, _v, n in got] == [(o, 2) for o in range(5)]
    assert m.acknowledge([(0, 4, RELEASE)])[1].error_code == 0  # the group's limit: 2
    assert records(m.fetch()[1]) == []
    assert running.state(group, tid).start_offset == 5


def test_read_committed_share_groups_see_no_aborted_or_open_transaction(running):
    """share.isolation.level=read_committed: records of an open transaction are not
    delivered until it commits (the last stable offset), and those of an aborted one
    never are: they are archived as they are acquired, left out of the AcquiredRecords
    runs (the transaction markers stay in them, for the consumer to acknowledge as gaps)."""
    import confluent_kafka as ck

    from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I

    tid = _topic(running, "share-txn", [])
    group = "g-txn"
    conn = running.conn()
    r = conn.request(
        I(
            resources=[
                I.AlterConfigsResource(
                    resource_type=32,
                    resource_name=group,
                    configs=[
                        I.AlterableConfig(name="share.isolation.level", config_operation=0, value="read_committed"),
                        I.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest"),
                    ],
                )
            ],
            validate_only=False,
        )
    ).responses[0]
    assert r.error_code == 0, r.error_message
    conn.close()
    p = ck.Producer({"bootstrap.servers": running.bootstrap, "transactional.id": "share-txn-p", "linger.ms": 0})
    p.init_transactions(30)

    def txn(values, commit=True):
        p.begin_transaction()
        for v in values:
            p.produce("share-txn", v, partition=0)
        p.flush(30)
        if commit is None:
            return
        (p.commit_transaction if commit else p.abort_transaction)(30)

    txn([b"c1-0", b"c1-1"])
    txn([b"a-0", b"a-1", b"a-2"], commit=False)
    txn([b"c2-0"])
    txn([b"o-0", b"o-1"], commit=None)  # left open
    m = Member(running.conn(), group, tid)
    err, d = m.fetch()
    assert err == 0
    got = records(d)
    assert [v for _o, v, _n in got] == [b"c1-0", b"c1-1", b"c2-0"]
    acquired = [(a.first_offset, a.last_offset) for a in d.acquired_records]
    assert not any(f <= o <= la for o in (3, 4, 5) for f, la in acquired)  # the aborted records
    p.commit_transaction(30)
    got = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        got = records(m.fetch(max_wait_ms=1000)[1])
    assert [v for _o, v, _n in got] == [b"o-0", b"o-1"]
