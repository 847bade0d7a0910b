"""A share group's offsets on a real `broker serve`: DescribeShareGroupOffsets v0-1,
AlterShareGroupOffsets and DeleteShareGroupOffsets sent with kbroker's own protocol
client, and `broker share-groups describe|reset-offsets|delete-offsets|delete` — the
commands docs/share-groups.md shows, run as it shows them, printing what it shows. A
group with members is refused (NON_EMPTY_GROUP), unknown groups and topics get Kafka's
answers, and a deleted group's state goes with it."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid

from broker.client import Cluster
from broker.protocol.errors import ErrorCode as E
from broker.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as A
from broker.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as D
from broker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DS
from broker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.groups.helpers import ROOT, child_env, connect, create_topic, find_coordinator, wait_until

BROKER_CONFIG = {
    "share.coordinator.state.topic.num.partitions": 3,
    "share.coordinator.state.topic.replication.factor": 1,
}
DOC = ROOT / "docs" / "share-groups.md"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *args],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=60,
    )


def hb(bootstrap: str, group: str, member: str, epoch: int, topics: list[str] | None = None):
    with connect(bootstrap) as conn:
        return conn.request(
            ShareGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
            )
        )


def make_group(bootstrap: str, group: str, topic: str) -> None:
    """A share group with one member that joined: Stable."""
    wait_until(lambda: find_coordinator(bootstrap, group)[0] == 0, 30, f"a coordinator for {group}")
    r = hb(bootstrap, group, "m1", 0, [topic])
    assert r.error_code == 0, r


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from broker.client import Producer

    create_topic(bootstrap, topic, partitions)
    with Producer(bootstrap) as p:
        for part in range(partitions):
            for i in range(per_partition):
                p.send(topic, f"v{i}".encode(), partition=part)
        p.flush()


def describe(bootstrap: str, group: str, topics: list[tuple[str, list[int]]] | None = None, version=None):
    with connect(bootstrap) as conn:
        asked = (
            None
            if topics is None
            else [DS.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics]
        )
        r = conn.request(
            DS(groups=[DS.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=asked)]), version=version
        )
    return r.groups[0]


def alter(bootstrap: str, group: str, topic: str, offsets: dict[int, int]):
    with connect(bootstrap) as conn:
        return conn.request(
            A(
                group_id=group,
                topics=[
                    A.AlterShareGroupOffsetsRequestTopic(
                        topic_name=topic,
                        partitions=[
                            A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                            for p, o in offsets.items()
                        ],
                    )
                ],
            )
        )


def starts(g) -> dict[tuple[str, int], tuple[int, int]]:
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in g.topics for p in t.partitions}


def doc_example() -> tuple[list[list[str]], str]:
    """The commands and the output of the offsets example of docs/share-groups.md."""
    text = DOC.read_text()
    section = text[text.index("## A share group's offsets") :]
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip().splitlines()
    output = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    return [c.split()[1:] for c in commands], output


def test_the_docs_example_runs_as_shown(broker):
    fill(broker.bootstrap, "orders", 2, 10)
    make_group(broker.bootstrap, "orders-workers", "orders")
    commands, shown = doc_example()
    # with a member, every command is refused
    for args in commands[1:2] + commands[3:]:
        r = run_cli(*[broker.bootstrap if a == "127.0.0.1:9092" else a for a in args])
        assert r.returncode != 0 and "Share group 'orders-workers' is not empty." in r.stderr, (args, r.stderr)
    assert hb(broker.bootstrap, "orders-workers", "m1", -1).error_code == 0  # the member stops
    out = []
    for args in commands:
        r = run_cli(*[broker.bootstrap if a == "127.0.0.1:9092" else a for a in args])
        assert r.returncode == 0, (args, r.stderr)
        out.append(r.stdout)
        if "reset-offsets" in args and "--execute" not in args:
            assert "dry run: nothing changed" in r.stderr
            assert starts(describe(broker.bootstrap, "orders-workers", [("orders", [0, 1])])) == {
                ("orders", 0): (-1, -1),
                ("orders", 1): (-1, -1),
            }
    assert "".join(out) == shown
    # the deleted group's state went with it (in the background)
    wait_until(
        lambda: (
            starts(describe(broker.bootstrap, "orders-workers", [("orders", [0, 1])]))
            == {("orders", 0): (-1, -1), ("orders", 1): (-1, -1)}
        ),
        30,
        "the deleted group's state to go",
    )


def test_reset_targets_and_lag(broker):
    fill(broker.bootstrap, "rt", 1, 6)
    make_group(broker.bootstrap, "rt-g", "rt")
    assert hb(broker.bootstrap, "rt-g", "m1", -1).error_code == 0
    b = broker.bootstrap

    def reset(*how: str) -> str:
        r = run_cli("share-groups", "reset-offsets", "rt-g", "--topic", "rt", *how, "--execute", "--bootstrap", b)
        assert r.returncode == 0, r.stderr
        return r.stderr

    reset("--to-latest")
    assert starts(describe(b, "rt-g")) == {("rt", 0): (6, 0)}
    reset("--to-earliest")
    assert starts(describe(b, "rt-g")) == {("rt", 0): (0, 6)}
    assert "above the log end (6)" in reset("--to-offset", "99")
    assert starts(describe(b, "rt-g")) == {("rt", 0): (6, 0)}
    reset("--to-datetime", "2001-01-01T00:00:00.000Z")
    assert starts(describe(b, "rt-g")) == {("rt", 0): (0, 6)}
    reset("--to-datetime", "2999-01-01T00:00:00.000+02:00")
    assert starts(describe(b, "rt-g")) == {("rt", 0): (6, 0)}
    # v0 has no lag
    g = describe(b, "rt-g", version=0)
    assert [(p.start_offset, p.lag) for t in g.topics for p in t.partitions] == [(6, -1)]
    r = run_cli("share-groups", "reset-offsets", "rt-g", "--all-topics", "--to-earliest", "--execute", "--bootstrap", b)
    assert r.returncode == 0 and r.stdout.splitlines()[1:] == ["rt-g\trt\t0\t0"], r
    r = run_cli("share-groups", "describe", "rt-g", "--bootstrap", b)
    assert r.stdout.splitlines() == ["GROUP\tTOPIC\tPARTITION\tSTART-OFFSET\tLAG", "rt-g\trt\t0\t0\t6"]
    bad = run_cli(
        "share-groups", "reset-offsets", "rt-g", "--topic", "rt", "--to-datetime", "yesterday", "--bootstrap", b
    )
    assert bad.returncode != 0 and "--to-datetime 'yesterday'" in bad.stderr


def test_bad_input_gets_kafkas_answers(broker):
    create_topic(broker.bootstrap, "bad-t", 2)
    b = broker.bootstrap
    make_group(b, "busy", "bad-t")
    # a group with members: NON_EMPTY_GROUP, at the top and on every partition
    r = alter(b, "busy", "bad-t", {0: 0, 1: 0})
    assert r.error_code == E.NON_EMPTY_GROUP and r.error_message == "The group is not empty."
    assert {p.error_code for t in r.responses for p in t.partitions} == {E.NON_EMPTY_GROUP}
    with connect(b) as conn:
        d = conn.request(D(group_id="busy", topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name="bad-t")]))
    assert d.error_code == E.NON_EMPTY_GROUP
    assert hb(b, "busy", "m1", -1).error_code == 0
    # unknown topic, unknown partition, a negative start offset
    r = alter(b, "busy", "no-such-topic", {0: 0})
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    r = alter(b, "busy", "bad-t", {0: 1, 7: 0, 1: -5})
    assert [(p.partition_index, p.error_code) for p in r.responses[0].partitions] == [
        (0, 0),
        (7, E.UNKNOWN_TOPIC_OR_PARTITION),
        (1, E.INVALID_REQUEST),
    ]
    with connect(b) as conn:
        d = conn.request(
            D(
                group_id="busy",
                topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in ("bad-t", "no-such-topic")],
            )
        )
    assert [(t.topic_name, t.error_code) for t in d.responses] == [
        ("bad-t", 0),
        ("no-such-topic", E.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    # a group that does not exist: described only for named topics; deleting its offsets GROUP_ID_NOT_FOUND
    g = describe(b, "nobody")
    assert g.error_code == E.GROUP_ID_NOT_FOUND
    g = describe(b, "nobody", [("bad-t", [0]), ("no-such-topic", [0])])
    assert g.error_code == 0 and starts(g) == {("bad-t", 0): (-1, -1), ("no-such-topic", 0): (-1, -1)}
    assert [p.error_code for t in g.topics for p in t.partitions] == [0, E.UNKNOWN_TOPIC_OR_PARTITION]
    with connect(b) as conn:
        d = conn.request(D(group_id="nobody", topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name="bad-t")]))
        assert d.error_code == E.GROUP_ID_NOT_FOUND
        assert conn.request(A(group_id="", topics=[])).error_code == E.INVALID_GROUP_ID
    # the CLI says what is wrong, in one line
    for args, said in [
        (("describe", "nobody"), "Group nobody not found."),
        (("delete", "nobody"), "share group nobody does not exist"),
        (("reset-offsets", "busy", "--topic", "no-such-topic", "--to-earliest"), "UNKNOWN_TOPIC_OR_PARTITION"),
    ]:
        r = run_cli("share-groups", *args, "--bootstrap", b)
        assert r.returncode != 0 and said in r.stderr, (args, r.stderr)
    r = run_cli("share-groups", "delete-offsets", "busy", "--topic", "no-such-topic", "--bootstrap", b)
    assert r.returncode == 1 and r.stdout.splitlines() == [
        "TOPIC\tSTATUS",
        "no-such-topic\tError: UNKNOWN_TOPIC_OR_PARTITION",
    ]
    # a group that does not exist yet gets its state (Kafka would create the group too)
    r = alter(b, "later", "bad-t", {0: 2})
    assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
    assert starts(describe(b, "later", [("bad-t", [0])]))[("bad-t", 0)][0] == 2
    assert uuid.UUID(bytes=bytes(16)) != r.responses[0].topic_id
    with Cluster(b) as c:
        assert r.responses[0].topic_id == c.topic("bad-t").topic_id
