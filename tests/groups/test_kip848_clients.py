"""KIP-848 consumer groups with real clients: librdkafka (confluent-kafka,
`group.protocol=consumer`) members join one by one and leave one by one on a
12-partition topic; from their own rebalance callbacks no partition is ever owned by two
members at once, every record is consumed, and the broker's ConsumerGroupDescribe shows
the group Stable with every partition assigned once."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from broker.client import BrokerConnection
from broker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from broker.protocol.messages.list_groups import ListGroupsRequest
from tests.groups.helpers import (
    child_env,
    committed,
    create_topic,
    describe,
    find_coordinator,
    host_port,
    produce,
    wait_until,
)
from tests.support.deps import require_module

pytestmark = pytest.mark.interop

BROKER_CONFIG = {
    "group.consumer.heartbeat.interval.ms": 300,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 1000,
}
PARTITIONS = 12
RECORDS = 600


@pytest.fixture(autouse=True)
def _confluent():
    require_module("confluent_kafka")


class Member:
    """One confluent-kafka consumer speaking KIP-848; what it owns is what its callbacks said."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, name: str, log: list, protocol: str = "consumer"
    ) -> None:
        import confluent_kafka as ck

        self.name = name
        self.owned: set[int] = set()
        self.log = log
        self.values: list[bytes] = []
        self.closed = False
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        if protocol == "classic":  # the eager range assignor: every rebalance revokes everything
            config.update({"partition.assignment.strategy": "range", "session.timeout.ms": 6000})
        self.consumer = ck.Consumer(config)
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        self.log.append((self.name, "+", sorted(p.partition for p in partitions)))
        self.owned |= {p.partition for p in partitions}

    def _revoked(self, consumer, partitions) -> None:
        # what a member gives up as it leaves is not a move the group made of the others
        self.log.append((self.name, "-" if not self.closed else "left", sorted(p.partition for p in partitions)))
        self.owned -= {p.partition for p in partitions}
        import confluent_kafka as ck

        try:
            consumer.commit(asynchronous=False)  # what it read of them, before they move
        except ck.KafkaException as exc:
            if exc.args[0].code() != ck.KafkaError._NO_OFFSET:  # nothing read since the last commit
                raise

    def poll(self) -> None:
        for msg in self.consumer.consume(500, 0.05):
            if not msg.error():
                self.values.append(msg.value())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def _owned_twice(members) -> list:
    seen: dict[int, str] = {}
    twice = []
    for m in members:
        for p in m.owned:
            if p in seen:
                twice.append((p, seen[p], m.name))
            seen[p] = m.name
    return twice


def _describe(bootstrap: str, group: str):
    with BrokerConnection(*host_port(bootstrap)) as conn:
        from broker.protocol.messages.find_coordinator import FindCoordinatorRequest

        fc = conn.request(FindCoordinatorRequest(key=group, key_type=0), 1)
    with BrokerConnection(fc.host, fc.port) as conn:
        return conn.request(
            ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
        ).groups[0]


def _stable_over(bootstrap, group, members, everyone) -> bool:
    for m in everyone:
        m.poll()
    assert not _owned_twice(everyone), _owned_twice(everyone)
    owned = [p for m in members for p in m.owned]
    if sorted(owned) != list(range(PARTITIONS)):
        return False
    g = _describe(bootstrap, group)
    return g.error_code == 0 and g.group_state == "Stable" and len(g.members) == len(members)


def test_librdkafka_members_join_and_leave_one_by_one_without_a_partition_owned_twice(broker, name):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, name, PARTITIONS)
    sent = produce(bootstrap, name, RECORDS, PARTITIONS)
    log: list = []
    members: list[Member] = []
    everyone: list[Member] = []
    try:
        for i in range(3):
            m = Member(bootstrap, name, name, f"m{i}", log)
            members.append(m)
            everyone.append(m)
            wait_until(lambda: _stable_over(bootstrap, name, members, everyone), 60, f"{len(members)} members stable")
            counts = sorted(len(x.owned) for x in members)
            assert counts[-1] - counts[0] <= 1, counts
        deadline = time.monotonic() + 60
        while len({v for m in everyone for v in m.values}) < RECORDS and time.monotonic() < deadline:
            for m in everyone:
                m.poll()
            assert not _owned_twice(everyone)
        assert {v for m in everyone for v in m.values} == set(sent)
        # ListGroups shows it as a consumer group (KIP-848's type and state), DescribeGroups
        # (classic groups only) as Dead, as Kafka answers up to v5
        with BrokerConnection(*host_port(bootstrap)) as conn:
            listed = conn.request(ListGroupsRequest(states_filter=[], types_filter=[]), 5).groups
            (mine,) = [g for g in listed if g.group_id == name]
            assert (mine.group_type, mine.group_state, mine.protocol_type) == ("consumer", "Stable", "consumer")
            only_classic = conn.request(ListGroupsRequest(states_filter=[], types_filter=["classic"]), 5).groups
            assert name not in {g.group_id for g in only_classic}
        assert describe(bootstrap, name)["state"] == "Dead"
        # `broker groups describe` shows it as a consumer group, each member with its partitions
        out = subprocess.run(
            [sys.executable, "-m", "broker.cli.main", "groups", "describe", name, "--bootstrap", bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(),
            check=True,
        ).stdout
        head, *rest = out.splitlines()
        assert head.startswith(f"Group: {name}\tType: consumer\tState: Stable\tAssignor: uniform"), out
        members_out = [ln for ln in rest if ln.startswith("\tMember: ")]
        assert len(members_out) == 3
        shown = sorted(p for ln in members_out for p in ln.split("Assignment: ")[1].split(","))
        assert shown == sorted(f"{name}-{p}" for p in range(PARTITIONS))
        while len(members) > 1:
            gone = members.pop(0)
            gone.close()
            everyone.remove(gone)
            gone.owned = set()
            wait_until(lambda: _stable_over(bootstrap, name, members, everyone), 60, f"{len(members)} members stable")
        g = _describe(bootstrap, name)
        assert [m.member_id for m in g.members] and g.group_epoch >= 5
        assert sum(len(tp.partitions) for tp in g.members[0].assignment.topic_partitions) == PARTITIONS
        assert {tp.topic_name for tp in g.members[0].assignment.topic_partitions} == {name}
    finally:
        print("callbacks:", log)
        for m in everyone + members:
            m.close()


def _classic_stable(bootstrap, members, everyone) -> bool:
    for m in everyone:
        m.poll()
    assert not _owned_twice(everyone), _owned_twice(everyone)
    # every member has its share (range: 12 / n each), and together they own every partition
    shares = sorted(len(m.owned) for m in members)
    return (
        shares[0] > 0
        and shares[-1] - shares[0] <= 1
        and sorted(p for m in members for p in m.owned) == list(range(PARTITIONS))
    )


def _join_and_leave_under_load(bootstrap: str, topic: str, protocol: str) -> tuple[int, set, set]:
    """Three librdkafka members of one group join one by one and leave one by one while a
    producer keeps writing; no partition is ever owned twice (checked after every poll of
    every member). (partitions revoked from members that stayed, values sent, values read)."""
    import threading

    create_topic(bootstrap, topic, PARTITIONS)
    group = f"{topic}-g"
    sent: set = set()
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            sent.update(produce(bootstrap, topic, 24, PARTITIONS, prefix=f"x{i}"))
            i += 1
            time.sleep(0.2)

    producer = threading.Thread(target=load, daemon=True)
    producer.start()
    log: list = []
    members: list[Member] = []
    everyone: list[Member] = []
    started: list[Member] = []  # every member, left or not: what it read counts
    if protocol == "consumer":

        def stable() -> bool:
            return _stable_over(bootstrap, group, members, everyone)
    else:

        def stable() -> bool:
            return _classic_stable(bootstrap, members, everyone)

    try:
        for i in range(3):
            m = Member(bootstrap, group, topic, f"{protocol}-{i}", log, protocol)
            members.append(m)
            everyone.append(m)
            started.append(m)
            wait_until(stable, 60, f"{len(members)} {protocol} members stable")
        while len(members) > 1:
            gone = members.pop(0)
            for _ in range(10):
                gone.poll()
            gone.close()
            everyone.remove(gone)
            gone.owned = set()
            wait_until(stable, 60, f"{len(members)} {protocol} members stable")
        stop.set()
        producer.join(30)
        wait_until(
            lambda: [m.poll() for m in members] and sent <= {v for m in started for v in m.values},
            60,
            f"every record read ({protocol}: {len(sent - {v for m in started for v in m.values})} missing)",
        )
        return sum(len(parts) for _, sign, parts in log if sign == "-"), sent, {v for m in started for v in m.values}
    finally:
        stop.set()
        print(protocol, "callbacks:", log)
        for m in everyone + members:
            m.close()


def test_librdkafka_kip848_moves_fewer_partitions_than_the_classic_eager_protocol(broker, name):
    """Issue 36's scenario with librdkafka under load, on each protocol: every record is
    read at least once, no partition is owned by two members at once, and KIP-848 revokes
    fewer partitions than the classic eager range assignor (which gives up everything at
    every rebalance)."""
    revoked, sent, read = _join_and_leave_under_load(broker.bootstrap, f"{name}-848", "consumer")
    assert sent and sent <= read
    classic_revoked, sent, read = _join_and_leave_under_load(broker.bootstrap, f"{name}-classic", "classic")
    assert sent and sent <= read
    print("partitions revoked from members that stay: KIP-848", revoked, "classic eager", classic_revoked)
    # KIP-848 moves only what it must: 6 + 4 on the joins, nothing from those that stay on
    # the leaves; the eager protocol takes everything back at each join (12 + 12) at least
    assert revoked <= 12, revoked
    assert classic_revoked >= 24 and revoked < classic_revoked, (revoked, classic_revoked)


def _java(area: str, bootstrap: str, topic: str) -> dict[str, list[dict]]:
    import json

    from tests.support.kafka_tools import java_program

    create_topic(bootstrap, topic, PARTITIONS)
    run = java_program("ClientChecks", area, bootstrap, topic, timeout=150)
    got: dict[str, list[dict]] = {}
    for line in run.lines:
        if line.startswith("{"):
            facts = json.loads(line)
            got.setdefault(facts.pop("check"), []).append(facts)
    return got


def test_the_java_client_members_join_and_leave_one_by_one_without_a_partition_owned_twice(broker, name):
    """The same with Apache Kafka's Java consumer (group.protocol=consumer): its
    rebalance listeners never see a partition owned twice (checked after every poll of
    every member), every record is read, and Admin.describeConsumerGroups (through
    ConsumerGroupDescribe) sees a Stable CONSUMER group with the uniform assignor. The same
    scenario on the classic protocol with the eager range assignor revokes more."""
    got = _java("kip848", broker.bootstrap, name)
    joins = got["kip848_join"]
    assert [j["members"] for j in joins] == [1, 2, 3]
    for j in joins:
        assert sum(j["owned"]) == PARTITIONS and max(j["owned"]) - min(j["owned"]) <= 1, j
    (d,) = got["kip848_describe"]
    assert (d["type"], d["state"], d["members"], d["assignor"]) == ("Consumer", "Stable", 3, "uniform")
    (done,) = got["kip848_done"]
    assert done["read"] == 120 and done["last"] == list(range(PARTITIONS))
    # members moved only what they had to: 6 + 4 on the joins, 4 + 6 on the leaves at most
    assert done["revocations"] <= 20, done
    classic = _java("kip848-classic", broker.bootstrap, name + "-classic")
    (cd,) = classic["kip848_describe"]
    assert (cd["type"], cd["state"], cd["members"], cd["assignor"]) == ("Classic", "Stable", 3, "range")
    (cdone,) = classic["kip848_done"]
    assert cdone["read"] == 120
    print("revocations: KIP-848", done["revocations"], "classic eager", cdone["revocations"])
    assert done["revocations"] < cdone["revocations"], (done, cdone)


def test_bad_heartbeats_get_the_error_codes_kafka_answers(broker, name):
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H

    create_topic(broker.bootstrap, name, 2)
    # as a client does: find the coordinator first (which creates __consumer_offsets)
    wait_until(lambda: find_coordinator(broker.bootstrap, name)[0] == 0, 30, "a coordinator")

    def hb(conn, **kw):
        fields = dict(group_id=name, member_id="m-1", member_epoch=0, rebalance_timeout_ms=5000)
        fields.update(subscribed_topic_names=[name], topic_partitions=[])
        fields.update(kw)
        return conn.request(H(**fields), 1)

    with BrokerConnection(*host_port(broker.bootstrap)) as conn:
        assert hb(conn, member_id="").error_code == ErrorCode.INVALID_REQUEST
        r = hb(conn, rebalance_timeout_ms=-1)
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "RebalanceTimeoutMs must be provided in first request.",
        )
        joined_owning = hb(conn, topic_partitions=[H.TopicPartitions(topic_id=uuid.uuid4(), partitions=[0])])
        assert joined_owning.error_code == ErrorCode.INVALID_REQUEST
        assert hb(conn, server_assignor="sticky").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
        bad_regex = hb(conn, subscribed_topic_names=None, subscribed_topic_regex="a(b")
        assert bad_regex.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
        assert hb(conn, member_epoch=3).error_code == ErrorCode.GROUP_ID_NOT_FOUND  # no such group yet
        joined = hb(conn)
        assert joined.error_code == 0 and joined.member_epoch == 1 and joined.heartbeat_interval_ms == 300
        assert hb(conn, member_epoch=5, rebalance_timeout_ms=-1, subscribed_topic_names=None).error_code == (
            ErrorCode.FENCED_MEMBER_EPOCH
        )
        stranger = hb(conn, member_id="m-2", member_epoch=1, rebalance_timeout_ms=-1, subscribed_topic_names=None)
        assert stranger.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        left = hb(conn, member_epoch=-1, rebalance_timeout_ms=-1, subscribed_topic_names=None, topic_partitions=None)
        assert (left.error_code, left.member_epoch) == (0, -1)
    g = _describe(broker.bootstrap, name)
    assert g.error_code == 0 and g.group_state == "Empty" and g.members == []
    assert _describe(broker.bootstrap, name + "-none").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_librdkafka_regex_subscription_picks_up_a_topic_created_afterwards(broker, name):
    """The regex is resolved on the broker (SubscribedTopicRegex, ConsumerGroupHeartbeat
    v1): a topic created after the member joined joins its assignment."""
    import confluent_kafka as ck

    first, later = f"{name}-a", f"{name}-b"
    create_topic(broker.bootstrap, first, 2)
    produce(broker.bootstrap, first, 4, 2, prefix="a")
    c = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": name,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    try:
        c.subscribe([f"^{name}-.*"])
        seen: set[tuple[str, bytes]] = set()

        def read(n: int) -> bool:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                seen.add((msg.topic(), msg.value()))
            return len(seen) >= n

        wait_until(lambda: read(4), 60, "the first topic's records")
        create_topic(broker.bootstrap, later, 1)
        produce(broker.bootstrap, later, 3, 1, prefix="b")
        wait_until(lambda: read(7), 60, "the later topic's records")
        assert {t for t, _ in seen} == {first, later}
        g = _describe(broker.bootstrap, name)
        (member,) = g.members
        assert member.subscribed_topic_regex is not None and len(member.assignment.topic_partitions) == 2
    finally:
        c.close()


def test_a_librdkafka_member_commits_its_offsets_in_a_transaction(broker, name):
    """Exactly-once consume-transform-produce with a KIP-848 member: librdkafka's
    send_offsets_to_transaction with the consumer's group metadata (member id and member
    epoch in TxnOffsetCommit) commits the offsets with the transaction's records; an
    aborted transaction's offsets are not kept. Before the fix the coordinator checked the
    member against the classic group and answered ILLEGAL_GENERATION."""
    import confluent_kafka as ck

    source, sink = f"{name}-in", f"{name}-out"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 1)
    produce(broker.bootstrap, source, 10, 2)
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": name,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{name}-txn"})
    try:
        consumer.subscribe([source])
        producer.init_transactions(30)
        got = []
        wait_until(lambda: _poll_into(consumer, got) >= 10, 60, "the 10 source records")

        def positions():
            return consumer.position(consumer.assignment())

        producer.begin_transaction()
        for m in got[:4]:
            producer.produce(sink, m.value())
        producer.send_offsets_to_transaction(positions(), consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert committed(broker.bootstrap, name, {source: 2}) == {}

        producer.begin_transaction()
        for m in got:
            producer.produce(sink, m.value())
        producer.send_offsets_to_transaction(positions(), consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        assert committed(broker.bootstrap, name, {source: 2}) == {(source, 0): 5, (source, 1): 5}
        assert consumer.memberid()  # a KIP-848 member did it
    finally:
        consumer.close()


def _poll_into(consumer, got: list) -> int:
    msg = consumer.poll(0.2)
    if msg is not None and not msg.error():
        got.append(msg)
    return len(got)


def _consume(bootstrap: str, group: str, topic: str, protocol: str, n: int) -> list[bytes]:
    """n records read by one confluent-kafka member of `group` speaking `protocol`
    (classic or consumer), committed synchronously, then the member leaves."""
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    got: list = []
    try:
        c.subscribe([topic])
        wait_until(lambda: _poll_into(c, got) >= n, 60, f"{n} records ({protocol})")
        c.commit(asynchronous=False)
        return [m.value() for m in got]
    finally:
        c.close()


def test_an_empty_classic_group_becomes_a_consumer_group_and_back_with_its_offsets(broker, name):
    """Kafka's offline upgrade and downgrade with real members: a classic group's member
    reads and commits, leaves; a KIP-848 member (group.protocol=consumer) of the same group
    id goes on from those offsets, leaves; a classic member again goes on from the KIP-848
    member's offsets. ListGroups says which kind the group is at each step. While the
    KIP-848 member is in the group, a classic JoinGroup is INCONSISTENT_GROUP_PROTOCOL
    (Kafka 4.4 with group.consumer.migration.policy=disabled; kbroker has no online
    migration, docs/architecture.md)."""
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.join_group import JoinGroupRequest as JG

    create_topic(broker.bootstrap, name, 1)
    produce(broker.bootstrap, name, 30, 1)

    def group_type() -> str:
        with BrokerConnection(*host_port(broker.bootstrap)) as c:
            r = c.request(ListGroupsRequest(states_filter=[], types_filter=[]), 5)
        return {g.group_id: g.group_type for g in r.groups}.get(name, "")

    first = _consume(broker.bootstrap, name, name, "classic", 10)
    assert first == [f"m-{i}".encode() for i in range(10)]
    assert group_type() == "classic"
    import confluent_kafka as ck

    member = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": name,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        member.subscribe([name])
        got: list = []
        wait_until(lambda: _poll_into(member, got) >= 10, 60, "the KIP-848 member's records")
        assert [m.value() for m in got[:10]] == [f"m-{i}".encode() for i in range(10, 20)]  # from the commit on
        member.commit(message=got[9], asynchronous=False)
        assert group_type() == "consumer"
        assert find_coordinator(broker.bootstrap, name)[0] == 0  # a broker alone: it is the coordinator
        protocols = [JG.JoinGroupRequestProtocol(name="range", metadata=b"")]
        with BrokerConnection(*host_port(broker.bootstrap)) as c:
            joined = c.request(
                JG(
                    group_id=name,
                    session_timeout_ms=6000,
                    rebalance_timeout_ms=6000,
                    member_id="",
                    protocol_type="consumer",
                    protocols=protocols,
                ),
                5,
            )
        assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    finally:
        member.close()
    third = _consume(broker.bootstrap, name, name, "classic", 10)
    assert third == [f"m-{i}".encode() for i in range(20, 30)]
    assert group_type() == "classic"
