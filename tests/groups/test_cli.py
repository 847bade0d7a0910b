"""`broker groups list|describe|reset-offsets|delete` and `broker consume --group`
(the project's own group member, broker/client/group.py) against a real broker."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from broker.client.group import GroupConsumer
from tests.groups.helpers import (
    HEARTBEAT_MS,
    SESSION_MS,
    child_env,
    committed,
    create_topic,
    describe,
    produce,
    simple_commit,
    stable_assignment,
    wait_until,
)
from tests.support.deps import require_module

BROKER_CONFIG = {}


def cli(broker, *args, timeout=60, check=None):
    """Runs `broker ARGS...`; returns (exit code, stdout, stderr)."""
    env = child_env()
    p = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *args, "--bootstrap", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p.returncode, p.stdout, p.stderr


def describe_rows(out: str) -> tuple[dict, dict, dict]:
    """(header fields, {member_id: line fields}, {(topic, partition): (committed, end, lag, member)})"""
    lines = out.splitlines()
    header = dict(f.split(": ", 1) for f in lines[0].split("\t"))
    members, rows = {}, {}
    table = False
    for line in lines[1:]:
        fields = line.strip("\t").split("\t")
        if line.startswith("\tMember: "):
            m = dict(f.split(": ", 1) for f in fields)
            members[m["Member"]] = m
        elif fields[0] == "TOPIC":
            table = True
        elif table:
            t, p, com, end, lag, member = fields
            rows[(t, int(p))] = (com, end, lag, member)
    return header, members, rows


@pytest.fixture
def live_member(broker):
    """A confluent member with client id cli-member, closed at the end."""
    require_module("confluent_kafka")
    import confluent_kafka as ck

    made = []

    def make(group, topic):
        c = ck.Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "client.id": "cli-member",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
            }
        )
        made.append(c)
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        assert c.assignment()
        return c

    yield make
    for c in made:
        c.close()


def test_list_describe_and_what_a_live_group_refuses(broker, name, live_member):
    import confluent_kafka as ck

    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 100, 2)
    c = live_member(group, topic)
    c.commit(offsets=[ck.TopicPartition(topic, 0, 30), ck.TopicPartition(topic, 1, 40)], asynchronous=False)
    wait_until(lambda: stable_assignment(broker.bootstrap, group, topic, 1), 20, "a stable group")
    member_id = next(iter(describe(broker.bootstrap, group)["members"]))

    _, out, _ = cli(broker, "groups", "list", check=0)
    assert f"{group}\tStable\tconsumer" in out.splitlines()

    _, out, _ = cli(broker, "groups", "describe", group, check=0)
    header, members, rows = describe_rows(out)
    assert (header["Group"], header["State"], header["Members"]) == (group, "Stable", "1")
    assert header["Protocol"].startswith("consumer/")
    assert list(members) == [member_id]
    assert members[member_id]["Client"] == "cli-member"
    assert sorted(members[member_id]["Assignment"].split(",")) == [f"{topic}-0", f"{topic}-1"]
    assert rows == {(topic, 0): ("30", "50", "20", member_id), (topic, 1): ("40", "50", "10", member_id)}

    # a group with members can be neither reset nor deleted
    code, out, err = cli(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert code == 1 and "not empty" in err
    code, out, err = cli(broker, "groups", "delete", group)
    assert code == 1 and "NON_EMPTY_GROUP" in err
    assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 0): 30, (topic, 1): 40}

    c.close()
    _, out, _ = cli(broker, "groups", "describe", group, check=0)
    header, members, rows = describe_rows(out)
    assert (header["State"], header["Members"], members) == ("Empty", "0", {})
    assert rows == {(topic, 0): ("30", "50", "20", "-"), (topic, 1): ("40", "50", "10", "-")}
    _, out, _ = cli(broker, "groups", "list", check=0)
    assert f"{group}\tEmpty\tconsumer" in out.splitlines()


def test_reset_offsets_of_an_empty_group(broker, name):
    """As Kafka's kafka-consumer-groups --reset-offsets: the plan is printed, and applied only
    with --execute; an offset outside the log is clamped, saying so."""
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 100, 2)
    assert simple_commit(broker.bootstrap, group, topic, {0: 7, 1: 9}) == {0: 0, 1: 0}
    before = committed(broker.bootstrap, group, {topic: 2})
    for dry in ([], ["--dry-run"]):
        _, out, err = cli(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", *dry, check=0)
        assert out.splitlines() == [f"{topic}\t0\t0", f"{topic}\t1\t0"]
        assert "dry run" in err and "--execute" in err
        assert committed(broker.bootstrap, group, {topic: 2}) == before, "a dry run changed the offsets"
    cases = [
        (["--to-earliest"], {0: 0, 1: 0}, None),
        (["--to-latest"], {0: 50, 1: 50}, None),
        (["--to-offset", "12"], {0: 12, 1: 12}, None),
        (["--to-offset", "1000"], {0: 50, 1: 50}, "above the log end"),
    ]
    for how, want, note in cases:
        _, out, err = cli(broker, "groups", "reset-offsets", group, "--topic", topic, *how, "--execute", check=0)
        assert out.splitlines() == [f"{topic}\t{p}\t{o}" for p, o in sorted(want.items())]
        assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, p): o for p, o in want.items()}
        assert "dry run" not in err
        if note:
            # one line per clamped partition, naming the offset asked and the one used
            lines = [line for line in err.splitlines() if note in line]
            assert len(lines) == 2 and all("1000" in line and "50" in line for line in lines), err
        else:
            assert err.strip() == "", err
    # a group that does not exist yet gets its first offsets
    _, out, _ = cli(
        broker, "groups", "reset-offsets", f"{group}-new", "--topic", topic, "--to-offset", "3", "--execute", check=0
    )
    assert committed(broker.bootstrap, f"{group}-new", {topic: 2}) == {(topic, 0): 3, (topic, 1): 3}
    assert (
        cli(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-latest", "--dry-run", "--execute")[0] == 2
    )
    # the flags are exclusive and one is required
    assert cli(broker, "groups", "reset-offsets", group, "--topic", topic)[0] == 2
    assert cli(broker, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--to-latest")[0] == 2


def test_delete_an_empty_group(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 1)
    assert simple_commit(broker.bootstrap, group, topic, {0: 0}) == {0: 0}
    _, out, _ = cli(broker, "groups", "list", check=0)
    assert any(line.startswith(f"{group}\t") for line in out.splitlines())
    _, out, _ = cli(broker, "groups", "delete", group, check=0)
    assert out.strip() == f"deleted group {group}"
    _, out, _ = cli(broker, "groups", "list", check=0)
    assert not any(line.startswith(f"{group}\t") for line in out.splitlines())
    assert committed(broker.bootstrap, group, {topic: 1}) == {}
    code, _, err = cli(broker, "groups", "delete", group)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err
    code, out, err = cli(broker, "groups", "describe", group)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err and out == ""


def test_consume_group_resumes_where_it_stopped(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    delivered = produce(broker.bootstrap, topic, 100, 2)
    _, out1, err = cli(
        broker,
        "consume",
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "30",
        "--timeout-ms",
        "3000",
        check=0,
    )
    first = out1.splitlines()
    assert len(first) == 30 and "consumed 30 messages" in err
    # what was printed is committed, nothing more
    assert sum(committed(broker.bootstrap, group, {topic: 2}).values()) == 30
    _, out2, err = cli(
        broker, "consume", "--topic", topic, "--group", group, "--from-beginning", "--timeout-ms", "3000", check=0
    )
    second = out2.splitlines()
    assert len(second) == 70
    assert sorted(first + second) == sorted(v.decode() for v in delivered)
    assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 0): 50, (topic, 1): 50}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_consume_group_leaves_the_group_when_stopped_by_a_signal(broker, name, sig):
    """Ctrl-C and a service manager's SIGTERM alike: the member leaves the group at once
    (the group is Empty when the process has exited, not a session timeout later) and
    what it printed is committed."""
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 20, 1)
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "consume",
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    try:
        wait_until(lambda: stable_assignment(broker.bootstrap, group, topic, 1), 30, "the member in the group")
        wait_until(lambda: _printed(p, 20), 30, "20 messages printed")
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert b"Traceback" not in err, err
    d = describe(broker.bootstrap, group)
    assert (d["state"], d["members"]) == ("Empty", {}), "the member did not leave the group"
    assert committed(broker.bootstrap, group, {topic: 1}) == {(topic, 0): 20}


def _printed(p: subprocess.Popen, n: int) -> bool:
    """True once the process printed n lines (reads what is there, never blocks)."""
    fd = p.stdout.fileno()
    while select.select([fd], [], [], 0)[0]:
        data = os.read(fd, 65536)
        if not data:
            break
        p.printed = getattr(p, "printed", b"") + data
    return getattr(p, "printed", b"").count(b"\n") >= n


def test_two_consume_group_processes_share_the_partitions(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    env = child_env()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "broker.cli.main",
                "consume",
                "--bootstrap",
                broker.bootstrap,
                "--topic",
                topic,
                "--group",
                group,
                "--from-beginning",
                "--timeout-ms",
                "8000",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(2)
    ]
    try:
        plan = wait_until(lambda: stable_assignment(broker.bootstrap, group, topic, 2), 30, "a stable group of 2")
        assert sorted(plan.values()) == [[0], [1]]
        delivered = produce(broker.bootstrap, topic, 200, 2)
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    lines = [line for out, _ in outs for line in out.decode().splitlines()]
    assert sorted(lines) == sorted(v.decode() for v in delivered)
    assert all(out for out, _ in outs)  # both members got a share
    assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 0): 100, (topic, 1): 100}


def test_group_consumer_auto_commit_commits_only_records_already_returned(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 20, 1)
    with GroupConsumer(
        broker.bootstrap,
        group,
        [topic],
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        auto_offset_reset="earliest",
        auto_commit_interval_ms=0,
    ) as c:
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = c.poll(1.0)
        assert got
        # records returned by this poll are not committed before the application had them
        assert committed(broker.bootstrap, group, {topic: 1}) in ({}, {(topic, 0): got[0].offset})
        c.poll(0.1)
        assert committed(broker.bootstrap, group, {topic: 1}) == {(topic, 0): got[-1].offset + 1}


def test_group_consumer_carries_on_across_a_broker_restart(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 100, 2)
    with GroupConsumer(
        broker.bootstrap,
        group,
        [topic],
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        auto_offset_reset="earliest",
        auto_commit_interval_ms=100,
    ) as c:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            got += c.poll(0.5)
        assert len(got) == 100
        c.poll(0.1)  # auto-commits what the first polls returned
        broker.restart()
        produce(broker.bootstrap, topic, 100, 2, start=100)
        more = []
        deadline = time.monotonic() + 30
        while len(more) < 100 and time.monotonic() < deadline:
            more += c.poll(0.5)  # must not raise: the coordinator is found again
        assert sorted(r.value for r in more) == sorted(f"m-{i}".encode() for i in range(100, 200))
        c.commit()
    assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 0): 100, (topic, 1): 100}
