"""confluent-kafka consumer groups against a real broker process: three members share a
6-partition topic exactly once (manual synchronous commits), a second group reads the
same topic independently, a member killed with SIGKILL loses its partitions to the
survivors after its session timeout (at-least-once, duplicates bounded by its
uncommitted work), and asynchronous / automatic commits leave the committed offsets
where the client says."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.groups.helpers import (
    HEARTBEAT_MS,
    SESSION_MS,
    Member,
    committed,
    create_topic,
    describe,
    end_offsets,
    produce,
    stable_assignment,
    wait_until,
)
from tests.support.deps import require_module

BROKER_CONFIG = {}

PARTITIONS = 6


@pytest.fixture(autouse=True)
def _confluent():
    require_module("confluent_kafka")


def _union(members):
    seen = set()
    for m in members:
        seen.update((p, o) for p, o, _ in m.parse()["messages"])
    return seen


def _cleanup(members):
    for m in members:
        m.stop()
    for m in members:
        try:
            m.wait(30)
        except Exception:
            pass
        m.cleanup()


def test_three_members_share_the_topic_exactly_once_and_a_second_group_reads_it_all(broker, name, tmp_path):
    total = 30_000
    topic = name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    group_a, group_b = f"{name}-a", f"{name}-b"
    a = [Member(tmp_path, f"a{i}", broker.bootstrap, group_a, topic) for i in range(3)]
    b = [Member(tmp_path, f"b{i}", broker.bootstrap, group_b, topic) for i in range(2)]
    try:
        # the groups form first (the member processes start one after another, and a
        # rebalance while records flow would legitimately re-deliver uncommitted ones)
        wait_until(lambda: stable_assignment(broker.bootstrap, group_a, topic, 3), 60, "group a stable with 3 members")
        wait_until(lambda: stable_assignment(broker.bootstrap, group_b, topic, 2), 60, "group b stable with 2 members")
        delivered = produce(broker.bootstrap, topic, total, PARTITIONS)
        ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
        assert sum(ends.values()) == total
        by_position = {pos: value.decode() for value, pos in delivered.items()}
        wait_until(
            lambda: len(_union(a)) == total and len(_union(b)) == total, 120, "both groups to consume every message"
        )
        # the broker's view while everyone is still a member
        plan_a = wait_until(
            lambda: stable_assignment(broker.bootstrap, group_a, topic, 3), 30, "group a stable with 3 members"
        )
        plan_b = wait_until(
            lambda: stable_assignment(broker.bootstrap, group_b, topic, 2), 30, "group b stable with 2 members"
        )
        assert sorted(len(ps) for ps in plan_a.values()) == [2, 2, 2], plan_a
        assert sorted(p for ps in plan_a.values() for p in ps) == list(range(PARTITIONS))
        assert sorted(len(ps) for ps in plan_b.values()) == [3, 3], plan_b
        assert sorted(p for ps in plan_b.values() for p in ps) == list(range(PARTITIONS))
        d = describe(broker.bootstrap, group_a)
        assert d["protocol_type"] == "consumer"
        assert sorted(m["client_id"] for m in d["members"].values()) == ["a0", "a1", "a2"]
        # each member's own view (its last assignment callback) is the broker's plan for it;
        # taken while everyone is a member: once they leave one after another, the last
        # ones may legitimately be handed the leavers' partitions
        for group, members in ((group_a, a), (group_b, b)):
            d = describe(broker.bootstrap, group)
            assert d["state"] == "Stable", d["state"]
            plan = {m["client_id"]: sorted(m["assignment"].get(topic, [])) for m in d["members"].values()}
            assert {m.name: m.parse()["assignments"][-1] for m in members} == plan
        # every commit has reached the coordinator: committed == log end, for both groups
        want = {(topic, p): off for p, off in ends.items()}
        wait_until(lambda: committed(broker.bootstrap, group_a, {topic: PARTITIONS}) == want, 30, "group a's commits")
        assert committed(broker.bootstrap, group_b, {topic: PARTITIONS}) == want
    finally:
        _cleanup(a + b)

    for group, members in ((group_a, a), (group_b, b)):
        parsed = [m.parse() for m in members]
        assert all(p["done"] for p in parsed), [m.log_tail() for m in members]
        assert not [e for p in parsed for e in p["errors"]], [p["errors"] for p in parsed]
        messages = [msg for p in parsed for msg in p["messages"]]
        counts = Counter((p, o) for p, o, _ in messages)
        dupes = {k: c for k, c in counts.items() if c > 1}
        assert not dupes, f"group {group}: {len(dupes)} messages consumed more than once"
        assert len(messages) == total
        # the right values at the right positions
        assert all(by_position[(p, o)] == v for p, o, v in messages)
        # after everyone left: Empty, no members, offsets kept
        d = describe(broker.bootstrap, group)
        assert d["state"] == "Empty" and d["members"] == {}
        assert committed(broker.bootstrap, group, {topic: PARTITIONS}) == {(topic, p): o for p, o in ends.items()}


def test_killed_member_loses_its_partitions_to_the_survivors_without_loss(broker, name, tmp_path):
    total = 12_000
    topic = name
    group = name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    delivered = produce(broker.bootstrap, topic, total, PARTITIONS)
    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    by_position = {pos: value.decode() for value, pos in delivered.items()}

    # slow consumers (batches of 50, 50 ms apart) so the victim dies with work left
    victim = Member(tmp_path, "victim", broker.bootstrap, group, topic, batch=50, sleep_s=0.05, pause=True)
    survivors = [Member(tmp_path, f"s{i}", broker.bootstrap, group, topic, batch=50, sleep_s=0.05) for i in range(2)]
    members = [victim] + survivors
    try:
        plan = wait_until(lambda: stable_assignment(broker.bootstrap, group, topic, 3), 60, "a stable group of 3")
        assert sorted(len(ps) for ps in plan.values()) == [2, 2, 2], plan
        victim_id = next(
            mid for mid, m in describe(broker.bootstrap, group)["members"].items() if m["client_id"] == "victim"
        )
        victim_parts = plan[victim_id]
        wait_until(
            lambda: set(victim.parse()["commits"]) >= set(victim_parts), 30, "the victim to commit on its partitions"
        )
        victim.pause()  # the next batch is consumed and never committed
        wait_until(lambda: victim.parse()["paused"], 30, "the victim to pause")
        victim.kill9()

        wait_until(lambda: len(_union(members)) == total, 90, "the survivors to consume the rest")
        after = wait_until(lambda: stable_assignment(broker.bootstrap, group, topic, 2), 30, "a stable group of 2")
        assert sorted(len(ps) for ps in after.values()) == [3, 3], after
        assert sorted(p for ps in after.values() for p in ps) == list(range(PARTITIONS))
        assert victim_id not in after
        want = {(topic, p): off for p, off in ends.items()}
        wait_until(
            lambda: committed(broker.bootstrap, group, {topic: PARTITIONS}) == want, 30, "commits of every message"
        )
    finally:
        _cleanup(members)

    v = victim.parse()
    s = [m.parse() for m in survivors]
    assert all(p["done"] for p in s)
    assert not v["done"]
    # the victim's uncommitted work: what it consumed at or after its last commit
    uncommitted = {(p, o) for p, o, _ in v["messages"] if o >= v["commits"].get(p, 0)}
    assert uncommitted, "the victim died with nothing uncommitted: the test proves nothing"
    messages = v["messages"] + [msg for p in s for msg in p["messages"]]
    assert all(by_position[(p, o)] == val for p, o, val in messages)
    counts = Counter((p, o) for p, o, _ in messages)
    assert set(counts) == set(by_position), "messages lost"
    dupes = {k for k, c in counts.items() if c > 1}
    # at-least-once: duplicates only from the victim's uncommitted work (all of it is
    # consumed again, from the committed offset) and never more than twice
    assert dupes == uncommitted
    assert max(counts.values()) == 2
    # the victim's partitions went to the survivors
    survivor_final = set().union(*(set(p["assignments"][-1]) for p in s))
    assert set(victim_parts) <= survivor_final
    assert len(messages) == total + len(uncommitted)


def test_async_commit_leaves_the_offsets_the_client_reports(broker, name):
    import confluent_kafka as ck

    topic, group = name, name
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, 300, 3)
    reported = []
    c = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "fetch.wait.max.ms": 100,
            "on_commit": lambda err, tps: reported.append((err, tps)),
        }
    )
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 150 and time.monotonic() < deadline:
            got += [m for m in c.consume(150 - len(got), 0.2) if not m.error()]
        assert len(got) == 150
        c.pause(c.assignment())  # poll() below serves callbacks only
        # commit the current positions asynchronously
        assert c.commit(asynchronous=True) is None
        deadline = time.monotonic() + 30
        while not reported and time.monotonic() < deadline:
            c.poll(0.1)
        assert len(reported) == 1
        err, tps = reported[0]
        assert err is None
        said = {(tp.topic, tp.partition): tp.offset for tp in tps if tp.offset >= 0}
        positions = {(tp.topic, tp.partition): tp.offset for tp in c.position(c.assignment()) if tp.offset >= 0}
        assert said == positions
        assert sum(said.values()) == 150
        assert committed(broker.bootstrap, group, {topic: 3}) == said
        # explicit offsets with metadata, asynchronously
        reported.clear()
        c.commit(offsets=[ck.TopicPartition(topic, 0, 7, metadata="seven")], asynchronous=True)
        deadline = time.monotonic() + 30
        while not reported and time.monotonic() < deadline:
            c.poll(0.1)
        assert reported and reported[0][0] is None
        view = c.committed([ck.TopicPartition(topic, 0)], timeout=10)[0]
        assert (view.offset, view.metadata) == (7, "seven")
        assert committed(broker.bootstrap, group, {topic: 3})[(topic, 0)] == 7
    finally:
        c.close()


def test_auto_commit_leaves_the_offsets_at_the_positions(broker, name):
    import confluent_kafka as ck

    topic, group = name, name
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, 600, 3)
    ends = {(topic, p): o for p, o in end_offsets(broker.bootstrap, topic, 3).items()}
    c = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        c.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 400 and time.monotonic() < deadline:
            seen += len([m for m in c.consume(400 - seen, 0.2) if not m.error()])
        assert seen == 400
        # the auto-commit catches up with the positions while we keep polling
        positions = {(tp.topic, tp.partition): tp.offset for tp in c.position(c.assignment()) if tp.offset >= 0}
        assert sum(positions.values()) == 400

        def caught_up():
            assert c.poll(0.05) is None  # paused: callbacks (and auto-commits) only
            return committed(broker.bootstrap, group, {topic: 3}) == positions

        c.pause(c.assignment())
        wait_until(caught_up, 20, "auto-commit of the positions", interval=0.2)
        client_view = {
            (tp.topic, tp.partition): tp.offset for tp in c.committed(c.assignment(), timeout=10) if tp.offset >= 0
        }
        assert client_view == positions
        # resume and drain: the auto-commit follows to the log end
        c.resume(c.assignment())
        deadline = time.monotonic() + 60
        while seen < 600 and time.monotonic() < deadline:
            seen += len([m for m in c.consume(600 - seen, 0.2) if not m.error()])
        assert seen == 600

        def at_end():
            c.poll(0.05)
            return committed(broker.bootstrap, group, {topic: 3}) == ends

        wait_until(at_end, 20, "auto-commit to the log end", interval=0.2)
    finally:
        c.close()
    assert committed(broker.bootstrap, group, {topic: 3}) == ends


def test_cooperative_sticky_members_rebalance_incrementally_without_duplicates(broker, name, tmp_path):
    """KIP-429 (incremental cooperative rebalancing) runs on the classic coordinator as two
    ordinary rebalances: a third member joining two busy ones takes partitions over without
    the others giving up the rest, and nothing is consumed twice or lost."""
    total = 9000
    topic, group = name, name
    create_topic(broker.bootstrap, topic, PARTITIONS)
    delivered = produce(broker.bootstrap, topic, total, PARTITIONS)
    members = [
        Member(tmp_path, f"c{i}", broker.bootstrap, group, topic, batch=50, sleep_s=0.05, assignor="cooperative-sticky")
        for i in range(2)
    ]
    try:

        def balanced(n, sizes):
            plan = stable_assignment(broker.bootstrap, group, topic, n)
            return plan if plan and sorted(len(ps) for ps in plan.values()) == sizes else None

        plan2 = wait_until(lambda: balanced(2, [3, 3]), 60, "a balanced stable group of 2")
        wait_until(lambda: len(_union(members)) > 0, 30, "consumption to start")
        members.append(
            Member(
                tmp_path, "c2", broker.bootstrap, group, topic, batch=50, sleep_s=0.05, assignor="cooperative-sticky"
            )
        )
        # first rebalance: the newcomer gets nothing while the others revoke one partition
        # each; the second one hands those to it
        plan3 = wait_until(lambda: balanced(3, [2, 2, 2]), 60, "a balanced stable group of 3")
        assert sorted(p for ps in plan3.values() for p in ps) == list(range(PARTITIONS))
        # sticky: the first two members kept two of their three partitions each
        assert set(plan2) < set(plan3)
        assert all(len(set(plan2[m]) & set(plan3[m])) == 2 for m in plan2), (plan2, plan3)
        assert describe(broker.bootstrap, group)["protocol"] == "cooperative-sticky"
        wait_until(lambda: len(_union(members)) == total, 90, "every message")
        want = {(topic, p): off for p, off in end_offsets(broker.bootstrap, topic, PARTITIONS).items()}
        wait_until(lambda: committed(broker.bootstrap, group, {topic: PARTITIONS}) == want, 30, "the last commits")
    finally:
        _cleanup(members)
    parsed = [m.parse() for m in members]
    # members go on consuming and committing while the group rebalances: a commit that
    # races with the end of a rebalance carries the old generation and is refused, as
    # Kafka refuses it; nothing else may fail
    errors = [e for p in parsed for e in p["errors"]]
    assert all(
        e.startswith("commit") and ("ILLEGAL_GENERATION" in e or "REBALANCE_IN_PROGRESS" in e) for e in errors
    ), errors
    messages = [msg for p in parsed for msg in p["messages"]]
    counts = Counter((p, o) for p, o, _ in messages)
    assert set(counts) == {pos for pos in delivered.values()}, "messages lost"
    # at-least-once: only batches whose commit was refused are consumed again
    failed = {(p, o) for m in parsed for p, lo, hi in m["failed"] for o in range(lo, hi + 1)}
    dupes = {k for k, n in counts.items() if n > 1}
    assert dupes <= failed and max(counts.values()) <= 2
