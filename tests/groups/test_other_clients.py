"""kafka-python, aiokafka and kcat as consumer-group members (smaller scale than the
confluent tests): members of one group split the partitions, consume every message
exactly once with manual commits, and leave the committed offsets at the log end."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from tests.groups.helpers import (
    HEARTBEAT_MS,
    SESSION_MS,
    committed,
    create_topic,
    describe,
    end_offsets,
    produce,
    stable_assignment,
    wait_until,
)
from tests.support.deps import require_binary, require_module

BROKER_CONFIG = {}

PARTITIONS = 4
TOTAL = 2000


def _check_exactly_once(consumed, delivered, ends, bootstrap, group, topic):
    counts = Counter((p, o) for p, o, _ in consumed)
    assert not [k for k, c in counts.items() if c > 1], "messages consumed twice"
    assert {(p, o): v for p, o, v in consumed} == {pos: v for v, pos in delivered.items()}
    assert committed(bootstrap, group, {topic: PARTITIONS}) == {(topic, p): o for p, o in ends.items()}


def test_kafka_python_group(broker, name):
    require_module("kafka")
    import kafka

    topic, group = name, name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    stop = threading.Event()
    consumed: list[tuple[int, int, bytes]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def member(i):
        c = None
        try:
            c = kafka.KafkaConsumer(
                topic,
                bootstrap_servers=broker.bootstrap,
                group_id=group,
                client_id=f"kp{i}",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                fetch_max_wait_ms=100,
                request_timeout_ms=20000,
            )
            deadline = time.monotonic() + 90
            while not stop.is_set() and time.monotonic() < deadline:
                batch = c.poll(200)
                if not batch:
                    continue
                with lock:
                    consumed.extend((m.partition, m.offset, m.value) for ms in batch.values() for m in ms)
                c.commit()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            if c is not None:
                c.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        plan = wait_until(lambda: stable_assignment(broker.bootstrap, group, topic, 2), 60, "a stable group of 2")
        assert sorted(len(ps) for ps in plan.values()) == [2, 2]
        assert sorted(p for ps in plan.values() for p in ps) == list(range(PARTITIONS))
        assert sorted(m["client_id"] for m in describe(broker.bootstrap, group)["members"].values()) == ["kp0", "kp1"]
        delivered = produce(broker.bootstrap, topic, TOTAL, PARTITIONS)
        ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
        wait_until(lambda: len(consumed) >= TOTAL or errors, 60, "kafka-python to consume everything")
        want = {(topic, p): o for p, o in ends.items()}
        wait_until(lambda: committed(broker.bootstrap, group, {topic: PARTITIONS}) == want, 20, "the last commits")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    _check_exactly_once(consumed, delivered, ends, broker.bootstrap, group, topic)
    d = describe(broker.bootstrap, group)
    assert d["state"] == "Empty" and not d["members"]


def test_aiokafka_group(broker, name):
    require_module("aiokafka")
    import aiokafka

    topic, group = name, name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    consumed: list[tuple[int, int, bytes]] = []

    async def run():
        stop = asyncio.Event()

        async def member(i):
            c = aiokafka.AIOKafkaConsumer(
                topic,
                bootstrap_servers=broker.bootstrap,
                group_id=group,
                client_id=f"aio{i}",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                fetch_max_wait_ms=100,
            )
            await c.start()
            try:
                while not stop.is_set():
                    batch = await c.getmany(timeout_ms=200)
                    if batch:
                        consumed.extend((m.partition, m.offset, m.value) for ms in batch.values() for m in ms)
                        await c.commit()
            finally:
                await c.stop()

        tasks = [asyncio.ensure_future(member(i)) for i in range(2)]
        try:
            plan = None
            for _ in range(300):
                plan = await asyncio.to_thread(stable_assignment, broker.bootstrap, group, topic, 2)
                if plan or any(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.1)
            assert plan, "no stable group of 2"
            assert sorted(len(ps) for ps in plan.values()) == [2, 2]
            assert sorted(p for ps in plan.values() for p in ps) == list(range(PARTITIONS))
            delivered = await asyncio.to_thread(produce, broker.bootstrap, topic, TOTAL, PARTITIONS)
            for _ in range(600):
                if len(consumed) >= TOTAL or any(t.done() for t in tasks):
                    break
                await asyncio.sleep(0.1)
            ends = await asyncio.to_thread(end_offsets, broker.bootstrap, topic, PARTITIONS)
            want = {(topic, p): o for p, o in ends.items()}
            for _ in range(200):
                if await asyncio.to_thread(committed, broker.bootstrap, group, {topic: PARTITIONS}) == want:
                    break
                await asyncio.sleep(0.1)
            return delivered, ends
        finally:
            stop.set()
            await asyncio.gather(*tasks)  # raises a member's failure

    delivered, ends = asyncio.run(asyncio.wait_for(run(), 120))
    _check_exactly_once(consumed, delivered, ends, broker.bootstrap, group, topic)
    d = describe(broker.bootstrap, group)
    assert d["state"] == "Empty" and not d["members"]


def test_kcat_balanced_consumer_joins_a_group(broker, name, tmp_path):
    require_binary("kcat")
    topic, group = name, name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    delivered = produce(broker.bootstrap, topic, 200, PARTITIONS)
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    out_path = tmp_path / "kcat.out"
    with open(out_path, "wb") as out, open(tmp_path / "kcat.err", "wb") as err:
        proc = subprocess.Popen(
            [
                "kcat",
                "-b",
                broker.bootstrap,
                "-G",
                group,
                topic,
                "-q",
                "-u",
                "-f",
                "%p %o %s\\n",
                "-X",
                "auto.offset.reset=earliest",
                "-X",
                f"session.timeout.ms={SESSION_MS}",
                "-X",
                f"heartbeat.interval.ms={HEARTBEAT_MS}",
                "-X",
                "client.id=kcat-member",
            ],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    try:
        plan = wait_until(lambda: stable_assignment(broker.bootstrap, group, topic, 1), 30, "kcat in the group")
        assert list(plan.values()) == [list(range(PARTITIONS))]
        assert [m["client_id"] for m in describe(broker.bootstrap, group)["members"].values()] == ["kcat-member"]
        wait_until(lambda: out_path.read_bytes().count(b"\n") >= 200, 30, "kcat to print every message")
        proc.send_signal(signal.SIGTERM)  # kcat closes the consumer: commits and leaves
        assert proc.wait(30) == 0, (tmp_path / "kcat.err").read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = [line.split(b" ", 2) for line in out_path.read_bytes().splitlines() if line]
    consumed = [(int(p), int(o), v) for p, o, v in rows]
    assert len(consumed) == 200
    _check_exactly_once(consumed, delivered, ends, broker.bootstrap, group, topic)
    d = describe(broker.bootstrap, group)
    assert d["state"] == "Empty" and d["protocol_type"] == "consumer"


def test_confluent_admin_client_sees_and_manages_groups(broker, name):
    """AdminClient: list, describe (a live member and its assignment; an unknown group is
    Dead, as Kafka answers DescribeGroups up to v5), read and alter offsets, delete."""
    require_module("confluent_kafka")
    import confluent_kafka as ck
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    topic, group = name, name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, 40, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    c = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": "admin-seen",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
        }
    )
    try:
        c.subscribe([topic])
        wait_until(
            lambda: c.poll(0.1) is None and stable_assignment(broker.bootstrap, group, topic, 1), 30, "a stable group"
        )
        c.commit(offsets=[ck.TopicPartition(topic, p, 5) for p in range(PARTITIONS)], asynchronous=False)
        listed = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(20)
        assert group in {g.group_id for g in listed.valid}
        descs = admin.describe_consumer_groups([group, f"{group}-unknown"])
        d = descs[group].result(20)
        assert d.state == ConsumerGroupState.STABLE and not d.is_simple_consumer_group
        assert [m.client_id for m in d.members] == ["admin-seen"]
        assert sorted(tp.partition for tp in d.members[0].assignment.topic_partitions) == list(range(PARTITIONS))
        assert descs[f"{group}-unknown"].result(20).state == ConsumerGroupState.DEAD
        # a live group: offsets can be read, not altered nor deleted
        offs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
        assert {(tp.topic, tp.partition): tp.offset for tp in offs.topic_partitions} == {
            (topic, p): 5 for p in range(PARTITIONS)
        }
        with pytest.raises(ck.KafkaException) as exc:
            admin.delete_consumer_groups([group])[group].result(20)
        assert exc.value.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
    finally:
        c.close()
    admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, 0, 1), ck.TopicPartition(topic, 1, 2)])]
    )[group].result(20)
    assert committed(broker.bootstrap, group, {topic: PARTITIONS}) == {
        (topic, p): {0: 1, 1: 2}.get(p, 5) for p in range(PARTITIONS)
    }
    admin.delete_consumer_groups([group])[group].result(20)
    assert committed(broker.bootstrap, group, {topic: PARTITIONS}) == {}
    assert admin.describe_consumer_groups([group])[group].result(20).state == ConsumerGroupState.DEAD
